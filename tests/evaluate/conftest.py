"""Fixtures for eval / train-lora tests: a tiny Llama whose tokenizer knows the synthetic fact tasks."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def one_thread_here(one_torch_thread):
    """Every test of this folder on one torch thread (tests/conftest.py)."""


@pytest.fixture(scope="session")
def colour_task():
    from paw.evaluate.synthetic import fact_task

    return fact_task("colour", n=16, seed=0)


@pytest.fixture(scope="session")
def fact_model(tmp_path_factory, colour_task) -> Path:
    """A 2-layer Llama (hidden 64) whose 400-token BPE spells each fact name and colour as one token."""
    from paw import zoo
    from paw.data import sample_texts
    from paw.evaluate.synthetic import tokenizer_corpus

    texts = sample_texts("multi") + tokenizer_corpus(colour_task)
    return zoo.tiny_model(tmp_path_factory.mktemp("evaluate") / "base", "llama", seed=0, vocab_size=400,
                          texts=texts, hidden_size=64, num_layers=2)
