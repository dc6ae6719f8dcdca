"""The shared loop on a least-squares problem: schedules, accumulation, clipping, the non-finite stop, resume."""

from __future__ import annotations

import pytest

from paw.errors import PawError
from paw.train import NonFiniteLoss, Recipe, run
from paw.train.loop import micro_batches
from paw.train_state import Checkpoints
from tests.train.spy import cosine_lrs, optimiser_steps, warmup_lrs


def problem(seed: int = 0):
    """``w`` (4,) fitted to 12 rows ``x @ w_true`` by mean squared error; a batch is a list of row indices."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(12, 4, generator=gen)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
    w = torch.zeros(4, requires_grad=True)

    def loss(rows):
        idx = torch.tensor(list(rows))
        return ((x[idx] @ w - y[idx]) ** 2).mean()

    return w, loss


def train(recipe: Recipe, order, **kw):
    import torch

    w, loss = problem()
    opt = torch.optim.SGD([w], lr=recipe.lr)
    with optimiser_steps() as seen:
        result = run(recipe, [w], opt, kw.pop("step_loss", loss), order.__getitem__, **kw)
    return w.detach().clone(), result, seen


ORDER = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]] * 3


@pytest.mark.parametrize("schedule,expected", [("warmup", warmup_lrs(0.1, 4, 9)), ("cosine", cosine_lrs(0.1, 3, 9)),
                                               ("constant", [0.1] * 9)])
def test_each_step_runs_at_the_schedules_rate(schedule, expected):
    warmup = {"warmup": 4, "cosine": 3, "constant": 0}[schedule]
    _, result, seen = train(Recipe(steps=9, lr=0.1, schedule=schedule, warmup=warmup), ORDER)
    assert [lr for lr, _ in seen] == pytest.approx(expected, rel=1e-12)
    assert result.done == 9 and len(result.losses) == 9


def test_two_micro_batches_of_two_equal_one_batch_of_four():
    import torch

    whole, a, _ = train(Recipe(steps=9, lr=0.05), ORDER)
    split, b, _ = train(Recipe(steps=9, lr=0.05, accumulation=2), ORDER)
    assert torch.allclose(whole, split, atol=1e-6) and not torch.equal(whole, torch.zeros(4))
    assert b.losses == pytest.approx(a.losses, rel=1e-5)
    assert micro_batches([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]


def test_clipping_bounds_the_gradient_norm_the_optimiser_sees():
    _, _, free = train(Recipe(steps=5, lr=0.01), ORDER)
    _, _, clipped = train(Recipe(steps=5, lr=0.01, clip=0.5), ORDER)
    assert max(norm for _, norm in free) > 2.0            # the problem's gradients are large
    assert all(norm <= 0.5 + 1e-5 for _, norm in clipped)


def test_a_nan_loss_at_step_3_stops_naming_step_3():
    _, loss = problem()
    calls = []

    def poisoned(rows):
        calls.append(rows)
        value = loss(rows)
        return value * float("nan") if len(calls) == 3 else value

    with pytest.raises(NonFiniteLoss, match="at step 3;") as err:
        train(Recipe(steps=9, lr=0.01), ORDER, step_loss=poisoned)
    assert err.value.step == 3 and isinstance(err.value, PawError) and len(calls) == 3


def test_a_resumed_run_ends_with_the_bytes_of_an_uninterrupted_one():
    import torch

    recipe = Recipe(steps=9, lr=0.1, schedule="cosine", warmup=2)
    whole, _, _ = train(recipe, ORDER)
    saved = []
    train(recipe, ORDER, checkpoints=Checkpoints(4, save=saved.append), after=lambda step: step == 5)
    assert [s["step"] for s in saved] == [4]
    resumed, result, seen = train(recipe, ORDER, checkpoints=Checkpoints(4, state=saved[0]))
    assert result.start == 4 and len(seen) == 5
    assert torch.equal(resumed, whole)


def test_skipped_batches_take_no_step_and_after_can_stop():
    _, result, seen = train(Recipe(steps=9, lr=0.1), ORDER, skip=lambda rows: rows[0] == 4,
                            after=lambda step: step == 7)
    assert len(seen) == 5 and result.done == 7       # steps 2 and 5 skipped; stopped after step 7


def test_a_recipe_no_loop_can_run_is_refused_naming_the_knob():
    for bad, name in ((dict(steps=0), "steps"), (dict(accumulation=0), "accumulation"), (dict(schedule="step"), "schedule"),
                      (dict(clip=0.0), "clip"), (dict(lr=float("nan")), "lr"), (dict(warmup=-1), "warmup")):
        with pytest.raises(PawError, match=name):
            Recipe(**{"steps": 3, "lr": 0.1, **bad}).check()


def test_one_module_of_paw_makes_optimiser_steps():
    """Every trainer brings its loss to paw.train.run; none keeps a loop of its own (issue 52)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "paw"
    stepping = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                      if re.search(r"\b(optimizer|opt|optim)\.step\(", p.read_text(encoding="utf-8")))
    assert stepping == ["train/loop.py"]
