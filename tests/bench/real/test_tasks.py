"""``paw bench real --parts tasks`` on zoo models: one task moved across tokenizers, every condition
scored, the fractions computed from the outcomes, the work cached and reused."""

from __future__ import annotations

import json

import pytest

from paw.bench.real import tasks as real_tasks
from paw.bench.real.cache import Cache
from paw.bench.real.task_sets import TaskSplit, load_task, split
from paw.errors import PawError

RECIPE = real_tasks.Recipe(lora_rank=4, lora_alpha=8, lora_steps=30, lora_batch=8, lora_lr=1e-2, train_inputs=12,
                           distill_steps=10)


def test_one_direction_scores_every_condition_and_caches_it(pair, monkeypatch):
    sides, items, root = pair
    cache = Cache(root / "cache")
    out = real_tasks.run_direction(sides["a"], sides["b"], items, items, cache, recipe=RECIPE, n_boot=50)
    acc = out["accuracy"]
    assert set(acc) == {"source base", "source + LoRA", "target base", "target + own LoRA", "target + moved LoRA"}
    assert all(a["n"] == len(items) for a in acc.values())
    assert acc["source + LoRA"]["mean"] > acc["source base"]["mean"]           # the LoRA learned the facts
    gain = out["source_gain"]
    assert gain["difference"] == pytest.approx(acc["source + LoRA"]["mean"] - acc["source base"]["mean"])
    assert gain["counts"] is (gain["z"] >= real_tasks.MIN_SOURCE_Z)
    moved_gain = acc["target + moved LoRA"]["mean"] - acc["target base"]["mean"]
    assert out["kept"]["value"] == pytest.approx(moved_gain / gain["difference"])
    assert out["distill"]["agreement_after"]["adapter_agreement"] is not None   # the teacher's excess was known

    from paw.bench.real.report import _tasks_table

    [_, _, row] = _tasks_table({"tasks": {"colour": {"directions": {"a -> b": out}}}})
    assert row.startswith(f"| colour | a -> b | {len(items)} |") and row.count("|") == 13
    from paw.bench.real.report import task_panels

    [panel] = task_panels({"tasks": {"colour": {"directions": {"a -> b": out}}}})   # tasks.png's one panel
    assert [(r["label"], r["role"]) for r in panel["rows"]] == [
        ("target base", "target"), ("target + own LoRA", "target"), ("source + LoRA (the teacher)", "source"),
        ("moved", "main")]
    assert panel["rows"][-1]["mean"] == pytest.approx(100 * acc["target + moved LoRA"]["mean"])

    def fail(*args, **kwargs):
        raise AssertionError("cached work was done again")

    monkeypatch.setattr(real_tasks, "train_adapter", fail)
    monkeypatch.setattr(real_tasks, "distill_lora", fail)
    monkeypatch.setattr(real_tasks, "score_items", fail)
    again = real_tasks.run_direction(sides["a"], sides["b"], items, items, cache, recipe=RECIPE, n_boot=50)
    assert again["accuracy"] == out["accuracy"] and again["kept"] == out["kept"]


def test_tasks_split_in_seeded_disjoint_halves_or_by_their_own_splits():
    train, test = split(list(range(11)), TaskSplit("x"), None, seed=3)
    assert len(train) == 5 and len(test) == 6 and not set(train) & set(test)
    assert (train, test) == split(list(range(11)), TaskSplit("x"), None, seed=3)
    assert split([1, 2], TaskSplit("x", "y"), [3], seed=0) == ([1, 2], [3])
    train, test = split(list(range(11)), TaskSplit("x", test_size=4), None, seed=3)
    assert len(train) == 7 and len(test) == 4 and sorted(train + test) == list(range(11))
    with pytest.raises(Exception, match="x: 11 items cannot give 11 test items"):
        split(list(range(11)), TaskSplit("x", test_size=11), None, seed=3)
    with pytest.raises(Exception, match="unknown real task 'mmlu'"):
        load_task("nowhere", "mmlu", 0)


def test_options_name_an_unknown_task_and_ask_for_data(tmp_path):
    from paw.bench.real.options import GEMMA, SMOL, RealOptions

    for name in (SMOL, GEMMA):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    with pytest.raises(PawError, match="--real-tasks: unknown task 'mmlu'"):
        RealOptions(models=str(tmp_path), data=str(tmp_path), parts=("tasks",), real_tasks=("mmlu",)).check()
    with pytest.raises(PawError, match="need --data"):
        RealOptions(models=str(tmp_path), parts=("tasks",)).check()
    assert "tasks" not in RealOptions(models=str(tmp_path)).parts   # hours on a CPU: asked for by name


def test_synthesized_inputs_reuse_the_cached_scores_and_say_what_the_teacher_wrote(pair, monkeypatch):
    """Trans-LoRA's setting on the zoo pair: the moved LoRA from the teacher's own inputs, scored beside
    the four cached conditions (which are not scored again), or the synthesis's failure as the result."""
    sides, items, root = pair
    cache = Cache(root / "cache-synth")
    recipe = real_tasks.Recipe(**{**RECIPE.__dict__, "synth_inputs": 6, "synth_seeds": 3})
    main = real_tasks.run_direction(sides["a"], sides["b"], items, items, cache, recipe=recipe, n_boot=50)
    calls = []
    real = real_tasks.score_items
    monkeypatch.setattr(real_tasks, "score_items", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = real_tasks.run_variant(sides["a"], sides["b"], items, items, cache, "synthesized", recipe=recipe, n_boot=50)
    assert out["seeds"] == [p.text for p in real_tasks.label_free_inputs(items, recipe, 0)[:3]]
    assert "failed" not in out, out
    assert calls == [1]                                   # only the moved LoRA was scored
    assert out["accuracy"]["target base"] == main["accuracy"]["target base"]
    assert 0 < out["inputs"]["synthesis"]["kept"] <= 6
    judged = out["discriminator"]    # what --discriminator says of the written inputs, and of real ones
    written = json.loads((root / "cache-synth" / "distilled-synth-a-to-b-work" / "synthesis.json").read_text())
    assert judged["sampled"] == {"synthesized": out["inputs"]["synthesis"]["kept"], "real": len(items) - 3}
    assert len(written["state"]["kept"]) == judged["sampled"]["synthesized"]
    from paw.bench.testbed import adapter_deltas, applied
    from paw.data import sample_texts
    from paw.transfer.distill.synthesis import discriminator_passes

    a, lora = sides["a"], real_tasks.own_lora(sides["a"], items, cache, recipe=recipe)[0]
    with applied(a.model, adapter_deltas(lora)):
        verdicts = discriminator_passes(a.model, a.tokenizer, [p.text for p in real_tasks.label_free_inputs(items, recipe, 0)[3:]],
                                    real_tasks.label_free_inputs(items, recipe, 0)[:3], sample_texts("en"))
    assert judged["real"]["mean"] == pytest.approx(sum(verdicts) / len(verdicts)) and judged["real"]["n"] == len(items) - 3
    assert judged["difference"]["difference"] == pytest.approx(judged["synthesized"]["mean"] - judged["real"]["mean"])
    monkeypatch.setattr(real_tasks, "discriminator_passes", lambda *a, **k: pytest.fail("judged again"))
    assert real_tasks.run_variant(sides["a"], sides["b"], items, items, cache, "synthesized", recipe=recipe,
                                  n_boot=50)["discriminator"] == judged

    from paw.bench.real.report import _tasks_table

    focus = real_tasks.run_variant(sides["a"], sides["b"], items, items, cache, "token-focus", recipe=recipe, n_boot=50)
    assert calls == [1, 1] and focus["accuracy"]["source + LoRA"] == main["accuracy"]["source + LoRA"]
    assert focus["inputs"]["count"] == len(real_tasks.label_free_inputs(items, recipe, 0))   # the main run's inputs
    from paw.io.adapter import read_adapter

    plain, focused = (read_adapter(root / "cache-synth" / f"distilled-{k}a-to-b").tensors for k in ("", "focus-"))
    assert max(float((plain[k] - focused[k]).abs().max()) for k in plain) > 1e-6   # the focus changed the training
    rows = _tasks_table({"tasks": {"colour": {"directions": {"a -> b": {**main, "synthesized": out,
                                                                        "token-focus": focus}}}}})
    assert rows[3].startswith("| colour | a -> b, from the teacher's own inputs (") and rows[3].count("|") == 13
    assert rows[4].startswith("| colour | a -> b, with --token-focus 0.5 |") and rows[4].count("|") == 13

    def barren(*args, **kwargs):
        raise PawError("the teacher wrote no usable input from the 3 seed examples")

    monkeypatch.setattr(real_tasks, "distill_lora", barren)   # a teacher that writes nothing usable: reported, not hidden
    failed = real_tasks.run_variant(sides["a"], sides["b"], items, items, Cache(root / "cache-barren"), "synthesized",
                                    recipe=recipe, n_boot=50)
    assert failed == {"failed": "the teacher wrote no usable input from the 3 seed examples", "seeds": out["seeds"]}
    # on record at once, and tried again on a rerun (a fixed bug must not stay a cached failure)
    record = json.loads((root / "cache-barren" / "distilled-synth-a-to-b.failed.json").read_text())
    assert record["failed"] == failed["failed"] and record["seconds"] >= 0
    assert not (root / "cache-barren" / "distilled-synth-a-to-b.meta.json").exists()


def test_the_base_teacher_control_distils_from_the_source_without_its_lora(pair, monkeypatch):
    """The control's teacher is the source base (no LoRA merged, no adapter to switch off); its result says,
    paired on the items, how much more the main move gave: what the LoRA itself carried."""
    import torch

    from paw.bench.real.report import _tasks_table
    from paw.bench.stats import paired_difference

    sides, items, root = pair
    cache = Cache(root / "cache-control")
    main = real_tasks.run_direction(sides["a"], sides["b"], items, items, cache, recipe=RECIPE, n_boot=50)
    bare = {k: v.clone() for k, v in sides["a"].model.state_dict().items()}
    seen, real = [], real_tasks.distill_lora

    def spy(adapter, teacher, student, **kw):
        now = teacher.model.state_dict()
        seen.append((teacher.adapter_off is None, all(torch.equal(now[k], bare[k]) for k in bare)))
        return real(adapter, teacher, student, **kw)

    monkeypatch.setattr(real_tasks, "distill_lora", spy)
    out = real_tasks.run_variant(sides["a"], sides["b"], items, items, cache, "base-teacher", recipe=RECIPE, n_boot=50)
    assert seen == [(True, True)]                      # no LoRA in the teacher while it taught
    main_moved = cache.found("score-b-moved-from-a")
    this = cache.found("score-b-moved-base-teacher-from-a")
    assert main_moved is not None and this is not None and len(this) == len(items)
    assert out["vs_main"] == paired_difference(main_moved, this)
    assert out["accuracy"]["target base"] == main["accuracy"]["target base"]
    rows = _tasks_table({"tasks": {"colour": {"directions": {"a -> b": {**main, "base-teacher": out}}}}})
    assert rows[3].startswith("| colour | a -> b, control: the source base as teacher (main move − this: ")
    assert rows[3].count("|") == 13


def test_a_diverged_distillation_is_a_result_kept_in_the_cache(pair, monkeypatch):
    """A move whose distillation stops at a NaN loss writes no adapter; the direction reports it with the
    four other conditions, the cache keeps it (not tried again), and the table shows it."""
    import math

    sides, items, root = pair
    cache = Cache(root / "cache-nan")
    real = real_tasks.distill_lora
    tried = []

    def diverging(adapter, *args, **kwargs):
        tried.append(1)
        moved, report = real(adapter, *args, **{**kwargs, "steps": 2})
        moved.tensors = {k: v * math.nan for k, v in moved.tensors.items()}
        report["distill"]["diverged_at_step"] = 2
        return moved, report

    monkeypatch.setattr(real_tasks, "distill_lora", diverging)
    out = real_tasks.run_direction(sides["a"], sides["b"], items, items, cache, recipe=RECIPE, n_boot=50)
    assert out["failed"] == "the distillation diverged (NaN/Inf loss) at step 2; no adapter"
    assert "target + moved LoRA" not in out["accuracy"] and out["accuracy"]["target base"]["n"] == len(items)
    assert not (root / "cache-nan" / "distilled-a-to-b").exists() and tried == [1]
    again = real_tasks.run_direction(sides["a"], sides["b"], items, items, cache, recipe=RECIPE, n_boot=50)
    assert again["failed"] == out["failed"] and tried == [1]

    from paw.bench.real.report import _tasks_table

    [_, _, row] = _tasks_table({"tasks": {"colour": {"directions": {"a -> b": out}}}})
    assert "diverged (NaN/Inf loss) at step 2" in row and row.count("|") == 13


def test_a_killed_distillation_resumes_from_its_checkpoint(pair, monkeypatch):
    """The CPU run takes an hour per distillation and a session can end in the middle: the bench
    checkpoints every SAVE_EVERY steps beside the adapter and the next run resumes there, to the same bytes."""
    from paw.io.adapter import read_adapter

    sides, items, root = pair
    monkeypatch.setattr(real_tasks, "SAVE_EVERY", 4)
    folder = root / "cache-resume"
    real_tasks.run_direction(sides["a"], sides["b"], items, items, Cache(folder), recipe=RECIPE, n_boot=50)
    first = read_adapter(folder / "distilled-a-to-b").tensors
    # as if killed after step 8 of 10: the checkpoint is there, the adapter and its record are not
    import shutil

    shutil.rmtree(folder / "distilled-a-to-b")
    (folder / "distilled-a-to-b.meta.json").unlink()
    (folder / "score-b-moved-from-a.json").unlink()
    resumed_from = []
    real = real_tasks.load_train_state
    monkeypatch.setattr(real_tasks, "load_train_state", lambda work: resumed_from.append((s := real(work)) and s["step"]) or s)
    real_tasks.run_direction(sides["a"], sides["b"], items, items, Cache(folder), recipe=RECIPE, n_boot=50)
    assert resumed_from == [8]
    again = read_adapter(folder / "distilled-a-to-b").tensors
    assert all(bool((again[k] == first[k]).all()) for k in first)


def test_a_killed_labelled_lora_resumes_from_its_checkpoint(pair, monkeypatch):
    """A Gemma-3 LoRA takes over an hour on a CPU: it checkpoints like a distillation and resumes to the same bytes."""
    import shutil

    from paw.io.adapter import read_adapter

    sides, items, root = pair
    monkeypatch.setattr(real_tasks, "SAVE_EVERY", 10)
    folder = root / "cache-lora-resume"
    real_tasks.own_lora(sides["a"], items, Cache(folder), recipe=RECIPE)
    first = read_adapter(folder / "lora-a").tensors
    shutil.rmtree(folder / "lora-a")  # killed after step 20 of 30: the checkpoint is there, the adapter is not
    (folder / "lora-a.meta.json").unlink()
    resumed_from = []
    real = real_tasks.load_train_state
    monkeypatch.setattr(real_tasks, "load_train_state", lambda work: resumed_from.append((s := real(work)) and s["step"]) or s)
    real_tasks.own_lora(sides["a"], items, Cache(folder), recipe=RECIPE)
    assert resumed_from == [20]
    again = read_adapter(folder / "lora-a").tensors
    assert first.keys() == again.keys() and all(bool((again[k] == first[k]).all()) for k in first)
    # another recipe refuses the checkpoint instead of continuing someone else's run
    shutil.rmtree(folder / "lora-a")
    (folder / "lora-a.meta.json").unlink()
    with pytest.raises(PawError, match="lr="):
        real_tasks.own_lora(sides["a"], items, Cache(folder), recipe=real_tasks.Recipe(**{**RECIPE.__dict__, "lora_lr": 5e-3}))


def test_every_task_s_main_directions_run_before_any_variant(monkeypatch, tmp_path):
    """The variants take hours on a CPU: BoolQ's main result must not wait behind ARC-Easy's variants."""
    from types import SimpleNamespace

    calls = []
    monkeypatch.setattr(real_tasks, "load_task", lambda data, task, seed: ([task], [task]))
    monkeypatch.setattr(real_tasks, "run_direction", lambda a, b, train, test, cache, **k: calls.append(("main", train[0], a.name))
                        or {})
    monkeypatch.setattr(real_tasks, "run_variant", lambda a, b, train, test, cache, v, **k: calls.append((v, train[0], a.name))
                        or {"v": v})
    opts = SimpleNamespace(real_tasks=("arc-easy", "boolq"), data=".", seed=0, n_boot=10, device="cpu")
    out = real_tasks.part_tasks(opts, {"s": tmp_path / "s", "t": tmp_path / "t"}, lambda folder, device: (None, None), tmp_path)
    assert calls[:4] == [("main", "arc-easy", "s"), ("main", "arc-easy", "t"), ("main", "boolq", "s"), ("main", "boolq", "t")]
    assert len(calls) == 4 + 2 * 2 * len(real_tasks.VARIANTS) and all(c[0] in real_tasks.VARIANTS for c in calls[4:])
    assert out["tasks"]["boolq"]["directions"]["t -> s"]["token-focus"] == {"v": "token-focus"}


def test_score_files_belong_to_the_adapter_they_scored(tmp_path):
    """A work folder that kept its scores but lost its adapters (a new machine) must not pair them with a
    LoRA trained again; legacy score files (no digest) are reused unless their adapter was made here."""
    import torch

    from paw.io.adapter import LoraAdapter
    from paw.io.manifest import write_json
    from paw.lora import tensors_digest

    def lora(v: float) -> LoraAdapter:
        return LoraAdapter({"r": 1}, {"a.lora_A.weight": torch.full((1, 2), v)})

    calls = []

    def make(value):
        return lambda: calls.append(value) or [value]

    old, new = lora(1.0), lora(2.0)
    assert tensors_digest(old.tensors) == tensors_digest(lora(1.0).tensors) != tensors_digest(new.tensors)
    cache = Cache(tmp_path)
    assert cache.scores("s", make(1), old) == ([1], pytest.approx(0, abs=1))
    assert cache.scores("s", make(9), old)[0] == [1] and calls == [1]        # the same adapter: reused
    assert cache.scores("s", make(2), new)[0] == [2] and calls == [1, 2]     # another adapter: made again
    write_json(tmp_path / "legacy.json", {"correct": [7], "seconds": 1.0})   # written before digests
    assert cache.scores("legacy", make(3), old)[0] == [7]                    # its adapter was read, not made
    cache.made.add(tensors_digest(new.tensors))
    write_json(tmp_path / "legacy.json", {"correct": [7], "seconds": 1.0})
    assert cache.scores("legacy", make(4), new)[0] == [4]                    # made in this process: scored again
    write_json(tmp_path / "legacy.json", {"correct": [7], "seconds": 1.0})
    assert Cache(tmp_path, keep_scores=True).scores("legacy", make(5), new)[0] == [7]   # stand-ins: kept
    assert calls == [1, 2, 4]
    cache.scores("moved", make(6), old, source=new)   # a moved adapter names the LoRA it came from
    written = json.loads((tmp_path / "moved.json").read_text())
    assert (written["adapter"], written["source_lora"]) == (tensors_digest(old.tensors), tensors_digest(new.tensors))
    assert "source_lora" not in json.loads((tmp_path / "s.json").read_text())


def test_a_target_lora_that_is_only_a_cached_score_is_not_trained_again(pair, monkeypatch):
    """The target's own LoRA gives a direction only its reference score: where that score is cached and the
    adapter did not travel (a GPU lease, a new machine), a variant uses the score and trains nothing for it;
    with neither at hand it is trained."""
    import shutil

    sides, items, root = pair
    cache = Cache(root / "cache-own")
    main = real_tasks.run_direction(sides["a"], sides["b"], items, items, cache, recipe=RECIPE, n_boot=50)
    shutil.rmtree(cache.folder / "lora-b")
    (cache.folder / "lora-b.meta.json").unlink()
    trained, real = [], real_tasks.train_adapter

    def spy(*args, **kwargs):
        trained.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(real_tasks, "train_adapter", spy)
    out = real_tasks.run_variant(sides["a"], sides["b"], items, items, cache, "token-focus", recipe=RECIPE, n_boot=50)
    assert trained == [] and out["accuracy"]["target + own LoRA"] == main["accuracy"]["target + own LoRA"]
    (cache.folder / "score-b-lora.json").unlink()
    real_tasks.run_variant(sides["a"], sides["b"], items, items, cache, "token-focus", recipe=RECIPE, n_boot=50)
    assert trained == [1] and (cache.folder / "lora-b.meta.json").is_file() and cache.found("score-b-lora")


def test_the_cells_table_reads_every_move_from_its_score_files(tmp_path):
    """scripts/real_tasks_table.py: hand-made outcomes of 4 items give hand-checked rows; a move whose score
    file predates the LoRA's (trained again, digest-named) is marked as an earlier LoRA's."""
    import importlib.util
    from pathlib import Path

    from paw.io.manifest import write_json

    spec = importlib.util.spec_from_file_location("real_tasks_table", Path(__file__).resolve().parents[3]
                                                  / "scripts" / "real_tasks_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    s, t = "smollm2-135m-instruct", "gemma-3-270m"
    folder = tmp_path / "tasks" / "x"
    folder.mkdir(parents=True)
    for key, correct in ((f"{s}-base", [0, 0, 0, 1]), (f"{s}-lora", [1, 1, 0, 1]), (f"{t}-base", [0, 0, 1, 1]),
                         (f"{t}-lora", [1, 1, 1, 1]), (f"{t}-moved-from-{s}", [1, 0, 1, 1]),
                         (f"{t}-moved-focus-from-{s}", [1, 1, 1, 1])):
        write_json(folder / f"score-{key}.json", {"correct": correct, "seconds": 1.0})
    main, focus = table.rows(folder, "x", s, t, n_boot=0)
    # main: 3/4; gain +1/4 (paired stderr of [1,0,0,0]: 0.25); kept (1/4)/(2/4); recovered (1/4)/(2/4)
    assert main == (f"| x | {s} -> {t} | main | first machine's | 75.0 ± 21.7 | +25.0 ± 25.0 | 0.50 | 0.50 |  |")
    assert focus.split(" | ")[4:7] == ["100.0 ± 0.0", "+50.0 ± 28.9", "1.00"]
    assert focus.endswith("| +25.0 ± 25.0 |")   # focus − main, paired: [0, 1, 0, 0]
    write_json(folder / f"score-{s}-lora.json", {"correct": [1, 1, 0, 1], "seconds": 1.0, "adapter": "ab" * 32})
    assert "abababab (the move's score predates it" in table.rows(folder, "x", s, t, n_boot=0)[0]
    # a move that names its source LoRA: that one, with a warning where the source's score file scored another copy
    for named, shown in (("ab" * 16, "abababab"), ("cd" * 16, "cdcdcdcd (the source's score file scored another copy, abababab)")):
        write_json(folder / f"score-{t}-moved-focus-from-{s}.json",
                   {"correct": [1, 1, 1, 1], "seconds": 1.0, "adapter": "ef" * 16, "source_lora": named})
        assert table.rows(folder, "x", s, t, n_boot=0)[1].split(" | ")[3] == shown
    write_json(folder / f"score-{s}-lora.json", {"correct": [1, 1, 0, 1], "seconds": 1.0})
    assert table.rows(folder, "x", s, t, n_boot=0)[1].split(" | ")[3] == (
        "cdcdcdcd (the source's score is the first machine's LoRA's)")
    assert table.rows(folder, "x", t, s, n_boot=0) == []   # no move that way
    # the figure's panel: the target's base and own LoRA, the teacher, then the moves, in percent
    drawn = table.panel(folder, "x", s, t)
    assert drawn["title"] == "x: SmolLM2 -> Gemma-3 (4 test items)"
    assert [(r["label"], r["role"], r["mean"]) for r in drawn["rows"]] == [
        ("Gemma-3 base", "target", 50.0), ("Gemma-3 + own LoRA (labels)", "target", 100.0),
        ("SmolLM2 + LoRA (the teacher)", "source", 75.0), ("moved: main", "main", 75.0),
        ("moved: token focus", "variant", 100.0)]
    assert abs(drawn["rows"][0]["stderr"] - 25.0) < 1e-9   # sqrt(p (1 - p) / n) of [0, 0, 1, 1]: sqrt(0.25 / 4)
    assert table.panel(folder, "x", t, s) is None
    assert table.discriminator_row(folder, "x", s, t) is None
    write_json(folder / f"discriminator-synthesized-{s}-to-{t}.json", {"correct": [1, 0, 0, 0], "seconds": 1.0})
    write_json(folder / f"discriminator-real-{s}.json", {"correct": [1, 1, 1, 0], "seconds": 1.0})
    # 1/4 = 25 ± 22% (sqrt(.25 .75 / 4) = .2165) against 3/4 = 75 ± 22%: -50 ± 30.6 (unpaired: other items)
    assert table.discriminator_row(folder, "x", s, t) == f"| x | {s} -> {t} | 1/4 = 25 ± 22% | 3/4 = 75 ± 22% | -50.0 ± 30.6 |"
    from paw.bench.real.report import tasks_figure

    fig = tasks_figure([drawn, drawn, drawn])   # three panels on a 2 x 2 grid: the fourth hidden
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 4 and len(shown) == 3
    assert [tick.get_text() for tick in shown[0].get_yticklabels()][-1] == "Gemma-3 base"   # first row on top
    dashed = [line for line in shown[0].lines if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_xdata()) == [50.0, 50.0]   # the line at the target's base


def test_the_shift_move_and_its_proxy_tuning_ceiling(pair):
    """The shift cell distils with ``target='shift'`` (its report says so) and pairs itself with the main move;
    the proxy cell trains nothing and equals a direct combination of the three models' choice scores."""
    from paw.bench.stats import paired_difference
    from paw.bench.testbed import adapter_deltas, applied, choice_lls, picked_right

    sides, items, root = pair
    cache = Cache(root / "cache-shift")
    real_tasks.run_direction(sides["a"], sides["b"], items, items, cache, recipe=RECIPE, n_boot=50)
    shift = real_tasks.run_variant(sides["a"], sides["b"], items, items, cache, "shift", recipe=RECIPE, n_boot=50)
    assert shift["target"]["kind"] == "shift" and shift["target"]["choice_inputs"] == len(items)
    main, moved = cache.found("score-b-moved-from-a"), cache.found("score-b-moved-shift-from-a")
    assert shift["vs_main"] == paired_difference(moved, main)
    proxy = real_tasks.run_variant(sides["a"], sides["b"], items, items, cache, "proxy", recipe=RECIPE, n_boot=50)
    lora = real_tasks.own_lora(sides["a"], items, cache, recipe=RECIPE)[0]
    t = choice_lls(sides["b"].model, sides["b"].tokenizer, items)
    anti = choice_lls(sides["a"].model, sides["a"].tokenizer, items)
    with applied(sides["a"].model, adapter_deltas(lora)):
        expert = choice_lls(sides["a"].model, sides["a"].tokenizer, items)
    combined = [[x + e - a for x, e, a in zip(*rows, strict=True)] for rows in zip(t, expert, anti, strict=True)]
    assert cache.found("score-b-moved-proxy-from-a") == picked_right(combined, items)
    assert proxy["accuracy"]["target + moved LoRA"]["mean"] == sum(picked_right(combined, items)) / len(items)
    assert proxy["base_picks_agree"] == 1.0   # the cached base outcomes are the same computation
