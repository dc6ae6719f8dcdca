"""What ``paw eval`` is asked to do: one frozen dataclass, the source of its flags and of its ``--config`` keys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.evaluate.formats import READERS  # light: the readers are plain functions
from paw.knobs import knob
from paw.validate import finite

DTYPES = ("auto", "float32", "bfloat16", "float16")
FORMATS = ("auto", *READERS)


@dataclass(frozen=True)
class EvalOptions:
    """One evaluation: a model (with an adapter, or with another model's adapter shift: proxy-tuning) on one
    multiple-choice file."""

    model: str | None = knob(None, "Model folder, .gguf file or cached Hugging Face id.")
    data: str | Path | None = knob(None, "Multiple-choice JSON-lines file.", cli=Path)
    adapter: str | Path | None = knob(None, "PEFT LoRA folder to apply first.", cli=Path)
    format: str = knob("auto", "Data layout: auto (detected from the first line), or one of the readers "
                               "(mc: flat question/choices/answer).", choices=FORMATS)
    limit: int | None = knob(None, "Evaluate the first N items only.", min=1)
    batch_size: int = knob(8, "Sequences per forward pass.", min=1)
    output: str | Path | None = knob(None, "Write the metrics to this JSON file.", cli=Path)
    dtype: str = knob("auto", "Model dtype: auto (float32 on CPU, checkpoint dtype on GPU), float32, bfloat16, "
                              "float16.", choices=DTYPES)
    proxy_base: str | None = knob(None, "Proxy-tuning: the base model that --proxy-adapter was trained on (any "
                                        "tokenizer).")
    proxy_adapter: str | Path | None = knob(None, "Proxy-tuning: add what this LoRA changes in --proxy-base to every "
                                                  "choice's score (no training).", cli=Path)
    proxy_scale: float = knob(1.0, "Proxy-tuning: the factor on that shift.")

    def check(self) -> None:
        """Refuse what no evaluation can run, naming the flag, before a file is read."""
        for name in ("model", "data"):
            if getattr(self, name) is None:
                raise PawError(f"missing option '--{name}' (a flag, or '{name}:' in --config)")
        if (self.proxy_base is None) != (self.proxy_adapter is None):
            raise PawError("proxy-tuning needs both --proxy-base (the adapter's own base) and --proxy-adapter")
        finite("--proxy-scale", self.proxy_scale)
        if self.proxy_base is None and self.proxy_scale != 1.0:
            raise PawError("--proxy-scale is for --proxy-base and --proxy-adapter")
        if not 0 < self.proxy_scale <= 10:
            raise PawError(f"--proxy-scale {self.proxy_scale}: must be in (0, 10] (1: the adapter's shift as it is)")
