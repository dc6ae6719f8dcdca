"""``paw bpe``: train, use and compare byte-level BPE tokenizers (exact against tiktoken)."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import OVERWRITE, command_line

TOKENIZER_HELP = "A PAW .model, a tiktoken rank file (base64 token + rank per line) or a byte-level BPE tokenizer.json."
PATTERN_HELP = "Pre-tokenization: gpt2, gpt4 (cl100k), llama3, qwen2, o200k, none, or a regex."


def _open(spec: Path, pattern: str | None = None):
    from paw.bpe.pipeline import open_encoder

    return open_encoder(spec, pattern)


def _read_one(path: Path) -> str:
    from paw.io.bpe_files import read_text_files

    return read_text_files([path])[0]


def register(app: typer.Typer) -> None:
    bpe_app = typer.Typer(help="Byte-level BPE: train, encode, decode, compare (exact against tiktoken).",
                          no_args_is_help=True)
    app.add_typer(bpe_app, name="bpe")

    @bpe_app.command("train")
    def train(
        files: list[Path] = typer.Argument(..., help="UTF-8 text files to learn from."),
        vocab_size: int = typer.Option(..., "--vocab-size", help="Ids in all: 256 bytes + merges + special tokens."),
        output: Path = typer.Option(..., "--output", help="Prefix: writes PREFIX.model and PREFIX.vocab."),
        pattern: str = typer.Option("gpt4", "--pattern", help=PATTERN_HELP),
        special_tokens: list[str] = typer.Option([], "--special-tokens", help="A special token (repeat the option)."),
        min_frequency: int = typer.Option(0, "--min-frequency", help="Stop when the best pair is rarer than this."),
        export_hf: Path | None = typer.Option(None, "--export-hf", help="Also write DIR/tokenizer.json and "
                                              "DIR/tokenizer_config.json: a folder AutoTokenizer opens."),
        processes: int = typer.Option(0, "--processes", help="Worker processes for counting (0: every core)."),
        overwrite: bool = OVERWRITE,
    ):
        """Learn a byte-level BPE from text files (merges equal Hugging Face BpeTrainer's).

        Example: paw bpe train corpus.txt --vocab-size 8000 --output my --pattern llama3 --export-hf my-hf
        """
        from paw.bpe.pipeline import train_files
        from paw.progress import track

        bpe = train_files(files, vocab_size, output, pattern=pattern, special_tokens=special_tokens,
                          min_frequency=min_frequency, export_hf=export_hf, processes=processes, overwrite=overwrite,
                          track=lambda steps, n: track(steps, "BPE", total=n, unit="merges"), command=command_line())
        n_vocab = len(bpe.mergeable_ranks) + len(bpe.special_tokens)
        typer.echo(f"{len(bpe.merges)} merges, vocabulary {n_vocab} -> {output}.model, {output}.vocab"
                   + (f", {export_hf}/tokenizer.json" if export_hf else ""))
        if n_vocab < vocab_size:
            typer.echo(f"note: the corpus ran out of pairs{' above --min-frequency' if min_frequency else ''} "
                       f"before {vocab_size} ids", err=True)

    @bpe_app.command("encode")
    def encode(
        tokenizer: Path = typer.Option(..., "--tokenizer", help=TOKENIZER_HELP),
        text: str | None = typer.Option(None, "--text", help="Text to encode."),
        input_file: Path | None = typer.Option(None, "--input", help="UTF-8 file to encode."),
        allowed_special: list[str] = typer.Option(["none"], "--allowed-special",
                                                  help="all, none, or a special token (repeat the option)."),
        pattern: str | None = typer.Option(None, "--pattern", help="Override the pattern (needed for rank files)."),
    ):
        """Print the token ids of a text, space separated (special tokens refused unless allowed).

        Example: paw bpe encode --tokenizer my.model --text "Hello world"
        """
        from paw.errors import PawError

        if (text is None) == (input_file is None):
            raise PawError("give exactly one of --text and --input")
        content = text if text is not None else _read_one(input_file)
        allowed = "all" if allowed_special == ["all"] else [] if allowed_special == ["none"] else allowed_special
        encoder = _open(tokenizer, pattern)
        unknown = [t for t in ([] if allowed == "all" else allowed) if t not in encoder.special_tokens]
        if unknown:
            raise PawError(f"--allowed-special {unknown[0]!r} is not a special token of this tokenizer "
                           f"(it has {len(encoder.special_tokens)})", path=tokenizer)
        typer.echo(" ".join(map(str, encoder.encode_large(content, allowed_special=allowed))))

    @bpe_app.command("decode")
    def decode(
        tokenizer: Path = typer.Option(..., "--tokenizer", help=TOKENIZER_HELP),
        ids: str = typer.Option(..., "--ids", help="Token ids, separated by spaces or commas."),
        more_ids: list[str] = typer.Argument(None, help="More ids (so `--ids 1 2 3` works)."),
    ):
        """Print the text of a sequence of token ids.

        Example: paw bpe decode --tokenizer my.model --ids 9906 1917
        """
        from paw.errors import PawError

        words = " ".join([ids, *(more_ids or [])]).replace(",", " ").split()
        try:
            values = [int(w) for w in words]
        except ValueError:
            raise PawError(f"--ids must be integers, got {' '.join(words)!r}") from None
        typer.echo(_open(tokenizer).decode(values))

    @bpe_app.command("compare")
    def compare(
        files: list[Path] = typer.Argument(..., help="UTF-8 text files to tokenize."),
        tokenizers: list[Path] = typer.Option(..., "--tokenizers", help="A tokenizer file (repeat the option)."),
        plot: Path = typer.Option(Path("bpe_compare.png"), "--plot", help="Bar chart of bytes per token."),
        pattern: str | None = typer.Option(None, "--pattern", help="Pattern for rank files that lack one."),
    ):
        """Tokens, bytes per token and tokens per word, per tokenizer and per file, with a bar chart.

        `--tokenizers T1 T2 ... FILES...` works too: arguments that name a tokenizer (`*.model`,
        `*.tiktoken`, `tokenizer.json`, a folder with one) join the tokenizers, the rest are texts.

        Example: paw bpe compare --tokenizers my.model llama3/tokenizer.json english.txt chinese.txt
        """
        from paw.bpe.pipeline import compare_files

        table = compare_files(tokenizers, files, plot=plot, pattern=pattern)
        typer.echo(_format_table(table))
        typer.echo(f"plot: {plot}")


def _format_table(table) -> str:
    rows = [("tokenizer", "file", "tokens", "bytes/token", "tokens/word")]
    rows += [(t, f, f"{c.tokens:,}", f"{c.bytes_per_token:.3f}", f"{c.tokens_per_word:.3f}")
             for (t, f), c in table.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)
