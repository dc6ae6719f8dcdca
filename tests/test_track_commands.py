"""--track on the one-shot commands: transfer and merge log their figures beside the output."""

from __future__ import annotations

import csv


def _rows(path):
    with open(path, newline="") as f:
        return {r["metric"]: float(r["value"]) for r in csv.DictReader(f)}


def test_transfer_and_merge_track_csv(cli, tmp_path, tiny_llama, tiny_lora):
    from paw import zoo

    ft = tmp_path / "ft"
    zoo.fine_tune(tiny_llama, ft, seed=5, scale=0.01)
    moved = tmp_path / "moved"
    r = cli("transfer-lora", "--adapter", tiny_lora, "--source-base", tiny_llama, "--target-base", ft,
            "--output", moved, "--method", "copy", "--track", "csv")
    assert r.exit_code == 0, r.stderr
    rows = _rows(tmp_path / "moved-tracking" / "metrics.csv")
    assert rows["transfer/transferred"] == 14.0 and rows["transfer/methods/copy"] == 14.0

    r = cli("merge", "--base", tiny_llama, "--models", ft, "--output", tmp_path / "merged",
            "--mode", "exp", "--track", "csv")
    assert r.exit_code == 0, r.stderr
    rows = _rows(tmp_path / "merged-tracking" / "metrics.csv")
    assert rows["merge/ft/weight"] == 1.0 and rows["merge/ft/l2"] > 0


def test_unknown_tracker_is_refused_before_work(cli, tmp_path, tiny_llama, tiny_lora):
    r = cli("transfer-lora", "--adapter", tiny_lora, "--source-base", tiny_llama, "--target-base", tiny_llama,
            "--output", tmp_path / "x", "--track", "mlflow")
    assert r.exit_code == 2 and "--track 'mlflow'" in r.stderr
    assert not (tmp_path / "x").exists()
