"""Grow a base model's vocabulary tensors to the size an adapter was trained with (pure).

The rows a resized base needs for tokens ``V0 .. V-1`` come, best first, from what the adapter
saved: the exact base it was trained on (``original_module`` / ``base_layer`` copies), the trained
``modules_to_save`` copy, or trainable-token rows. Rows the adapter does not carry start as the
mean of the base's trained rows (:func:`paw.vocab.resize.init_mean`). With ``modules_to_save``
the loaded adapter replaces the whole layer anyway, so its logits are the adapter's exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from paw.adaptercheck.fit import TRAINABLE_TOKENS, token_indices
from paw.errors import PawError
from paw.io.adapter import split_adapter_key, strip_prefix
from paw.vocab.resize import grow_rows, new_rows

# which saved copy to prefer for a base row: the untouched base layer first, the trained copy last
_PRIORITY = {"original_module": 0, "base_layer": 1, "": 2, "modules_to_save": 3}
_COPY = re.compile(r"^(?P<module>.+?)(?:\.(?P<seg>modules_to_save|original_module|base_layer))?\.weight$")


def vocab_sources(adapter_tensors: Mapping[str, object], config: Mapping,
                  keys: tuple[str, ...]) -> dict[str, dict[int, object] | object]:
    """``base key -> full (V, d) matrix`` or ``-> {row id: (d,) row}`` from an adapter's saved tensors."""
    best: dict[str, tuple[int, object]] = {}
    rows: dict[str, dict[int, object]] = {}
    for key, tensor in adapter_tensors.items():
        if split_adapter_key(key):
            continue
        name = strip_prefix(key)
        if name.endswith(TRAINABLE_TOKENS):
            module = name[: -len(TRAINABLE_TOKENS)]
            ids = token_indices(config, module)
            if f"{module}.weight" in keys:
                rows[f"{module}.weight"] = dict(zip(ids, tensor, strict=True))
            continue
        m = _COPY.match(name)
        if m and f"{m['module']}.weight" in keys:
            base_key, rank = f"{m['module']}.weight", _PRIORITY[m["seg"] or ""]
            if base_key not in best or rank < best[base_key][0]:
                best[base_key] = (rank, tensor)
    out: dict[str, dict[int, object] | object] = dict(rows)
    out.update({k: t for k, (_, t) in best.items()})
    return out


def rebase_tensors(base: Mapping[str, object], *, rows: int, keys: tuple[str, ...],
                   sources: Mapping[str, object], device=None) -> Iterator[tuple[str, object]]:
    """Yield the base's tensors with each vocabulary tensor in ``keys`` grown to ``rows`` rows.

    ``sources`` comes from :func:`vocab_sources`. Rows ``< V0`` keep the base's values.
    """
    import torch

    for name in base:
        tensor = base[name]
        if name in keys:
            weight = tensor if device is None else tensor.to(device)
            old = weight.shape[0]
            if rows < old:
                raise PawError(f"{name} has {old} rows, more than the {rows} the adapter expects; "
                               "use the base the adapter was trained on")
            values = _new_values(weight, sources.get(name), range(old, rows))
            stacked = torch.stack(list(values.values())) if values else None
            tensor = grow_rows(weight, rows, ids=list(values), rows=stacked).cpu()
        yield name, tensor


def _new_values(weight, source, ids: range) -> dict[int, object]:
    """Row values for ``ids`` from ``source`` where it has them, else the mean of trained rows."""
    import torch

    given: dict[int, object] = {}
    if isinstance(source, dict):
        given = {i: r for i, r in source.items() if i in ids}
    elif isinstance(source, torch.Tensor):
        given = {i: source[i] for i in ids if i < source.shape[0]}
    missing = [i for i in ids if i not in given]
    fill = new_rows(weight, [[]] * len(missing), init="mean") if missing else []
    values = {i: r.to(weight.device, weight.dtype) for i, r in given.items()}
    values.update(dict(zip(missing, fill, strict=True)))
    return values
