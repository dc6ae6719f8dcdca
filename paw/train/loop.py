"""The one optimiser loop of PAW: every trainer brings a loss and its batches, the loop does the rest.

One optimiser step ``s`` (0-based) of :func:`run`:

1. set every parameter group's learning rate to ``recipe.lr_at(s)`` (:class:`~paw.train.recipe.Recipe`);
2. cut the step's batch into ``recipe.accumulation`` micro-batches (``batch[i*m:(i+1)*m]``, lists or
   tensors alike), and for each call ``step_loss(micro)`` and back-propagate ``loss / accumulation``
   (a None loss, nothing to learn on this rank, adds no gradient);
3. ``sync(params)``, the data-parallel gradient sum (:func:`paw.distributed.sync_gradients`);
4. clip the global gradient norm to ``recipe.clip`` when set;
5. ``optimizer.step()``;
6. ``record(losses) -> float``: the step's loss for the curve (default: the mean of the micro-batch
   losses), appended to ``losses``; a NaN or infinite value stops the run with :class:`NonFiniteLoss`
   naming the step (the weights are lost by then: every later step is waste);
7. log the mean of the last ``log_every`` losses to ``tracker``; ``after(step + 1)`` (True stops the run
   after this step); a resumable checkpoint when one is due (:class:`paw.train_state.Checkpoints`).

With ``accumulation`` 1, no schedule and no clipping this is the plain loop every trainer had, and a
seeded run gives the bytes it gave before (pinned by ``tests/train``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from paw.errors import PawError
from paw.progress import track
from paw.train.recipe import Recipe
from paw.train_state import Checkpoints


class NonFiniteLoss(PawError):
    """The training loss became NaN or infinite at optimiser step ``step`` (1-based)."""

    def __init__(self, step: int, value: float, hint: str = "lower --lr"):
        super().__init__(f"the training loss became {value} at step {step}; {hint}")
        self.step, self.value = step, value


@dataclass
class Run:
    """What :func:`run` did: steps ``start`` (a resumed run's first) to ``done``, and every step's loss."""

    start: int
    done: int
    losses: list[float] = field(default_factory=list)


def micro_batches(batch, k: int) -> list:
    """``batch`` cut into ``k`` consecutive parts of equal size (the last takes the rest).

    >>> micro_batches([1, 2, 3, 4, 5, 6], 3)
    [[1, 2], [3, 4], [5, 6]]
    """
    if k == 1:
        return [batch]
    size = math.ceil(len(batch) / k)
    return [batch[i * size:(i + 1) * size] for i in range(k) if len(batch[i * size:(i + 1) * size])]


def mean_loss(losses: list) -> float:
    """The mean of a step's micro-batch losses (None, no loss on this rank, counts 0)."""
    return sum(float(x.detach()) if x is not None else 0.0 for x in losses) / len(losses)


def run(recipe: Recipe, params: Sequence[Any], optimizer, step_loss: Callable[[Any], Any],
        batch_at: Callable[[int], Any], *, checkpoints: Checkpoints | None = None,
        sync: Callable[[Sequence[Any]], None] | None = None, record: Callable[[list], float] = mean_loss,
        skip: Callable[[Any], bool] | None = None, after: Callable[[int], bool | None] | None = None,
        extra: Callable[[], dict] | None = None, losses: list[float] | None = None, main: bool = True,
        tracker=None, log_every: int = 10, progress: str | Callable[[Iterable[int]], Iterable[int]] | None = None,
        hint: str = "lower --lr") -> Run:
    """Train ``params`` for ``recipe.steps`` optimiser steps (module docstring); returns the :class:`Run`.

    ``batch_at(step)``: the global batch of optimiser step ``step``, called once per step in order (a
    resumed run starts at the checkpoint's step); ``skip(batch)``: True for a batch with nothing to learn,
    which takes no optimiser step. ``checkpoints`` resumes the run and saves it (on the ``main`` rank,
    with ``extra()`` beside the tensors); ``losses``: the curve so far, appended to (a resumed run's).
    ``progress``: a description to show progress under, or a wrapper of the step range.
    """
    import torch

    checkpoints = checkpoints or Checkpoints()
    start = checkpoints.resume(params, optimizer, steps=recipe.steps)
    losses = [] if losses is None else losses
    todo: Iterable[int] = range(start, recipe.steps)
    if isinstance(progress, str):
        todo = track(todo, progress, total=recipe.steps, unit="steps", start=start)
    elif progress is not None:
        todo = progress(todo)
    done = start
    for step in todo:
        batch = batch_at(step)
        if skip is not None and skip(batch):
            continue
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr_at(step)
        optimizer.zero_grad(set_to_none=True)
        parts = []
        for micro in micro_batches(batch, recipe.accumulation):
            loss = step_loss(micro)
            if loss is not None:
                (loss / recipe.accumulation if recipe.accumulation > 1 else loss).backward()
            parts.append(loss)
        if sync is not None:
            sync(params)
        if recipe.clip is not None:
            torch.nn.utils.clip_grad_norm_(params, recipe.clip)
        optimizer.step()
        done = step + 1
        losses.append(record(parts))
        if not math.isfinite(losses[-1]):
            raise NonFiniteLoss(done, losses[-1], hint)
        if tracker is not None and main and (done % log_every == 0 or done == recipe.steps):
            tracker.log({"train/loss": sum(losses[-log_every:]) / len(losses[-log_every:])}, step=done)
        stop = bool(after(done)) if after is not None else False
        if main:
            checkpoints.after(done, recipe.steps, params, optimizer, **(extra() if extra is not None else {}))
        if stop:
            break
    return Run(start, done, losses)
