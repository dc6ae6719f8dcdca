"""Weights from L2 norms, on hand-computed cases, and the table printed before merging."""

from __future__ import annotations

import json
import math

import pytest

from paw.errors import PawError
from paw.merge.weights import WEIGHT_MODES, weights_from_norms


def test_modes_registered():
    assert list(WEIGHT_MODES) == ["exp", "linear", "power", "equal"]


def test_exp_on_norms_1_2_3():
    # mean 2: scores exp(-1/2), exp(-1), exp(-3/2), divided by their sum
    got = weights_from_norms([1, 2, 3], "exp", beta=1.0)
    assert got == pytest.approx([0.506480, 0.307196, 0.186324], abs=1e-6)
    e = [math.exp(-0.5), math.exp(-1.0), math.exp(-1.5)]
    assert got == pytest.approx([x / sum(e) for x in e], rel=1e-12)


def test_exp_is_scale_free_and_beta_zero_is_equal():
    assert weights_from_norms([10, 20, 30], "exp") == pytest.approx(weights_from_norms([1, 2, 3], "exp"))
    assert weights_from_norms([1, 2, 3], "exp", beta=0.0) == pytest.approx([1 / 3] * 3)
    # beta 2 on norms [1, 3]: mean 2, scores exp(-1), exp(-3) -> 1 / (1 + e^-2), e^-2 / (1 + e^-2)
    assert weights_from_norms([1, 3], "exp", beta=2.0) == pytest.approx([0.880797, 0.119203], abs=1e-6)


def test_linear_power_equal_by_hand():
    assert weights_from_norms([1, 2, 3], "linear") == pytest.approx([6 / 11, 3 / 11, 2 / 11])
    assert weights_from_norms([1, 2, 3], "power", alpha=2.0) == pytest.approx([36 / 49, 9 / 49, 4 / 49])
    assert weights_from_norms([1, 4], "power", alpha=1.5) == pytest.approx([8 / 9, 1 / 9])
    assert weights_from_norms([5, 7, 1, 2], "equal") == [0.25] * 4


def test_exp_accepts_a_zero_norm_linear_and_power_refuse_it():
    # norms [0, 2, 4]: mean 2, scores 1, e^-1, e^-2
    s = [1.0, math.exp(-1), math.exp(-2)]
    assert weights_from_norms([0, 2, 4], "exp") == pytest.approx([x / sum(s) for x in s])
    assert weights_from_norms([0, 0], "exp") == [0.5, 0.5]
    for mode in ("linear", "power"):
        with pytest.raises(PawError, match=f"--mode {mode} divides by the L2 norm, but model 1 has norm 0"):
            weights_from_norms([0, 2], mode)


def test_bad_norms():
    with pytest.raises(PawError, match="not a finite non-negative"):
        weights_from_norms([1, -2], "exp")
    with pytest.raises(PawError, match="unknown --mode 'cubic'"):
        weights_from_norms([1, 2], "cubic")


@pytest.mark.parametrize("mode,expected", [
    ("exp", ["0.5065", "0.3072", "0.1863"]),
    ("linear", ["0.5455", "0.2727", "0.1818"]),
    ("power", ["0.6468", "0.2287", "0.1245"]),
    ("equal", ["0.3333", "0.3333", "0.3333"]),
])
def test_cli_prints_the_weight_table_and_records_it(cli, family, tmp_path, mode, expected):
    out = tmp_path / "m"
    r = cli("merge", "--base", family.base, "--models", *family.models, "--output", out,
            "--l2-norms", "1", "2", "3", "--mode", mode)
    assert r.exit_code == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("│") and "ft" in line]  # table rows only
    assert len(lines) == 3
    for line, name, norm, weight in zip(lines, ["ft0", "ft1", "ft2"], ["1", "2", "3"], expected, strict=True):
        assert line.split("│")[1:4] == [f" {name}   ", f"  {norm} ", f" {weight} "] or \
            [c.strip() for c in line.split("│")[1:4]] == [name, norm, weight]
    record = json.loads((out / "paw_merge.json").read_text())
    assert record["norms"] == [1.0, 2.0, 3.0] and record["norm_source"] == "given"
    assert [round(w, 4) for w in record["weights"]] == [float(x) for x in expected]
