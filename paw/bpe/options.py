"""What ``paw bpe train|encode|decode|compare`` are asked to do: one frozen dataclass per command, the source of
its flags and of its ``--config`` keys (:mod:`paw.knobs`); the pipelines of :mod:`paw.bpe.pipeline` take them.

The text files of ``train`` and ``compare`` are positional arguments on the command line (``paw bpe train
corpus.txt ...``), so they are plain fields here, not knobs: the CLI fills them in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.knobs import knob, require

TOKENIZER_HELP = "A PAW .model, a tiktoken rank file (base64 token + rank per line) or a byte-level BPE tokenizer.json."
PATTERN_HELP = "Pre-tokenization: gpt2, gpt4 (cl100k), llama3, qwen2, o200k, none, or a regex."


def _items(values) -> tuple[str, ...] | None:
    return tuple(map(str, values)) or None


def _tokenizer():
    return knob(None, TOKENIZER_HELP, cli=Path)


@dataclass(frozen=True)
class TrainOptions:
    """A byte-level BPE learnt from text files (``paw bpe train``)."""

    files: tuple[str | Path, ...] = ()    # UTF-8 text files to learn from (the command's arguments)
    vocab_size: int | None = knob(None, "Ids in all: 256 bytes + merges + special tokens.")
    output: str | Path | None = knob(None, "Prefix: writes PREFIX.model and PREFIX.vocab.", cli=Path)
    pattern: str = knob("gpt4", PATTERN_HELP)
    special_tokens: tuple[str, ...] | None = knob(None, "A special token (repeat the option).", cli=list[str],
                                                  parse=_items, verbatim=True)
    min_frequency: int = knob(0, "Stop when the best pair is rarer than this.")
    export_hf: str | Path | None = knob(None, "Also write DIR/tokenizer.json and DIR/tokenizer_config.json: a "
                                              "folder AutoTokenizer opens.", cli=Path)
    processes: int = knob(0, "Worker processes for counting (0: every core).")

    def check(self) -> None:
        require(self, "vocab_size", "output")


@dataclass(frozen=True)
class EncodeOptions:
    """The token ids of one text (``paw bpe encode``)."""

    tokenizer: str | Path | None = _tokenizer()
    text: str | None = knob(None, "Text to encode.")
    input_file: str | Path | None = knob(None, "UTF-8 file to encode.", flag="--input", cli=Path)
    allowed_special: tuple[str, ...] | None = knob(None, "all, none (the default), or a special token (repeat the "
                                                         "option).", cli=list[str], parse=_items, verbatim=True)
    pattern: str | None = knob(None, "Override the pattern (needed for rank files).")

    def check(self) -> None:
        require(self, "tokenizer")


@dataclass(frozen=True)
class DecodeOptions:
    """The text of a sequence of token ids (``paw bpe decode``)."""

    tokenizer: str | Path | None = _tokenizer()
    ids: str | None = knob(None, "Token ids, separated by spaces or commas.")

    def check(self) -> None:
        require(self, "tokenizer", "ids")


@dataclass(frozen=True)
class CompareOptions:
    """Several tokenizers on the same texts (``paw bpe compare``)."""

    files: tuple[str | Path, ...] = ()    # UTF-8 text files to tokenize (the command's arguments)
    tokenizers: tuple[str, ...] | None = knob(None, "A tokenizer file (repeat the option).", cli=list[Path],
                                              parse=_items)
    plot: str | Path | None = knob(Path("bpe_compare.png"), "Bar chart of bytes per token.", cli=Path)
    pattern: str | None = knob(None, "Pattern for rank files that lack one.")

    def check(self) -> None:
        require(self, "tokenizers")
