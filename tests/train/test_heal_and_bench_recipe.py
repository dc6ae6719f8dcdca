"""Transplant healing and the bench's pretraining on the shared loop: schedules, accumulation, clipping, the
non-finite stop, with real values on a tiny Llama."""

from __future__ import annotations

import copy

import pytest

from paw.bench.lm import Schedule, train_lm
from paw.errors import PawError
from paw.vocab.heal import HealPlan, heal_rows, trainable_matrices
from tests.train.spy import cosine_lrs, optimiser_steps, warmup_lrs


@pytest.fixture(scope="module")
def model(tiny_llama):
    from paw.io.lm import load_lm

    return load_lm(tiny_llama, device="cpu", dtype="float32")[0]


@pytest.fixture(scope="module")
def stream(model):
    import torch

    return torch.randint(0, model.config.vocab_size, (500,), generator=torch.Generator().manual_seed(4))


def heal(model, stream, **kw):
    m = copy.deepcopy(model)
    plan = HealPlan(**{"steps": 5, "lr": 1e-2, "batch": 4, "seq_len": 12, "eval_every": 5, "warmup": 2, "seed": 1,
                       **kw})
    with optimiser_steps() as seen:
        curve = heal_rows(m, list(range(3, 90, 2)), stream.tolist(), plan, evaluate=lambda: 0.0)
    return trainable_matrices(m)[0].detach().clone(), curve, seen


def pretrain(model, stream, **kw):
    m = copy.deepcopy(model)
    with optimiser_steps() as seen:
        losses = train_lm(m, stream, Schedule(**{"steps": 5, "batch_size": 4, "seq_len": 12, "lr": 3e-3, "warmup": 2,
                                                 **kw}), seed=2, progress=False)
    return m.get_input_embeddings().weight.detach().clone(), losses, seen


TRAINERS = [heal, pretrain]


@pytest.mark.parametrize("train", TRAINERS)
@pytest.mark.parametrize("schedule", ["constant", "warmup", "cosine"])
def test_each_step_runs_at_the_schedules_rate(model, stream, train, schedule):
    lr = 1e-2 if train is heal else 3e-3
    expected = {"constant": [lr] * 5, "warmup": warmup_lrs(lr, 2, 5), "cosine": cosine_lrs(lr, 2, 5)}[schedule]
    assert [x for x, _ in train(model, stream, schedule=schedule)[2]] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("train", TRAINERS)
def test_two_micro_batches_of_two_train_as_one_batch_of_four(model, stream, train):
    import torch

    size = "batch" if train is heal else "batch_size"
    whole, a, _ = train(model, stream, **{size: 4}, lr=1e-4)
    split, b, _ = train(model, stream, **{size: 2}, accumulation=2, lr=1e-4)
    # Adam divides by each gradient's own scale: an element whose gradient is float noise may step by up to lr
    assert torch.allclose(whole, split, atol=1e-5) and not torch.equal(whole, model.get_input_embeddings().weight)
    losses = ([p["train_loss"] for p in a[1:]], [p["train_loss"] for p in b[1:]]) if train is heal else (a, b)
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


@pytest.mark.parametrize("train", TRAINERS)
def test_clipping_bounds_the_gradient_norm(model, stream, train):
    free = train(model, stream, clip=None)[2]
    clipped = train(model, stream, clip=1e-3)[2]
    assert max(norm for _, norm in free) > 1e-2
    assert all(norm <= 1e-3 * (1 + 1e-4) for _, norm in clipped)


@pytest.mark.parametrize("train", TRAINERS)
def test_a_nan_loss_at_step_3_stops_naming_step_3(model, stream, train):
    calls = []

    def poison(module, args, kwargs, output):
        if kwargs.get("labels") is not None:
            calls.append(1)
            if len(calls) == 3:
                output.loss = output.loss * float("nan")
        return output

    patched = copy.deepcopy(model)
    patched.register_forward_hook(poison, with_kwargs=True)
    with pytest.raises(PawError, match="at step 3;"):
        train(patched, stream)
    assert len(calls) == 3


def test_heal_options_refuse_a_recipe_no_loop_can_run():
    from paw.vocab.options import HealOptions

    with pytest.raises(PawError, match="schedule"):
        HealOptions(corpus=["x.txt"], schedule="step").check()
    assert HealOptions(corpus=["x.txt"], accumulation=2).changes() == {"accumulation": 2}
