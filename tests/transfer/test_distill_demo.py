"""The issue's bar on the demo's own pair: the colour LoRA of ``paw demo --quick`` distilled onto its
SentencePiece Qwen2 with no flag but ``--prompts`` (the colour questions, answers unused)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from paw.demo import run_demo

    out = tmp_path_factory.mktemp("demo") / "demo"
    run_demo(out, quick=True)
    return out


def test_defaults_move_the_demo_colour_lora_across_tokenizers(cli, demo, tmp_path):
    from paw.evaluate.formats import read_items
    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm

    out = tmp_path / "moved"
    result = cli("transfer-lora", "--method", "distill", "--adapter", demo / "adapters/colour-lora",
                 "--source-base", demo / "models/base", "--target-base", demo / "models/qwen2-sentencepiece",
                 "--prompts", demo / "data/colour.jsonl", "--output", out)
    assert result.exit_code == 0, result.stderr
    items = read_items(demo / "data/colour.jsonl")
    base, base_tok = load_lm(demo / "models/qwen2-sentencepiece", device="cpu")
    moved, moved_tok = load_lm(demo / "models/qwen2-sentencepiece", adapter=out, device="cpu")
    before = evaluate(base, base_tok, items, progress=False)["accuracy"]
    after = evaluate(moved, moved_tok, items, progress=False)["accuracy"]
    assert after >= 0.8 and after > before + 0.3, (before, after)
    report = json.loads((out / "transfer_report.json").read_text())
    d = report["distill"]
    assert d["inputs"]["held_out"] == 0 and d["inputs"]["train"] == d["inputs"]["count"] == len(items)
    assert d["budget"]["auto"] and d["budget"]["steps_run"] <= d["budget"]["max_steps"]
    assert d["loss_tail_drop"] is not None and not report["warnings"]        # levelled off: nothing to warn of
    assert d["budget"]["loss_levelled_off"]
    a = d["agreement"]
    assert a["after"]["adapter_agreement"] > a["before"]["adapter_agreement"] + 0.5
    assert "warning" not in result.stderr and "levelled off" in result.stdout or "cap" in result.stdout
