"""``paw adapter``: will a LoRA adapter load on a base (check), and the base resize that makes it load."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE


def register(app: typer.Typer) -> None:
    adapter_app = typer.Typer(help="Check that a PEFT adapter fits a base; fix a vocabulary mismatch.",
                              no_args_is_help=True)
    app.add_typer(adapter_app, name="adapter")

    @adapter_app.command("check")
    def check(
        adapter: Path = typer.Option(..., "--adapter", help="PEFT adapter folder."),
        base: Path = typer.Option(..., "--base", help="Base model folder (or cached model ID)."),
    ):
        """Tell from file headers alone whether ADAPTER loads on BASE (exit 0) or not (exit 2).

        Checks target modules, every LoRA shape, modules_to_save copies and trainable-token rows
        against the base's vocabulary; on a mismatch, prints the size the adapter expects and the fix.

        Example: paw adapter check --adapter ./my-lora --base meta-llama/Llama-3.2-3B
        """
        import sys

        from paw.adaptercheck.fit import check_fit, table
        from paw.io.adapter_check import read_adapter_header, read_base_header

        header = read_adapter_header(adapter)
        base_header = read_base_header(base)
        report = check_fit(header.config, header.shapes, base_header.shapes, tied=base_header.tied)
        for line in table(report):
            typer.echo(line)
        if report.ok:
            typer.echo(f"fits: {adapter} loads on {base} (vocabulary {report.base_vocab})")
            return
        for line in _advice(report, adapter, base):
            typer.echo(line)
        typer.echo(f"error: {_summary(report)}", err=True)
        sys.exit(2)

    @adapter_app.command("resize-base")
    def resize_base(
        adapter: Path = typer.Option(..., "--adapter", help="PEFT adapter folder."),
        base: Path = typer.Option(..., "--base", help="Base model folder at the old vocabulary size."),
        output: Path = typer.Option(..., "--output", help="Folder to write the resized base to."),
        tokenizer: Path = typer.Option(None, "--tokenizer",
                                       help="Tokenizer folder to ship with it (default: the adapter's "
                                       "folder if it holds one, else the base's)."),
        vocab_size: int = typer.Option(0, "--vocab-size", min=0,
                                       help="Rows to grow to (default: what the adapter's tensors say)."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
    ):
        """Write BASE resized to ADAPTER's vocabulary, using the rows the adapter saved, so that
        PeftModel.from_pretrained(OUTPUT, ADAPTER) loads.

        Example: paw adapter resize-base --adapter ./my-lora --base ./llama --output ./llama-resized
        """
        from paw.io.atomic import check_output

        check_output(output, overwrite=overwrite)
        for line in run_resize_base(adapter, base, output, tokenizer=tokenizer, vocab_size=vocab_size or None,
                                    device=device, overwrite=overwrite):
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


def run_resize_base(adapter: Path, base: Path, output: Path, *, tokenizer: Path | None = None,
                    vocab_size: int | None = None, device: str = "cpu", overwrite: bool = False) -> list[str]:
    """Read adapter and base, grow the base's vocabulary tensors, write the folder; return report lines."""
    from paw import __version__
    from paw.adaptercheck.fit import check_fit
    from paw.adaptercheck.rebase import rebase_tensors, vocab_sources
    from paw.cli._options import command_line
    from paw.device import resolve_device
    from paw.errors import PawError
    from paw.io.adapter import read_adapter
    from paw.io.adapter_check import read_adapter_header
    from paw.io.checkpoint import open_checkpoint
    from paw.io.manifest import describe_input
    from paw.io.writer import TOKENIZER_FILES, write_checkpoint
    from paw.vocab.extend import find_vocab_tensors, with_vocab_size

    header = read_adapter_header(adapter)
    ckpt = open_checkpoint(base)
    keys = tuple(k for k in find_vocab_tensors(list(ckpt)) if k)
    report = check_fit(header.config, header.shapes, {n: ckpt.shape(n) for n in ckpt}, tied=ckpt.tied_embeddings)
    tok_source = tokenizer or (header.path if any((header.path / f).exists() for f in TOKENIZER_FILES) else ckpt.path)
    rows = vocab_size or report.expected_vocab
    if rows is not None and report.vocab_is_lower_bound and not vocab_size:
        rows = max(rows, _tokenizer_size(tok_source) or 0)  # trainable tokens only bound it from below
    old = ckpt.shape(keys[0])[0]
    if rows is None:
        raise PawError("the adapter carries no vocabulary-sized tensor; pass --vocab-size", path=adapter)
    if rows == old:
        raise PawError(f"base already has {old} rows, the size the adapter expects; nothing to resize", path=base)
    sources = vocab_sources(read_adapter(adapter).tensors, header.config, keys)
    manifest = {"paw_version": __version__, "command": command_line(),
                "inputs": {"adapter": describe_input(adapter), "base": describe_input(base)},
                "old_rows": old, "rows": rows, "tokenizer_from": str(tok_source),
                "rows_from_adapter": sorted(sources)}
    write_checkpoint(output, rebase_tensors(ckpt, rows=rows, keys=keys, sources=sources,
                                            device=resolve_device(device)),
                     config=with_vocab_size(ckpt.config, rows), copy_from=ckpt.path, tokenizer_from=tok_source,
                     overwrite=overwrite, extra_files={"paw_resize_base.json": manifest})
    carried = ", ".join(sources) or "none (mean of trained rows)"
    lines = [f"resized {' and '.join(keys)}: {old} -> {rows} rows",
             f"new rows from the adapter's saved tensors: {carried}",
             f"tokenizer from {tok_source}"]
    if tok_source == ckpt.path:
        lines.append("  note: the base's tokenizer does not know the new tokens; pass --tokenizer with the "
                     "extended one")
    lines.append(f"wrote {output}; load with PeftModel.from_pretrained(<model from {output}>, '{adapter}')")
    return lines


def _tokenizer_size(folder: Path) -> int | None:
    from paw.io.hf_tokenizer_edit import TOKENIZER_JSON, open_tokenizer_json

    path = Path(folder)
    if (path / TOKENIZER_JSON).exists() or path.suffix == ".json":
        return open_tokenizer_json(path).size()
    return None
