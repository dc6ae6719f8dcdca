"""``paw analyze-tokenizers``, ``paw align-vocab``, ``paw transplant-tokenizer``."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE

METHOD_HELP = ("Alignment methods, chained in order (repeat or comma-separate): exact, decompose, "
               "nearest-string, semantic (needs the source model), frequency (needs --corpus).")


RANK_PATTERN = typer.Option(None, "--rank-pattern", help="Pre-tokenizer regex for tiktoken rank files, which "
                            "store none: gpt2, gpt4, llama3, qwen2, o200k or a regex (default: a known file's "
                            "such as cl100k_base.tiktoken, else gpt4 = cl100k).")


def _open(spec: str, rank_pattern: str | None):
    from paw.io.tokenizer import open_tokenizer

    if rank_pattern is None:
        return open_tokenizer(spec)
    from paw.bpe.patterns import resolve_pattern

    return open_tokenizer(spec, pattern=resolve_pattern(rank_pattern))


def _methods(values: list[str] | None) -> list[str]:
    from paw.vocab.align import DEFAULT_METHODS

    out = [m.strip() for v in values or [] for m in v.split(",") if m.strip()]
    return out or list(DEFAULT_METHODS)


def _texts(corpus: list[Path] | None) -> list[str]:
    from paw import zoo
    from paw.io.tokenizer import read_corpus

    return read_corpus(corpus) if corpus else zoo.sample_texts("multi")


def _counts(tok, texts: list[str]):
    from paw.vocab.compare import token_counts

    return token_counts(tok.encode_batch(texts), tok.size)


def _context(source, target, methods, *, embeddings=None, corpus=None, anchors=8):
    from paw.vocab.align import AlignContext, check_methods

    need_counts = "frequency" in methods
    check_methods(methods, have_embeddings=embeddings is not None, have_counts=not need_counts or bool(corpus))
    counts = _counts(source, _texts(corpus)) if need_counts else None
    return AlignContext(source, target, source_embeddings=embeddings, source_counts=counts, k=anchors)


def _input_embeddings(model: str, device: str):
    """The source model's input embedding matrix (Ns, d), float32 on ``device``."""
    from paw.device import resolve_device
    from paw.io.checkpoint import open_checkpoint
    from paw.vocab.transplant import embedding_names, vocab_rows

    ckpt = open_checkpoint(model)
    names = embedding_names({n: ckpt.shape(n) for n in ckpt}, vocab_rows(ckpt.config or {}))
    pick = [n for n in names if "lm_head" not in n and not n.endswith("output.weight")] or names
    if not pick:
        from paw.errors import PawError

        raise PawError("no embedding matrix found (embed_tokens / wte with vocab_size rows)", path=model)
    return ckpt[pick[0]].float().to(resolve_device(device))


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
    @app.command("analyze-tokenizers")
    def analyze_tokenizers(
        source: str = typer.Option(..., "--source", "-s", help="Source tokenizer: HF folder/ID, tokenizer.json, "
                                   "tiktoken rank file or PAW BPE .model."),
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
        from paw.cli._options import command_line
        from paw.io.atomic import check_output
        from paw.io.manifest import describe_input
        from paw.io.vocab_map import write_analysis
        from paw.vocab.analyze import analyze

        check_output(outdir, overwrite=overwrite)
        src, tgt = _open(source, rank_pattern), _open(target, rank_pattern)
        texts = _texts(corpus)
        result = analyze(src, tgt, texts, plots=plots)
        from paw import __version__

        report = {"paw_version": __version__, "command": command_line(),
                  "inputs": {"source": describe_input(source), "target": describe_input(target),
                             "corpus": [describe_input(c) for c in corpus or []] or "embedded sample 'multi'"},
                  **result.report}
        write_analysis(outdir, report=report, rows=result.rows, source_only=result.source_only,
                       target_only=result.target_only, figures=result.figures, overwrite=overwrite)
        _print_analysis(report)
        typer.echo(f"wrote {outdir}/ (report.json, encoding.csv, source_only.txt, target_only.txt"
                   f"{', length_ratio.png, bytes_per_token.png' if result.figures else ''})")

    @app.command("align-vocab")
    def align_vocab(
        source: str = typer.Option(..., "--source", "-s", help="Source tokenizer (where embeddings come from)."),
        target: str = typer.Option(..., "--target", "-t", help="Target tokenizer (rows to build)."),
        output: Path = typer.Option(..., "--output", "-o", help="Mapping JSON to write (paw-vocab-map v1)."),
        method: list[str] = typer.Option(None, "--method", "-m", help=METHOD_HELP),
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
        from rich.console import Console

        from paw.io.atomic import check_output
        from paw.io.vocab_map import write_vocab_map
        from paw.vocab.align import align

        check_output(output, overwrite=overwrite)
        methods = _methods(method)
        src, tgt = _open(source, rank_pattern), _open(target, rank_pattern)
        emb = _input_embeddings(source_model, device) if source_model else None
        mapping = align(_context(src, tgt, methods, embeddings=emb, corpus=corpus, anchors=anchors), methods)
        write_vocab_map(output, mapping)
        Console().print(_coverage_table(f"{source} -> {target}", mapping.coverage(), mapping.target_size))
        typer.echo(f"wrote {output}")

    @app.command("transplant-tokenizer")
    def transplant_tokenizer(
        model: str = typer.Option(..., "--model", "-m", help="Model folder (with its own tokenizer)."),
        tokenizer: str = typer.Option(..., "--tokenizer", "-t", help="New tokenizer T (HF folder, tokenizer.json, "
                                      "tiktoken or PAW BPE file)."),
        output: Path = typer.Option(..., "--output", "-o", help="Output model folder."),
        method: list[str] = typer.Option(None, "--method", help=METHOD_HELP),
        vocab_map: Path = typer.Option(None, "--vocab-map", help="Use this paw-vocab-map file instead of aligning."),
        init: str = typer.Option("mean", "--init", help="Rows no method maps: mean (of the source rows) or zero."),
        head: str = typer.Option("mapping", "--head", help="Untied lm_head rows: 'mapping' (same weights as the "
                                 "input rows) or 'first' (first piece of each decomposition)."),
        corpus: list[Path] = typer.Option(None, "--corpus", help="Texts for 'frequency' and the semantic check "
                                          "(default: the embedded multilingual sample)."),
        check: bool = typer.Option(True, "--check/--no-check", help="Run the hidden-state semantic check."),
        check_texts: int = typer.Option(64, "--check-texts", min=1, help="Texts used by the semantic check."),
        anchors: int = typer.Option(8, "--anchors", min=1, help="Shared tokens per target token for 'semantic'."),
        rank_pattern: str = RANK_PATTERN,
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
    ):
        """Give a model a new tokenizer: remapped embed_tokens/lm_head rows, updated config, T's tokenizer files.

        Example: paw transplant-tokenizer --model ./tiny/base --tokenizer ./other-tok --output ./tiny-t2
        """
        summary = _run_transplant(model=model, tokenizer=tokenizer, output=output, methods=_methods(method),
                                 vocab_map=vocab_map, init=init, head=head, corpus=corpus, check=check,
                                 check_texts=check_texts, anchors=anchors, rank_pattern=rank_pattern, device=device, overwrite=overwrite)
        from rich.console import Console

        Console().print(_coverage_table(f"{model} -> {tokenizer}", summary["coverage"], summary["target_size"]))
        if summary.get("semantic_check"):
            c = summary["semantic_check"]
            typer.echo(f"semantic check over {c['texts']} texts: cosine mean {c.get('mean')} std {c.get('std')} "
                       f"min {c.get('min')} max {c.get('max')}")
        typer.echo(f"wrote {output}")


def _print_analysis(report: dict) -> None:
    from rich.console import Console
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
    console = Console()
    console.print(t)
    console.print(f"vocabulary: common {voc['common']:,}  source-only {voc['source_only']:,}  target-only "
                  f"{voc['target_only']:,}  jaccard {voc['jaccard']:.4f}  overlap coefficient "
                  f"{voc['overlap_coefficient']:.4f}")
    console.print(f"encoding: {o['texts']:,} texts, {o['bytes']:,} bytes, length ratio target/source "
                  f"{o['length_ratio']}, boundary agreement {o['boundary_agreement']}")
    s = Table(title="by script")
    for col in ("script", "texts", "src bytes/tok", "tgt bytes/tok", "ratio", "boundary agr."):
        s.add_column(col, justify="right" if col != "script" else "left")
    for name, row in enc["by_script"].items():
        s.add_row(name, str(row["texts"]), str(row["source_bytes_per_token"]), str(row["target_bytes_per_token"]),
                  str(row["length_ratio"]), str(row["boundary_agreement"]))
    console.print(s)
    sp = Table(title="special tokens by role")
    for col in ("role", "source", "target"):
        sp.add_column(col)
    for role, pair in report["special_tokens"].items():
        sp.add_row(role, " ".join(pair["source"][:6]) + (" ..." if len(pair["source"]) > 6 else ""),
                   " ".join(pair["target"][:6]) + (" ..." if len(pair["target"]) > 6 else ""))
    console.print(sp)


def _run_transplant(*, model, tokenizer, output, methods, vocab_map, init, head, corpus, check, check_texts, anchors,
                    rank_pattern, device, overwrite) -> dict:
    """Read model and tokenizers, align (or read the mapping), write the new model, run the check."""
    import json
    import tempfile

    from paw import __version__
    from paw.cli._options import command_line
    from paw.device import resolve_device
    from paw.errors import PawError
    from paw.io.atomic import check_output
    from paw.io.checkpoint import open_checkpoint
    from paw.io.manifest import describe_input
    from paw.io.vocab_map import mapping_to_json, read_vocab_map
    from paw.io.writer import write_checkpoint
    from paw.vocab import transplant as T
    from paw.vocab.align import align
    from paw.vocab.embed import FALLBACKS

    check_output(output, overwrite=overwrite)
    if init not in FALLBACKS:
        raise PawError(f"unknown --init {init!r}; choose from {', '.join(FALLBACKS)}")
    if head not in T.HEAD_POLICIES:
        raise PawError(f"unknown --head {head!r}; choose from {', '.join(T.HEAD_POLICIES)}")
    dev = resolve_device(device)
    ckpt = open_checkpoint(model)
    if not ckpt.config:
        raise PawError("model folder has no config.json", path=model)
    rows = T.vocab_rows(ckpt.config)
    names = T.embedding_names({n: ckpt.shape(n) for n in ckpt}, rows)
    if not names:
        raise PawError(f"no embed_tokens / lm_head tensor with {rows} rows (config vocab_size)", path=model)
    src, tgt = _open(model, rank_pattern), _open(tokenizer, rank_pattern)
    if src.size > rows:
        raise PawError(f"the model's tokenizer has {src.size} ids but its embedding only {rows} rows", path=model)
    if vocab_map is not None:
        mapping = read_vocab_map(vocab_map)
        if mapping.source_size > rows or mapping.target_size != tgt.size:
            raise PawError(f"mapping is {mapping.source_size} -> {mapping.target_size} ids but the model has "
                           f"{rows} rows and the tokenizer {tgt.size} ids", path=vocab_map)
        methods = ["from " + str(vocab_map)]
    else:
        emb = ckpt[[n for n in names if "lm_head" not in n][0] if len(names) > 1 else names[0]].float().to(dev) \
            if "semantic" in methods else None
        mapping = align(_context(src, tgt, methods, embeddings=emb, corpus=corpus, anchors=anchors), methods)
    config = T.new_config(ckpt.config, tgt, tgt.size)
    tied = bool(ckpt.tied_embeddings or config.get("tie_word_embeddings"))
    record = {"paw_version": __version__, "command": command_line(),
              "inputs": {"model": describe_input(model), "tokenizer": describe_input(tokenizer)},
              "methods": methods, "init": init, "head": head, "tied": tied, "embedding_tensors": names, "rows": {"before": rows, "after": tgt.size},
              "coverage": mapping.coverage(), "target_size": mapping.target_size}
    extra = {"paw_vocab_map.json": mapping_to_json(mapping)}
    with tempfile.TemporaryDirectory() as empty:
        tok_from = tgt.folder if tgt.kind not in ("tiktoken", "paw-bpe") else Path(empty)
        if tgt.kind in ("tiktoken", "paw-bpe"):
            extra["tokenizer.json"] = json.loads(tgt.tokenizer_json())
            extra["tokenizer_config.json"] = _minimal_tokenizer_config(tgt)
        gen = ckpt.path / "generation_config.json" if ckpt.path.is_dir() else None
        if gen is not None and gen.is_file():
            extra["generation_config.json"] = _generation_config(gen, config)
        tensors = T.transplanted_tensors(ckpt, names, mapping, rows=tgt.size, fallback=init, head=head, tied=tied,
                                         device=dev)
        write_checkpoint(output, tensors, config=config, tokenizer_from=tok_from, overwrite=overwrite,
                         extra_files={**extra, "paw_transplant.json": record})
    if check:
        record["semantic_check"] = _semantic_check(model, output, src, tgt, _texts(corpus)[:check_texts], dev)
        from paw.io.manifest import write_json

        write_json(Path(output) / "paw_transplant.json", record)
    return record


def _minimal_tokenizer_config(tgt) -> dict:
    from paw.vocab.roles import role_id

    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    for role in ("bos", "eos", "pad", "unk"):
        i = role_id(tgt, role)
        if i is not None:
            cfg[f"{role}_token"] = tgt.specials[i].content
    return cfg


def _generation_config(path: Path, config: dict) -> dict:
    import json

    gen = json.loads(path.read_text(encoding="utf-8"))
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in gen or config.get(key) is not None:
            gen[key] = config.get(key)
    return gen


def _semantic_check(model, output, src, tgt, texts, dev) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from paw.vocab.transplant import semantic_check

    original = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).to(dev).eval()
    new = AutoModelForCausalLM.from_pretrained(output, dtype=torch.float32).to(dev).eval()
    limit = getattr(original.config, "max_position_embeddings", None) or 2048
    texts = [t[:2000] for t in texts]  # same text span on both sides; ids cut only past the position limit
    cut = lambda rows: [r[:limit] for r in rows]  # noqa: E731
    return semantic_check(original, new, cut(src.encode_batch(texts)), cut(tgt.encode_batch(texts)), device=dev)
