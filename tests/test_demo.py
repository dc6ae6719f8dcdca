"""``paw demo --quick`` end to end: every step runs, and the LoRA and its transfer beat the bases."""

from __future__ import annotations

import json

import pytest

from paw.demo import STEPS, Demo, DemoSettings, Step, StepStatus, _run_step
from paw.registry import DuplicateName


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    from paw.demo import run_demo

    outdir = tmp_path_factory.mktemp("demo") / "paw_demo"
    return run_demo(outdir, quick=True)


def test_demo_steps_all_run(demo_run):
    status = {r.name: r.status for r in demo_run.steps}
    assert list(status) == list(STEPS)
    assert all(s is StepStatus.OK for s in status.values()), {r.name: r.label for r in demo_run.steps}
    details = {r.name: r.detail for r in demo_run.steps}
    assert "|Δ colour| = " in details["task-vectors"] and "cosine " in details["task-vectors"]
    assert details["tokenizers"].startswith("vocabulary.jaccard 0.")
    assert details["transfer"].startswith("methods copy x14, median subspace similarity 0.9")


def test_demo_accuracies(demo_run):
    evals = demo_run.evals
    base, lora = evals["base"]["colour"], evals["base + LoRA"]["colour"]
    assert base["accuracy"] <= 0.5 and lora["accuracy"] >= 0.9 > base["accuracy"]
    assert lora["loss"] < base["loss"]
    # the LoRA taught colour facts only: home facts stay near chance
    assert evals["base + LoRA"]["home"]["accuracy"] <= 0.5
    if "successor + transferred LoRA" in evals:
        assert evals["successor"]["colour"]["accuracy"] <= 0.5
        assert evals["successor + transferred LoRA"]["colour"]["accuracy"] >= 0.9
    if "merged" in evals:
        merged = evals["merged"]
        assert merged["colour"]["accuracy"] > 0.5 and merged["home"]["accuracy"] > 0.5


def test_demo_folder_holds_reports(demo_run):
    out = demo_run.outdir
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["steps"] == DemoSettings.for_mode(True).steps
    assert summary["evaluations"]["base + LoRA"]["colour"]["n"] == 16
    assert (out / "plots" / "lora_training_loss.png").stat().st_size > 1000
    assert json.loads((out / "adapters" / "colour-lora" / "adapter_config.json").read_text())["r"] == 8
    expected = {"analyze-tokenizers": out / "reports" / "tokenizers" / "report.json",
                "transfer-lora": out / "adapters" / "colour-lora-on-successor" / "transfer_report.json",
                "task-vectors": out / "reports" / "task-vectors" / "pairwise_cosines.csv",
                "merge": out / "models" / "merged" / "paw_merge.json"}
    for log, path in expected.items():
        assert path.is_file(), path
        # the log names the library call the step made, and what it wrote
        text = (out / "logs" / f"{log}.log").read_text(encoding="utf-8")
        assert text.startswith(">>> paw.") and f"wrote {path.parent}" in text


def test_failed_step_and_failed_dependency_are_reported(tmp_path):
    demo = Demo(outdir=tmp_path, settings=DemoSettings.for_mode(True))
    broken = Step("y", "breaks", lambda d: 1 / 0)
    result = _run_step(demo, broken, set())
    assert result.status is StepStatus.FAILED and result.label == "failed: ZeroDivisionError: division by zero"
    after = Step("z", "after", lambda d: "ran", needs=("y",))
    skipped = _run_step(demo, after, set())
    assert skipped.status is StepStatus.SKIPPED and skipped.label == "skipped: needs y"
    assert _run_step(demo, after, {"y"}).detail == "ran"


def test_demo_step_names_are_unique():
    from paw.demo import step

    with pytest.raises(DuplicateName, match="demo step 'merge' is registered twice"):
        step("merge", "a second merge step")(lambda d: "")


def test_cli_refuses_existing_folder(cli, tmp_path):
    (tmp_path / "old.txt").write_text("x")
    result = cli("demo", "--outdir", tmp_path)
    assert result.exit_code == 2 and "--overwrite" in result.stderr


def test_previous_demo_folder_is_replaced_not_a_users(tmp_path, demo_run):
    from paw.demo import MANIFEST, _remove_own_entries, is_previous_demo

    assert is_previous_demo(demo_run.outdir)
    folder = tmp_path / "paw_demo"
    (folder / "models" / "base").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    assert not is_previous_demo(folder)  # no manifest: a user's folder, refused without --overwrite
    (folder / MANIFEST).write_text('{"paw_version": "0.1.0", "command": "paw demo"}')
    assert is_previous_demo(folder)
    _remove_own_entries(folder)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def _evals(**acc):
    """``colour_merged=0.29`` -> the demo's evals layout with that accuracy (others as the full demo has them)."""
    table = {"base": (0.33, 0.25), "fine-tune colour": (1.0, 0.25), "fine-tune home": (0.17, 1.0),
             "merged": (acc.get("colour", 0.29), acc.get("home", 1.0))}
    return {label: {"colour": {"accuracy": c}, "home": {"accuracy": h}} for label, (c, h) in table.items()}


def test_merge_note_says_what_the_merged_row_means():
    from paw.demo import merge_note

    first = "merged: the two fine-tunes in one model, weighted by their task-vector norms (paw merge --mode exp);"
    assert merge_note(_evals()) == [first, "it keeps home (100%) but loses colour (29%), back near chance: a merge "
                                           "is not a sure thing."]
    assert merge_note(_evals(colour=0.88)) == [first, "it keeps both tasks: colour (88%) and home (100%), as each "
                                                      "fine-tune alone does."]
    assert merge_note(_evals(colour=0.3, home=0.4)) == [first, "it loses colour (30%) and home (40%), back near "
                                                               "chance: a merge is not a sure thing."]
    assert merge_note({"base": {}}) == []  # the merge did not run: nothing to explain
