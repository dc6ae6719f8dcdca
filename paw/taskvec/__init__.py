"""Streaming task-vector statistics: exact quantiles, module groups, cosines, reports.

    from paw.io.checkpoint import open_checkpoint
    from paw.taskvec import compute_task_vectors, write_report

    results = compute_task_vectors(open_checkpoint("base"), [open_checkpoint("ft")], device="cpu")
    results.global_l2(0), results.cosines()
    write_report("tv_stats", results, top_k=50)

A task vector is Δ = fine-tuned − base (Ilharco et al., "Editing Models with Task Arithmetic",
ICLR 2023). Nothing here imports torch at import time.
"""

from importlib import import_module as _import_module

_LAZY = {
    "compute_task_vectors": "paw.taskvec.compute",
    "TaskVectorResults": "paw.taskvec.compute",
    "write_report": "paw.taskvec.report",
    "delta_stats": "paw.taskvec.stats",
    "exact_quantiles": "paw.taskvec.quantiles",
    "QUANTILES": "paw.taskvec.quantiles",
    "module_group": "paw.taskvec.groups",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(_import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paw.taskvec' has no attribute {name!r}")
