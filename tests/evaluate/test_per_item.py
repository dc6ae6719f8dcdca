"""``paw eval --per-item FILE``: every item's choices, log-likelihoods and pick, one JSON object per line."""

from __future__ import annotations

import json

import pytest


def test_per_item_records_are_the_scores_the_accuracy_came_from(cli, tiny_llama, tmp_path):
    from paw.evaluate.mc import evaluate
    from paw.evaluate.synthetic import fact_task
    from paw.io.lm import load_lm
    from paw.io.mcdata import write_items

    items = fact_task("colour", n=6, seed=0)
    data = write_items(tmp_path / "quiz.jsonl", items)
    result = cli("eval", "--model", tiny_llama, "--data", data, "--output", tmp_path / "m.json",
                 "--per-item", tmp_path / "items.jsonl")
    assert result.exit_code == 0, result.stderr
    assert f"per item: {tmp_path / 'items.jsonl'}" in result.stdout
    records = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    model, tok = load_lm(tiny_llama, device="cpu")
    direct = evaluate(model, tok, items, progress=False, per_item=True)
    assert [r["index"] for r in records] == list(range(len(items)))
    assert [r["correct"] for r in records] == direct["correct"]
    for r, lls, item in zip(records, direct["choice_logprobs"], items, strict=True):
        assert r["choice_logprobs"] == pytest.approx(lls, abs=1e-5) and r["answer"] == item.answer
        assert r["pick"] == max(range(len(lls)), key=lambda j: (lls[j], -j))
    metrics = json.loads((tmp_path / "m.json").read_text())["metrics"]
    assert "choice_logprobs" not in metrics and metrics["accuracy"] == sum(direct["correct"]) / len(items)
    again = cli("eval", "--model", tiny_llama, "--data", data, "--per-item", tmp_path / "items.jsonl")
    assert again.exit_code == 2 and "items.jsonl" in again.stderr   # not replaced without --overwrite
