"""mergekit's ``slices``: output layers taken from layer ranges of the inputs, merged or stacked.

For slices ``[{sources: [A 0-24]}, {sources: [B 20-40]}]`` (passthrough) the output has 44 layers:
A's 0..23 then B's 20..39, renumbered 0..43. With several sources per slice (a SLERP of A and B over
``[0, 40]``), the output's layer i merges the sources' layers ``start + i``. Each role (the base,
model 1, model 2, ...) becomes one lazy :func:`~paw.io.composite.composite_checkpoint` whose layer
tensors are renamed from their sources; the embeddings come from the first slice's source and the
other tensors outside the layers (final norm, head) from the last slice's, as mergekit does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.io.checkpoint import Checkpoint
from paw.io.composite import composite_checkpoint


@dataclass
class SliceSource:
    """Layers ``[start, end)`` of ``model`` with that model's parameters in this slice."""

    model: str
    start: int
    end: int
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class SliceSpec:
    """One output slice: the base's source (None without a base) and the models' sources, in one order."""

    base: SliceSource | None
    models: list[SliceSource]


def layer_count(ckpt: Checkpoint) -> int:
    """1 + the largest layer index among the checkpoint's tensor names (0 without layers)."""
    indices = [i for i in (arch.layer_index(n) for n in ckpt) if i is not None]
    return max(indices) + 1 if indices else 0


def check_ranges(specs: list[SliceSpec], layers: Mapping[str, int], *, stacking: bool) -> None:
    """Refuse ranges past a model's layers; unless ``stacking``, also a model's ranges that overlap or leave a gap.

    A merge (not a passthrough stack) must use every layer of each model once, in order: ranges
    ``[0, 10]`` then ``[12, 24]`` leave layers 10 and 11 out, ``[0, 12]`` then ``[10, 24]`` use 10 and
    11 twice.
    """
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        for src in [*([spec.base] if spec.base else []), *spec.models]:
            total = layers[src.model]
            if src.end > total:
                raise PawError(f"slices[{i}]: layer_range [{src.start}, {src.end}] of {src.model} goes past its "
                               f"{total} layers")
            if stacking:
                continue
            expected = seen.get(src.model, 0)
            if src.start != expected:
                what = "overlaps the previous slice" if src.start < expected else "leaves a layer out"
                raise PawError(f"slices[{i}]: layer_range [{src.start}, {src.end}] of {src.model} {what} "
                               f"(expected it to start at layer {expected}); a merge uses each layer once, in order")
            seen[src.model] = src.end
    if not stacking:
        for model, end in seen.items():
            if end != layers[model]:
                raise PawError(f"slices: layers {end}..{layers[model] - 1} of {model} are left out "
                               f"(its slices end at layer {end}); a merge uses each layer once")


def _sources(specs: list[SliceSpec], role: int) -> list[SliceSource]:
    return [s.base if role < 0 else s.models[role] for s in specs]


def sliced_checkpoint(specs: list[SliceSpec], role: int, opened: Mapping[str, Checkpoint]) -> Checkpoint:
    """The lazy checkpoint of one role (``-1``: the base, ``j``: model j) across all slices."""
    sources = _sources(specs, role)
    first, last = opened[sources[0].model], opened[sources[-1].model]
    parts: dict[str, tuple[Checkpoint, str]] = {}
    for name in first:
        if arch.layer_index(name) is None and arch.is_embedding(name):
            parts[name] = (first, name)
    offset = 0
    for src in sources:
        ckpt = opened[src.model]
        for name in ckpt:
            index = arch.layer_index(name)
            if index is not None and src.start <= index < src.end:
                parts[arch.rename_layer(name, offset + index - src.start)] = (ckpt, name)
        offset += src.end - src.start
    for name in last:
        if arch.layer_index(name) is None and not arch.is_embedding(name):
            parts[name] = (last, name)
    label = "+".join(dict.fromkeys(opened[s.model].name for s in sources))
    return composite_checkpoint(parts, name=label, config=_config(first.config, sources, opened, offset),
                                path=first.path)


def _config(config: dict | None, sources: list[SliceSource], opened: Mapping[str, Checkpoint],
            layers: int) -> dict | None:
    """The first source's config with the new layer count (and per-layer lists such as ``layer_types`` cut to match)."""
    if config is None:
        return None
    out = copy.deepcopy(config)
    text = out.get("text_config") if isinstance(out.get("text_config"), dict) else out
    text["num_hidden_layers"] = layers
    if isinstance(text.get("layer_types"), list):
        kinds = []
        for src in sources:
            cfg = opened[src.model].config or {}
            cfg = cfg.get("text_config") or cfg
            kinds += list(cfg.get("layer_types") or [])[src.start:src.end]
        text["layer_types"] = kinds
    return out


def open_sliced(specs: list[SliceSpec], opener, *, stacking: bool) -> tuple[Checkpoint | None, list[Checkpoint]]:
    """Open every source once (``opener(path)``), check the ranges, return the base's and the models' views."""
    paths = dict.fromkeys(s.model for spec in specs for s in [*([spec.base] if spec.base else []), *spec.models])
    opened = {p: opener(p) for p in paths}
    check_ranges(specs, {p: layer_count(c) for p, c in opened.items()}, stacking=stacking)
    base = sliced_checkpoint(specs, -1, opened) if specs[0].base is not None else None
    return base, [sliced_checkpoint(specs, j, opened) for j in range(len(specs[0].models))]
