"""Task-vector L2 norms in one streamed pass: ``||M_i - base||_2`` over the tensors that are merged.

Memory holds one block of rows of the base and of each model at a time (:mod:`paw.merge.blocks`);
squares are summed in float64 so that a norm over billions of entries does not lose digits. A
tensor whose squares are not finite is reported by model and tensor name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from paw.io.checkpoint import Checkpoint
from paw.merge.blocks import BLOCK_ELEMENTS, row_blocks
from paw.progress import track
from paw.validate import ALLOW_HINT, NonFinite, nonfinite


def task_vector_norms(base: Checkpoint, models: Sequence[Checkpoint], names: Sequence[str], *,
                      device=None, block_elements: int = BLOCK_ELEMENTS,
                      allow_nonfinite: bool = False) -> list[float]:
    """Global L2 norm of each model's task vector over ``names`` (sqrt of the summed squares).

    The same figure as ``global_l2`` in the ``summary.json`` of ``paw task-vectors``. A model
    holding NaN/Inf in one of ``names`` raises :class:`~paw.validate.NonFinite` naming both,
    unless ``allow_nonfinite`` (its norm is then nan or inf).
    """
    import torch

    sums = [0.0] * len(models)
    for name in track(names, "L2 norms", unit="tensors"):
        per_tensor = [0.0] * len(models)
        for block in row_blocks(base.shape(name), None, block_elements):
            ref = _read(base, name, block, device).to(torch.float32)
            for i, model in enumerate(models):
                delta = torch.sub(_read(model, name, block, device), ref)
                per_tensor[i] += float(torch.linalg.vector_norm(delta, dtype=torch.float64) ** 2)
        for i, value in enumerate(per_tensor):
            if not math.isfinite(value) and not allow_nonfinite:
                _refuse(base, models[i], name)
            sums[i] += value
    return [math.sqrt(s) for s in sums]


def _read(ckpt: Checkpoint, name: str, block, device):
    t = ckpt[name] if block is None else ckpt.rows(name, *block)
    return t.to(device) if device is not None else t


def _refuse(base: Checkpoint, model: Checkpoint, name: str):
    culprit = model if nonfinite(model[name]) else base
    raise NonFinite(f"model {culprit.name}: tensor {name!r} holds {nonfinite(culprit[name])} NaN/Inf "
                    f"value(s), so its task-vector norm is undefined; nothing was written; {ALLOW_HINT}",
                    path=culprit.path)
