"""What ``paw zoo build`` and ``paw zoo fine-tune`` are asked to do: the source of their flags and of their
``--config`` keys (:mod:`paw.knobs`). Apart from :mod:`paw.zoo` because ``paw --help`` imports it: no I/O here.

The folders are positional arguments on the command line (``paw zoo build ./tiny``), so they are plain fields,
not knobs: the CLI fills them in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.knobs import knob


@dataclass(frozen=True)
class BuildOptions:
    """A tiny base model with its own trained tokenizer, and a fine-tune and a LoRA of it beside (``paw zoo build``)."""

    output: str | Path | None = None      # folder to create (the command's argument)
    arch: str = knob("llama", "llama, qwen2, gemma or mistral.")
    hidden_size: int = knob(64, "Hidden size.")
    num_layers: int = knob(2, "Number of decoder layers.")
    vocab_size: int = knob(300, "Tokenizer vocabulary to train.")
    seed: int = knob(0, "Initialisation seed.")
    tokenizer: str = knob("byte-bpe", "Tokenizer kind: byte-bpe, sentencepiece-bpe or wordpiece.")
    lora: bool = knob(True, "Also write a LoRA adapter and a fine-tune next to the base.", flag="--lora/--no-lora")


@dataclass(frozen=True)
class FineTuneOptions:
    """A stand-in fine-tune: the model in ``base`` with every matching tensor moved a little (``paw zoo fine-tune``)."""

    base: str | Path | None = None        # model folder to start from (the command's first argument)
    output: str | Path | None = None      # folder to create (its second)
    seed: int = knob(1, "Seed of the perturbation; different seeds give unrelated fine-tunes.")
    scale: float = knob(0.01, "Size of the change, relative to each tensor's std.")
    include: str = knob(".*", "Regex of the tensor names to change (for example 'mlp').")
