"""The range of every merge knob, in one table read by the flags' check and by mergekit's YAML.

A value reaches a merge from a flag (``--density -0.5``), from PAW's own YAML (``density: -0.5``) or
from a mergekit config (``models[0].parameters.density: -0.5``); all three are judged here, so a
value the flag refuses is refused from a file too, naming the key instead of the flag::

    check_knob("--density", "density", -0.5)                      # PawError: --density -0.5 is outside (0, 1]
    check_knob("models[0].parameters.weight", "weight", "heavy")  # PawError: ... is not a number
    check_knob("parameters.t", "t", 0.3, method="slerp")          # 0.3

YAML 1.1 reads ``1e-3`` and ``1.0e300`` (no dot, or no sign in the exponent) as text: a string that
Python reads as a number is taken as that number and then range-checked; any other string, and
``true``/``false`` where a number goes, is refused. Pure: no file is opened here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from paw.errors import PawError
from paw.validate import FLOAT32_MAX


@dataclass(frozen=True)
class Range:
    """Allowed values of one knob: a kind (float, int or bool) and, for numbers, ``[low, high]``."""

    kind: type = float
    low: float = -FLOAT32_MAX
    high: float = FLOAT32_MAX
    low_open: bool = False
    high_open: bool = False

    def text(self) -> str:
        """``(0, 1]``, or ``[0, inf)`` when only the float32 limit bounds it from above."""
        lo, hi = ("(" if self.low_open else "["), (")" if self.high_open else "]")
        if self.high == FLOAT32_MAX:
            return f"{lo}{self.low:g}, inf)"
        return f"{lo}{self.low:g}, {self.high:g}{hi}"


_ANY = Range()  # any finite float32 number: weights, scale, lambda, beta, alpha
_FRACTION_OPEN_LOW = Range(low=0.0, high=1.0, low_open=True)
_FRACTION_OPEN_HIGH = Range(low=0.0, high=1.0, high_open=True)
_BOOL = Range(kind=bool)

# knob (PAW's name or mergekit's) -> its range; ``t`` depends on the method (see T_RANGES)
RANGES: dict[str, Range] = {
    "weight": _ANY, "weights": _ANY, "scale": _ANY, "lambda": _ANY, "multiplier": _ANY,
    "beta": _ANY, "alpha": _ANY,
    "density": _FRACTION_OPEN_LOW,     # fraction kept: 0 keeps nothing
    "select_topk": _FRACTION_OPEN_LOW,
    "drop_rate": _FRACTION_OPEN_HIGH,  # dropping everything leaves nothing to rescale
    "gamma": _FRACTION_OPEN_HIGH,
    "epsilon": _FRACTION_OPEN_HIGH,
    "t": _ANY,
    "tol": Range(low=0.0),
    "l2_norm": Range(low=0.0),         # an L2 norm is never negative
    "eps": Range(low=0.0),
    "max_iter": Range(kind=int, low=1, high=2**31 - 1),
    "seed": Range(kind=int, low=-(2**63), high=2**63 - 1),
    **{k: _BOOL for k in ("normalize", "rescale", "int8_mask", "filter_wise", "row_wise", "flatten",
                          "nuslerp_row_wise", "nuslerp_flatten", "normalize_weights")},
}
# slerp's t interpolates (0 = the base, 1 = the model); nearswap's is a distance threshold (< 0 keeps the base)
T_RANGES: dict[str, Range] = {"slerp": Range(low=0.0, high=1.0), "nearswap": Range(low=0.0)}


def knob_range(knob: str, method: str | None = None) -> Range:
    """The :class:`Range` of ``knob`` for PAW method ``method`` (``t`` differs between slerp and nearswap)."""
    if knob == "t" and method in T_RANGES:
        return T_RANGES[method]
    return RANGES.get(knob, _ANY)


def check_knob(label: str, knob: str, value: Any, *, method: str | None = None) -> Any:
    """``value`` converted to the knob's kind and checked against its range, or PawError naming ``label``.

    ``label`` is what the user typed: a flag (``--t``) or a YAML key (``parameters.t``).
    """
    allowed = knob_range(knob, method)
    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    if allowed.kind is bool:
        if not isinstance(value, bool):
            raise PawError(f"{label} must be true or false, got {shown}")
        return value
    if isinstance(value, bool):
        kind = "an integer" if allowed.kind is int else "a number"
        raise PawError(f"{label} {shown} is not {kind} (true and false are not read as 1 and 0)")
    if isinstance(value, str):
        value = _number_from_text(label, value)
        shown = f"{shown} (text in YAML, read as {value!r})"
    if not isinstance(value, (int, float)):
        raise PawError(f"{label} {shown} is not a number")
    if not math.isfinite(value):
        raise PawError(f"{label} {shown} is not a finite number")
    if abs(value) > FLOAT32_MAX:
        raise PawError(f"{label} {shown} is too large (the arithmetic is float32: at most {FLOAT32_MAX:.4g})")
    if allowed.kind is int:
        if value != int(value):
            raise PawError(f"{label} {shown} must be a whole number")
        value = int(value)
    too_low = value <= allowed.low if allowed.low_open else value < allowed.low
    too_high = value >= allowed.high if allowed.high_open else value > allowed.high
    if too_low or too_high:
        what = f" for {method}" if knob == "t" and method in T_RANGES else ""
        raise PawError(f"{label} {value} is outside {allowed.text()}{what}")
    return float(value) if allowed.kind is float else value


def _number_from_text(label: str, text: str) -> float:
    try:
        return float(text.strip().replace("_", ""))
    except ValueError:
        raise PawError(f"{label} {text!r} is not a number") from None


def check_della(density: float, epsilon: float, *, labels: tuple[str, str] = ("--density", "--epsilon"),
                where: str = "") -> None:
    """DELLA keeps entries with probabilities spanning ``density ± epsilon``: both ends inside (0, 1).

    ``density >= 1`` keeps everything and ignores ``epsilon``. ``where`` ends the message (a tensor).
    """
    if density < 1.0 and not (0.0 < density - epsilon and density + epsilon < 1.0):
        raise PawError(f"{labels[1]} {epsilon:g} with {labels[0]} {density:g}{where}: density ± epsilon must "
                       "lie inside (0, 1)")


def divides_by_weight_sum(method: str, params: dict[str, Any]) -> bool:
    """Whether ``method`` with knobs ``params`` divides by the sum of the weights (a weighted average).

    linear (unless ``normalize`` is off) and multislerp (unless ``normalize_weights`` is off) do; the
    consensus methods divide per entry by the weights that agree in sign, and nuslerp falls back to
    t = 0.5, so a zero sum is not a division by zero there.
    """
    if method == "linear":
        return params.get("normalize") is not False
    if method == "multislerp":
        return params.get("normalize_weights") is not False
    return False


def check_weight_sum(weights: list[float], method: str, params: dict[str, Any], *, label: str = "--weights",
                     where: str = "") -> None:
    """Refuse weights whose sum is (about) zero when ``method`` divides by it."""
    if divides_by_weight_sum(method, params) and abs(math.fsum(weights)) < 1e-12:
        raise PawError(f"{label} {weights}{where}: they sum to zero and method {method} divides by their sum")
