"""A real full fine-tune, extracted: base + LoRA keeps at least 0.9 of the fine-tune's accuracy gain.

A tiny model (untied Llama, tied Qwen2) whose tokenizer spells the 16 made-up colour facts in few
tokens is fully fine-tuned (:func:`paw.evaluate.finetune.finetune_model`, every weight) until it knows
them; ``extract_lora --energy 0.9`` turns the fine-tune into a LoRA whose per-module ranks the report
names; base + that LoRA, loaded through PEFT, is scored on the same facts.
"""

from __future__ import annotations

import pytest

from paw.evaluate.finetune import FinetuneOptions, finetune_model
from paw.extract import ExtractOptions, extract_lora


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    task = fact_task("colour", n=16, seed=0)
    return task, write_items(tmp_path_factory.mktemp("facts") / "colour.jsonl", task)


def _accuracy(model, items, adapter=None) -> float:
    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm

    lm, tokenizer = load_lm(model, adapter=adapter)
    return evaluate(lm, tokenizer, items, progress=False)["accuracy"]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_extracted_lora_keeps_the_finetune_gain(tmp_path, facts, family):
    import torch

    from paw import zoo
    from paw.data import sample_texts
    from paw.evaluate.synthetic import tokenizer_corpus

    torch.set_num_threads(1)
    task, data = facts
    texts = sample_texts("multi") + tokenizer_corpus(task)
    base = zoo.tiny_model(tmp_path / "base", family, seed=0, vocab_size=400, texts=texts, hidden_size=64,
                          num_layers=2)
    ft = finetune_model(base, data, tmp_path / "ft", FinetuneOptions(steps=40, lr=1e-3), eval_data=data)
    before, after = ft.metrics["base/accuracy"], ft.metrics["test/accuracy"]
    assert after == 1.0 and after - before >= 0.5  # a clear gain (chance is 1/4)

    out = extract_lora(base, ft.output, tmp_path / "lora", ExtractOptions(energy=0.9))
    s = out.summary
    assert s["lora_modules"] >= 14 and 1 <= s["rank_min"] <= s["rank_max"] <= 32  # the ranks the report names
    assert s["energy_held"] >= 0.9
    kept = (_accuracy(base, task, adapter=out.output) - before) / (after - before)
    assert kept >= 0.9

    # the same rank for every module, the largest the report named, keeps it too
    fixed = extract_lora(base, ft.output, tmp_path / "lora-r", ExtractOptions(rank=s["rank_max"]))
    assert (_accuracy(base, task, adapter=fixed.output) - before) / (after - before) >= 0.9
