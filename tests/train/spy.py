"""What every optimiser step saw: its learning rate and the global gradient norm, for any trainer."""

from __future__ import annotations

import contextlib
import math


@contextlib.contextmanager
def optimiser_steps():
    """``with optimiser_steps() as seen: ...``: ``seen`` fills with ``(lr, gradient norm)`` per ``optimizer.step()``."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    seen: list[tuple[float, float]] = []

    def hook(optimizer, args, kwargs):
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0
        seen.append((optimizer.param_groups[0]["lr"], norm))

    handle = register_optimizer_step_pre_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def warmup_lrs(lr: float, warmup: int, steps: int) -> list[float]:
    """The warmup schedule written out by hand: linear to ``lr`` over ``warmup`` steps, then flat."""
    return [lr * min(1.0, (s + 1) / warmup) for s in range(steps)]


def cosine_lrs(lr: float, warmup: int, steps: int, floor: float = 0.1) -> list[float]:
    """The cosine schedule written out by hand: the same warm-up, then a half cosine toward ``floor * lr``."""
    out = []
    for s in range(steps):
        if s < warmup:
            out.append(lr * (s + 1) / warmup)
        else:
            t = (s - warmup) / (steps - warmup)
            out.append(lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))))
    return out


def poisoned_call(monkeypatch, module, name: str, call: int, poison=lambda value: value * float("nan")) -> list:
    """Replace ``module.name`` so that its ``call``-th call returns ``poison(value)`` (a NaN loss by default);
    returns the list that grows by one per call."""
    real, calls = getattr(module, name), []

    def patched(*args, **kwargs):
        calls.append(1)
        value = real(*args, **kwargs)
        return poison(value) if len(calls) == call else value

    monkeypatch.setattr(module, name, patched)
    return calls
