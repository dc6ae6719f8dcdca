"""What one tensor is merged with: the weights, the method's knobs (one number or one per model), the scale.

A flat ``paw merge`` gives every tensor the same :class:`TensorParams`; a mergekit config gives each
tensor its own (per-model values, filters by tensor name, gradients over depth: see
:mod:`paw.merge.mergekit`), through the same record so the streamed merge has one code path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# the MergeOptions fields a method may read, by the name the method functions use
KNOBS = ("density", "drop_rate", "gamma", "epsilon", "normalize", "rescale", "t", "select_topk",
         "filter_wise", "max_iter", "tol", "row_wise", "flatten")


@dataclass
class TensorParams:
    """``weights``: one per model; ``params``: knob -> number or per-model list; ``scale``: result = base + scale × merged."""

    weights: list[float]
    params: dict[str, Any] = field(default_factory=dict)
    scale: float = 1.0

    def per_model(self, knob: str, count: int) -> list:
        """``params[knob]`` as one value per model (a shared number repeated)."""
        value = self.params[knob]
        return list(value) if isinstance(value, (list, tuple)) else [value] * count


def flat_params(options, weights: list[float]) -> TensorParams:
    """The one :class:`TensorParams` of a flat ``paw merge`` (flags or PAW's own YAML keys)."""
    params = {k: getattr(options, k) for k in KNOBS}
    params["base_given"] = options.base is not None
    return TensorParams(list(weights), params, options.scale)
