"""The benchmark's distill rows: label-free inputs per budget, CPU seconds, and their table."""

from __future__ import annotations

import pytest

from paw.bench.conditions import CONDITIONS, DISTILL, DISTILL_BUDGETS, add_columns, chosen, families, markdown
from paw.bench.distill import N_SEEDS, inputs_for
from paw.bench.options import BenchOptions
from paw.bench.tasks import facts_task, rule_task
from paw.errors import PawError


def test_inputs_never_carry_an_answer_and_synth_gets_five_seeds():
    task = facts_task(40, seed=0, words=[])
    inputs = inputs_for("inputs", task, 0)["prompts"]
    assert len(inputs) == 20 and all(not p.pairs for p in inputs)  # one statement per fact, its colour dropped
    assert {p.text for p in inputs} == {item.question for item in task.train}
    synth = inputs_for("synth", task, 0)
    assert len(synth["seed_examples"]) == N_SEEDS and synth["synthesize"] == 20 and synth["discriminator"]
    assert set(synth["seed_examples"]) <= set(inputs) and synth == inputs_for("synth", task, 0)
    assert inputs_for("generic", task, 0) == {"prompts": "generic"}
    words = [f"w{i}" for i in range(40)]
    rule = rule_task(20, seed=1, words=words)
    test_words = {c.strip() for item in rule.test for c in item.choices}
    assert not any(p.text.split()[1].rstrip(".") in test_words for p in inputs_for("inputs", rule, 1)["prompts"])


def test_shift_rows_take_the_same_inputs_with_the_shift_target():
    task = facts_task(40, seed=0, words=[])
    for budget in DISTILL_BUDGETS:
        assert inputs_for(f"{budget}-shift", task, 0) == {**inputs_for(budget, task, 0), "target": "shift"}
    assert "target" not in inputs_for("inputs", task, 0)


def test_facts_known_targets_know_two_thirds_and_distillation_sees_every_fact():
    from paw.bench.options import quick_options
    from paw.bench.tasks import DEFAULT_TASKS, FACTS_TRAIN, TASKS, facts_known_task

    task = facts_known_task(60, seed=2, words=[])
    assert task == facts_known_task(60, seed=2, words=[]) and task != facts_known_task(60, seed=3, words=[])
    taught = {(t.question, t.choices[0]) for t in task.train}
    known = {(t.question, t.choices[0]) for t in task.known}
    asked = {(i.question, i.choices[i.answer]) for i in task.test}
    assert len(taught) == 10 and len(known) == 20 and not taught & known and taught | known == asked
    # distillation sees each fact's prompt once, taught or known, and never an answer
    assert sorted(task.inputs) == sorted(q for q, _ in asked) and all(q.endswith("colour") for q in task.inputs)
    prompts = inputs_for("inputs", task, 2)["prompts"]
    assert {p.text for p in prompts} == set(task.inputs) and all(not p.pairs for p in prompts)
    assert len(task.test) == 60 and len(task.reworded) == 60 and task.clusters[:2] == [0, 1]
    assert {i.question for i in task.reworded}.isdisjoint({FACTS_TRAIN.format(name=q.split(" likes")[0])
                                                            for q in task.inputs})
    # asked for by name: the published run's tasks are unchanged
    assert "facts-known" in TASKS and "facts-known" not in DEFAULT_TASKS
    assert quick_options().tasks == DEFAULT_TASKS


def test_conditions_are_registered_with_a_summary_and_checked():
    assert CONDITIONS.names() == ["distill[inputs]", "distill[synth]", "distill[generic]", "distill[inputs-shift]",
                                  "distill[synth-shift]", "distill[generic-shift]"]
    assert families() == [DISTILL] and all(c.summary and "\n" not in c.summary for c in CONDITIONS.values())
    assert chosen({"distill": tuple(DISTILL_BUDGETS)}) == CONDITIONS.names()[:3]
    assert BenchOptions().distill == tuple(DISTILL_BUDGETS)  # the published run's rows: the shift rows by name
    assert chosen({"distill": ("generic", "inputs")}) == ["distill[generic]", "distill[inputs]"]  # the order asked
    assert chosen({"distill": ()}) == []
    with pytest.raises(PawError, match="unknown distill input budget 'labels'; choose from inputs, synth, generic, "
                                       "inputs-shift"):
        chosen({"distill": ("inputs", "labels")})
    with pytest.raises(PawError, match="unknown distill input budget 'labels'"):
        BenchOptions(distill=("labels",)).check()  # before any training


def test_cpu_seconds_and_table():
    raw = {"facts": {"unrelated": {
        0: {"summaries": {"distill[inputs]": {"cpu_seconds": 20.0}}},
        1: {"summaries": {"distill[inputs]": {"cpu_seconds": 30.0}}}}}}
    rows = [{"task": "facts", "target": "unrelated", "condition": "distill[inputs]", "status": ["ok"],
             "accuracy": {"mean": 0.9, "stderr": 0.02}, "kept": {"value": 0.95, "stderr": 0.03, "ceiling_ok": True},
             "recovered": {"value": 0.97, "stderr": 0.02, "ceiling_ok": True}},
            {"task": "facts", "target": "unrelated", "condition": "distill[synth]", "status": ["n/a"],
             "reasons": ["the teacher wrote no usable input"]},
            {"task": "facts", "target": "unrelated", "condition": "auto", "status": ["refused"]}]
    assert add_columns([dict(r) for r in rows], raw, ["auto"]) == rows  # no distill row asked: untouched
    rows = add_columns(rows, raw, ["auto", "distill[inputs]"])
    assert rows[0]["cpu_seconds"] == 25.0 and "cpu_seconds" not in rows[2]
    text = markdown({"rows": rows})
    assert "| unrelated | inputs | 90.0 ± 2.0 | 0.95 ± 0.03 | 0.97 ± 0.02 | 25 |" in text
    assert "Not run, inputs `synth` on every target: the teacher wrote no usable input." in text  # not a row
    assert markdown({"rows": rows[2:]}) == ""
    second = [dict(r, task="rule") for r in rows[:2]]  # a second task after a 'Not run' line
    assert markdown({"rows": rows + second}).count("Not run, inputs `synth` on every target") == 2


def test_distill_steps_default_to_three_lora_budgets_and_are_checked():
    assert BenchOptions().distill_budget == 900 and BenchOptions(lora_steps=10).distill_budget == 30
    assert BenchOptions(lora_steps=10, distill_steps=7).distill_budget == 7
    with pytest.raises(PawError, match="--distill-steps 0"):
        BenchOptions(distill_steps=0).check()
    with pytest.raises(PawError, match="--jobs 0"):
        BenchOptions(jobs=0).check()


def test_jobs_give_the_results_of_one_process(tmp_path, capsys):
    """Two forked workers, one per seed: every outcome and row as in one process (timings aside), and said."""
    from dataclasses import replace

    from paw.bench.options import quick_options
    from paw.bench.quality import run_benchmark

    opts = quick_options(seeds=(0, 1), tasks=("facts",), targets=("pruned",), methods=("auto",), distill=("inputs",))
    one = run_benchmark(opts, tmp_path / "one", progress=False)
    capsys.readouterr()
    two = run_benchmark(replace(opts, jobs=2), tmp_path / "two", progress=False)
    assert "--jobs 2: 2 (seed, task) units over 2 forked worker processes on the CPU" in capsys.readouterr().err

    def timeless(x):
        if isinstance(x, dict):
            return {k: timeless(v) for k, v in x.items() if not k.endswith("seconds")}
        return [timeless(v) for v in x] if isinstance(x, list) else x

    assert timeless(two["raw"]) == timeless(one["raw"]) and timeless(two["rows"]) == timeless(one["rows"])
    assert one["raw"]["facts"]["pruned"].keys() == {"0", "1"}
    assert "distill[inputs]" in one["raw"]["facts"]["pruned"]["1"]["status"]


def test_token_focus_reaches_the_distill_rows_and_is_range_checked():
    from dataclasses import replace

    from paw.bench.options import BenchOptions, for_run
    from paw.errors import PawError

    opts = for_run(BenchOptions(seeds=(0,), tasks=("facts",), targets=("upgrade",), items=10, hidden_size=8,
                                num_layers=1, pretrain_steps=1, lora_steps=1, lora_rank=1, distill_token_focus=0.5),
                   quick=True)
    assert opts.distill_token_focus == 0.5 and opts.hidden_size == 32   # --quick: its sizes, the knob kept
    with pytest.raises(PawError, match="--distill-token-focus 1.5"):
        replace(BenchOptions(), distill_token_focus=1.5).check()


@pytest.mark.parametrize(("distill_lr", "expected"), [(None, 3e-3), (1e-3, 1e-3)])
def test_distill_rows_learn_at_the_lora_rate_unless_given_their_own(monkeypatch, distill_lr, expected):
    from types import SimpleNamespace

    import paw.bench.distill as bench_distill
    from paw.bench.options import BenchOptions, for_run
    from paw.errors import PawError

    seen = {}

    def record(adapter, teacher, student, **kw):
        seen.update(kw)
        raise PawError("recorded")   # the row ends as not applicable: nothing to score

    monkeypatch.setattr(bench_distill, "distill_lora", record)
    monkeypatch.setattr(bench_distill, "_side", lambda base, model=None: SimpleNamespace(model=SimpleNamespace(
        named_parameters=lambda: [])))
    monkeypatch.setattr(bench_distill, "merged_copy", lambda model, adapter: model)
    monkeypatch.setattr(bench_distill, "without_adapter", lambda model, adapter: None)
    monkeypatch.setattr(bench_distill, "inputs_for", lambda kind, task, seed: {})
    source = SimpleNamespace(model=None)
    out = {"status": {}, "summaries": {}, "reasons": {}, "outcomes": {}}
    opts = BenchOptions(distill_lr=distill_lr)
    bench_distill.run(out, SimpleNamespace(name="t"), source, None, SimpleNamespace(test=[]), opts, 0, None, "cpu",
          names={"inputs": "distill[inputs]"})
    assert seen["lr"] == expected and out["reasons"]["distill[inputs]"] == "recorded"
    with pytest.raises(PawError, match="--distill-lr 0.0: must be a positive number"):
        for_run(BenchOptions(seeds=(0,), tasks=("facts",), targets=("upgrade",), distill_lr=0.0), quick=True)


@pytest.mark.slow
def test_facts_known_targets_learn_their_part_and_get_both_distill_targets(tmp_path):
    """The stronger-target task end to end: a target merges its own LoRA on the known facts (saved for the
    transfers to read), the source does not, and both distill targets get a row on both phrasings."""
    import torch

    from paw.bench.options import quick_options
    from paw.bench.quality import KNOWN_SEED, build_bases, knowing, run_benchmark
    from paw.bench.tasks import facts_known_task
    from paw.bench.testbed import adapter_deltas, train_adapter
    from paw.io.checkpoint import open_checkpoint

    opts = quick_options(tasks=("facts-known",), targets=("upgrade-mild",), methods=("copy",),
                         distill=("inputs", "inputs-shift"), lora_steps=40, lora_lr=1e-2, items=12)
    results = run_benchmark(opts, tmp_path / "work", progress=False)
    rows = {(r["task"], r["target"], r["condition"]) for r in results["rows"] if "accuracy" in r}
    for view in ("facts-known", "facts-known:reworded"):
        for target in ("source", "upgrade-mild"):
            assert {(view, target, c) for c in ("base", "copy", "distill[inputs]", "distill[inputs-shift]")} <= rows
    assert set(results["lora"]) == {"facts-known/0/source", "facts-known/0/upgrade-mild",
                                    "facts-known/0/upgrade-mild/known"}  # the source learns nothing of its own
    # the knowing target is the target plus exactly its own merged LoRA, and that is what lies on disk
    bases, _ = build_bases(opts, tmp_path / "again", progress=False)
    target = bases[1]
    before = {k: v.clone() for k, v in target.model.state_dict().items()}
    task = facts_known_task(opts.items, seed=0, words=[])
    knows, fit = knowing(target, task, opts, 0)
    assert all(torch.equal(v, target.model.state_dict()[k]) for k, v in before.items())  # the base is untouched
    adapter, _ = train_adapter(target, task.known, opts, KNOWN_SEED)
    deltas = adapter_deltas(adapter)
    after = knows.model.state_dict()
    assert deltas and all(torch.allclose(after[k], before[k] + d, atol=1e-6) for k, d in deltas.items())
    assert all(torch.equal(after[k], before[k]) for k in before if k not in deltas)
    on_disk = open_checkpoint(knows.folder)
    name = next(iter(deltas))
    assert torch.allclose(on_disk[name].float(), after[name], atol=1e-6) and knows.folder != target.folder
