"""``paw adapter``: will a LoRA adapter load on a base (check), and the base resize that makes it load."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.adaptercheck.options import CheckOptions, ResizeOptions
from paw.cli._options import RunOptions, WriteOptions, command_line, options_command


def register(app: typer.Typer) -> None:
    adapter_app = typer.Typer(help="Check that a PEFT adapter fits a base; fix a vocabulary mismatch.",
                              no_args_is_help=True)
    app.add_typer(adapter_app, name="adapter")
    options_command(adapter_app, "check", [(CheckOptions, "")], check, doc=check.__doc__)
    options_command(adapter_app, "resize-base", [(ResizeOptions, ""), (RunOptions, "", ("track",)), (WriteOptions, "")],
                    resize_base, doc=resize_base.__doc__)


def check(options: CheckOptions) -> None:
    """Tell from file headers alone whether ADAPTER loads on BASE (exit 0) or not (exit 2).

    Checks target modules, every LoRA shape, modules_to_save copies and trainable-token rows
    against the base's vocabulary; on a mismatch, prints the size the adapter expects and the fix.

    Example: paw adapter check --adapter ./my-lora --base meta-llama/Llama-3.2-3B
    """
    import sys

    from paw.adaptercheck.fit import table
    from paw.adaptercheck.pipeline import check_adapter

    options.check()
    adapter, base = options.adapter, options.base
    report = check_adapter(adapter, base)
    for line in table(report):
        typer.echo(line)
    if report.ok:
        typer.echo(f"fits: {adapter} loads on {base} (vocabulary {report.base_vocab})")
        return
    for line in _advice(report, adapter, base):
        typer.echo(line)
    typer.echo(f"error: {_summary(report)}", err=True)
    sys.exit(2)


def resize_base(options: ResizeOptions, run: RunOptions, write: WriteOptions) -> None:
    """Write BASE resized to ADAPTER's vocabulary, using the rows the adapter saved, so that
    PeftModel.from_pretrained(OUTPUT, ADAPTER) loads.

    Example: paw adapter resize-base --adapter ./my-lora --base ./llama --output ./llama-resized
    """
    from paw.adaptercheck.pipeline import resize_base

    result = resize_base(options, run, command=command_line())
    for line in result.lines():
        typer.echo(line)


def _summary(report) -> str:
    bad = report.failures()
    if report.vocab_mismatch:
        at_least = "at least " if report.vocab_is_lower_bound else ""
        return (f"adapter expects a vocabulary of {at_least}{report.expected_vocab} rows, base has "
                f"{report.base_vocab} ({len(bad)} tensor(s) do not fit)")
    first = bad[0]
    return f"{len(bad)} check(s) failed; first: {first.check} {first.module}: {first.note}"


def _advice(report, adapter: Path, base: Path) -> list[str]:
    if not report.vocab_mismatch:
        return []
    at_least = "at least " if report.vocab_is_lower_bound else ""
    out = Path(f"{str(base).rstrip('/')}-vocab{report.expected_vocab}")
    return [
        f"vocabulary mismatch: the adapter was trained on a base resized to {at_least}{report.expected_vocab} "
        f"rows; this base has {report.base_vocab}.",
        "fix: write a base at the adapter's size (rows the adapter saved are reused), then load on it:",
        f"  paw adapter resize-base --adapter {adapter} --base {base} --output {out}",
        f"  PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained('{out}'), '{adapter}')",
    ]
