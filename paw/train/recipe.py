"""One recipe shape for every PAW trainer: how long, how fast, and how each optimiser step is made.

A :class:`Recipe` is the part of a trainer's knobs that the shared loop (:mod:`paw.train.loop`) reads:
the number of optimiser steps, the peak learning rate and its schedule, gradient accumulation,
gradient-norm clipping and the seed of the batch order. A trainer keeps its own loss, data and
optimiser; the loop gives every trainer the same schedule, accumulation, clipping, non-finite stop,
checkpoints and tracking.

The learning rate at optimiser step ``s`` (0-based) of ``steps``, peak ``lr``, warm-up ``w``:

- ``constant``: ``lr``;
- ``warmup``: ``lr * min(1, (s + 1) / max(w, 1))``: linear warm-up, then constant (Goyal et al. 2017,
  "Accurate, Large Minibatch SGD");
- ``cosine``: the same warm-up ``lr * (s + 1) / w`` for ``s < w``, then a half cosine from ``lr`` toward
  ``min_lr_ratio * lr``, reached at step ``steps`` (Loshchilov & Hutter 2017, "SGDR"; nanoGPT's floor of a tenth).

>>> r = Recipe(steps=10, lr=1.0, schedule="warmup", warmup=4)
>>> [r.lr_at(s) for s in range(6)]
[0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
>>> c = Recipe(steps=10, lr=1.0, schedule="cosine", warmup=2, min_lr_ratio=0.0)
>>> [round(c.lr_at(s), 3) for s in (0, 1, 2, 6, 9)]
[0.5, 1.0, 1.0, 0.5, 0.038]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paw.errors import PawError

SCHEDULES = ("constant", "warmup", "cosine")


@dataclass(frozen=True)
class Recipe:
    """What the shared training loop needs to know; :meth:`check` refuses bad values naming the field."""

    steps: int                     # optimiser steps
    lr: float                      # peak learning rate
    schedule: str = "constant"     # constant | warmup | cosine (module docstring)
    warmup: int = 0                # linear warm-up steps (warmup and cosine schedules)
    min_lr_ratio: float = 0.1      # cosine: the last step's rate as a fraction of lr
    accumulation: int = 1          # micro-batches per optimiser step (gradients summed, losses averaged)
    clip: float | None = None      # clip the global gradient norm to this (None: no clipping)
    seed: int = 0                  # seed of the batch order

    def check(self) -> Recipe:
        """Refuse a value no loop can run, naming the knob (one line, exit 2 in the CLI)."""
        for name in ("steps", "accumulation"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PawError(f"{name} must be an integer of at least 1, got {value!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise PawError(f"warmup must be an integer of at least 0, got {self.warmup!r}")
        if self.schedule not in SCHEDULES:
            raise PawError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not (isinstance(self.lr, int | float) and math.isfinite(self.lr) and self.lr > 0):
            raise PawError(f"lr must be a finite number above 0, got {self.lr!r}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise PawError(f"min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio!r}")
        if self.clip is not None and not (math.isfinite(self.clip) and self.clip > 0):
            raise PawError(f"clip must be a finite number above 0 (or none), got {self.clip!r}")
        return self

    def changes(self) -> dict:
        """The knobs set away from the plain loop's (constant rate, one micro-batch, no clipping), for a run's
        report and resume settings: a run with the defaults records what it recorded before they existed.

        >>> Recipe(steps=9, lr=0.1, schedule="cosine", clip=1.0).changes()
        {'schedule': 'cosine', 'clip': 1.0}
        """
        return {k: getattr(self, k) for k in ("schedule", "warmup", "accumulation", "clip")
                if getattr(self, k) != getattr(PLAIN, k)}

    def lr_at(self, step: int) -> float:
        """The learning rate of optimiser step ``step`` (0-based); the formulas are the module's."""
        if self.schedule == "constant":
            return self.lr
        if self.schedule == "warmup":
            return self.lr * min(1.0, (step + 1) / max(self.warmup, 1))
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        floor = self.min_lr_ratio
        return self.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


PLAIN = Recipe(steps=1, lr=1.0)   # the defaults every trainer had before paw.train
