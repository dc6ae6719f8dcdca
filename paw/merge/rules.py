"""How a mergekit config's parameters reach one tensor: settings (numbers, gradients, filters) and per-tensor rules.

A parameter is looked up as mergekit does: the model's own ``parameters`` (a slice source's), then
the slice's, then the top-level ones, then the method's default; a required one missing everywhere
is refused naming the tensor. A gradient ``[v_0, ..., v_k]`` is read at ``t = i / (L - 1)`` for
layer i of a slice of L layers (linear between neighbours); tensors outside the layers read it at
``t = 0``. :mod:`paw.merge.mergekit` builds the :class:`MergekitRules` from the YAML.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.merge.knobs import check_della, check_knob, check_weight_sum
from paw.merge.params import TensorParams

REQUIRED = object()  # a parameter without a default

@dataclass(frozen=True)
class MethodSpec:
    """How one mergekit method maps onto PAW: the method, its global and per-model parameters, the base's role."""

    paw: str
    global_params: dict[str, Any]
    model_params: dict[str, Any]
    base: str = "required"     # required | optional | member (averaged with the models) | none


# mergekit parameter -> PAW knob (TensorParams.params)
_KNOB = {"density": "density", "gamma": "gamma", "epsilon": "epsilon", "normalize": "normalize",
         "rescale": "rescale", "t": "t", "select_topk": "select_topk", "filter_wise": "filter_wise",
         "max_iter": "max_iter", "tol": "tol", "nuslerp_row_wise": "row_wise", "nuslerp_flatten": "flatten",
         "normalize_weights": "normalize_weights", "scale": "multiplier"}


# ---------------------------------------------------------------- settings: scalars, gradients, filters

def check_setting(where: str, value: Any, *, knob: str | None = None, method: str | None = None) -> Any:
    """A parameter value as mergekit allows it, or :class:`PawError` naming ``where``.

    Allowed: a number, bool or string; a non-empty list of numbers (a gradient) or of scalars; a list
    of ``{filter: substring, value: ...}`` conditions (``filter`` optional: a fallback). With ``knob``
    every scalar in it is judged by :func:`paw.merge.knobs.check_knob` (the flags' ranges) and
    returned converted: ``check_setting('parameters.density', [1, '0.5'], knob='density') == [1.0, 0.5]``.
    """
    def leaf(label: str, scalar: Any) -> Any:
        return scalar if knob is None else check_knob(label, knob, scalar, method=method)

    if isinstance(value, (int, float, bool, str)):
        return leaf(where, value)
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list) or not value:
        raise PawError(f"{where}: expected a number, a list of numbers (a gradient) or a list of "
                       f"{{filter, value}} conditions, got {value!r}")
    if all(isinstance(v, (int, float, bool, str)) for v in value):
        return [leaf(f"{where}[{i}]", v) for i, v in enumerate(value)]
    if not all(isinstance(v, Mapping) for v in value):
        raise PawError(f"{where}: mixes conditions ({{filter, value}}) with plain values")
    out = []
    for i, cond in enumerate(value):
        extra = set(cond) - {"filter", "value"}
        if extra or "value" not in cond:
            raise PawError(f"{where}[{i}]: a condition has keys 'filter' (optional) and 'value'"
                           + (f"; unknown key {sorted(extra)[0]!r}" if extra else "; 'value' is missing"))
        if cond.get("filter") is not None and not isinstance(cond["filter"], str):
            raise PawError(f"{where}[{i}].filter: expected a substring of tensor names, got {cond['filter']!r}")
        out.append({**cond, "value": check_setting(f"{where}[{i}].value", cond["value"], knob=knob, method=method)})
    return out


def evaluate_setting(value: Any, tensor: str, t: float) -> Any:
    """A setting's value for tensor ``tensor`` at depth ``t`` in [0, 1]; None when no condition matches.

    ``evaluate_setting([0, 0.5, 1], name, 0.25) == 0.25``; ``[0, 1]`` at ``t = 0.5`` is 0.5; a list of
    non-numbers picks ``value[int(t (k - 1))]``; conditions take the first whose filter is absent, ``*``
    or a substring of ``tensor``.
    """
    if not isinstance(value, list):
        return value
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        scaled = t * (len(value) - 1)
        i0 = int(scaled)
        i1 = min(len(value) - 1, i0 + 1)
        frac = scaled - i0
        return (1 - frac) * value[i0] + frac * value[i1]
    if all(not isinstance(v, Mapping) for v in value):
        return value[int(t * (len(value) - 1))]
    for cond in value:
        pattern = cond.get("filter")
        if pattern is None or pattern == "*" or pattern in tensor:
            return evaluate_setting(cond["value"], tensor, t)
    return None


# ---------------------------------------------------------------- the per-tensor rules

@dataclass
class Section:
    """One output slice: its first output layer, its layer count, its own and its sources' parameters."""

    start: int
    layers: int | None                      # None: every layer of the models (the ``models:`` form)
    params: dict[str, Any] = field(default_factory=dict)
    model_params: list[dict[str, Any]] = field(default_factory=list)   # one per PAW model, in order


@dataclass
class MergekitRules:
    """Resolve weights, knobs and scale per tensor as mergekit would (see the module docstring)."""

    method: str                             # mergekit's name
    spec: MethodSpec
    top: dict[str, Any]                     # top-level parameters
    sections: list[Section]
    n_models: int
    base_given: bool
    source: dict[str, Any] = field(default_factory=dict)   # the config as read, for the record
    n_layers: int = 0                       # layers of the reference, for the models: form (set by bind)
    path: str | None = None                 # the config file, named by the refusals for_tensor raises

    def _section(self, name: str) -> tuple[Section, float]:
        layer = arch.layer_index(name)
        if layer is None:  # embeddings read the first slice, the rest (norm, head) the last, at t = 0
            return (self.sections[0] if arch.is_embedding(name) else self.sections[-1]), 0.0
        for s in self.sections:
            count = self.n_layers if s.layers is None else s.layers
            if s.start <= layer < s.start + count:
                return s, (layer - s.start) / (count - 1) if count > 1 else 1.0
        return self.sections[-1], 0.0

    def bind(self, layers: int) -> None:
        self.n_layers = layers

    def _lookup(self, key: str, name: str, t: float, scopes: list[dict[str, Any]], default: Any, who: str) -> Any:
        for scope in scopes:
            if key in scope:
                value = evaluate_setting(scope[key], name, t)
                if value is not None:
                    return value
        if default is REQUIRED:
            raise PawError(f"parameter {key!r} is missing for {who}tensor {name!r} (merge_method "
                           f"{self.method} needs it; give it under the model's or the top-level parameters)")
        return default

    def for_tensor(self, name: str) -> TensorParams:
        """The :class:`TensorParams` of tensor ``name``. Raises PawError (naming the config file) for a
        missing required parameter or values that do not combine (:meth:`_check_combinations`)."""
        try:
            return self._for_tensor(name)
        except PawError as err:
            raise PawError(str(err), path=self.path if err.path is None else None) from None

    def _for_tensor(self, name: str) -> TensorParams:
        section, t = self._section(name)
        shared = [section.params, self.top]
        params: dict[str, Any] = {"base_given": self.base_given}
        scale = 1.0
        for key, default in self.spec.global_params.items():
            value = self._lookup(key, name, t, shared, default, "")
            if key == "lambda":
                scale = float(value)
            elif key in _KNOB:
                params[_KNOB[key]] = value
        weights = [1.0] * self.n_models
        per_model: dict[str, list] = {}
        for i in range(self.n_models):
            scopes = [section.model_params[i] if i < len(section.model_params) else {}, *shared]
            for key, default in self.spec.model_params.items():
                value = self._lookup(key, name, t, scopes, default, f"model {i + 1}, ")
                if key == "weight":
                    weights[i] = float(value)
                else:
                    per_model.setdefault(_KNOB[key], []).append(value)
        params.update(per_model)
        self._check_combinations(name, weights, params)
        if self.spec.paw.startswith("dare"):  # mergekit's density is DARE's keep probability
            params["drop_rate"] = [1.0 - float(d) for d in params.pop("density")]
        return TensorParams(weights, params, scale)

    def _check_combinations(self, name: str, weights: list[float], params: dict[str, Any]) -> None:
        """What no single value shows: DELLA's density ± epsilon, a zero weight sum a method divides by."""
        if self.spec.paw.startswith("della"):
            for i, (density, epsilon) in enumerate(zip(params["density"], params["epsilon"], strict=True)):
                check_della(density, epsilon, labels=("density", "epsilon"),
                            where=f" (model {i + 1}, tensor {name!r})")
        check_weight_sum(weights, self.spec.paw, params, label="weight", where=f" of tensor {name!r}")
