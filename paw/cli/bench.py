"""``paw bench transfer`` (the transfer quality benchmark) and ``paw bench real`` (SmolLM2 and Gemma-3), each made
from its options classes in :mod:`paw.bench.options` and :mod:`paw.bench.real.options`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from paw.bench.options import BenchOptions, BenchRun, for_run
from paw.bench.real.options import RealOptions, RealRun
from paw.cli._options import RunOptions, command_line, options_command
from paw.knobs import require
from paw.progress import format_duration


def register(app: typer.Typer) -> None:
    bench_app = typer.Typer(help="Benchmarks that anyone can rerun on a CPU.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")
    options_command(bench_app, "transfer", [(BenchRun, ""), (BenchOptions, ""), (RunOptions, "", ("device", "track"))],
                    transfer, doc=transfer.__doc__)   # BenchOptions has its own --device: the CPU by default
    options_command(bench_app, "real", [(RealRun, ""), (RealOptions, ""), (RunOptions, "", ("track",))], real,
                    doc=real.__doc__)


def transfer(out: BenchRun, options: BenchOptions, run: RunOptions) -> None:
    """Pretrain a small LM, build sibling targets, train LoRAs, transfer them, and score every method.

    Example: paw bench transfer --output bench-out --seeds 0,1 --targets upgrade,pruned,unrelated
    """
    from paw.bench.quality import benchmark_to_folder, pool_to_folder
    from paw.bench.report import markdown
    from paw.bench.tasks import FALLBACK_WARNING

    out.check()
    output = Path(out.output)
    if out.merge:
        pooled = pool_to_folder([Path(p) for p in out.merge], output, overwrite=run.overwrite, command=command_line())
        typer.echo(markdown(pooled))
        typer.echo(f"wrote {output}/results.json, results.md, recovered.png, kept.png ({len(out.merge)} runs pooled)")
        return
    opts = for_run(options, quick=out.quick)
    if opts.commonsense is None:
        typer.echo(FALLBACK_WARNING, err=True)
    results = benchmark_to_folder(opts, output, workdir=out.workdir, overwrite=run.overwrite, command=command_line())
    typer.echo(markdown(results))
    if results["notes"].get("corpus_fallback"):
        typer.echo(FALLBACK_WARNING)
    typer.echo(f"wrote {output}/results.json, results.md, recovered.png, kept.png "
               f"({format_duration(results['notes']['seconds']['total'])})")


def real(out: RealRun, options: RealOptions, run: RunOptions) -> None:
    """SmolLM2-135M and Gemma-3-270M: eval, tokenizers, LoRA transfer across families, task vectors, merge.

    Example: paw bench real --models ~/paw-models --data ../shared/data/commonsense --output bench-real
    """
    from paw.bench.real.report import markdown, real_to_folder
    from paw.device import resolve_device

    out.check()
    require(options, "models", "data")   # --data is asked for whatever the parts, as it always was
    opts = dataclasses.replace(options, device=str(resolve_device(run.device)))
    output = Path(out.output)
    results = real_to_folder(opts, output, workdir=out.workdir, overwrite=run.overwrite, command=command_line())
    typer.echo(markdown(results))
    typer.echo(f"wrote {output}/results.json, results.md, real.png ({format_duration(results['seconds']['total'])})")
