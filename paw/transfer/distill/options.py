"""What ``paw transfer-lora --method distill`` is asked to do: one frozen dataclass, checked before any work.

Field names are the CLI flags (``max_steps`` is ``--max-steps``) and their defaults are the CLI's;
:meth:`DistillOptions.check` names the one flag at fault (``--holdout 1.0: must be in [0, 1)``)
before a file or model is read. Which inputs go together (``--prompts FILE``, ``--prompts
generic``, or ``--synthesize N --seed-examples FILE``) is decided here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from paw import fsdp as F
from paw.errors import PawError
from paw.validate import finite, lora_alpha, lora_rank

DISTILL = "distill"          # its name among the transfer methods of ``paw transfer-lora --method``
DTYPES = ("auto", "float32", "bfloat16", "float16")   # what paw.io.lm.load_lm accepts
INITS = ("auto", "none")     # auto: start from the weight-space transfer when it applies; none: PEFT init
GENERIC = "generic"          # --prompts generic: the embedded sample text, no task data
TARGETS = ("teacher", "shift")  # what the student learns: the teacher's outputs, or its base plus the adapter's shift


@dataclass(frozen=True)
class DistillOptions:
    """The knobs of a distillation; see :func:`paw.transfer.distill.lora.distill_lora` for what each does."""

    prompts: str | Path | None = None         # task inputs: a file paw eval reads, text lines, or 'generic'
    synthesize: int = 0                       # let the teacher write N inputs from seed_examples
    seed_examples: str | Path | None = None   # at most 5 task inputs for synthesize
    discriminator: bool = False               # keep only synthetic inputs the teacher finds task-like
    eval_prompts: str | Path | None = None    # held-out inputs for the agreement figures
    holdout: float = 0.0                      # fraction of the inputs kept for agreement (0: train on all)
    init: str = "auto"                        # one of INITS
    rank: int | None = None                   # student LoRA rank (None: the source adapter's)
    alpha: float | None = None                # student LoRA alpha (None: the source adapter's)
    target_modules: tuple[str, ...] | None = None  # module types (None: the source's that the target has)
    max_steps: int | None = None              # optimiser steps (None: set by the inputs, stop once levelled off)
    batch_size: int = 8                       # inputs per step
    lr: float = 1e-3                          # AdamW learning rate (docs/distill.md#learning-rate)
    max_new_tokens: int = 16                  # teacher continuation length (it also stops at a line break)
    byte_kl: bool = False                     # across tokenizers, also match distributions at shared cuts
    next_words: int = 0                       # across tokenizers, teach the teacher's K likeliest next words
    token_focus: float = 0.0                  # train on this fraction of tokens the adapter changed most (0: all)
    target: str = "teacher"                   # one of TARGETS (docs/distill.md#the-shift-target)
    shift_scale: float = 1.0                  # --target shift: student_base + scale x (teacher - teacher_base)
    seed: int = 0                             # same inputs and seed give byte-identical outputs
    # ---- scale (docs/scale.md) ----
    save_every: int | None = None             # resumable checkpoint in OUT-work/ every K steps
    resume: bool = False                      # continue from OUT-work/'s checkpoint
    offload_teacher: bool = False             # free the teacher after its continuations, before training
    gradient_checkpointing: bool = False      # recompute the student's activations in the backward pass
    dtype: str = "auto"                       # both bases: auto (checkpoint's on GPU, float32 on CPU) or a dtype
    fsdp: bool = False                        # under torchrun: shard the student over the processes (paw.fsdp)

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
        finite("--holdout", self.holdout)
        if not 0 <= self.holdout < 1:
            raise PawError(f"--holdout {self.holdout}: must be in [0, 1) (the fraction of inputs kept for agreement)")
        if self.next_words < 0 or self.next_words == 1:
            raise PawError(f"--next-words {self.next_words}: 0 (off) or at least 2")
        lora_alpha("--alpha", self.alpha)
        lora_rank("--rank", self.rank)  # the fit to the target's layers is checked once it is read
        F.check(self.fsdp, save_every=self.save_every, resume=self.resume)

    def given(self) -> list[str]:
        """The flags set to something other than their default (``['--rank', '--alpha']``)."""
        return [_flag(f.name) for f in fields(self) if getattr(self, f.name) != f.default]


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"
