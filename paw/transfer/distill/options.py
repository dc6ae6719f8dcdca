"""What ``paw transfer-lora --method distill`` is asked to do: one frozen dataclass, checked before any work.

Field names are the CLI flags (``max_steps`` is ``--max-steps``) and their defaults are the CLI's;
:meth:`DistillOptions.check` names the one flag at fault (``--holdout 1.0: must be in [0, 1)``)
before a file or model is read. Which inputs go together (``--prompts FILE``, ``--prompts
generic``, or ``--synthesize N --seed-examples FILE``) is decided here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from paw import fsdp
from paw.errors import PawError
from paw.knobs import knob
from paw.train.recipe import SCHEDULES  # light: no torch
from paw.validate import finite, lora_alpha, lora_rank

DISTILL = "distill"          # its name among the transfer methods of ``paw transfer-lora --method``
DTYPES = ("auto", "float32", "bfloat16", "float16")   # what paw.io.lm.load_lm accepts
INITS = ("auto", "none")     # auto: start from the weight-space transfer when it applies; none: PEFT init
GENERIC = "generic"          # --prompts generic: the embedded sample text, no task data
TARGETS = ("teacher", "shift")  # what the student learns: the teacher's outputs, or its base plus the adapter's shift


def modules(text: str | None) -> tuple[str, ...] | None:
    """``'q_proj, v_proj'`` -> ``('q_proj', 'v_proj')``; nothing given -> None (the source adapter's)."""
    names = tuple(m.strip() for m in text.split(",") if m.strip()) if text else ()
    return names or None


@dataclass(frozen=True)
class DistillOptions:
    """The knobs of a distillation; see :func:`paw.transfer.distill.lora.distill_lora` for what each does."""

    prompts: str | Path | None = knob(None, "Task inputs: a file paw eval reads (answers ignored), text lines, "
                                      "or 'generic'.", cli=str)
    synthesize: int = knob(0, "Let the teacher write N inputs from --seed-examples.", min=0)
    seed_examples: str | Path | None = knob(None, "At most 5 task inputs for --synthesize.", cli=Path)
    discriminator: bool = knob(False, "Keep only synthetic inputs the teacher finds task-like.")
    eval_prompts: str | Path | None = knob(None, "Held-out inputs for the agreement figures.", cli=Path)
    holdout: float = knob(0.0, "Share of inputs set apart for agreement.")
    init: str = knob("auto", "auto: start from the weight-space transfer if related.",
                     choices=INITS)
    rank: int | None = knob(None, "LoRA rank [default: the source's; --finetune: 16].", min=1)
    alpha: float | None = knob(None, "LoRA alpha [default: the source's].")
    target_modules: tuple[str, ...] | None = knob(None, "Comma list [default: the source adapter's, where the target "
                                                        "has them].", cli=str, parse=modules)
    max_steps: int | None = knob(None, "Optimiser steps [default: until agreement levels off].", min=1)
    batch_size: int = knob(8, "Inputs per step.", min=1, max=4096)
    lr: float = knob(1e-3, "AdamW learning rate.")
    # the shared loop's recipe (paw.train.Recipe); one line each: transfer-lora's help is one screenful
    schedule: str = knob("constant", "Rate schedule.", choices=SCHEDULES)
    warmup: int = knob(0, "Warm-up steps.", min=0)
    accumulation: int = knob(1, "Accumulated batches.", min=1)
    clip: float | None = knob(None, "Clip the gradient norm (0: off).", min=0)
    max_new_tokens: int = knob(16, "Teacher continuation length (it stops at a line break).", min=1)
    byte_kl: bool = knob(False, "Across tokenizers, also match next-token distributions at shared cuts.",
                     flag="--byte-kl/--no-byte-kl")
    next_words: int = knob(0, "Across tokenizers, teach the teacher's K likeliest next words (0: off).", min=0)
    token_focus: float = knob(0.0, "Train on the share of tokens the adapter changed most (TiTok).")
    target: str = knob("teacher", "Learn the teacher, or its own base + the adapter's shift.",
                       choices=TARGETS)
    shift_scale: float = knob(1.0, "--target shift: the factor on the shift.")
    seed: int = knob(0, "Random seed (same seed, same bytes).")
    # ---- scale (docs/scale.md) ----
    save_every: int | None = knob(None, "Checkpoint every K steps.", min=1)
    resume: bool = knob(False, "Continue from OUT-work/.")
    offload_teacher: bool = knob(False, "Free the teacher before training.")
    gradient_checkpointing: bool = knob(False, "Less memory, more compute.")
    dtype: str = knob("auto", "Weights' dtype.")
    fsdp: bool = knob(False, "Shard the student (FSDP2, torchrun).")

    def check(self) -> None:
        """Refuse a knob out of range or inputs that do not go together, naming the one flag at fault."""
        self.check_knobs()
        if self.prompts is None and not self.synthesize:
            raise PawError("--method distill needs inputs: --prompts FILE, --prompts generic, or "
                           "--synthesize N --seed-examples FILE")
        if self.prompts is not None and self.synthesize:
            raise PawError("give either --prompts or --synthesize, not both")
        if self.seed_examples is not None and not self.synthesize:
            raise PawError("--seed-examples is for --synthesize N")
        if self.synthesize and self.seed_examples is None:
            raise PawError("--synthesize needs --seed-examples FILE (at most 5 task inputs)")

    def check_knobs(self) -> None:
        """The ranges alone, before any input is looked at."""
        if self.synthesize < 0:
            raise PawError(f"--synthesize {self.synthesize}: must not be negative")
        if self.init not in INITS:
            raise PawError(f"unknown --init {self.init!r}; choose one of {', '.join(INITS)}")
        if self.save_every is not None and self.save_every < 1:
            raise PawError(f"--save-every {self.save_every}: must be at least 1")
        if self.dtype not in DTYPES:
            raise PawError(f"--dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        if self.target not in TARGETS:
            raise PawError(f"--target {self.target!r}: choose one of {', '.join(TARGETS)}")
        finite("--shift-scale", self.shift_scale)
        if not 0 < self.shift_scale <= 10:
            raise PawError(f"--shift-scale {self.shift_scale}: must be in (0, 10] (1: the adapter's shift as it is)")
        if self.shift_scale != 1.0 and self.target != "shift":
            raise PawError("--shift-scale is for --target shift")
        if self.target == "shift" and self.token_focus:
            raise PawError("--token-focus weighs the teacher's text, which --target shift does not train on")
        finite("--token-focus", self.token_focus)
        if not 0 <= self.token_focus <= 1:
            raise PawError(f"--token-focus {self.token_focus}: must be in [0, 1] (0: off; the fraction of tokens kept)")
        for flag in ("max_steps", "batch_size", "max_new_tokens"):
            if getattr(self, flag) is not None and getattr(self, flag) < 1:
                raise PawError(f"{_flag(flag)} {getattr(self, flag)}: must be at least 1")
        finite("--lr", self.lr, positive=True)
        if self.schedule not in SCHEDULES:
            raise PawError(f"--schedule {self.schedule!r}: choose one of {', '.join(SCHEDULES)}")
        for flag, low in (("warmup", 0), ("accumulation", 1)):
            if getattr(self, flag) < low:
                raise PawError(f"{_flag(flag)} {getattr(self, flag)}: must be at least {low}")
        if self.clip is not None:
            finite("--clip", self.clip)
            if self.clip < 0:
                raise PawError(f"--clip {self.clip}: must not be negative (0: off)")
        finite("--holdout", self.holdout)
        if not 0 <= self.holdout < 1:
            raise PawError(f"--holdout {self.holdout}: must be in [0, 1) (the fraction of inputs kept for agreement)")
        if self.next_words < 0 or self.next_words == 1:
            raise PawError(f"--next-words {self.next_words}: 0 (off) or at least 2")
        lora_alpha("--alpha", self.alpha)
        lora_rank("--rank", self.rank)  # the fit to the target's layers is checked once it is read
        fsdp.check(self.fsdp, save_every=self.save_every, resume=self.resume)

    def given(self) -> list[str]:
        """The flags set to something other than their default (``['--rank', '--alpha']``)."""
        return [_flag(f.name) for f in fields(self) if getattr(self, f.name) != f.default]


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"
