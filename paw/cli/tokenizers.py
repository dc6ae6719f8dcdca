"""``paw analyze-tokenizers``, ``paw align-vocab``, ``paw transplant-tokenizer``."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import (
    ALLOW_NONFINITE,
    DEVICE,
    OVERWRITE,
    choices,
    command_line,
    console,
    multi_value_command,
)
from paw.vocab.align import methods_help  # light: the alignment registry, no torch or numpy
from paw.vocab.embed import FALLBACKS  # light: torch is imported inside the functions
from paw.vocab.transplant import HEAD_POLICIES

Init = choices("Init", FALLBACKS)
Head = choices("Head", HEAD_POLICIES)

RANK_PATTERN = typer.Option(None, "--rank-pattern", help="Pre-tokenizer regex for tiktoken rank files, which "
                            "store none: gpt2, gpt4, llama3, qwen2, o200k or a regex (default: a known file's "
                            "such as cl100k_base.tiktoken, else gpt4 = cl100k).")


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
    @app.command("analyze-tokenizers", cls=multi_value_command("--corpus"))
    def analyze_tokenizers(
        source: str = typer.Option(..., "--source", "-s", help="Source tokenizer: HF folder/ID, tokenizer.json, "
                                   "tiktoken rank file, PAW BPE .model or a model .gguf."),
        target: str = typer.Option(..., "--target", "-t", help="Target tokenizer (same kinds as --source)."),
        outdir: Path = typer.Option(..., "--outdir", "-o", help="Output folder (report.json, encoding.csv, ...)."),
        corpus: list[Path] = typer.Option(None, "--corpus", help="Text or .jsonl files (one text per line); "
                                          "default: the embedded multilingual sample."),
        plots: bool = typer.Option(True, "--plots/--no-plots", help="Write the PNG figures."),
        rank_pattern: str = RANK_PATTERN,
        overwrite: bool = OVERWRITE,
    ):
        """Compare two tokenizers: vocabulary overlap on canonical bytes, special tokens, encoding statistics.

        Example: paw analyze-tokenizers --source Qwen/Qwen2.5-1.5B --target ./llama3 --corpus wiki.txt --outdir cmp
        """
        from paw.vocab.pipelines import analyze_tokenizers

        result = analyze_tokenizers(source, target, outdir, corpus=corpus, plots=plots, rank_pattern=rank_pattern,
                                    overwrite=overwrite)
        _print_analysis(result.report)
        typer.echo(f"wrote {outdir}/ (report.json, encoding.csv, source_only.txt, target_only.txt"
                   f"{', length_ratio.png, bytes_per_token.png' if result.figures else ''})")

    @app.command("align-vocab", cls=multi_value_command("--corpus"))
    def align_vocab(
        source: str = typer.Option(..., "--source", "-s", help="Source tokenizer (where embeddings come from)."),
        target: str = typer.Option(..., "--target", "-t", help="Target tokenizer (rows to build)."),
        output: Path = typer.Option(..., "--output", "-o", help="Mapping JSON to write (paw-vocab-map v1)."),
        method: list[str] = typer.Option(None, "--method", help=methods_help()),
        source_model: str = typer.Option(None, "--source-model", help="Model whose embeddings 'semantic' uses."),
        corpus: list[Path] = typer.Option(None, "--corpus", help="Text files for 'frequency' token counts."),
        anchors: int = typer.Option(8, "--anchors", min=1, help="Shared tokens per target token for 'semantic'."),
        rank_pattern: str = RANK_PATTERN,
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
    ):
        """Map every target token to source tokens (and weights) and save the mapping as JSON.

        Example: paw align-vocab --source ./qwen --target ./llama3 --output qwen2llama.json --method exact,decompose
        """

        from paw.vocab.pipelines import align_vocab, parse_methods

        result = align_vocab(source, target, output, methods=parse_methods(method), source_model=source_model,
                             corpus=corpus, anchors=anchors, rank_pattern=rank_pattern, device=device,
                             overwrite=overwrite)
        console().print(_coverage_table(f"{source} -> {target}", result.coverage, result.mapping.target_size))
        typer.echo(f"wrote {output}")

    @app.command("transplant-tokenizer", cls=multi_value_command("--corpus", "--heal-corpus"))
    def transplant_tokenizer(
        model: str = typer.Option(..., "--model", help="Model folder (with its own tokenizer)."),
        tokenizer: str = typer.Option(None, "--tokenizer", help="New tokenizer T (HF folder, tokenizer.json, "
                                      "tiktoken or PAW BPE file); default with --donor: the donor's."),
        output: Path = typer.Option(..., "--output", "-o", help="Output model folder."),
        method: list[str] = typer.Option(None, "--method", help=methods_help()),
        vocab_map: Path = typer.Option(None, "--vocab-map", help="Use this paw-vocab-map file instead of aligning."),
        init: Init = typer.Option("mean", "--init", help="Rows no method maps: mean (of the source rows) or zero."),
        head: Head = typer.Option("mapping", "--head", help="Untied output-head rows: 'mapping' (same weights as the "
                                 "input rows) or 'first' (first piece of each decomposition)."),
        corpus: list[Path] = typer.Option(None, "--corpus", help="Texts for 'frequency' and the semantic check "
                                          "(default: the embedded multilingual sample)."),
        check: bool = typer.Option(True, "--check/--no-check", help="Run the hidden-state semantic check."),
        check_texts: int = typer.Option(64, "--check-texts", min=1, help="Texts used by the semantic check."),
        anchors: int = typer.Option(8, "--anchors", min=1, help="Shared tokens per target token for 'semantic'."),
        donor: str = typer.Option(None, "--donor", help="The model whose tokenizer T is: fit each new token as a "
                                  "sparse combination of shared tokens on the donor's rows (OMP, Goddard & Neto "
                                  "2025, arXiv 2506.06607) and apply it to the model's rows; replaces --method."),
        omp_k: int = typer.Option(64, "--omp-k", min=1, help="Shared tokens (anchors) per new token for --donor."),
        omp_batch: int = typer.Option(512, "--omp-batch", min=1, help="Tokens fitted at once with --donor "
                                      "(memory ~ batch x anchors floats)."),
        resume: bool = typer.Option(False, "--resume", help="[--donor] Take the OMP fits a stopped run kept in "
                                    "OUT-work/ (each batch is kept as it is done) and fit only the rest."),
        heal_steps: int = typer.Option(0, "--heal-steps", min=0, help="Then train the non-exact rows this many "
                                       "steps on --heal-corpus (see paw heal-transplant)."),
        heal_corpus: list[Path] = typer.Option(None, "--heal-corpus", help="Text or .jsonl files for --heal-steps."),
        rank_pattern: str = RANK_PATTERN,
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
        allow_nonfinite: bool = ALLOW_NONFINITE,  # honoured by the writer (paw.io.finite, opened in _options)
    ):
        """Give a model a new tokenizer: remapped embed_tokens/lm_head rows, updated config, T's tokenizer files.

        Example: paw transplant-tokenizer --model ./tiny/base --tokenizer ./other-tok --output ./tiny-t2

        Example: paw transplant-tokenizer --model ./smollm2 --donor ./gemma-3 --output ./smollm2-gemma-tok
        """

        from paw.vocab.heal_pipeline import HealOptions, check_heal_request
        from paw.vocab.pipelines import parse_methods, transplant_tokenizer

        check_heal_request(heal_steps, heal_corpus)
        heal = HealOptions(steps=heal_steps, corpus=heal_corpus, device=device) if heal_steps else None
        result = transplant_tokenizer(model, tokenizer, output, methods=parse_methods(method), vocab_map=vocab_map,
                                      init=init.value, head=head.value, corpus=corpus, check=check, check_texts=check_texts,
                                      anchors=anchors, donor=donor, omp_k=omp_k, omp_batch=omp_batch, resume=resume, heal=heal,
                                      rank_pattern=rank_pattern, device=device, overwrite=overwrite,
                                      command=command_line())
        console().print(_coverage_table(f"{model} -> {tokenizer or donor}", result.coverage, result.target_size))
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
        typer.echo(f"wrote {output}")

    @app.command("heal-transplant", cls=multi_value_command("--corpus", "--eval-corpus"))
    def heal_transplant(
        model: Path = typer.Option(..., "--model", help="A folder written by paw transplant-tokenizer."),
        corpus: list[Path] = typer.Option(..., "--corpus", help="Training text: text or .jsonl files."),
        output: Path = typer.Option(..., "--output", "-o", help="Output model folder."),
        steps: int = typer.Option(100, "--steps", min=1, help="Optimizer steps."),
        eval_corpus: list[Path] = typer.Option(None, "--eval-corpus", help="Held-out text for the bits-per-byte "
                                               "check (default: every 10th text of --corpus, not trained on)."),
        original: Path = typer.Option(None, "--original", help="The model before the transplant: its bits per byte "
                                      "on its own tokenizer is drawn in the curve as the level to reach."),
        lr: float = typer.Option(1e-3, "--lr", help="Adam learning rate of the trained rows."),
        batch: int = typer.Option(8, "--batch", min=1, help="Windows per step."),
        seq_len: int = typer.Option(128, "--seq-len", min=2, help="Tokens per window."),
        eval_every: int = typer.Option(0, "--eval-every", min=0, help="Steps between checks (0: steps / 5)."),
        eval_texts: int = typer.Option(200, "--eval-texts", min=1, help="Held-out texts scored at each check."),
        seed: int = typer.Option(0, "--seed", help="Window sampling seed."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
        allow_nonfinite: bool = ALLOW_NONFINITE,  # honoured by the writer (paw.io.finite, opened in _options)
    ):
        """Train only the embedding/head rows a transplant did not copy exactly; all else stays byte-identical.

        Example: paw heal-transplant --model ./tiny-t2 --corpus text.txt --steps 100 --output ./tiny-t2-healed
        """
        from paw.vocab.heal_pipeline import HealOptions, heal_transplant

        options = HealOptions(steps=steps, corpus=corpus, eval_corpus=eval_corpus or [], lr=lr, batch=batch,
                              seq_len=seq_len, eval_every=eval_every, eval_texts=eval_texts, seed=seed, device=device,
                              original=original)
        result = heal_transplant(model, output, options, overwrite=overwrite, command=command_line())
        _print_heal(result.record, result.seconds)
        typer.echo(f"wrote {output} (paw_heal.json, heal_curve.png)")


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
