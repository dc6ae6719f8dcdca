"""Data parallel (paw.distributed): the shares of a batch, and rank-weighted losses whose gradients sum to the whole batch's.

The ranks are simulated in one process (each shard's loss computed and back-propagated in turn):
the weighting is the part that decides whether N processes train the same adapter as one. The
launched run (torchrun, gloo) is in tests/test_torchrun.py (slow).
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paw.distributed import Ranks, is_main, ranks_from_env, shard, share
from paw.errors import PawError


@given(st.integers(0, 40), st.integers(1, 8))
def test_shards_partition_the_batch_in_order(n, world):
    items = list(range(n))
    parts = [shard(items, Ranks(r, world)) for r in range(world)]
    assert [i for p in parts for i in p] == items
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize("env", [{"RANK": "2", "WORLD_SIZE": "2"}, {"RANK": "x", "WORLD_SIZE": "2"},
                                 {"RANK": "0", "WORLD_SIZE": "0"}])
def test_bad_launcher_variables_are_one_line_errors(env):
    with pytest.raises(PawError, match="RANK"):
        ranks_from_env(env)


def test_only_rank_0_shows_progress(monkeypatch, capsys):
    from paw.progress import status, track

    monkeypatch.setenv("PAW_PROGRESS", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert not is_main()
    status("from rank 1")
    assert list(track(range(3), "work")) == [0, 1, 2]
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    status("from rank 0")
    assert capsys.readouterr().err == "[paw] from rank 0\n"


def _grads(model) -> dict:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def _summed_over_ranks(model, loss_of_rank, world: int) -> dict:
    """Each simulated rank back-propagates its weighted loss into fresh gradients; their sum is what the all-reduce makes."""
    total: dict = {}
    for r in range(world):
        model.zero_grad(set_to_none=True)
        loss = loss_of_rank(Ranks(r, world))
        if loss is None:
            continue
        loss.backward()
        for n, g in _grads(model).items():
            total[n] = total.get(n, 0) + g
    return total


@pytest.mark.parametrize("world", [2, 3, 7])
def test_train_lora_shards_sum_to_the_batch_gradient(fact_model_lm, world):
    """Answers of unequal token counts on unequal shards (7 ranks for 5 items: two ranks get none)."""
    import torch

    from paw.evaluate.encode import pad_id_of
    from paw.evaluate.train import _step_loss, encode_answer, wrap_lora

    lm, tokenizer, items = fact_model_lm
    model = wrap_lora(copy.deepcopy(lm), rank=4, alpha=8, target_modules="all-linear", seed=0)
    with torch.no_grad():  # B = 0 at the start gives zero A gradients: make both factors live
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    batch = [encode_answer(tokenizer, item, None) for item in items[:5]]
    assert len({e.n_cont for e in batch}) > 1  # the weighting matters only when shares differ
    pad = pad_id_of(tokenizer)
    model.zero_grad(set_to_none=True)
    _step_loss(model, batch, pad, "cpu", Ranks()).backward()
    whole = _grads(model)
    split = _summed_over_ranks(model, lambda r: _step_loss(model, batch, pad, "cpu", r), world)
    assert max(float((whole[n] - split[n]).abs().max()) for n in whole) < 1e-6
    assert max(float(g.abs().max()) for g in whole.values()) > 1e-3


@pytest.fixture(scope="module")
def fact_model_lm(tiny_llama):
    from paw.evaluate.synthetic import fact_task
    from paw.io.lm import load_lm

    lm, tokenizer = load_lm(tiny_llama, device="cpu")
    return lm, tokenizer, fact_task("colour", n=16, seed=0)  # the zoo's tokenizer splits answers into 1-3 tokens


def test_share_weights_sum_to_one():
    assert sum(share(n, 10) for n in (3, 0, 7)) == pytest.approx(1.0)
