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


def make_adapter(base, out, *, kind: str, new_ids: list[int], seed: int = 0, tokenizer: bool = False):
    """Save a 'trained' PEFT adapter for the extended ``base`` (all its non-zero updates are random).

    kind: ``save`` (LoRA + embed_tokens/lm_head in modules_to_save), ``lora-embed`` (LoRA on the
    embedding and the head too) or ``tokens`` (trainable_token_indices = ``new_ids``).
    """
    import warnings

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base)
    extra = {"save": {"modules_to_save": ["embed_tokens", "lm_head"]},
             "lora-embed": {"target_modules": ["q_proj", "v_proj", "embed_tokens", "lm_head"]},
             "tokens": {"trainable_token_indices": {"embed_tokens": new_ids}}}[kind]
    config = LoraConfig(**{"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], **extra})
    peft_model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in peft_model.parameters():
            if p.requires_grad:  # exactly what training would change
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    with warnings.catch_warnings():  # PEFT notes that it saves the resized embedding: that is the point
        warnings.simplefilter("ignore")
        peft_model.save_pretrained(out)
    if tokenizer:
        AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out
