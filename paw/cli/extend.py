"""``paw extend-tokenizer``: add tokens to a model's tokenizer and grow its embeddings in one step."""

from __future__ import annotations

import typer

from paw.cli._options import RunOptions, WriteOptions, command_line, multi_value_command, options_command
from paw.vocab.options import ExtendOptions  # light: torch is imported inside the functions


def register(app: typer.Typer) -> None:
    options_command(app, "extend-tokenizer", [(ExtendOptions, ""), (RunOptions, "", ("track",)), (WriteOptions, "")],
                    extend_tokenizer, doc=extend_tokenizer.__doc__, cls=multi_value_command("--tokens"))


def extend_tokenizer(options: ExtendOptions, run: RunOptions, write: WriteOptions) -> None:
    """Add tokens to a model's tokenizer (real BPE vocabulary where possible) and resize its embeddings.

    Byte-level BPE tokenizers get the tokens as vocabulary plus appended merges, so encoding
    produces them; other tokenizers (and --special) get added tokens. embed_tokens and lm_head
    (tied or not) grow; config.vocab_size follows; logits of old-token text stay identical.

    Example: paw extend-tokenizer --model ./tiny/base --tokens-file words.txt --output ./tiny-ext
    """
    from paw.vocab.extend_pipeline import extend_tokenizer, token_list

    options.check()
    tokens, numbers = token_list(options)
    if numbers:
        typer.echo(f"left out {len(numbers)} number string(s) of {options.from_tokenizer} (--keep-numbers adds them)")
    result = extend_tokenizer(options, run, tokens=tokens, command=command_line())
    for line in result.lines():
        typer.echo(line)
