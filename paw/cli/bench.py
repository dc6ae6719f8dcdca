"""``paw bench transfer`` (the transfer quality benchmark) and ``paw bench real`` (SmolLM2 and Gemma-3), each made
from its options classes in :mod:`paw.bench.options` and :mod:`paw.bench.real.options`; ``paw bench real --cell``
and ``--check-device`` run one cell of its part 'tasks' or the device checks instead of its parts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import typer

from paw.bench.options import BenchOptions, BenchRun, for_run
from paw.bench.real.options import RealCell, RealCheck, RealOptions, RealRun
from paw.cli._options import RunOptions, command_line, options_command
from paw.errors import PawError
from paw.knobs import require
from paw.progress import format_duration


def register(app: typer.Typer) -> None:
    bench_app = typer.Typer(help="Benchmarks that anyone can rerun on a CPU.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")
    options_command(bench_app, "transfer", [(BenchRun, ""), (BenchOptions, ""), (RunOptions, "", ("device", "track"))],
                    transfer, doc=transfer.__doc__)   # BenchOptions has its own --device: the CPU by default
    options_command(bench_app, "real", [(RealRun, ""), (RealOptions, ""), (RealCell, ""), (RealCheck, ""),
                                        (RunOptions, "", ("track",))], real, doc=real.__doc__)


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


def real(out: RealRun, options: RealOptions, cell: RealCell, check: RealCheck, run: RunOptions) -> None:
    """SmolLM2-135M and Gemma-3-270M: eval, tokenizers, LoRA transfer across families, task vectors, merge.

    Example: paw bench real --models ~/paw-models --data ../shared/data/commonsense --output bench-real

    One cell of part 'tasks': paw bench real --cell piqa A B main --models M --data D --workdir W
    """
    from paw.device import resolve_device

    if cell.cell is not None or cell.stand_in_loras:
        return _cell(out, options, cell, check, run)
    if check.check_device is not None:
        return _check(out, options, check, run)
    from paw.bench.real.report import markdown, real_to_folder

    out.check()
    require(options, "models", "data")   # --data is asked for whatever the parts, as it always was
    opts = dataclasses.replace(options, device=str(resolve_device(run.device)))
    output = Path(out.output)
    results = real_to_folder(opts, output, workdir=out.workdir, overwrite=run.overwrite, command=command_line())
    typer.echo(markdown(results))
    typer.echo(f"wrote {output}/results.json, results.md, real.png ({format_duration(results['seconds']['total'])})")


def _cell(out: RealRun, options: RealOptions, cell: RealCell, check: RealCheck, run: RunOptions) -> None:
    """``--cell``: one cell of part 'tasks', its summary beside the work folder's cache."""
    from paw.bench.real.cell import run_cell
    from paw.device import resolve_device

    if check.check_device is not None:
        raise PawError("--cell and --check-device: one at a time")
    require(out, "workdir")
    require(options, "models", "data")
    done = run_cell(dataclasses.replace(options, device=str(resolve_device(run.device))), cell, out.workdir)
    typer.echo(json.dumps(done.headline(), indent=1))
    typer.echo(f"wrote {done.path}")


def _check(out: RealRun, options: RealOptions, check: RealCheck, run: RunOptions) -> None:
    """``--check-device``: the device against the CPU on both real models, row by row."""
    from paw.bench.real.device_check import check_device
    from paw.device import resolve_device

    require(options, "models", "data")
    found = check_device(dataclasses.replace(options, device=str(resolve_device(run.device))), check,
                         workdir=out.workdir)
    for line in found.lines():
        typer.echo(line)
