"""``paw.io.finite``: no NaN/Inf reaches disk through any writer unless the run allows it."""

from __future__ import annotations

import math

import pytest
import torch

from paw.io.atomic import atomic_dir
from paw.io.finite import nonfinite_allowed, nonfinite_policy
from paw.io.writer import write_checkpoint
from paw.validate import NonFinite


def _tensors(bad: float | None = None) -> dict:
    tensors = {"a.weight": torch.ones(4, 4), "b.weight": torch.zeros(8)}
    if bad is not None:
        tensors["b.weight"][5] = bad
    return tensors


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_sharded_writer_refuses_nan_and_inf_as_it_writes(tmp_path, bad):
    with pytest.raises(NonFinite, match=rf"^{tmp_path / 'out'}: not written: tensor 'b.weight' holds 1 NaN/Inf "
                                        r"value\(s\) of 8; pass --allow-nonfinite"):
        write_checkpoint(tmp_path / "out", _tensors(bad), max_shard_size=40)
    assert list(tmp_path.iterdir()) == []  # no output, no staging folder, no lock


def test_allow_nonfinite_writes_it(tmp_path):
    from safetensors.torch import load_file

    write_checkpoint(tmp_path / "out", _tensors(math.nan), allow_nonfinite=True)
    assert torch.isnan(load_file(tmp_path / "out" / "model.safetensors")["b.weight"]).sum() == 1


def test_any_safetensors_file_staged_by_any_writer_is_read_back(tmp_path):
    """A writer that calls ``save_file`` (or PEFT's ``save_pretrained``) itself is covered at the commit."""
    from safetensors.torch import save_file

    with pytest.raises(NonFinite, match=r"out/sub/x\.safetensors: not written: tensor 'b.weight'"):
        with atomic_dir(tmp_path / "out") as tmp:
            (tmp / "sub").mkdir()
            save_file(_tensors(math.inf), str(tmp / "sub" / "x.safetensors"))
    assert list(tmp_path.iterdir()) == []
    with nonfinite_policy(True), atomic_dir(tmp_path / "out") as tmp:
        save_file(_tensors(math.inf), str(tmp / "x.safetensors"))
    assert (tmp_path / "out" / "x.safetensors").is_file()


def test_the_policy_nests_and_an_inner_false_does_not_undo_the_users_flag():
    assert not nonfinite_allowed()
    with nonfinite_policy(True):
        with nonfinite_policy(False):
            assert nonfinite_allowed()
    with nonfinite_policy(False):
        assert not nonfinite_allowed()
    assert not nonfinite_allowed()


def test_a_checked_file_is_not_read_back(tmp_path, monkeypatch):
    """The sharded writer checked each tensor as it came: the commit does not read the model again."""
    from paw.io import finite

    opened = []
    real = finite.SafetensorsFile
    monkeypatch.setattr(finite, "SafetensorsFile", lambda p: opened.append(p) or real(p))
    write_checkpoint(tmp_path / "out", _tensors(), max_shard_size=40)
    assert opened == []
