"""Walk several checkpoints tensor by tensor, in step.

Task vectors and merges both read ``base`` and ``models`` side by side; which names are comparable
is decided by :func:`paw.taskvec.align.align`, and :func:`iter_aligned` yields their tensors one
name at a time, so memory holds one tensor per model whatever the model size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from paw.io.lazy_checkpoint import Checkpoint


def iter_aligned(checkpoints: Sequence[Checkpoint], names: Sequence[str], *, device=None,
                 dtype=None) -> Iterator[tuple[str, list]]:
    """Yield ``(name, [tensor of each checkpoint])``, moved to ``device`` and cast to ``dtype`` if given."""
    for name in names:
        tensors = []
        for ckpt in checkpoints:
            t = ckpt[name]
            if device is not None or dtype is not None:
                t = t.to(device=device, dtype=dtype)
            tensors.append(t)
        yield name, tensors
