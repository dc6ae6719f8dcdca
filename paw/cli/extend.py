"""``paw extend-tokenizer``: add tokens to a model's tokenizer and grow its embeddings in one step."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import ALLOW_NONFINITE, DEVICE, OVERWRITE, choices, command_line, multi_value_command
from paw.vocab.resize import INITS  # light: torch is imported inside the functions

Init = choices("Init", INITS)


def register(app: typer.Typer) -> None:
    @app.command("extend-tokenizer", cls=multi_value_command("--tokens"))
    def extend_tokenizer(
        model: Path = typer.Option(..., "--model", help="Model folder with tokenizer.json."),
        output: Path = typer.Option(..., "--output", help="Folder to write (model + tokenizer)."),
        tokens: list[str] = typer.Option(None, "--tokens", help="Tokens to add: --tokens A B C (or repeat the option)."),
        tokens_file: Path = typer.Option(None, "--tokens-file",
                                         help="Text file, one token per line (kept verbatim, spaces included)."),
        from_tokenizer: Path = typer.Option(None, "--from-tokenizer",
                                            help="Add every token of this tokenizer that the model lacks "
                                            "(HF tokenizer.json / folder, or a `paw bpe train` .model)."),
        skip_numbers: bool = typer.Option(True, "--skip-numbers/--keep-numbers",
                                          help="With --from-tokenizer: leave out its number strings ('2024', ' 12'). "
                                          "Most pre-tokenizers split digit runs, so they could only be added tokens, "
                                          "which would change how every number in old text tokenizes."),
        special: bool = typer.Option(False, "--special", help="Add them as special (added, unsplittable) tokens."),
        init: Init = typer.Option("interpolate", "--init", help="How new rows start."),
        pad_to_multiple: int = typer.Option(0, "--pad-to-multiple", min=0, max=65536,
                                            help="Pad the row count to a multiple of N (0: no padding; "
                                            "64 or 128 are usual)."),
        max_intermediates: int = typer.Option(-1, "--max-intermediates",
                                              help="A token whose merge chain needs more new intermediate "
                                              "tokens than this is added as an added token instead (-1: no limit)."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
        allow_nonfinite: bool = ALLOW_NONFINITE,  # honoured by the writer (paw.io.finite, opened in _options)
    ):
        """Add tokens to a model's tokenizer (real BPE vocabulary where possible) and resize its embeddings.

        Byte-level BPE tokenizers get the tokens as vocabulary plus appended merges, so encoding
        produces them; other tokenizers (and --special) get added tokens. embed_tokens and lm_head
        (tied or not) grow; config.vocab_size follows; logits of old-token text stay identical.

        Example: paw extend-tokenizer --model ./tiny/base --tokens-file words.txt --output ./tiny-ext
        """
        from paw.vocab.extend_pipeline import extend_tokenizer, split_numbers, tokens_from

        token_list = tokens_from(tokens=tokens, tokens_file=tokens_file, from_tokenizer=from_tokenizer,
                                 skip_numbers=False)
        if from_tokenizer and skip_numbers:
            token_list, numbers = split_numbers(token_list)
            if numbers:
                typer.echo(f"left out {len(numbers)} number string(s) of {from_tokenizer} (--keep-numbers adds them)")
        result = extend_tokenizer(model, output, token_list, special=special, init=init.value,
                                  pad_to_multiple=pad_to_multiple, device=device, overwrite=overwrite,
                                  max_intermediates=None if max_intermediates < 0 else max_intermediates, command=command_line())
        for line in result.lines():
            typer.echo(line)
