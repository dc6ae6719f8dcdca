"""Resumable training: what a checkpoint holds and how a loop is put back where it was.

A checkpoint is a plain dict (tensors, numbers, strings), so it loads with ``weights_only=True``:
the trainable tensors in the optimiser's order, ``optimizer.state_dict()``, the scheduler's (None
for a constant rate), the RNG states of Python, torch and CUDA, the number of optimiser steps
done, the loss curve so far, anything the loop adds, and the run's ``settings``. A resumed run takes
the same batches from the seeded order from ``step`` on, so with the same inputs its final adapter is
byte-identical to an uninterrupted run's. Files: :mod:`paw.io.train_state`.

>>> every(10, 20, 100), every(10, 25, 100), every(None, 20, 100), every(10, 100, 100)
(True, False, False, False)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from paw.errors import PawError
from paw.progress import status

FORMAT = "paw-train-state"


def every(save_every: int | None, step: int, steps: int) -> bool:
    """Whether a checkpoint is due after optimiser step ``step`` (not after the last: the output follows)."""
    return bool(save_every) and step % save_every == 0 and step < steps


def capture(step: int, params: Sequence[Any], optimizer, *, settings: dict, scheduler=None, **extra) -> dict:
    """The state after ``step`` optimiser steps, copied to CPU."""
    return {"format": FORMAT, "version": 1, "step": int(step), "settings": dict(settings),
            "params": [p.detach().to("cpu").clone() for p in params],
            "optimizer": _to_cpu(optimizer.state_dict()),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng_states(), **extra}


def restore(state: dict, params: Sequence[Any], optimizer, *, settings: dict, scheduler=None) -> int:
    """Load ``state`` into ``params`` and ``optimizer`` (and the RNGs); the step to continue from.

    Refuses a checkpoint of other settings (another ``--lr``, seed, batch size, inputs ...), naming the first.
    """
    import torch

    saved = state.get("settings", {})
    for key in sorted(set(saved) | set(settings)):
        if saved.get(key) != settings.get(key):
            raise PawError(f"--resume: the checkpoint was made with {key}={saved.get(key)!r}, this run has "
                           f"{key}={settings.get(key)!r}; rerun with the same settings or without --resume")
    if len(state["params"]) != len(params) or any(a.shape != b.shape for a, b in zip(state["params"], params, strict=False)):
        raise PawError("--resume: the checkpoint's trainable tensors do not match this run's LoRA")
    with torch.no_grad():
        for p, saved_p in zip(params, state["params"], strict=True):
            p.copy_(saved_p.to(p.device, p.dtype))
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    set_rng_states(state.get("rng") or {})
    return int(state["step"])


def rng_states() -> dict:
    import torch

    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    import torch

    if "python" in states:
        random.setstate(_tuples(states["python"]))
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _tuples(value):
    """``random.setstate`` wants the tuples back that a save may have turned into lists."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list | tuple) else value


def _to_cpu(value):
    if hasattr(value, "detach"):
        return value.detach().to("cpu").clone()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_cpu(v) for v in value)
    return value


@dataclass
class Checkpoints:
    """How a training loop checkpoints and resumes; the loop calls :meth:`resume` once and :meth:`after` per step.

    ``save``: writes a state dict (the pipeline passes :func:`paw.io.train_state.save_train_state`
    bound to the work folder, on rank 0 only); ``state``: the checkpoint ``--resume`` found, if any;
    ``settings``: what must match for a resume (steps, batch size, learning rate, seed, inputs ...).
    """

    save_every: int | None = None
    save: Callable[[dict], Any] | None = None
    state: dict | None = None
    settings: dict = field(default_factory=dict)
    where: str = "the checkpoint"  # the file ``state`` came from, named when a run resumes from it

    def resume(self, params: Sequence[Any], optimizer, scheduler=None, *, steps: int | None = None) -> int:
        """The step to start from: 0, or the checkpoint's step with everything put back (said on stderr).

        ``steps``: the run's length; a checkpoint past it (or before step 0) is refused, not run as done.
        """
        if self.state is None:
            return 0
        step = self.state.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0 or (steps is not None and step > steps):
            raise PawError(f"--resume: {self.where} says step {step!r}, not a step of this {steps}-step run; "
                           "delete it to start over")
        start = restore(self.state, params, optimizer, settings=self.settings, scheduler=scheduler)
        status(f"resumed from step {start} of {self.where}")
        return start

    def extra(self, key: str, default=None):
        """What the loop stored beside the tensors (its loss curve ...), from the resumed checkpoint."""
        return (self.state or {}).get(key, default)

    def after(self, step: int, steps: int, params: Sequence[Any], optimizer, scheduler=None, **extra) -> bool:
        """Write a checkpoint when one is due after ``step`` steps; whether one was written."""
        if self.save is None or not every(self.save_every, step, steps):
            return False
        self.save(capture(step, params, optimizer, settings=self.settings, scheduler=scheduler, **extra))
        return True
