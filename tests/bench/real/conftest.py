"""Tiny stand-ins for ``paw bench real``'s two models and its commonsense folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two tiny models of different families and tokenizers (folders ``a`` and ``b`` of ``root``, loaded as
    bench ``Base`` s), and a 12-fact task: ``(sides, items, root)``."""
    from paw import zoo
    from paw.bench.testbed import Base
    from paw.data import sample_texts
    from paw.evaluate.synthetic import fact_task, tokenizer_corpus
    from paw.io.lm import load_lm

    root = tmp_path_factory.mktemp("real-tasks")
    task = fact_task("colour", n=12, seed=0)
    texts = sample_texts("multi") + tokenizer_corpus(task)
    for name, family, kind, seed in (("a", "llama", "byte-bpe", 0), ("b", "qwen2", "sentencepiece-bpe", 1)):
        tok = zoo.train_tokenizer(texts, 300, kind=kind)
        model = zoo.build_model(family, seed=seed, init_std=0.2, vocab_size=len(tok), hidden_size=32, num_layers=2,
                                num_heads=4, num_kv_heads=2)
        zoo.save_model(model, root / name, tokenizer=tok)
    sides = {}
    for name in ("a", "b"):
        lm, tok = load_lm(root / name, device="cpu")
        sides[name] = Base(name, lm, tok, root / name)
    return sides, list(task), root


def write_raw(data: Path, stem: str, records: list[dict]) -> None:
    """``data/raw/STEM.jsonl``, one record a line, as the commonsense folder holds each set."""
    (data / "raw").mkdir(parents=True, exist_ok=True)
    (data / "raw" / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def flat(items) -> list[dict]:
    """MC items as records of the flat layout (question, choices, answer)."""
    return [{"question": i.question, "choices": list(i.choices), "answer": i.answer} for i in items]
