"""Pure row inits and growth (paw.vocab.resize), checked against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from paw.errors import PawError
from paw.vocab.resize import grow_rows, new_rows, pad_to_multiple, trained_rows

W = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0], [1e-9, 0.0], [4.0, 2.0]])  # rows 0 and 3 never trained


def test_pad_to_multiple():
    assert [pad_to_multiple(n, 64) for n in (1, 64, 65, 305)] == [64, 64, 128, 320]
    assert pad_to_multiple(305, 0) == 305 and pad_to_multiple(305, 1) == 305


def test_trained_rows_leaves_out_zero_and_tiny_rows():
    assert trained_rows(W).tolist() == [False, True, True, False, True]


def test_mean_uses_only_trained_rows():
    rows = new_rows(W, [[1], []], init="mean")
    assert torch.equal(rows, torch.tensor([[2.0, 2.0], [2.0, 2.0]]))  # (2+0+4)/3, (0+4+2)/3


def test_subtoken_mean_and_fallback():
    # token 0 = pieces 1 and 2; token 1 = only the untrained row 0 -> falls back to the mean
    rows = new_rows(W, [[1, 2], [0], [4]], init="subtoken-mean")
    assert torch.equal(rows, torch.tensor([[1.0, 2.0], [2.0, 2.0], [4.0, 2.0]]))


def test_interpolate_is_half_of_each():
    rows = new_rows(W, [[1, 2], [4]], init="interpolate")
    assert torch.allclose(rows, torch.tensor([[1.5, 2.0], [3.0, 2.0]]))


def test_dtype_kept_and_unknown_init():
    assert new_rows(W.to(torch.bfloat16), [[1]], init="mean").dtype == torch.bfloat16
    with pytest.raises(PawError, match="unknown init 'zeros'.*mean, subtoken-mean, interpolate"):
        new_rows(W, [[1]], init="zeros")


def test_grow_rows_writes_ids_and_zero_pads():
    out = grow_rows(W, 8, ids=[5, 3], rows=torch.tensor([[7.0, 7.0], [1.0, 1.0]]))
    assert out.shape == (8, 2)
    assert torch.equal(out[:3], W[:3]) and torch.equal(out[4], W[4])
    assert out[3].tolist() == [1.0, 1.0] and out[5].tolist() == [7.0, 7.0]  # id 3 reuses an unused row
    assert not out[6:].any()  # padding stays zero (= never trained)
    with pytest.raises(ValueError):
        grow_rows(W, 2)
