"""What ``paw adapter check`` and ``paw adapter resize-base`` are asked to do: the source of their flags and of
their ``--config`` keys (:mod:`paw.knobs`). Light: ``paw --help`` imports it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.knobs import knob, require

_ADAPTER = "PEFT adapter folder."


@dataclass(frozen=True)
class CheckOptions:
    """Will ``adapter`` load on ``base``? (read from file headers only)"""

    adapter: str | Path | None = knob(None, _ADAPTER, cli=Path)
    base: str | Path | None = knob(None, "Base model folder (or Hub id org/name[@rev]).", cli=Path)

    def check(self) -> None:
        require(self, "adapter", "base")


@dataclass(frozen=True)
class ResizeOptions:
    """``base`` grown to the vocabulary ``adapter`` was trained at, written to ``output``."""

    adapter: str | Path | None = knob(None, _ADAPTER, cli=Path)
    base: str | Path | None = knob(None, "Base model folder at the old vocabulary size.", cli=Path)
    output: str | Path | None = knob(None, "Folder to write the resized base to.", cli=Path)
    tokenizer: str | Path | None = knob(None, "Tokenizer folder to ship with it (default: the adapter's folder if it "
                                              "holds one, else the base's).", cli=Path)
    vocab_size: int = knob(0, "Rows to grow to (default: what the adapter's tensors say).", min=0)

    def check(self) -> None:
        require(self, "adapter", "base", "output")
