"""``paw task-vectors``: exact, streamed statistics of fine-tune − base, per tensor, group and model."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE, command_line, multi_value_command


def register(app: typer.Typer) -> None:
    @app.command("task-vectors", cls=multi_value_command("--models"))
    def task_vectors(
        base: str = typer.Option(..., "--base", help="Base model: folder, weight file, .gguf or cached HF id."),
        models: list[str] = typer.Option(..., "--models",
                                         help="Fine-tuned model(s) of the same architecture: "
                                              "--models A B C (or --models A --models B)."),
        outdir: Path = typer.Option(Path("tv_stats"), "--outdir", help="Report folder."),
        device: str = DEVICE,
        multi_gpu: bool = typer.Option(False, "--multi-gpu", help="Spread tensors over all visible GPUs."),
        top_k: int = typer.Option(50, "--top-k", min=1, help="Rows in the top-k tables (names follow it)."),
        include: str = typer.Option(None, "--include", help="Only tensors whose name matches this regex."),
        exclude: str = typer.Option(None, "--exclude", help="Skip tensors whose name matches this regex."),
        workers: int = typer.Option(0, "--workers", min=0,
                                    help="CPU only: tensors processed in parallel (0: one per core, up to 4)."),
        overwrite: bool = OVERWRITE,
        allow_nonfinite: bool = typer.Option(False, "--allow-nonfinite", help="Report models holding NaN or "
                                             "Inf (their statistics read nan) instead of refusing them."),
        spectra: bool = typer.Option(False, "--spectra", help="Also the stable rank, effective rank and energy at "
                                     "--spectra-ranks of every 2-D Δ, and per pair of models the sign agreement "
                                     "and top-k mask overlap (writes spectra*.csv, energy_by_rank.png, pairwise_*)."),
        spectra_ranks: str = typer.Option("8,16,64", "--spectra-ranks",
                                          help="With --spectra: ranks k at which the energy held is reported."),
        spectra_exact: bool = typer.Option(False, "--spectra-exact", help="With --spectra: the full SVD of every "
                                           "matrix (exact figures; slow on large ones)."),
        mask_density: float = typer.Option(0.2, "--mask-density", help="With --spectra: share of entries with "
                                           "the largest |Δ| in each model's top-k mask (TIES keeps 0.2)."),
    ):
        """Task vectors Δ = model − base: per-tensor stats with exact quantiles, groups, cosines, plot.

        Streams one tensor at a time, so peak memory is about two copies of the largest tensor.
        Writes DIR/MODEL/{per_param_stats.csv, top50_by_l2.csv, top50_by_maxabs.csv,
        summary.json, group_l2_bar.png} and DIR/pairwise_cosines.csv.

        Example: paw task-vectors --base ./tiny/base --models ./tiny/finetune --outdir tv_stats
        """
        from paw.errors import PawError
        from paw.knobs import typed_on_command_line
        from paw.taskvec.pipeline import task_vectors as run_task_vectors
        from paw.taskvec.spectra import SpectraOptions

        unused = [] if spectra else sorted(typed_on_command_line(["spectra_ranks", "spectra_exact", "mask_density"]))
        if unused:  # they would change nothing: say so rather than run without them
            flags = ", ".join("--" + name.replace("_", "-") for name in unused)
            one = len(unused) == 1
            raise PawError(f"{flags} {'is a' if one else 'are'} --spectra option{'' if one else 's'}; add --spectra "
                           f"or drop {'it' if one else 'them'}")
        try:
            ranks = tuple(int(r) for r in spectra_ranks.split(","))
        except ValueError:
            raise PawError(f"--spectra-ranks {spectra_ranks!r}: give integers separated by commas, "
                           "e.g. 8,16,64") from None
        options = SpectraOptions(ranks=ranks, density=mask_density, exact=spectra_exact) if spectra else None
        results = run_task_vectors(base, models, outdir, device=device, multi_gpu=multi_gpu, top_k=top_k,
                                   include=include, exclude=exclude, workers=workers, overwrite=overwrite,
                                   allow_nonfinite=allow_nonfinite, spectra=options,
                                   command=command_line()).results
        for i, name in enumerate(results.models):
            typer.echo(f"{name}: global L2 {results.global_l2(i):.6g}, L1 {results.global_l1(i):.6g} "
                       f"over {results.n_params():,} parameters in {len(results.names)} tensors "
                       f"({len(results.skipped)} skipped) -> {outdir / name}")
        typer.echo(f"pairwise cosines -> {outdir / 'pairwise_cosines.csv'}")
        if spectra:
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
