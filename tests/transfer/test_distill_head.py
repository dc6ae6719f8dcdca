"""The choices' sums with the LM head in row chunks (distill.head): the same values and gradients as the plain
path, one chunk's logits at a time, and the plain path wherever a chunked head could differ."""

from __future__ import annotations

import pytest
import torch

from paw.evaluate.encode import Encoded, make_batch
from paw.evaluate.mc import continuation_logprobs, forward_logits
from paw.transfer.distill import head


def _model(softcap=None, vocab=97):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    if softcap:
        model.config.final_logit_softcapping = softcap
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    return model


def _batch():
    # five rows of different context and answer lengths, left-padded as distill's choice batches are
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randint(3, 97, (n,), generator=g).tolist(), torch.randint(3, 97, (k,), generator=g).tolist())
             for n, k in [(5, 3), (2, 7), (9, 1), (4, 4), (6, 2)]]
    return make_batch([Encoded(tuple(c + a), len(a)) for c, a in pairs], pad_id=0, padding_side="left")


def _plain(model, batch):
    logits, skip = forward_logits(model, batch, "cpu")
    return continuation_logprobs(logits, batch.targets[:, skip:], batch.target_mask[:, skip:])[0]


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_chunked_head_gives_the_plain_sums_and_gradients():
    model, batch = _model(), _batch()
    plain = _plain(model, batch)
    (plain * torch.arange(1.0, 6.0)).sum().backward()
    want = _grads(model)
    model.zero_grad()
    budget = 2 * 7 * 97 * 4   # two rows of the 7 kept positions: chunks of 2, 2, 1
    chunked = head.choice_sums(model, batch, "cpu", budget=budget)
    (chunked * torch.arange(1.0, 6.0)).sum().backward()
    got = _grads(model)
    assert chunked.tolist() == pytest.approx(plain.tolist(), abs=1e-5)
    assert set(got) == set(want) and len(want) == 8   # q and v LoRA factors of both layers
    for name in want:
        assert torch.allclose(got[name], want[name], atol=1e-5, rtol=1e-4), name
    # the head is restored: a plain forward afterwards gives logits of vocabulary width
    assert forward_logits(model, batch, "cpu")[0].shape[-1] == 97


def test_chunks_hold_one_chunk_of_logits(monkeypatch):
    model, batch = _model(), _batch()
    seen = []
    real = head.continuation_logprobs
    monkeypatch.setattr(head, "continuation_logprobs", lambda logits, t, m: seen.append(tuple(logits.shape)) or real(logits, t, m))
    head.choice_sums(model, batch, "cpu", budget=2 * 7 * 97 * 4).sum().backward()
    assert seen[:3] == [(2, 7, 97), (2, 7, 97), (1, 7, 97)]   # forward; the backward recomputes them
    assert len(seen) == 6


def test_within_the_budget_or_with_a_softcap_the_plain_path_runs(monkeypatch):
    batch = _batch()
    calls = []
    monkeypatch.setattr(head, "_bypassed", lambda h: calls.append(h) or pytest.fail("chunked"))
    for model, budget in [(_model(), 1 << 30), (_model(softcap=30.0), 1)]:
        got = head.choice_sums(model, batch, "cpu", budget=budget)
        assert got.tolist() == pytest.approx(_plain(model, batch).tolist(), abs=1e-6)
    assert calls == []
