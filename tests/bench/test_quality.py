"""Transfer quality benchmark: statistics, tasks, adapter application, report and CLI errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paw.bench.quality import applied, random_deltas, score_items
from paw.bench.report import markdown
from paw.bench.stats import accuracy, kept, recovered
from paw.bench.tasks import (
    COLOURS,
    FALLBACK_WARNING,
    HELDOUT_ASK,
    HELDOUT_TRAIN,
    facts_heldout_task,
    facts_task,
    missing_sets,
    rule_task,
    synthetic_sentences,
)


def test_accuracy_pools_seeds():
    out = accuracy([[1, 0, 1, 1], [1, 1, 0, 0]])
    assert out["mean"] == 0.625 and out["per_seed"] == [0.75, 0.5] and out["n"] == 8
    assert out["stderr"] == pytest.approx(math.sqrt(0.625 * 0.375 / 8))


def test_recovered_is_ratio_of_gains_with_a_sane_bootstrap():
    rng = np.random.default_rng(0)
    base = (rng.random((2, 400)) < 0.25).astype(int)
    direct = np.maximum(base, (rng.random((2, 400)) < 0.8)).astype(int)
    half = np.where(rng.random((2, 400)) < 0.5, direct, base)  # each item: direct's outcome or base's
    r = recovered(half, base, direct, n_boot=400, seed=1)
    exact = (half.mean() - base.mean()) / (direct.mean() - base.mean())
    assert r["value"] == pytest.approx(exact)
    assert 0.4 < r["value"] < 0.6 and r["ceiling_ok"]
    assert 0.01 < r["stderr"] < 0.06 and r["low"] < r["value"] < r["high"]
    assert recovered(direct, base, direct, n_boot=0)["value"] == 1.0
    assert recovered(base, base, direct, n_boot=0)["value"] == 0.0


def test_cluster_bootstrap_widens_the_stderr_of_repeated_questions():
    """Each fact asked twice with the same outcome: 300 items are 150 independent ones, stderr x sqrt(2)."""
    rng = np.random.default_rng(3)
    per_fact = [(rng.random(150) < p).astype(int) for p in (0.25, 0.9, 0.6)]
    base, direct, half = ([np.concatenate([x, x])] for x in per_fact)
    clusters = [list(range(150)) * 2]
    items = recovered(half, base, direct, n_boot=2000, seed=1)
    facts = recovered(half, base, direct, clusters=clusters, n_boot=2000, seed=1)
    assert facts["value"] == items["value"]
    assert 1.25 < facts["stderr"] / items["stderr"] < 1.6


def test_kept_divides_by_the_source_gain():
    source_base, source_lora = [[0] * 8 + [1] * 2], [[1] * 10]     # the adapter adds 0.8 on its own base
    target_base, transfer = [[0] * 9 + [1]], [[1] * 4 + [0] * 5 + [1]]  # +0.4 on the target
    r = kept(transfer, target_base, source_lora, source_base, n_boot=0)
    assert r["value"] == pytest.approx(0.5) and r["per_seed"] == [pytest.approx(0.5)]


def test_recovered_flags_a_ceiling_at_base():
    base = [[1, 0] * 50]
    r = recovered(base, base, base, n_boot=50)
    assert not r["ceiling_ok"] and r["value"] is None


def test_tasks_are_balanced_held_out_and_deterministic():
    facts = facts_task(300, seed=3, words=[])
    assert len(facts.test) == 300 and len(facts.train) == 150
    assert facts.test == facts_task(300, seed=3, words=[]).test
    answers = np.bincount([i.answer for i in facts.test], minlength=4) / 300
    assert answers.min() > 0.17  # the right answer is not always in one slot
    assert all(i.choices[i.answer].strip() in COLOURS and len(set(i.choices)) == 4 for i in facts.test)
    # training text states each tested fact; each fact is asked twice with other distractors
    assert {(t.question, t.choices[0]) for t in facts.train} == {(i.question, i.choices[i.answer]) for i in facts.test}
    assert facts.test[0].question == facts.test[150].question and facts.test[0].choices != facts.test[150].choices

    assert facts.clusters[:3] == [0, 1, 2] and facts.clusters[150] == 0

    held = facts_heldout_task(300, seed=3, words=[])
    assert len(held.train) == 2 * 150 and len(held.test) == 300
    trained = {t.question for t in held.train}
    assert all(i.question not in trained for i in held.test)  # asked in a phrasing never trained on
    name = held.test[0].question.removeprefix("Ask ").removesuffix(" about colours and the answer is")
    assert {t.question for t in held.train if name in t.question} == {p.format(name=name) for p in HELDOUT_TRAIN}
    assert HELDOUT_ASK.format(name=name) == held.test[0].question

    words = sorted({w for s in synthetic_sentences(200, seed=0) for w in s.lower().strip(".").split()})
    rule = rule_task(50, seed=1, words=words + [f"w{i}" for i in range(60)])
    train_words = {t.choices[0].strip() for t in rule.train}
    test_words = {c.strip() for i in rule.test for c in i.choices}
    assert not train_words & test_words and len(rule.train) == 100
    for item in rule.test:
        shown = item.question[len("Word: "):-len(". Again:")]
        assert item.choices[item.answer] == f" {shown}" and len(set(item.choices)) == 4


def test_applied_adds_and_restores_exactly(tiny_llama):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    name = "model.layers.0.self_attn.q_proj.weight"
    before = dict(model.named_parameters())[name].detach().clone()
    delta = torch.randn_like(before)
    with applied(model, {name: delta}):
        torch.testing.assert_close(dict(model.named_parameters())[name].detach(), before + delta)
    assert torch.equal(dict(model.named_parameters())[name].detach(), before)


def test_random_deltas_match_norms_and_rank(tiny_llama):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    norms = {"model.layers.0.self_attn.q_proj.weight": 2.0, "model.layers.1.self_attn.q_proj.weight": 4.0,
             "model.layers.0.mlp.down_proj.weight": 1.5, "model.layers.9.mlp.down_proj.weight": 0.5}
    deltas = random_deltas(norms, model, rank=3, seed=0)
    assert sorted(deltas) == ["model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight",
                              "model.layers.1.mlp.down_proj.weight", "model.layers.1.self_attn.q_proj.weight"]
    assert float(deltas["model.layers.1.self_attn.q_proj.weight"].norm()) == pytest.approx(4.0)
    assert float(deltas["model.layers.1.mlp.down_proj.weight"].norm()) == pytest.approx(1.0)  # type mean
    assert int(torch.linalg.matrix_rank(deltas["model.layers.0.mlp.down_proj.weight"])) == 3


def test_score_items_agrees_with_evaluate(tiny_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paw.evaluate.mc import evaluate

    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    items = facts_task(40, seed=0, words=[]).test
    outcomes = score_items(model, tok, items, batch_size=16)
    assert len(outcomes) == 40 and set(outcomes) <= {0, 1}
    assert sum(outcomes) / 40 == pytest.approx(evaluate(model, tok, items, progress=False)["accuracy"])


def _results():
    rows = []
    for target in ("source", "upgrade"):
        for cond, acc in (("base", 0.25), ("direct", 0.9), ("auto", 0.85), ("copy", 0.8), ("random", 0.26)):
            row = {"task": "facts", "target": target, "condition": cond, "status": ["ok"],
                   "accuracy": {"mean": acc, "stderr": 0.02}}
            if cond not in ("base", "direct"):
                row["recovered"] = {"value": (acc - 0.25) / 0.65, "stderr": 0.03, "ceiling_ok": True}
            rows.append(row)
    rows.append({"task": "facts", "target": "unrelated", "condition": "base", "status": ["ok"],
                 "accuracy": {"mean": 0.25, "stderr": 0.02}})
    rows.append({"task": "facts", "target": "unrelated", "condition": "copy", "status": ["n/a"],
                 "reasons": ["shapes differ"]})
    return {"settings": {"methods": ["auto", "copy"]}, "rows": rows,
            "notes": {"targets": {"tokenizer": {"skipped": "not run: transplant-tokenizer unavailable"}}}}


def test_markdown_tables():
    text = markdown(_results())
    assert "| upgrade | 25.0 ± 2.0 | 90.0 ± 2.0 | 85.0 ± 2.0 | 80.0 ± 2.0 | 26.0 ± 2.0 |" in text
    assert "| upgrade | 0.92 ± 0.03 | 0.85 ± 0.03 | 0.02 ± 0.03 |" in text
    assert "| unrelated | 25.0 ± 2.0 | – | – | n/a | – |" in text
    assert "Target `tokenizer`: not run: transplant-tokenizer unavailable." in text


def test_plot_marks_dagger_refused_and_na_cells():
    from paw.bench.report import plot

    results = _results()
    rows = {(r["target"], r["condition"]): r for r in results["rows"]}
    rows[("upgrade", "copy")]["recovered"]["ceiling_ok"] = False      # a † cell
    rows[("source", "auto")]["status"] = ["refused"]                  # auto kept the base
    ax = plot(results).axes[0]
    marks = sorted(t.get_text() for t in ax.texts)
    assert marks == ["n/a", "refused", "†"]
    from matplotlib.container import BarContainer

    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    copy_bars = bars[1]  # methods in order: auto, copy, random; targets: source, upgrade, unrelated
    assert copy_bars[1].get_hatch() == "//" and copy_bars[1].get_alpha() < 1
    assert copy_bars[0].get_hatch() is None and math.isnan(copy_bars[2].get_height())


@pytest.mark.parametrize("args, message", [
    (["--seeds", "0,x"], "--seeds"),
    (["--targets", "upgrade,bogus"], "unknown task/target 'bogus'"),
    (["--items", "3"], "at least 10"),
    (["--methods", "teleport"], "unknown transfer method 'teleport'"),
    (["--jobs", "0"], "--jobs 0: at least 1"),
    (["--distill-steps", "0"], "--distill-steps 0: at least 1"),
])
def test_cli_rejects_bad_options(cli, tmp_path, args, message):
    result = cli("bench", "transfer", "--output", tmp_path / "out", "--targets", "upgrade", *args)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_cli_refuses_existing_output(cli, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    result = cli("bench", "transfer", "--output", tmp_path / "out", "--quick")
    assert result.exit_code == 2 and "exists" in result.stderr
    assert FALLBACK_WARNING in result.stderr  # no --data: said before any work


def test_data_folder_must_hold_the_corpus_sets(cli, tmp_path, commonsense):
    assert missing_sets(commonsense / "formatted") == []  # the carried slices name every set
    assert len(missing_sets(None)) == len(missing_sets(tmp_path)) == 7
    (tmp_path / "piqa_validation_formatted.jsonl").write_text("{}\n")
    result = cli("bench", "transfer", "--output", tmp_path / "out", "--quick", "--data", tmp_path)
    assert result.exit_code == 2 and "--data: lacks arc-easy_train_formatted.jsonl" in result.stderr


@pytest.mark.slow
def test_quick_benchmark_end_to_end(tmp_path):
    """The whole pipeline on tiny settings: every target kind, every method, outputs written."""
    from paw.bench.options import quick_options
    from paw.bench.quality import run_benchmark
    from paw.bench.report import write_results
    from paw.bench.results import merge_results

    opts = quick_options(targets=("upgrade", "pruned", "unrelated"), methods=("auto", "copy", "structural"))
    results = run_benchmark(opts, tmp_path / "work", progress=False)
    assert results["notes"]["corpus_fallback"] is True  # no commonsense folder: recorded, not silent
    rows = {(r["task"], r["target"], r["condition"]): r for r in results["rows"]}
    assert rows[("facts", "pruned", "copy")]["status"] == ["n/a"]  # shapes differ: copy cannot apply
    assert "copy needs equal shapes" in rows[("facts", "pruned", "copy")]["reasons"][0]
    assert rows[("facts", "source", "copy")]["accuracy"] == rows[("facts", "source", "direct")]["accuracy"]
    assert rows[("rule", "unrelated", "base")]["accuracy"]["n"] == 20
    merged = merge_results([results])
    assert merged["rows"] == results["rows"]  # pooling one run changes nothing
    out = write_results(tmp_path / "out", results)
    assert {p.name for p in out.iterdir()} == {"results.json", "results.md", "recovered.png", "kept.png"}


def test_version_1_results_pool_into_typed_statuses():
    """Files written before statuses were an enum ('n/a: <why>' in one string) still pool."""
    from paw.bench.results import TransferStatus, merge_results

    run = {"version": 1, "settings": {"methods": ["auto", "copy"], "n_boot": 10, "seeds": [0], "tasks": ["facts"]},
           "notes": {"seconds": {"total": 1.0}}, "lora": {},
           "raw": {"facts": {"unrelated": {"0": {
               "outcomes": {"base": "0101", "direct": "1111", "random": "0101", "auto": "0101"},
               "status": {"auto": "refused", "copy": "n/a: copy needs equal shapes"},
               "summaries": {"auto": {"message": "target looks unrelated"}, "copy": {}}}}}}}
    rows = {r["condition"]: r for r in merge_results([run])["rows"]}
    assert rows["copy"]["status"] == [TransferStatus.NOT_APPLICABLE.value] == ["n/a"]
    assert rows["copy"]["reasons"] == ["copy needs equal shapes"] and "accuracy" not in rows["copy"]
    assert rows["auto"]["status"] == ["refused"] and rows["auto"]["accuracy"]["mean"] == 0.5
    assert rows["base"]["status"] == ["ok"] and "reasons" not in rows["base"]
    text = markdown(merge_results([run]))
    assert "| unrelated | 50.0 ± 25.0 | 100.0 ± 0.0 | 50.0 ± 25.0 (refused) | 50.0 ± 25.0 |" in text
    assert "Left out, no number (n/a): column copy." in text  # copy applies to no target


def test_kept_plot_draws_the_kept_fraction():
    """kept.png draws each row's kept fraction, not its recovered one, and says what its † means."""
    from matplotlib.container import BarContainer

    from paw.bench.report import plot

    results = _results()
    for r in results["rows"]:
        if "recovered" in r:
            r["kept"] = {"value": r["recovered"]["value"] / 2, "stderr": 0.01, "ceiling_ok": True}
    ax = plot(results, "kept").axes[0]
    auto = [c for c in ax.containers if isinstance(c, BarContainer)][0]
    heights = [b.get_height() for b in auto]
    assert heights[:2] == pytest.approx([0.6 / 0.65 / 2] * 2) and math.isnan(heights[2])
    assert ax.get_ylabel() == "kept fraction" and "source LoRA" in ax.get_title()
