"""Trackers: CSV content, swanlab offline run folder, unknown kinds."""

from __future__ import annotations

import csv

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
    with pytest.raises(PawError, match="choose one of none, csv, swanlab"):
        make_tracker("wandb", "x", {})


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
