"""``paw bpe``: train, use and compare byte-level BPE tokenizers (exact against tiktoken); each command made from
its options class in :mod:`paw.bpe.options`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from paw.bpe.options import CompareOptions, DecodeOptions, EncodeOptions, TrainOptions
from paw.cli._options import RunOptions, argument, command_line, options_command

_OVERWRITE_ONLY = ("device", "track")    # knobs of RunOptions that mean nothing to a tokenizer trainer


def register(app: typer.Typer) -> None:
    bpe_app = typer.Typer(help="Byte-level BPE: train, encode, decode, compare (exact against tiktoken).",
                          no_args_is_help=True)
    app.add_typer(bpe_app, name="bpe")
    options_command(bpe_app, "train", [(TrainOptions, ""), (RunOptions, "", _OVERWRITE_ONLY)], train,
                    doc=train.__doc__, arguments=(argument("files", list[Path], ..., "UTF-8 text files to learn from."),))
    options_command(bpe_app, "encode", [(EncodeOptions, "")], encode, doc=encode.__doc__)
    options_command(bpe_app, "decode", [(DecodeOptions, "")], decode, doc=decode.__doc__,
                    arguments=(argument("more_ids", list[str] | None, None, "More ids (so `--ids 1 2 3` works)."),))
    options_command(bpe_app, "compare", [(CompareOptions, "")], compare, doc=compare.__doc__,
                    arguments=(argument("files", list[Path], ..., "UTF-8 text files to tokenize."),))


def train(options: TrainOptions, run: RunOptions, *, files: list[Path]) -> None:
    """Learn a byte-level BPE from text files (merges equal Hugging Face BpeTrainer's).

    Example: paw bpe train corpus.txt --vocab-size 8000 --output my --pattern llama3 --export-hf my-hf
    """
    from paw.bpe.pipeline import train_files
    from paw.progress import track

    options = dataclasses.replace(options, files=tuple(files))
    bpe = train_files(options, run, track=lambda steps, n: track(steps, "BPE", total=n, unit="merges"),
                      command=command_line())
    n_vocab = len(bpe.mergeable_ranks) + len(bpe.special_tokens)
    output, export_hf, vocab_size = options.output, options.export_hf, options.vocab_size
    typer.echo(f"{len(bpe.merges)} merges, vocabulary {n_vocab} -> {output}.model, {output}.vocab"
               + (f", {export_hf}/tokenizer.json" if export_hf else ""))
    if n_vocab < vocab_size:
        typer.echo(f"note: the corpus ran out of pairs{' above --min-frequency' if options.min_frequency else ''} "
                   f"before {vocab_size} ids", err=True)


def encode(options: EncodeOptions) -> None:
    """Print the token ids of a text, space separated (special tokens refused unless allowed).

    Example: paw bpe encode --tokenizer my.model --text "Hello world"
    """
    from paw.bpe.pipeline import encode_text

    typer.echo(" ".join(map(str, encode_text(options))))


def decode(options: DecodeOptions, *, more_ids: list[str] | None) -> None:
    """Print the text of a sequence of token ids.

    Example: paw bpe decode --tokenizer my.model --ids 9906 1917
    """
    from paw.bpe.pipeline import decode_ids

    options.check()
    typer.echo(decode_ids(dataclasses.replace(options, ids=" ".join([options.ids, *(more_ids or [])]))))


def compare(options: CompareOptions, *, files: list[Path]) -> None:
    """Tokens, bytes per token and tokens per word, per tokenizer and per file, with a bar chart.

    `--tokenizers T1 T2 ... FILES...` works too: arguments that name a tokenizer (`*.model`,
    `*.tiktoken`, `tokenizer.json`, a folder with one) join the tokenizers, the rest are texts.

    Example: paw bpe compare --tokenizers my.model llama3/tokenizer.json english.txt chinese.txt
    """
    from paw.bpe.pipeline import compare_files

    table = compare_files(dataclasses.replace(options, files=tuple(files)))
    typer.echo(_format_table(table))
    typer.echo(f"plot: {options.plot}")


def _format_table(table) -> str:
    rows = [("tokenizer", "file", "tokens", "bytes/token", "tokens/word")]
    rows += [(t, f, f"{c.tokens:,}", f"{c.bytes_per_token:.3f}", f"{c.tokens_per_word:.3f}")
             for (t, f), c in table.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)
