"""Trackers: CSV content, swanlab offline run folder, wandb (a fake module records its calls), unknown kinds."""

from __future__ import annotations

import csv
import json
import sys
import types
from pathlib import Path

import pytest

from paw.errors import PawError
from paw.io.tracking import log_once, make_tracker


def test_csv_tracker(tmp_path):
    tracker = make_tracker("csv", tmp_path / "run", {"rank": 4})
    tracker.log({"train/loss": 2.5, "note": "text", "flag": True}, step=10)
    tracker.log({"test/accuracy": 0.75}, step=20)
    tracker.finish()
    rows = list(csv.reader((tmp_path / "run" / "metrics.csv").open()))
    assert rows == [["step", "metric", "value"], ["10", "train/loss", "2.5"], ["20", "test/accuracy", "0.75"]]
    assert (tmp_path / "run" / "config.json").read_text().strip() == '{\n  "rank": 4\n}'


def test_none_tracker_writes_nothing(tmp_path):
    tracker = make_tracker("none", tmp_path / "run", {})
    tracker.log({"a": 1.0}, step=1)
    tracker.finish()
    assert not (tmp_path / "run").exists()


def test_log_once_flattens(tmp_path):
    run = log_once("csv", tmp_path / "once", {"command": "paw merge"}, {"summary": {"similarity": 0.5}, "n": 3,
                                                                      "name": "x"})
    rows = list(csv.reader((run / "metrics.csv").open()))
    assert rows == [["step", "metric", "value"], ["0", "summary/similarity", "0.5"], ["0", "n", "3.0"]]
    assert log_once("none", tmp_path / "nothing", {}, {"n": 1}) is None and not (tmp_path / "nothing").exists()


def test_unknown_tracker():
    with pytest.raises(PawError, match="choose one of none, csv, swanlab, wandb"):
        make_tracker("mlflow", "x", {})


def test_swanlab_offline_run_directory(tmp_path, monkeypatch, capfd):
    pytest.importorskip("swanlab")
    monkeypatch.chdir(tmp_path)  # anything swanlab might write beside the run stays in tmp
    tracker = make_tracker("swanlab", tmp_path / "run", {"name": "unit", "rank": 4})
    for step in range(1, 4):
        tracker.log({"train/loss": 1.0 / step}, step=step)
    tracker.finish()
    printed = capfd.readouterr()
    said = printed.out + printed.err
    lines = [line for line in said.splitlines() if "swanlab" in line]
    assert len(lines) == 1 and "swanlab sync" in lines[0], said  # said once, with its sync hint
    runs = list((tmp_path / "run" / "swanlog").glob("run-*"))
    assert len(runs) == 1
    assert any(p.suffix == ".swanlab" for p in runs[0].iterdir())
    import yaml

    config = yaml.safe_load((runs[0] / "files" / "config.yaml").read_text())
    assert config["rank"]["value"] == 4 and config["name"]["value"] == "unit"


def test_csv_tracker_never_writes_through_a_link(tmp_path):
    victim = tmp_path / "input.csv"
    victim.write_text("keep me\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.csv").hardlink_to(victim)
    tracker = make_tracker("csv", tmp_path / "run", {}, shown=tmp_path / "elsewhere")
    tracker.log({"loss": 1.0}, step=1)
    tracker.finish()
    assert victim.read_text() == "keep me\n"
    assert "loss" in (tmp_path / "run" / "metrics.csv").read_text()
    assert tracker.shown == tmp_path / "elsewhere" / "metrics.csv"


class FakeWandb(types.ModuleType):
    """Stands for the ``wandb`` package: ``init`` returns a run that records ``log`` and ``finish``."""

    def __init__(self):
        super().__init__("wandb")
        self.inits, self.logs, self.finished = [], [], 0

    def init(self, **kwargs):
        self.inits.append(kwargs)
        folder = Path(kwargs["dir"]) / "wandb" / "offline-run-20260101_000000-abc" / "files"
        folder.mkdir(parents=True)
        module = self

        class Run:
            dir = str(folder)
            url = "https://wandb.example/paw/abc"

            def log(self, metrics, step):
                module.logs.append((step, dict(metrics)))

            def finish(self):
                module.finished += 1

        return Run()


@pytest.fixture
def wandb(monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return fake


def test_wandb_runs_offline_under_the_run_folder(wandb, tmp_path, capsys):
    tracker = make_tracker("wandb", tmp_path / "run", {"name": "unit", "rank": 4, "targets": ["q", "v"]})
    tracker.log({"train/loss": 2.5, "note": "text", "flag": True}, step=1)
    tracker.log({"test/accuracy": 0.75}, step=2)
    tracker.finish()
    tracker.finish()  # a second finish does nothing
    assert wandb.inits == [{"dir": str(tmp_path / "run"), "mode": "offline", "project": "paw", "name": "unit",
                            "config": {"name": "unit", "rank": 4, "targets": "['q', 'v']"}}]
    assert wandb.logs == [(1, {"train/loss": 2.5}), (2, {"test/accuracy": 0.75})] and wandb.finished == 1
    run = tmp_path / "run" / "wandb" / "offline-run-20260101_000000-abc"
    assert capsys.readouterr().err == f"[paw] wandb offline run: {run} (nothing is uploaded; `wandb sync {run}` " \
                                      "publishes it)\n"


def test_wandb_mode_from_the_environment_wins(wandb, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "online")
    log_once("wandb", tmp_path / "run", {"command": "paw merge"}, {"merge": {"weights": 0.5}})
    assert wandb.inits[0]["mode"] == "online" and wandb.inits[0]["name"] == "run"
    assert wandb.logs == [(0, {"merge/weights": 0.5})]
    assert "wandb run (online): https://wandb.example/paw/abc" in capsys.readouterr().err


def test_wandb_missing_is_one_line_before_any_work(cli, monkeypatch, tmp_path, tiny_llama):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb fails, as when it is not installed
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"question": "Q:", "choices": [" a", " b"], "answer": 0}) + "\n")
    r = cli("train-full", "--model", tiny_llama, "--data", data, "--output", tmp_path / "ft", "--steps", "2",
            "--track", "wandb")
    assert r.exit_code == 2 and r.stderr == "error: --track wandb needs the wandb package (pip install wandb)\n"
    assert not (tmp_path / "ft").exists()


def test_train_full_logs_each_step_to_wandb(cli, wandb, tmp_path, tiny_llama):
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps({"question": f"Q{i}:", "choices": [" a", " b"], "answer": i % 2}) + "\n"
                            for i in range(4)))
    r = cli("train-full", "--model", tiny_llama, "--data", data, "--output", tmp_path / "ft", "--steps", "3",
            "--batch-size", "2", "--track", "wandb")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert wandb.logs[:3] == [(step, {"train/loss": loss}) for step, loss in enumerate(metrics["train_losses"], 1)]
    assert wandb.logs[3][0] == 3 and wandb.logs[3][1]["steps"] == 3.0 and wandb.finished == 1
    assert wandb.inits[0]["dir"] == str(tmp_path / "ft-tracking") and wandb.inits[0]["mode"] == "offline"


def test_distill_logs_each_step_then_its_summary_to_wandb(cli, wandb, tmp_path, tiny_llama, tiny_lora):
    from paw import zoo

    target = tmp_path / "target"
    zoo.fine_tune(tiny_llama, target, seed=3, scale=0.01)
    r = cli("transfer-lora", "--method", "distill", "--prompts", "generic", "--adapter", tiny_lora, "--source-base",
            tiny_llama, "--target-base", target, "--output", tmp_path / "moved", "--max-steps", "3", "--batch-size", "2",
            "--device", "cpu", "--track", "wandb")
    assert r.exit_code == 0, r.stderr
    curve = json.loads((tmp_path / "moved" / "transfer_report.json").read_text())["distill"]["curve"]
    assert [step for step, _ in wandb.logs] == [1, 2, 3, 3] and wandb.finished == 1
    assert [m["train/loss"] for _, m in wandb.logs[:3]] == curve["loss"]
    assert wandb.logs[3][1]["distill/loss_end"] > 0 and "distill/agreement/top1_agreement" in wandb.logs[3][1]
    assert wandb.inits[0]["dir"] == str(tmp_path / "moved-tracking") and wandb.inits[0]["mode"] == "offline"
    assert f"tracking (wandb): {tmp_path / 'moved-tracking'}" in r.stdout
