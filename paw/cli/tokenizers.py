"""``paw analyze-tokenizers``, ``paw align-vocab``, ``paw transplant-tokenizer``, ``paw heal-transplant``: each made
from its options class in :mod:`paw.vocab.options` (flags, defaults, help and ``--config`` keys)."""

from __future__ import annotations

import typer

from paw.cli._options import (
    RunOptions,
    WriteOptions,
    command_line,
    console,
    multi_value_command,
    options_command,
    track_steps,
)
from paw.vocab.options import AlignOptions, AnalyzeOptions, HealOptions, TransplantOptions

_NO_TRACK = ("track",)          # a knob of RunOptions these commands have no use for (they train nothing)


def _coverage_table(title: str, coverage: dict[str, int], total: int):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("method")
    table.add_column("target tokens", justify="right")
    table.add_column("share", justify="right")
    for m, n in coverage.items():
        table.add_row(m, f"{n:,}", f"{n / max(total, 1):.1%}")
    return table


def register(app: typer.Typer) -> None:
    options_command(app, "analyze-tokenizers", [(AnalyzeOptions, ""), (RunOptions, "", ("device", "track"))],
                    analyze_tokenizers, doc=analyze_tokenizers.__doc__, cls=multi_value_command("--corpus"))
    options_command(app, "align-vocab", [(AlignOptions, ""), (RunOptions, "", _NO_TRACK)], align_vocab,
                    doc=align_vocab.__doc__, cls=multi_value_command("--corpus"))
    options_command(app, "transplant-tokenizer", [(TransplantOptions, ""), (RunOptions, ""),
                                                  (WriteOptions, "")], transplant_tokenizer,
                    doc=transplant_tokenizer.__doc__, cls=multi_value_command("--corpus", "--heal-corpus"))
    options_command(app, "heal-transplant", [(HealOptions, ""), (RunOptions, ""), (WriteOptions, "")],
                    heal_transplant, doc=heal_transplant.__doc__, cls=multi_value_command("--corpus", "--eval-corpus"))


def analyze_tokenizers(options: AnalyzeOptions, run: RunOptions) -> None:
    """Compare two tokenizers: vocabulary overlap on canonical bytes, special tokens, encoding statistics.

    Example: paw analyze-tokenizers --source Qwen/Qwen2.5-1.5B --target ./llama3 --corpus wiki.txt --outdir cmp
    """
    from paw.vocab.pipelines import analyze_tokenizers

    result = analyze_tokenizers(options, run, command=command_line())
    _print_analysis(result.report)
    typer.echo(f"wrote {options.outdir}/ (report.json, encoding.csv, source_only.txt, target_only.txt"
               f"{', length_ratio.png, bytes_per_token.png' if result.figures else ''})")


def align_vocab(options: AlignOptions, run: RunOptions) -> None:
    """Map every target token to source tokens (and weights) and save the mapping as JSON.

    Example: paw align-vocab --source ./qwen --target ./llama3 --output qwen2llama.json --method exact,decompose
    """
    from paw.vocab.pipelines import align_vocab

    result = align_vocab(options, run)
    console().print(_coverage_table(f"{options.source} -> {options.target}", result.coverage,
                                    result.mapping.target_size))
    typer.echo(f"wrote {options.output}")


def transplant_tokenizer(options: TransplantOptions, run: RunOptions, write: WriteOptions) -> None:
    """Give a model a new tokenizer: remapped embed_tokens/lm_head rows, updated config, T's tokenizer files.

    Example: paw transplant-tokenizer --model ./tiny/base --tokenizer ./other-tok --output ./tiny-t2

    Example: paw transplant-tokenizer --model ./smollm2 --donor ./gemma-3 --output ./smollm2-gemma-tok
    """
    from paw.io.tracking import check_kind
    from paw.vocab.pipelines import transplant_tokenizer

    check_kind(run.track)  # before any heavy work
    result = transplant_tokenizer(options, run, command=command_line())
    console().print(_coverage_table(f"{options.model} -> {options.tokenizer or options.donor}", result.coverage,
                                    result.target_size))
    if "omp" in result.record:
        o = result.record["omp"]
        typer.echo(f"donor OMP: k={o['k']} over {o['anchors']:,} shared anchors, {o['fitted']:,} tokens fitted "
                   f"({o['head_fit']})")
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if result.semantic_check:
        c = result.semantic_check
        figures = " ".join(f"{k} {_four(c.get(k))}" for k in ("mean", "std", "min", "max"))
        typer.echo(f"semantic check over {c['texts']} texts: cosine {figures}")  # 4 digits: stable across BLAS
    if "heal" in result.record:
        _print_heal(result.record["heal"], result.heal_seconds)
    typer.echo(f"wrote {options.output}")
    if "heal" in result.record:  # what --track logs: the healing's curve; a transplant alone trains nothing
        track_steps(run.track, options.output, {"command": command_line()}, _heal_points(result.record["heal"]))


def heal_transplant(options: HealOptions, run: RunOptions, write: WriteOptions) -> None:
    """Train only the embedding/head rows a transplant did not copy exactly; all else stays byte-identical.

    Example: paw heal-transplant --model ./tiny-t2 --corpus text.txt --steps 100 --output ./tiny-t2-healed
    """
    from paw.io.tracking import check_kind
    from paw.vocab.heal_pipeline import heal_transplant

    check_kind(run.track)  # before any heavy work
    result = heal_transplant(options, run, command=command_line())
    _print_heal(result.record, result.seconds)
    typer.echo(f"wrote {options.output} (paw_heal.json, heal_curve.png)")
    track_steps(run.track, options.output, {"command": command_line()}, _heal_points(result.record))


def _heal_points(record: dict) -> list[tuple[int, dict]]:
    """The heal curve for ``--track``: each check's mean train loss since the last and held-out bits per
    byte (step 0 has no loss yet), then the rows trained and the bits per byte before and after."""
    points = [(p["step"], {"train/loss": p["train_loss"], "test/bpb": p["bpb"]}) for p in record["curve"]]
    summary = {"heal/rows_trained": record["rows_trained"],
               **{f"heal/bpb_{k}": v for k, v in record["bpb"].items() if v is not None}}
    return [*points, (record["steps"], summary)]


def _print_heal(record: dict, seconds: float | None) -> None:
    b = record["bpb"]
    gap = ""
    if b.get("original") is not None and b["before"] > b["original"]:
        closed = (b["before"] - b["after"]) / (b["before"] - b["original"])
        gap = f"; original {b['original']:.4f}, {closed:.0%} of the gap closed"
    typer.echo(f"healed {record['rows_trained']:,} rows for {record['steps']} steps in {seconds or 0:.1f} s: "
               f"held-out bits per byte {b['before']:.4f} -> {b['after']:.4f}{gap}")


def _four(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _print_analysis(report: dict) -> None:
    from rich.table import Table

    sz, voc, enc = report["sizes"], report["vocabulary"], report["encoding"]
    t = Table(title="tokenizers", show_lines=False)
    t.add_column("")
    t.add_column("source", justify="right")
    t.add_column("target", justify="right")
    for key in ("kind", "regular", "added", "special", "embedding_rows"):
        t.add_row(key, str(sz["source"][key]), str(sz["target"][key]))
    o = enc["overall"]
    for key in ("tokens", "bytes_per_token", "tokens_per_word", "byte_fallback_rate", "unknown_rate"):
        t.add_row(key.replace("_", " "), str(o[f"source_{key}"]), str(o[f"target_{key}"]))
    out = console()
    out.print(t)
    out.print(f"vocabulary: common {voc['common']:,}  source-only {voc['source_only']:,}  target-only "
                  f"{voc['target_only']:,}  jaccard {voc['jaccard']:.4f}  overlap coefficient "
                  f"{voc['overlap_coefficient']:.4f}")
    out.print(f"encoding: {o['texts']:,} texts, {o['bytes']:,} bytes, length ratio target/source "
                  f"{o['length_ratio']}, boundary agreement {o['boundary_agreement']}")
    s = Table(title="by script")
    for col in ("script", "texts", "src bytes/tok", "tgt bytes/tok", "ratio", "boundary agr."):
        s.add_column(col, justify="right" if col != "script" else "left")
    for name, row in enc["by_script"].items():
        s.add_row(name, str(row["texts"]), str(row["source_bytes_per_token"]), str(row["target_bytes_per_token"]),
                  str(row["length_ratio"]), str(row["boundary_agreement"]))
    out.print(s)
    sp = Table(title="special tokens by role")
    for col in ("role", "source", "target"):
        sp.add_column(col)
    for role, pair in report["special_tokens"].items():
        sp.add_row(role, " ".join(pair["source"][:6]) + (" ..." if len(pair["source"]) > 6 else ""),
                   " ".join(pair["target"][:6]) + (" ..." if len(pair["target"]) > 6 else ""))
    out.print(sp)
