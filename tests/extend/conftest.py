"""Fixtures for the extend area: tiny zoo models (tied, untied, sentencepiece) and helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

NEW_WORDS = [" hello", "PAW", " tokenizerization", "New York"]  # the last one spans two pre-tokens


@pytest.fixture(scope="session")
def tiny_gemma(zoo_root) -> Path:
    """A 2-layer Gemma (tied, embeddings scaled by sqrt(hidden))."""
    from paw import zoo

    return zoo.tiny_model(zoo_root / "gemma", "gemma", seed=2, hidden_size=32, num_layers=2)


@pytest.fixture(scope="session")
def tiny_llama_sp(zoo_root) -> Path:
    """A Llama with a sentencepiece-style BPE tokenizer (not byte-level: extension adds added tokens)."""
    from paw import zoo

    return zoo.tiny_model(zoo_root / "llama-sp", "llama", seed=4, hidden_size=32, num_layers=1,
                          tokenizer_kind="sentencepiece-bpe")


def load(folder):
    """(model in eval mode, tokenizer) from a folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def logits(model, ids):
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]
