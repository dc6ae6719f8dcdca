"""A lazy checkpoint whose tensors come from other checkpoints under other names (layer slices).

``composite_checkpoint({"model.layers.0.mlp.up_proj.weight": (ckpt_a, "model.layers.20.mlp.up_proj.weight"), ...})``
reads nothing until a tensor is asked for, then reads that one tensor (or rows of it) from its source.
The merge pipeline uses it for mergekit's ``slices``: the output's layer i is layer j of some model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from paw.io.lazy_checkpoint import Checkpoint


class _Renamed:
    """One source tensor served under another name (the file-object interface Checkpoint uses)."""

    def __init__(self, source, name: str):
        self._source, self._name, self.path = source, name, source.path

    def get(self, name: str, rows: tuple[int, int] | None = None):
        return self._source.get(self._name, rows)

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        return self._source.meta(self._name)


def composite_checkpoint(parts: Mapping[str, tuple[Checkpoint, str]], *, name: str, config: dict | None,
                         path: Path) -> Checkpoint:
    """A :class:`Checkpoint` whose tensor ``out`` is tensor ``src`` of ``ckpt`` for ``parts[out] = (ckpt, src)``.

    Names keep the order of ``parts``; ``path`` (a source's folder) is where side files (config,
    tokenizer) are copied from and what messages name.
    """
    where = {out: _Renamed(ckpt._where[src], src) for out, (ckpt, src) in parts.items()}
    return Checkpoint(Path(path), where, config, name)
