"""``task_vectors``: what ``paw task-vectors`` runs, from model folders to a report folder.

    from paw.taskvec.pipeline import task_vectors
    run = task_vectors("./tiny/base", ["./tiny/finetune"], "tv_stats")
    run.results.global_l2(0), run.results.cosines()

Streams one tensor at a time (peak memory about two copies of the largest tensor) and writes
``OUTDIR/MODEL/{per_param_stats.csv, top50_by_l2.csv, top50_by_maxabs.csv, summary.json,
group_l2_bar.png}`` and ``OUTDIR/pairwise_cosines.csv``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw.device import resolve_device, visible_devices
from paw.errors import PawError
from paw.io.checkpoint import distinct_names, open_checkpoint
from paw.io.manifest import describe_input, records_call
from paw.progress import status
from paw.taskvec.compute import compute_task_vectors, cpu_workers, unique_names
from paw.taskvec.report import check_report_outputs, write_report
from paw.taskvec.spectra import SpectraOptions

PathLike = str | Path


@dataclass(frozen=True)
class TaskVectorRun:
    """The statistics (:class:`~paw.taskvec.compute.TaskVectorResults`) and where their report went."""

    outdir: Path
    results: Any
    devices: list                 # the devices the tensors were spread over


@records_call
def task_vectors(base: PathLike, models: Sequence[PathLike], outdir: PathLike = "tv_stats", *,
                 device: str = "cpu", multi_gpu: bool = False, top_k: int = 50, include: str | None = None,
                 exclude: str | None = None, workers: int = 0, overwrite: bool = False,
                 allow_nonfinite: bool = False, spectra: SpectraOptions | None = None,
                 command: str | None = None) -> TaskVectorRun:
    """Task vectors Δ = model − base: per-tensor stats with exact quantiles, groups, cosines, plot.

    ``spectra`` (``--spectra``) adds stable rank, effective rank and energy at ranks per 2-D tensor,
    and the sign agreement and top-k mask overlap of every pair of models (:mod:`paw.taskvec.spectra`).

    A model (or the base) holding NaN/Inf is refused, naming it and the tensor, unless
    ``allow_nonfinite``: then its statistics are ``nan`` in the report.
    """
    spectra = spectra.check() if spectra is not None else None
    specs = [str(m) for m in models]
    base_ckpt = open_checkpoint(base)
    model_ckpts = [open_checkpoint(m) for m in specs]
    distinct_names([base_ckpt, *model_ckpts])  # messages and report folders tell a/ft from b/ft
    check_report_outputs(outdir, unique_names([m.name for m in model_ckpts]), overwrite=overwrite,
                         inputs=[base_ckpt.path, *(m.path for m in model_ckpts)])
    devices = _devices(resolve_device(device), multi_gpu, workers)
    results = compute_task_vectors(base_ckpt, model_ckpts, devices=devices, include=include, exclude=exclude,
                                   allow_nonfinite=allow_nonfinite, spectra=spectra)
    inputs = {"base": describe_input(base), "models": [describe_input(m) for m in specs]}
    try:
        write_report(outdir, results, top_k=top_k, command=command, inputs=inputs,
                     overwrite=overwrite)
    except OSError as err:  # e.g. the output folder is a file, or the disk is full
        raise PawError(f"cannot write the report: {err.strerror or err}", path=outdir) from None
    return TaskVectorRun(Path(outdir), results, devices)


def _devices(primary, multi_gpu: bool, workers: int) -> list:
    """One entry per parallel worker: CPU threads, or every visible GPU with ``multi_gpu``."""
    single = [primary] * (cpu_workers(workers) if primary.type == "cpu" else 1)
    if not multi_gpu:
        return single
    devices = visible_devices(primary)
    if len(devices) < 2:
        status(f"--multi-gpu: fewer than two GPUs visible; running on {primary} only")
        return single
    status(f"--multi-gpu: spreading tensors over {len(devices)} GPUs")
    return devices
