"""The trainers on the shared loop (:mod:`paw.train`) write the bytes their old loops wrote.

Each test runs a trainer and its frozen old loop (``reference_loops``) in this process on a tiny model
with the old defaults and a seed, and compares every output tensor with ``torch.equal``.
"""

from __future__ import annotations

import copy

import pytest

from tests.train import reference_loops as old


@pytest.fixture(scope="module")
def lm(tiny_llama):
    from paw.io.lm import load_lm

    return load_lm(tiny_llama, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def items():
    from paw.evaluate.synthetic import fact_task

    return fact_task("colour", n=10, seed=0)


def lora_tensors(peft_model) -> dict:
    return {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" in n}


def assert_same(a: dict, b: dict) -> None:
    import torch

    assert a.keys() == b.keys() and a
    different = [n for n in a if not torch.equal(a[n], b[n])]
    assert not different, different[:3]


def test_train_lora_writes_the_old_loops_adapter(lm, items):
    from paw.evaluate.train import train_lora

    model, tok = lm
    kwargs = dict(rank=4, alpha=8, steps=7, batch_size=3, lr=3e-3, seed=5, progress=False)
    new_model, new_metrics = train_lora(copy.deepcopy(model), tok, items, **kwargs)
    old_model, old_metrics = old.train_lora(copy.deepcopy(model), tok, items, **kwargs)
    assert_same(lora_tensors(new_model), lora_tensors(old_model))
    assert new_metrics["train_losses"] == old_metrics["train_losses"]
    assert new_metrics == old_metrics


def test_full_fine_tuning_writes_the_old_loops_weights(lm, items):
    import torch

    from paw.evaluate.finetune import FinetuneOptions, finetune

    model, tok = lm
    options = FinetuneOptions(steps=5, batch_size=3, lr=1e-3, weight_decay=0.01, seed=2)  # clipped at 1.0 by default
    new_model, old_model = copy.deepcopy(model), copy.deepcopy(model)
    new_metrics = finetune(new_model, tok, items, options, progress=False)
    old_metrics = old.finetune(old_model, tok, items, options, progress=False)
    new_state, old_state = new_model.state_dict(), old_model.state_dict()
    assert_same(new_state, old_state)
    assert not torch.equal(new_state["model.norm.weight"], model.state_dict()["model.norm.weight"])  # it trained
    assert {k: v for k, v in new_metrics.items() if k != "train_seconds"} == \
        {k: v for k, v in old_metrics.items() if k != "train_seconds"}


@pytest.fixture(scope="module")
def stream(lm):
    import torch

    vocab = lm[0].config.vocab_size
    return torch.randint(0, vocab, (600,), generator=torch.Generator().manual_seed(4))


def test_heal_writes_the_old_loops_rows(lm, stream):
    import torch

    from paw.vocab.heal import HealPlan, bits_per_byte, heal_rows, trainable_matrices

    model, _ = lm
    plan = HealPlan(steps=7, lr=1e-2, batch=3, seq_len=12, eval_every=3, warmup=4, seed=6)
    held = [stream[500:530].tolist(), stream[530:560].tolist()]
    rows = list(range(5, 60, 3))
    runs = []
    for heal in (heal_rows, old.heal_rows):
        m = copy.deepcopy(model)
        curve = heal(m, rows, stream[:500].tolist(), plan, prefix=[1],
                     evaluate=lambda m=m: bits_per_byte(m, held, lambda i: 2, prefix=[1]))
        runs.append(({str(i): t.detach().clone() for i, t in enumerate(trainable_matrices(m))}, curve))
    assert_same(runs[0][0], runs[1][0])
    assert str(runs[0][1]) == str(runs[1][1]) and len(runs[0][1]) == 4   # steps 0, 3, 6, 7 (nan compares as text)
    assert not torch.equal(runs[0][0]["0"], model.get_input_embeddings().weight)


@pytest.mark.parametrize("distilled", [False, True])
def test_bench_pretraining_writes_the_old_loops_weights(lm, stream, distilled):
    from paw.bench.lm import Schedule, train_lm

    model, _ = lm
    schedule = Schedule(steps=6, batch_size=3, seq_len=16, lr=3e-3, warmup=2)
    teacher = copy.deepcopy(model) if distilled else None
    new_model, old_model = copy.deepcopy(model), copy.deepcopy(model)
    new = train_lm(new_model, stream, schedule, seed=9, teacher=teacher, progress=False)
    before = old.bench_train_lm(old_model, stream, schedule, seed=9, teacher=teacher, progress=False)
    assert new == before and len(new) == 6
    assert_same(new_model.state_dict(), old_model.state_dict())
