"""``paw demo``: the one-command tour of PAW on tiny local models."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import options_command
from paw.demo_options import DemoOptions
from paw.knobs import RunOptions
from paw.progress import format_duration


def register(app: typer.Typer) -> None:
    options_command(app, "demo", [(DemoOptions, ""), (RunOptions, "", ("device", "track"))], demo_command,
                    doc=demo_command.__doc__)


def demo_command(options: DemoOptions, run: RunOptions) -> None:
    """Build tiny models, train a LoRA, compare tokenizers, transfer the LoRA, compute task vectors,
    merge, and print a summary (under a minute on a laptop CPU; nothing is downloaded).

    Example: paw demo --outdir ./paw_demo
    """
    from paw.cli._options import console as make_console
    from paw.demo import STEPS, is_previous_demo, merge_note, run_demo

    outdir, quick, overwrite = Path(options.outdir), options.quick, run.overwrite   # a file gives text
    console = make_console()
    console.print(f"[bold]PAW demo[/bold]: {len(STEPS)} steps, everything under {outdir}")
    if is_previous_demo(outdir):
        console.print(f"(replacing the output of a previous demo in {outdir})", highlight=False)
    report = run_demo(outdir, quick=quick, overwrite=overwrite, on_step=lambda r: _print_step(console, r),
                      on_begin=lambda i, s: console.print(f"[bold][{i}/{len(STEPS)}][/bold] {s.title} ...",
                                                          highlight=False))
    console.print(_evaluation_table(report.evals))
    for line in merge_note(report.evals):
        console.print(line, highlight=False)
    console.print(f"Done in {format_duration(report.seconds)}. Reports, plots, models and logs: [bold]{report.outdir}[/bold]"
                  f"  (numbers in {report.summary_path})")


def _print_step(console, result) -> None:
    from paw.demo import StepStatus

    mark = "[green]ok[/green]" if result.status is StepStatus.OK else f"[yellow]{result.label}[/yellow]"
    timing = f" ({format_duration(result.seconds)})" if result.seconds else ""
    console.print(f"      {mark}{timing}" + (f": {result.detail}" if result.detail else ""))


def _evaluation_table(evals: dict):
    from rich.table import Table

    tasks = sorted({task for per_task in evals.values() for task in per_task})
    table = Table(title="Multiple-choice accuracy on the synthetic fact tasks (chance 25 %)")
    table.add_column("model", no_wrap=True)
    for task in tasks:
        table.add_column(f"{task} acc", justify="right")
        table.add_column(f"{task} loss", justify="right")
    for label, per_task in evals.items():
        cells = []
        for task in tasks:
            m = per_task.get(task)
            cells += [f"{m['accuracy']:.0%} ± {m['stderr']:.0%}", f"{m['loss']:.2f}"] if m else ["-", "-"]
        table.add_row(label, *cells)
    return table
