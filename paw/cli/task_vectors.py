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
    ):
        """Task vectors Δ = model − base: per-tensor stats with exact quantiles, groups, cosines, plot.

        Streams one tensor at a time, so peak memory is about two copies of the largest tensor.
        Writes DIR/MODEL/{per_param_stats.csv, top50_by_l2.csv, top50_by_maxabs.csv,
        summary.json, group_l2_bar.png} and DIR/pairwise_cosines.csv.

        Example: paw task-vectors --base ./tiny/base --models ./tiny/finetune --outdir tv_stats
        """
        from paw.taskvec.pipeline import task_vectors as run_task_vectors

        results = run_task_vectors(base, models, outdir, device=device, multi_gpu=multi_gpu, top_k=top_k,
                                   include=include, exclude=exclude, workers=workers, overwrite=overwrite,
                                   allow_nonfinite=allow_nonfinite, command=command_line()).results
        for i, name in enumerate(results.models):
            typer.echo(f"{name}: global L2 {results.global_l2(i):.6g}, L1 {results.global_l1(i):.6g} "
                       f"over {results.n_params():,} parameters in {len(results.names)} tensors "
                       f"({len(results.skipped)} skipped) -> {outdir / name}")
        typer.echo(f"pairwise cosines -> {outdir / 'pairwise_cosines.csv'}")
