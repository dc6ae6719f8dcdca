"""``paw task-vectors``: exact, streamed statistics of fine-tune − base, per tensor, group and model."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import RunOptions, command_line, options_command
from paw.knobs import Given
from paw.taskvec.options import TaskVectorOptions


def register(app: typer.Typer) -> None:
    options_command(app, "task-vectors", [(TaskVectorOptions, ""), (RunOptions, "", ("track",))], task_vectors,
                    doc=task_vectors.__doc__, given=True)


def task_vectors(options: TaskVectorOptions, run: RunOptions, *, given: Given) -> None:
    """Task vectors Δ = model − base: per-tensor stats with exact quantiles, groups, cosines, plot.

    Streams one tensor at a time, so peak memory is about two copies of the largest tensor.
    Writes DIR/MODEL/{per_param_stats.csv, top50_by_l2.csv, top50_by_maxabs.csv,
    summary.json, group_l2_bar.png} and DIR/pairwise_cosines.csv.

    Example: paw task-vectors --base ./tiny/base --models ./tiny/finetune --outdir tv_stats
    """
    from paw.taskvec.pipeline import task_vectors as run_task_vectors

    options.check(given.names())
    outdir = Path(options.outdir)
    results = run_task_vectors(options.base, options.models, outdir, device=run.device, multi_gpu=options.multi_gpu,
                               top_k=options.top_k, include=options.include, exclude=options.exclude,
                               workers=options.workers, overwrite=run.overwrite,
                               allow_nonfinite=options.allow_nonfinite, spectra=options.spectra_options(),
                               command=command_line()).results
    for i, name in enumerate(results.models):
        typer.echo(f"{name}: global L2 {results.global_l2(i):.6g}, L1 {results.global_l1(i):.6g} "
                   f"over {results.n_params():,} parameters in {len(results.names)} tensors "
                   f"({len(results.skipped)} skipped) -> {outdir / name}")
    typer.echo(f"pairwise cosines -> {outdir / 'pairwise_cosines.csv'}")
    if options.spectra:
        _echo_spectra(results, outdir)


def _echo_spectra(results, outdir: Path) -> None:
    """One line per model (energy of the 2-D tensors held at each rank), one per pair of models."""
    ranks = results.spectra_options.ranks
    for i, name in enumerate(results.models):
        energy = results.spectra_energy(i)
        held = ", ".join(f"{e:.3g} at rank {k}" for k, e in zip(ranks, energy, strict=True))
        typer.echo(f"{name}: 2-D tensors hold {held} -> {outdir / name / 'spectra.csv'}")
    agree, overlap = results.sign_agreement(), results.mask_overlap()
    for i in range(len(results.models)):
        for j in range(i + 1, len(results.models)):
            typer.echo(f"{results.models[i]} vs {results.models[j]}: signs agree on {agree[i][j]:.3g}, "
                       f"top-{results.spectra_options.density:g} masks overlap {overlap[i][j]:.3g}")
