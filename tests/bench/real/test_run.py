"""``paw bench real``'s pure parts: the kept fraction as it calls it, the seeded subsets, the report, the refusals."""

from __future__ import annotations

import pytest

from paw.bench.real.options import GEMMA, SMOL, RealOptions
from paw.bench.real.run import seeded_subset
from paw.bench.stats import kept
from paw.errors import PawError


def test_kept_fraction_hand_checked_and_bootstrapped_over_clusters():
    # one seed; target base 1/4, transfer 2/4, source 0/4 -> 4/4: kept (0.5 - 0.25) / (1 - 0) = 0.25
    assert kept([[1, 1, 0, 0]], [[0, 1, 0, 0]], [[1, 1, 1, 1]], [[0, 0, 0, 0]], n_boot=0)["value"] == 0.25
    out = kept([[1, 0] * 20], [[0] * 40], [[1] * 40], [[0] * 40], n_boot=400, seed=1)
    assert out["value"] == 0.5 and 0.04 < out["stderr"] < 0.12  # binomial se sqrt(.25/40) = 0.079
    # facts asks each fact twice: 20 facts, each answered alike both times, resampled as pairs
    pairs = [[1, 0] * 10 * 2]
    clusters = [list(range(20)) * 2]
    alone = kept(pairs, [[0] * 40], [[1] * 40], [[0] * 40], n_boot=2000, seed=1)["stderr"]
    paired = kept(pairs, [[0] * 40], [[1] * 40], [[0] * 40], clusters=clusters, n_boot=2000, seed=1)["stderr"]
    assert 1.25 < paired / alone < 1.6  # 20 independent answers, not 40: sqrt(2) wider
    assert kept([[1]], [[0]], [[0]], [[0]], n_boot=10)["value"] is None  # no source gain, no fraction


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
    with pytest.raises(PawError, match="--distill-steps 0"):
        RealOptions(models=str(tmp_path), parts=("transfer",), distill_steps=0).check()
    # the distillation budget follows `paw bench transfer`'s rule unless given
    assert RealOptions(models=str(tmp_path)).distill_budget == 3 * RealOptions.lora_steps
    assert RealOptions(models=str(tmp_path), distill_steps=7).distill_budget == 7


def test_report_writes_json_markdown_and_plot(tmp_path):
    from paw.bench.real.report import markdown, write_real

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
    # with the tasks part, its figure too: one panel per direction (a failed move draws the references only)
    four = {k: acc for k in ("source base", "source + LoRA", "target base", "target + own LoRA")}
    results["tasks"] = {"tasks": {"piqa": {"directions": {"a -> b": {
        "items": 20, "accuracy": four, "source_gain": {"difference": 0.0, "z": 0.0}, "failed": "no adapter"}}}}}
    out = write_real(tmp_path / "t", results)
    assert {p.name for p in out.iterdir()} == {"results.json", "results.md", "real.png", "tasks.png"}
    assert (out / "tasks.png").read_bytes()[:4] == b"\x89PNG"


def test_reworded_figures_by_hand_and_their_table():
    """One view of 8 items (clusters of one): target base 2/8, direct 6/8, copy 4/8; source 0/8 -> 4/8.

    kept (4/8 - 2/8) / (4/8 - 0) = 0.5; recovered (4/8 - 2/8) / (6/8 - 2/8) = 0.5; random 2/8: 0 and 0.
    """
    from paw.bench.real.report import markdown
    from paw.bench.real.run import SOURCE_BASE, SOURCE_LORA, view_figures

    outcomes = {"base": [1, 1, 0, 0, 0, 0, 0, 0], "direct": [1, 1, 1, 1, 1, 1, 0, 0], "random": [1, 1, 0, 0, 0, 0, 0, 0],
                "copy": [1, 1, 1, 1, 0, 0, 0, 0], SOURCE_BASE: [0] * 8, SOURCE_LORA: [0, 0, 0, 0, 1, 1, 1, 1]}
    rows = view_figures(outcomes, None, n_boot=0, seed=0)
    assert list(rows) == ["base", "direct", "random", "copy"]  # the source's own rows are the denominator only
    assert rows["copy"]["kept"]["value"] == pytest.approx(0.5) and rows["copy"]["recovered"]["value"] == pytest.approx(0.5)
    assert rows["random"]["kept"]["value"] == pytest.approx(0.0) and "kept" not in rows["base"]
    assert rows["copy"]["accuracy"]["mean"] == pytest.approx(0.5)
    acc = {"mean": 0.5, "stderr": 0.1, "n": 8, "per_seed": [0.5]}
    results = {"transfer": {"task": "facts", "items": 8, "source": {"base": acc, "lora": acc},
                            "rows": {"copy": {"status": "ok", "accuracy": acc, "kept": {"value": 0.9, "stderr": 0.05}}},
                            "reworded": {"task": "facts:reworded", "items": 8, "phrasings": ["a {name}", "b {name}"],
                                         "source": {"base": acc, "lora": acc}, "rows": rows}},
               "seconds": {"total": 1.0}, "machine": {"cpus": 2, "load_before": [1.0], "load_after": [1.0]}}
    text = markdown(results)
    assert "### Asked in other words" in text and "in 2 phrasings never used as a training or distillation" in text
    assert "| copy | 50.0 ± 17.7 | 0.50 | 0.50 | 0.90 ± 0.05 |" in text


@pytest.mark.slow  # about 5 s alone, 25 s on a busy machine
def test_part_transfer_scores_the_reworded_questions_with_every_condition(tmp_path):
    """The transfer part on two tiny zoo models in the real models' places: both views, every condition."""
    from paw import zoo
    from paw.bench.real.run import part_transfer
    from paw.bench.testbed import Base, load_model

    folders = {SMOL: zoo.tiny_model(tmp_path / SMOL, "llama", seed=0, hidden_size=32, num_layers=2),
               GEMMA: zoo.tiny_model(tmp_path / GEMMA, "llama", seed=1, hidden_size=32, num_layers=2)}
    opts = RealOptions(models=str(tmp_path), parts=("transfer",), task_items=20, lora_steps=3, distill_steps=2,
                       methods=("copy", "distill"), n_boot=20, lora_batch=4)
    lm, tok = load_model(folders[SMOL], "cpu")
    out = part_transfer(opts, folders, None, Base(SMOL, lm, tok, folders[SMOL]))
    reworded = out["reworded"]
    assert out["items"] == reworded["items"] == 20 and reworded["task"] == "facts:reworded"
    assert list(reworded["rows"]) == ["base", "direct", "random", "copy", "distill"]
    for name, row in reworded["rows"].items():
        assert row["accuracy"]["n"] == 20 and out["rows"][name]["accuracy"]["n"] == 20
        assert ("kept" in row) == (name not in ("base", "direct"))
