"""Per-model merge weights from task-vector L2 norms, so one heavily trained fine-tune does not drown the rest.

Given the norms ``L_i = ||M_i - base||_2`` of N task vectors, a mode gives unnormalised scores and
:func:`weights_from_norms` divides them by their sum:

======  ==========================================  =======================================
mode    score                                       norms [1, 2, 3]  ->  weights
======  ==========================================  =======================================
exp     exp(-beta * L_i / mean(L))    (beta = 1)    [0.5065, 0.3072, 0.1863]
linear  1 / L_i                                     [0.5455, 0.2727, 0.1818]
power   1 / L_i ** alpha              (alpha = 1.5) [0.6468, 0.2287, 0.1245]
equal   1                                           [1/3, 1/3, 1/3]
======  ==========================================  =======================================

``exp`` is scale-free (norms are divided by their mean) and accepts a zero norm; ``linear`` and
``power`` divide by the norm and refuse one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from paw.errors import PawError
from paw.registry import Registry

WEIGHT_MODES: Registry[Callable[..., list[float]]] = Registry("weight mode")


def weight_mode(name: str):
    """Register ``f(norms, *, beta, alpha) -> unnormalised scores`` as mode ``name``."""

    return WEIGHT_MODES.register(name)


@weight_mode("exp")
def _exp(norms: Sequence[float], *, beta: float, alpha: float) -> list[float]:
    mean = sum(norms) / len(norms)
    if mean == 0:  # every task vector is zero: nothing to prefer
        return [1.0] * len(norms)
    return [math.exp(-beta * n / mean) for n in norms]


def _refuse_zero(norms: Sequence[float], mode: str) -> None:
    for i, n in enumerate(norms):
        if n <= 0:
            raise PawError(f"--mode {mode} divides by the L2 norm, but model {i + 1} has norm {n:g}; "
                           "use --mode exp or equal, or pass --weights")


@weight_mode("linear")
def _linear(norms: Sequence[float], *, beta: float, alpha: float) -> list[float]:
    _refuse_zero(norms, "linear")
    return [1.0 / n for n in norms]


@weight_mode("power")
def _power(norms: Sequence[float], *, beta: float, alpha: float) -> list[float]:
    _refuse_zero(norms, "power")
    return [n ** -alpha for n in norms]


@weight_mode("equal")
def _equal(norms: Sequence[float], *, beta: float, alpha: float) -> list[float]:
    return [1.0] * len(norms)


def weights_from_norms(norms: Sequence[float], mode: str = "exp", *, beta: float = 1.0,
                       alpha: float = 1.5) -> list[float]:
    """Normalised weights (sum 1) for task vectors of L2 norms ``norms``.

    >>> [round(w, 4) for w in weights_from_norms([1, 2, 3], "exp")]
    [0.5065, 0.3072, 0.1863]
    """
    score = WEIGHT_MODES.lookup(mode, what="--mode")
    if not norms:
        raise PawError("no norms to weight (empty model list)")
    for n in norms:
        if not math.isfinite(n) or n < 0:
            raise PawError(f"L2 norm {n!r} is not a finite non-negative number")
    scores = score(list(norms), beta=beta, alpha=alpha)
    total = sum(scores)
    if not math.isfinite(total) or total <= 0:
        raise PawError(f"--mode {mode} gives weights that cannot be normalised (scores {scores}); "
                       "lower --beta/--alpha or use --mode equal")
    return [s / total for s in scores]
