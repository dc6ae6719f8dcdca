"""mergekit's YAML schema as ``paw merge`` input: checked, then translated to one :class:`MergeOptions`.

``paw merge --config mergekit.yml`` accepts what mergekit-yaml accepts for these keys::

    merge_method: ties                  # mergekit's name (task_arithmetic, model_stock, ...): see MERGEKIT_METHODS
    base_model: ./base
    models:                             # or slices: [{sources: [{model, layer_range, parameters}], parameters}]
      - model: ./ft1
        parameters: {weight: 1.0, density: [1, 0.7, 0.1]}   # a list of numbers: a gradient over depth
      - model: ./ft2
        parameters:
          weight: [{filter: mlp, value: 0.5}, {value: 0}]   # by tensor name: first filter contained in it wins
    parameters: {normalize: true, int8_mask: true}          # top level: for every model and tensor
    dtype: float16                      # mergekit computes in it; PAW computes in float32 and writes it
    out_dtype: bfloat16                 # the written dtype (default: dtype)
    tokenizer_source: base              # base | a model | union (or tokenizer: {source: ...})
    chat_template: "{% for m in messages %}..."

How a parameter is found for one tensor of one model (mergekit's order): the model's own
``parameters`` (a slice source's), then the slice's, then the top-level ones, then the method's
default; a required one (``weight``, SLERP's ``t``) missing everywhere is refused naming the tensor.
A gradient ``[v_0, ..., v_k]`` is read at ``t = i / (L - 1)`` for layer i of a slice of L layers
(interpolated linearly between neighbours); tensors outside the layers read it at ``t = 0``.

Anything PAW cannot do as mergekit would is refused with one line naming the key, before a file is
read: ``modules``, methods PAW lacks (``arcee_fusion``, ``ram``), parameters a method does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paw.errors import PawError
from paw.merge.options import MergeOptions, MergeSpec
from paw.merge.rules import (
    REQUIRED,
    MergekitRules,
    MethodSpec,
    Section,
    check_setting,
    evaluate_setting,
)
from paw.merge.slices import SliceSource, SliceSpec
from paw.merge.union import ZERO, TokenOverride
from paw.registry import same_name

__all__ = ["MERGEKIT_METHODS", "MergekitRules", "evaluate_setting", "is_mergekit_config", "options_from_mergekit"]

GTA_GLOBAL = {"int8_mask": False, "lambda": 1.0}


def _gta(paw: str, normalize: bool, rescale: bool, **extra: Any) -> MethodSpec:
    # density 1 (keep every entry) is mergekit's default for these methods, not PAW's --density
    return MethodSpec(paw, {**GTA_GLOBAL, "normalize": normalize, "rescale": rescale},
                      {"weight": REQUIRED, "density": 1.0, **extra})


# mergekit's defaults; where they are PAW's own (gamma, epsilon, ...), read from MergeSpec, the one place
MERGEKIT_METHODS: dict[str, MethodSpec] = {
    "linear": MethodSpec("linear", {"normalize": True}, {"weight": REQUIRED}, base="member"),
    "task_arithmetic": _gta("task-arithmetic", False, False),
    "ties": _gta("ties", True, False),
    "dare_ties": _gta("dare-ties", False, True),
    "dare_linear": _gta("dare-linear", False, True),
    "breadcrumbs": _gta("breadcrumbs", False, False, gamma=MergeSpec.gamma),
    "breadcrumbs_ties": _gta("breadcrumbs-ties", False, False, gamma=MergeSpec.gamma),
    "della": _gta("della", True, True, epsilon=MergeSpec.epsilon),
    "della_linear": _gta("della-linear", False, True, epsilon=MergeSpec.epsilon),
    "slerp": MethodSpec("slerp", {"t": REQUIRED}, {}),
    "nuslerp": MethodSpec("nuslerp", {"nuslerp_row_wise": MergeSpec.row_wise,
                                      "nuslerp_flatten": MergeSpec.flatten}, {"weight": REQUIRED}, base="optional"),
    "multislerp": MethodSpec("multislerp", {"normalize_weights": True, "eps": 1e-8}, {"weight": REQUIRED},
                             base="optional"),
    "karcher": MethodSpec("karcher", {"max_iter": MergeSpec.max_iter, "tol": MergeSpec.tol}, {}, base="member"),
    "model_stock": MethodSpec("model-stock", {"filter_wise": MergeSpec.filter_wise}, {}),
    "nearswap": MethodSpec("nearswap", {"t": REQUIRED}, {}),
    "sce": MethodSpec("sce", {"int8_mask": False, "select_topk": MergeSpec.select_topk}, {}),
    "passthrough": MethodSpec("passthrough", {}, {"scale": None}, base="none"),
}
NOT_IN_PAW = ("arcee_fusion", "ram", "ramplus_tl")

TOP_KEYS = ("merge_method", "base_model", "models", "slices", "parameters", "dtype", "out_dtype",
            "tokenizer_source", "tokenizer", "chat_template")
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
               "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def is_mergekit_config(data: Mapping[str, Any]) -> bool:
    """True for mergekit's schema (it names ``merge_method``); PAW's flat config uses ``method``."""
    return "merge_method" in data


# ---------------------------------------------------------------- translation

def _method(data: Mapping[str, Any]) -> tuple[str, MethodSpec]:
    name = data.get("merge_method")
    if not isinstance(name, str):
        raise PawError(f"merge_method: expected a method name, got {name!r}")
    # mergekit's spelling of the name; dare-ties is read as dare_ties (paw.registry.same_name, the one rule)
    name = next((k for k in (*MERGEKIT_METHODS, *NOT_IN_PAW) if same_name(k) == same_name(name.strip())), name.strip())
    if name in NOT_IN_PAW:
        raise PawError(f"merge_method: {name!r} is a mergekit method PAW does not have; PAW has: "
                       f"{', '.join(MERGEKIT_METHODS)}")
    if name not in MERGEKIT_METHODS:
        raise PawError(f"merge_method: unknown method {name!r}; choose one of: {', '.join(MERGEKIT_METHODS)}")
    return name, MERGEKIT_METHODS[name]


def _params(where: str, value: Any, allowed: set[str], method: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PawError(f"{where}: expected a mapping of parameter names to values")
    out = {}
    for key, setting in value.items():
        if key not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise PawError(f"{where}.{key}: merge_method {method} has no parameter {key!r} (its parameters: {known})")
        out[key] = check_setting(f"{where}.{key}", setting, knob=key, method=MERGEKIT_METHODS[method].paw)
    return out


def _model_ref(where: str, value: Any) -> str:
    if isinstance(value, Mapping) and set(value) <= {"model"} and isinstance(value.get("model"), str):
        value = value["model"]
    if not isinstance(value, str) or not value.strip():
        raise PawError(f"{where}: expected a model path or ID, got {value!r}")
    return value.strip()


def _check_keys(where: str, entry: Any, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(entry, Mapping):
        raise PawError(f"{where}: expected a mapping with keys {', '.join(allowed)}")
    for key in entry:
        if key not in allowed:
            raise PawError(f"{where}.{key}: not a key PAW reads here (it reads {', '.join(allowed)})")
    return entry


def _dtype(where: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value.lower() not in DTYPE_NAMES:
        raise PawError(f"{where}: {value!r} is not a dtype PAW writes ({', '.join(DTYPE_NAMES)})")
    return DTYPE_NAMES[value.lower()]


def _tokenizer(data: Mapping[str, Any]) -> tuple[str | None, dict, int | None]:
    """``tokenizer_source`` / ``tokenizer`` -> (source: None for the base, 'union' or a model; tokens; padding)."""
    if data.get("tokenizer_source") is not None and data.get("tokenizer") is not None:
        raise PawError("tokenizer_source: give tokenizer_source or tokenizer, not both")
    source, tokens, pad = data.get("tokenizer_source"), {}, None
    if data.get("tokenizer") is not None:
        tok = _check_keys("tokenizer", data["tokenizer"], ("source", "tokens", "pad_to_multiple_of"))
        source = tok.get("source", "union")  # mergekit's default for a tokenizer: block
        tokens = tok.get("tokens") or {}
        if not isinstance(tokens, Mapping):
            raise PawError("tokenizer.tokens: expected a mapping of token -> {source, force}")
        pad = tok.get("pad_to_multiple_of")
        if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or pad < 1):
            raise PawError(f"tokenizer.pad_to_multiple_of: expected a positive integer, got {pad!r}")
        if (tokens or pad) and source != "union":
            raise PawError("tokenizer.tokens: per-token sources and padding apply to source: union")
    if source is None:
        return None, tokens, pad
    if source in ("base", "union"):
        return source, tokens, pad
    return _model_ref("tokenizer_source", source), tokens, pad


def _overrides(tokens: Mapping[str, Any], members: list[str]) -> dict[str, TokenOverride]:
    """mergekit's ``tokenizer.tokens`` as :class:`TokenOverride`, with models named by member index."""
    def member(where: str, ref: Any) -> int:
        ref = _model_ref(where, ref)
        if ref not in members:
            raise PawError(f"{where}: {ref!r} is not one of the merged models ({', '.join(members)})")
        return members.index(ref)

    out = {}
    for token, spec in tokens.items():
        where = f"tokenizer.tokens.{token}"
        spec = _check_keys(where, spec, ("source", "force"))
        src = spec.get("source")
        if isinstance(src, Mapping):
            kind = src.get("kind")
            if kind == "zero":
                src = ZERO
            elif kind == "model_token":
                _check_keys(f"{where}.source", src, ("kind", "model", "token", "token_id"))
                if (src.get("token") is None) == (src.get("token_id") is None):
                    raise PawError(f"{where}.source: give token or token_id (one of them)")
                src = (member(f"{where}.source.model", src.get("model")),
                       src["token_id"] if src.get("token_id") is not None else str(src["token"]))
            else:
                raise PawError(f"{where}.source.kind: expected zero or model_token, got {kind!r}")
        elif src is not None:
            src = member(f"{where}.source", src)
        force = spec.get("force", False)
        if not isinstance(force, bool):
            raise PawError(f"{where}.force: expected true or false, got {force!r}")
        out[str(token)] = TokenOverride(src, force)
    return out


def options_from_mergekit(data: Mapping[str, Any], *, source: str = "config") -> MergeOptions:
    """Translate a parsed mergekit config into :class:`MergeOptions` (``output`` left unset).

    Every refusal is a :class:`PawError` naming the file and the key. The result's ``rules`` resolve
    parameters per tensor; ``slices`` (a list of :class:`paw.merge.slices.SliceSpec`) stack layers.
    """
    try:
        for key in data:
            if key == "modules":
                raise PawError("modules: per-module configs (multimodal models) are not supported; use models or slices")
            if key not in TOP_KEYS:
                raise PawError(f"{key}: not a mergekit key PAW reads (it reads {', '.join(TOP_KEYS)})")
        name, spec = _method(data)
        base = _model_ref("base_model", data["base_model"]) if data.get("base_model") is not None else None
        if spec.base == "required" and base is None:
            raise PawError(f"base_model: merge_method {name} needs a base_model")
        if spec.base == "none" and base is not None:
            raise PawError(f"base_model: merge_method {name} uses no base model; remove base_model")
        allowed_model = set(spec.model_params)  # mergekit reads only per-model parameters there
        allowed_top = set(spec.global_params) | set(spec.model_params)
        top = _params("parameters", data.get("parameters"), allowed_top, name)
        if ("models" in data) == ("slices" in data):
            raise PawError("models: give exactly one of models or slices")
        slices = None
        if "models" in data:
            entries = data["models"]
            if not isinstance(entries, list) or not entries:
                raise PawError("models: expected a non-empty list of {model, parameters}")
            listed = []
            for i, entry in enumerate(entries):
                entry = _check_keys(f"models[{i}]", entry, ("model", "parameters"))
                listed.append((_model_ref(f"models[{i}].model", entry.get("model")),
                               _params(f"models[{i}].parameters", entry.get("parameters"), allowed_model, name)))
            models, per_model, base = _roles(name, spec, base, listed)
            sections = [Section(0, None, {}, per_model)]
        else:
            slices, models, sections, base = _slices(name, spec, base, data["slices"], allowed_model, allowed_top)
        if "rescale" in top and top["rescale"] is True and spec.paw in ("ties", "breadcrumbs", "breadcrumbs-ties",
                                                                         "task-arithmetic"):
            raise PawError(f"parameters.rescale: true is not supported for {name} (only the DARE and DELLA methods rescale)")
        dtype, out_dtype = _dtype("dtype", data.get("dtype")), _dtype("out_dtype", data.get("out_dtype"))
        template = data.get("chat_template")
        if template is not None and not isinstance(template, str):
            raise PawError(f"chat_template: expected a Jinja template string or 'auto', got {template!r}")
        if isinstance(template, str) and template != "auto" and "{" not in template:
            raise PawError(f"chat_template: {template!r} names one of mergekit's bundled templates, which PAW does "
                           "not ship; give the Jinja text itself, or 'auto' to keep the tokenizer's")
        tokenizer, tokens, pad = _tokenizer(data)
        members = [*([base] if base is not None else []), *models]
        overrides = _overrides(tokens, members) if tokens else None
    except PawError as err:
        raise PawError(str(err), path=source) from None
    rules = MergekitRules(name, spec, top, sections, len(models), base_given=base is not None,
                          source=dict(data), path=None if source == "config" else source)
    # base: the base's vocabulary; shared rows merged, rows past a model's own kept from the base (mergekit's
    # permutation onto the base's tokens, for models whose vocabularies extend the base's)
    policy = tokenizer if tokenizer in ("base", "union") else "refuse"
    return MergeOptions(models=models, base=base, method=spec.paw, mode="equal", dtype=out_dtype or dtype or "auto",
                        tokenizer_from=None if policy != "refuse" else tokenizer,
                        chat_template=None if template == "auto" else template, rules=rules, slices=slices,
                        vocab_policy=policy, token_overrides=overrides,
                        pad_to_multiple_of=pad)


def _roles(name: str, spec: MethodSpec, base: str | None,
           listed: list[tuple[str, dict]]) -> tuple[list[str], list[dict], str | None]:
    """Split ``models:`` into PAW's base and models (mergekit lists the base among the models or not)."""
    if spec.base == "member":  # averaged with the others: the base is one more model
        if base is not None and base not in [m for m, _ in listed]:
            if "weight" in spec.model_params:
                raise PawError(f"base_model: {name} averages the listed models; list the base under models with "
                               "its weight, or remove base_model")
            listed = [*listed, (base, {})]
        return [m for m, _ in listed], [p for _, p in listed], None
    kept = [(m, p) for m, p in listed if m != base]
    return [m for m, _ in kept], [p for _, p in kept], base


def _slices(name: str, spec: MethodSpec, base: str | None, value: Any, allowed_model: set[str],
            allowed_top: set[str]) -> tuple[list[SliceSpec], list[str], list[Section], str | None]:
    """Check ``slices:`` and split each slice's sources into the base and the models, in one order."""
    if not isinstance(value, list) or not value:
        raise PawError("slices: expected a non-empty list of {sources: [...]}")
    specs, sections, roles = [], [], None
    start = 0
    for i, entry in enumerate(value):
        entry = _check_keys(f"slices[{i}]", entry, ("sources", "parameters", "base_model"))
        if entry.get("base_model") is not None:
            raise PawError(f"slices[{i}].base_model: a base per slice is not supported; set the top-level base_model")
        sources = entry.get("sources")
        if not isinstance(sources, list) or not sources:
            raise PawError(f"slices[{i}].sources: expected a non-empty list of {{model, layer_range}}")
        parsed = []
        for j, src in enumerate(sources):
            where = f"slices[{i}].sources[{j}]"
            src = _check_keys(where, src, ("model", "layer_range", "parameters"))
            layer_range = src.get("layer_range")
            if not (isinstance(layer_range, list) and len(layer_range) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in layer_range)):
                raise PawError(f"{where}.layer_range: expected [start, end] (integers), got {layer_range!r}")
            if not 0 <= layer_range[0] < layer_range[1]:
                raise PawError(f"{where}.layer_range: {layer_range} is empty or negative (start < end, end exclusive)")
            parsed.append(SliceSource(_model_ref(f"{where}.model", src.get("model")), layer_range[0], layer_range[1],
                                      _params(f"{where}.parameters", src.get("parameters"), allowed_model, name)))
        lengths = {s.end - s.start for s in parsed}
        if len(lengths) != 1:
            raise PawError(f"slices[{i}].sources: every source of a slice must have as many layers "
                           f"(got {sorted(lengths)})")
        base_src = [s for s in parsed if base is not None and s.model == base and spec.base != "member"]
        if spec.base == "required" and not base_src:
            raise PawError(f"slices[{i}].sources: merge_method {name} needs the base_model {base} among each slice's sources")
        others = [s for s in parsed if s not in base_src]
        if spec.base == "none" and len(others) != 1:
            raise PawError(f"slices[{i}].sources: passthrough takes exactly one source per slice, got {len(others)}")
        if roles is not None and len(others) != roles:
            raise PawError(f"slices[{i}].sources: every slice needs the same number of models ({roles} in slice 0)")
        roles = len(others)
        count = lengths.pop()
        specs.append(SliceSpec(base_src[0] if base_src else None, others))
        sections.append(Section(start, count, _params(f"slices[{i}].parameters", entry.get("parameters"),
                                                      allowed_top, name), [s.params for s in others]))
        start += count
    models = [f"{specs[0].models[j].model}" for j in range(roles)]
    return specs, models, sections, base if any(s.base for s in specs) else None
