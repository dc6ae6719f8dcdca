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


CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|eos|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def chat_tokenizer(texts: list[str], template: str = CHAT_TEMPLATE):
    """A byte-level BPE trained on ``texts`` here, adding BOS before every text as Llama's does, with ``template``
    as its chat template (which writes the BOS text itself, as Llama-2's does)."""
    from tokenizers import processors

    from paw import zoo

    tok = zoo.train_tokenizer(texts, 400)
    bos = tok.convert_tokens_to_ids("<|bos|>")
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A $B", special_tokens=[("<|bos|>", bos)])
    tok.chat_template = template
    return tok


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory, colour_task) -> Path:
    """A 2-layer Llama (hidden 64) whose tokenizer, trained on the spot, has the chat template :data:`CHAT_TEMPLATE`."""
    from paw import zoo
    from paw.data import sample_texts
    from paw.evaluate.synthetic import tokenizer_corpus

    tok = chat_tokenizer(sample_texts("multi") + tokenizer_corpus(colour_task))
    model = zoo.build_model("llama", seed=0, vocab_size=len(tok), hidden_size=64, num_layers=2)
    return zoo.save_model(model, tmp_path_factory.mktemp("chat") / "base", tokenizer=tok)
