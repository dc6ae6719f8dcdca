"""mergekit's ``MODEL+LORA`` model reference: a model with a PEFT LoRA (or DoRA) applied as it is read.

mergekit's ``ModelReference.parse`` (``mergekit/common.py``) splits a model reference on ``+``:
``./base+./my-lora`` is ``./base`` with ``./my-lora`` merged into it (mergekit runs PEFT's
``merge_and_unload`` and saves the result in a cache folder first). PAW merges nothing ahead: the
returned lazy :class:`~paw.io.lazy_checkpoint.Checkpoint` computes each adapted tensor when it is
read, from the base tensor and the module's factors, in float32, rounded once to the stored dtype
(what a merged-and-saved copy holds)::

    W' = W + s · B @ A                                   LoRA
    W' = m ⊙ (W + s · B @ A) / ||W + s · B @ A||         DoRA (paw.lora.apply_lora)

Full-layer copies the adapter saved (``modules_to_save``, a ``base_layer`` copy) replace the
model's tensor, as PEFT loads them. What PEFT would load differently is refused with one line
naming the adapter: trainable-token rows, ``fan_in_fan_out`` factors, a module the model lacks or
whose shape differs, a LoRA on a head the model ties to its embedding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.io.adapter import (
    COPY_SEGMENTS,
    LoraAdapter,
    LoraModule,
    read_adapter,
    split_adapter_key,
    strip_prefix,
)
from paw.io.checkpoint import Checkpoint, open_checkpoint
from paw.io.manifest import describe_input

TRAINABLE_TOKENS = ".token_adapter.trainable_tokens_delta"


def split_model_ref(spec: str | Path) -> tuple[str, str | None]:
    """``'base+lora'`` -> ``('base', 'lora')``; a plain model (or a path that exists, ``+`` and all) -> ``(spec, None)``.

    mergekit's rule: at most one ``+``. ``'a+b+c'`` is refused, naming it.
    """
    text = str(spec)
    if "+" not in text or Path(text).exists():
        return text, None
    model, _, lora = text.partition("+")
    if "+" in lora or not model.strip() or not lora.strip():
        raise PawError(f"model reference {text!r}: write MODEL+LORA (a model and a PEFT adapter, one '+'), "
                       "or the path of a model")
    return model.strip(), lora.strip()


def ref_paths(spec: str | Path) -> list[str]:
    """The paths a model reference reads: the model, and the adapter if there is one."""
    model, lora = split_model_ref(spec)
    return [model] if lora is None else [model, lora]


def describe_ref(spec: str | Path) -> dict[str, Any]:
    """:func:`paw.io.manifest.describe_input` of a reference; ``MODEL+LORA`` describes both parts."""
    model, lora = split_model_ref(spec)
    if lora is None:
        return describe_input(model)
    return {"path": str(spec), "model": describe_input(model), "lora": describe_input(lora)}


def open_model(spec: str | Path | Checkpoint) -> Checkpoint:
    """Open a model lazily (:func:`paw.io.checkpoint.open_checkpoint`), or ``MODEL+LORA``: the model with the
    adapter applied to each tensor it adapts, when that tensor is read. Raises :class:`PawError`."""
    if isinstance(spec, Checkpoint):
        return spec
    model, lora = split_model_ref(spec)
    ckpt = open_checkpoint(model)
    if lora is None:
        return ckpt
    return with_adapter(ckpt, read_adapter(lora, dora=None))


def with_adapter(ckpt: Checkpoint, adapter: LoraAdapter) -> Checkpoint:
    """``ckpt`` with ``adapter`` applied lazily, named ``MODEL+ADAPTER`` by folder names. What does not fit is
    refused naming the adapter (and the model)."""
    where = dict(ckpt._where)
    where.update(_copies(ckpt, adapter))
    for module in adapter.modules().values():
        name = module.base_key
        _check_module(ckpt, module, adapter)
        where[name] = _Applied(where[name], name, module)
    name = f"{ckpt.name}+{adapter.path.name if adapter.path else 'lora'}"
    return Checkpoint(ckpt.path, where, ckpt.config, name)


def _copies(ckpt: Checkpoint, adapter: LoraAdapter) -> dict[str, Any]:
    """Whole-tensor copies the adapter saved, by base name (``modules_to_save``, ``base_layer``)."""
    out: dict[str, Any] = {}
    for key, tensor in sorted(adapter.tensors.items()):
        split = split_adapter_key(key)
        if split is not None:
            continue
        name = strip_prefix(key)
        if name.endswith(TRAINABLE_TOKENS):
            raise PawError("the adapter trains token rows (trainable_token_indices), which PAW does not apply to "
                           "a MODEL+LORA; merge it with PEFT's merge_and_unload first", path=adapter.path)
        if ".original_module." in name:  # PEFT keeps the untouched layer beside a modules_to_save copy
            continue
        base = COPY_SEGMENTS.sub("", name)
        if base not in ckpt:
            raise PawError(f"the adapter saves {key!r}, but {ckpt.path} has no tensor {base!r}", path=adapter.path)
        if tuple(tensor.shape) != tuple(ckpt.shape(base)):
            raise PawError(f"the adapter saves {base!r} with shape {list(tensor.shape)}, {ckpt.path} has "
                           f"{list(ckpt.shape(base))} (a resized vocabulary: paw adapter resize-base)", path=adapter.path)
        out[base] = _Saved(tensor, ckpt._where[base].path, ckpt.dtype(base))
    return out


def _check_module(ckpt: Checkpoint, module: LoraModule, adapter: LoraAdapter) -> None:
    name = module.base_key
    if adapter.config.get("fan_in_fan_out"):
        raise PawError("the adapter's factors are fan_in_fan_out (GPT-2 Conv1D layers), which PAW's model families "
                       "do not use", path=adapter.path)
    if name not in ckpt:
        tied = ckpt.tied_embeddings and name.endswith(arch.GENERIC.head)
        why = "ties its head to the embedding and stores no head" if tied else "has no such tensor"
        raise PawError(f"the adapter adapts {module.module!r}, but {ckpt.path} {why}", path=adapter.path)
    rows, cols = int(module.B.shape[0]), int(module.A.shape[1])
    want = (cols, rows) if module.kind == "embedding" else (rows, cols)
    if tuple(ckpt.shape(name)) != want:
        raise PawError(f"module {module.module!r} is {want[0]}x{want[1]} in the adapter but "
                       f"{'x'.join(map(str, ckpt.shape(name)))} in {ckpt.path}; it is not this model's adapter",
                       path=adapter.path)


class _Applied:
    """One adapted tensor (the file-object interface :class:`Checkpoint` reads): base tensor, then the module."""

    def __init__(self, source, name: str, module: LoraModule):
        self._source, self._name, self._module, self.path = source, name, module, source.path

    def get(self, name: str, rows: tuple[int, int] | None = None):
        whole = self._module.magnitude is not None and self._module.kind == "embedding"  # column norms: all rows
        W = self._source.get(self._name, None if whole else rows)
        merged = self._module.apply(W, rows=None if whole else rows)
        if whole and rows is not None:
            merged = merged[rows[0]:rows[1]]
        return merged.to(W.dtype)

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        return self._source.meta(self._name)


class _Saved:
    """A tensor the adapter saved whole, served as the model's (in the model's dtype)."""

    def __init__(self, tensor, path: Path, dtype: str):
        self._tensor, self.path, self._dtype = tensor, path, dtype

    def get(self, name: str, rows: tuple[int, int] | None = None):
        import torch

        t = self._tensor.to(getattr(torch, self._dtype))
        return t if rows is None or t.dim() == 0 else t[rows[0]:rows[1]]

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        return tuple(self._tensor.shape), self._dtype
