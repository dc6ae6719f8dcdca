"""``paw bench real``'s pure parts: the kept fraction, the seeded subsets, the report, the refusals."""

from __future__ import annotations

import pytest

from paw.bench.real import GEMMA, SMOL, RealOptions, kept, seeded_subset
from paw.errors import PawError


def test_kept_fraction_hand_checked_and_bootstrapped():
    # target base 1/4, transfer 2/4, source 0/4 -> 4/4: kept (0.5 - 0.25) / (1 - 0) = 0.25
    assert kept([1, 1, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], n_boot=0)["value"] == 0.25
    out = kept([1, 0] * 20, [0] * 40, [1] * 40, [0] * 40, n_boot=200, seed=1)
    assert out["value"] == 0.5 and 0.04 < out["stderr"] < 0.12  # binomial se sqrt(.25/40) = 0.079
    assert kept([1], [0], [0], [0], n_boot=10)["value"] is None  # no source gain, no fraction


def test_seeded_subset_is_fixed_and_ordered():
    items = list(range(100))
    a, b = seeded_subset(items, 10, 0), seeded_subset(items, 10, 0)
    assert a == b == sorted(a) and len(set(a)) == 10
    assert seeded_subset(items, 10, 1) != a and seeded_subset(items, 500, 0) == items


def test_options_refuse_a_folder_without_the_models(tmp_path):
    with pytest.raises(PawError, match="real_models.sh"):
        RealOptions(models=str(tmp_path)).check()
    for name in (SMOL, GEMMA):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    with pytest.raises(PawError, match="--data"):
        RealOptions(models=str(tmp_path), parts=("eval",)).check()
    with pytest.raises(PawError, match="unknown part"):
        RealOptions(models=str(tmp_path), parts=("dance",)).check()


def test_report_writes_json_markdown_and_plot(tmp_path):
    from paw.bench.real_report import markdown, write_real

    acc = {"mean": 0.5, "stderr": 0.1, "n": 20, "per_seed": [0.5]}
    ev = {"n": 20, "accuracy": 0.55, "stderr": 0.11, "accuracy_norm": 0.6, "stderr_norm": 0.11}
    results = {
        "eval": {"results": {SMOL: {"PIQA": ev}, GEMMA: {"PIQA": ev}},
                 "published": {GEMMA: {"PIQA": {"value": 67.7, "metric": "acc", "shots": "0-shot", "source": "card"}}}},
        "transfer": {"task": "facts", "items": 20, "source": {"base": acc, "lora": acc},
                     "rows": {"auto": {"status": "refused", "reason": "unrelated", "accuracy": acc,
                                       "recovered": {"value": 0.0, "stderr": 0.1}, "kept": {"value": 0.0}},
                              "distill": {"status": "not run", "reason": "distill not merged yet"}}},
        "seconds": {"total": 12.0}, "machine": {"cpus": 2, "load_before": [1.0], "load_after": [2.0]},
    }
    text = markdown(results)
    assert "| PIQA | Gemma-3-270M (Q4_K_M) | 55.0 ± 11.0 | 60.0 ± 11.0 | 67.7 (acc, 0-shot) |" in text
    assert "| auto | refused: unrelated | 50.0 ± 10.0 | 0.00 ± 0.10 | 0.00 |" in text
    assert "distill not merged yet" in text
    out = write_real(tmp_path / "r", results)
    assert {p.name for p in out.iterdir()} == {"results.json", "results.md", "real.png"}
