"""Task-vector L2 norms in one streamed pass: ``||M_i - base||_2`` over the tensors that are merged.

Memory holds one tensor of the base and of each model at a time; squares are summed in float64 so
that a norm over billions of entries does not lose digits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from paw.io.checkpoint import Checkpoint
from paw.io.stream import iter_aligned
from paw.progress import track


def task_vector_norms(base: Checkpoint, models: Sequence[Checkpoint], names: Sequence[str], *,
                      device=None) -> list[float]:
    """Global L2 norm of each model's task vector over ``names`` (sqrt of the summed squares).

    The same figure as ``global_l2`` in the ``summary.json`` of ``paw task-vectors``.
    """
    import torch

    sums = [0.0] * len(models)
    stream = iter_aligned([base, *models], names, device=device, dtype=torch.float32)
    for _, (ref, *tensors) in track(stream, "L2 norms", total=len(names)):
        for i, t in enumerate(tensors):
            sums[i] += float(torch.linalg.vector_norm(t.sub_(ref), dtype=torch.float64) ** 2)
    return [math.sqrt(s) for s in sums]
