"""What ``paw eval`` is asked to do: one frozen dataclass, the source of its flags and of its ``--config`` keys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.evaluate.exact import Rules  # light: re and string
from paw.evaluate.formats import READERS  # light: the readers are plain functions
from paw.evaluate.generate import MAX_GEN_TOKENS, UNTIL  # light: torch is imported inside
from paw.io.lm import DTYPES  # what load_lm accepts (light: torch is imported inside it)
from paw.knobs import knob, require
from paw.train.recipe import SCHEDULES  # light: no torch
from paw.validate import finite

FORMATS = ("auto", *READERS)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def unescape(text: str) -> str:
    r"""A stop sequence as typed on the command line: ``\n``, ``\t``, ``\r`` and ``\\`` become a newline, a tab,
    a carriage return and one backslash; any other backslash stays.

    >>> unescape(r"\n\n"), unescape(r"Q\\n:"), unescape(r"a\x")
    ('\n\n', 'Q\\n:', 'a\\x')
    """
    out, k = [], 0
    while k < len(text):
        if text[k] == "\\" and k + 1 < len(text) and text[k + 1] in _ESCAPES:
            out.append(_ESCAPES[text[k + 1]])
            k += 2
        else:
            out.append(text[k])
            k += 1
    return "".join(out)


def _stops(values) -> tuple[str, ...]:
    return tuple(unescape(str(v)) for v in values)


def _texts(values) -> tuple[str, ...] | None:
    return tuple(map(str, values)) or None


def batch_size_value(value: int | str) -> int | str:
    """``'auto'``, or a whole number >= 1 (typed as text on the command line).

    >>> batch_size_value("16"), batch_size_value("auto")
    (16, 'auto')
    """
    if value == "auto":
        return value
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise PawError(f"--batch-size {value!r}: a whole number >= 1, or auto")
    return int(text)


@dataclass(frozen=True)
class EvalOptions:
    """One evaluation: a model (with an adapter, or with another model's adapter shift: proxy-tuning) on one
    multiple-choice file, one text (``text``: perplexity) or one file of questions to answer (``generate``)."""

    model: str | None = knob(None, "Model folder, .gguf file or Hub id (org/name[@rev]).")
    data: str | Path | None = knob(None, "Multiple-choice JSON-lines file (with --generate: question and answer).",
                                   cli=Path)
    text: str | Path | None = knob(None, "Perplexity instead: a text file (one document) or .jsonl of {\"text\": ...}.",
                                   cli=Path)
    num_fewshot: int = knob(0, "Solved examples from --fewshot-data before each question.", min=0, max=1000)
    fewshot_data: str | Path | None = knob(None, "Where few-shot examples come from: a train split (never the item "
                                                 "itself).", cli=Path)
    seed: int = knob(1234, "Seed of the few-shot draw (1234: lm-eval's, so its examples).", min=0)
    max_length: int | None = knob(None, "Longest sequence, and the perplexity window, in tokens (default: the "
                                        "model's).", min=1)
    adapter: str | Path | None = knob(None, "PEFT LoRA folder to apply first.", cli=Path)
    format: str = knob("auto", "Data layout: auto (detected from the first line), or one of the readers "
                               "(mc: flat question/choices/answer).", choices=FORMATS)
    limit: int | None = knob(None, "Evaluate the first N items only.", min=1)
    batch_size: int | str = knob(8, "Sequences per forward pass, or auto (CUDA: from 64, halved on out of memory).",
                                 min=1, cli=str, parse=batch_size_value)
    output: str | Path | None = knob(None, "Write the metrics to this JSON file.", cli=Path)
    per_item: str | Path | None = knob(None, "Write every item's scores (choices and pick, or generated text) to "
                                             "this JSON-lines file.", cli=Path)
    dtype: str = knob("auto", "Model dtype: auto (float32 on CPU, checkpoint dtype on GPU), float32, bfloat16, "
                              "float16.", choices=DTYPES)
    proxy_base: str | None = knob(None, "Proxy-tuning: the base model that --proxy-adapter was trained on (any "
                                        "tokenizer).")
    proxy_adapter: str | Path | None = knob(None, "Proxy-tuning: add what this LoRA changes in --proxy-base to every "
                                                  "choice's score (no training).", cli=Path)
    proxy_scale: float = knob(1.0, "Proxy-tuning: the factor on that shift.")
    apply_chat_template: bool = knob(False, "Render each context with the model's chat template, as lm-eval's "
                                            "--apply_chat_template.")
    system_instruction: str | None = knob(None, "With --apply-chat-template: this system message first.")
    fewshot_as_multiturn: bool | None = knob(None, "With --apply-chat-template: each few-shot example a user and "
                                                    "an assistant turn (default: on, as in lm-eval).",
                                             flag="--fewshot-as-multiturn/--no-fewshot-as-multiturn")
    generate: bool = knob(False, "Generation instead: --data holds prompts and answers; greedy, scored by exact "
                                 "match.")
    max_gen_tokens: int = knob(MAX_GEN_TOKENS, "With --generate: new tokens at most per item (lm-eval's "
                                               "max_gen_toks).", min=1)
    until: tuple[str, ...] = knob(UNTIL, "With --generate: stop sequences, --until A B (typed \\n: a newline).",
                                  parse=_stops, verbatim=True, shown="\\n\\n")
    ignore_case: bool = knob(False, "With --generate: exact match ignores case.")
    ignore_punctuation: bool = knob(False, "With --generate: exact match ignores ASCII punctuation.")
    ignore_numbers: bool = knob(False, "With --generate: exact match ignores the digits 0-9.")
    regexes_to_ignore: tuple[str, ...] | None = knob(None, "With --generate: regexes removed before matching, "
                                                           "--regexes-to-ignore A B.", parse=_texts, verbatim=True)

    def check(self) -> None:
        """Refuse what no evaluation can run, naming the flag, before a file is read."""
        require(self, "model")
        if self.text is not None:
            self._check_text()
        else:
            require(self, "data")
        self._check_chat()
        self._check_generation()
        if self.num_fewshot and self.fewshot_data is None:
            raise PawError(f"--num-fewshot {self.num_fewshot} needs --fewshot-data FILE (a train split; "
                           "the item itself is never its own example)")
        if self.fewshot_data is not None and not self.num_fewshot:
            raise PawError("--fewshot-data is for --num-fewshot K (K >= 1)")
        if (self.proxy_base is None) != (self.proxy_adapter is None):
            raise PawError("proxy-tuning needs both --proxy-base (the adapter's own base) and --proxy-adapter")
        finite("--proxy-scale", self.proxy_scale)
        if self.proxy_base is None and self.proxy_scale != 1.0:
            raise PawError("--proxy-scale is for --proxy-base and --proxy-adapter")
        if not 0 < self.proxy_scale <= 10:
            raise PawError(f"--proxy-scale {self.proxy_scale}: must be in (0, 10] (1: the adapter's shift as it is)")

    def multiturn(self) -> bool:
        """Whether a chat template shows each few-shot example as turns of its own: lm-eval 0.4's default with
        ``--apply_chat_template`` (``--fewshot_as_multiturn false`` turns it off), unless turned off here."""
        return self.apply_chat_template and self.fewshot_as_multiturn is not False

    def rules(self) -> Rules:
        """What ``--generate``'s exact match ignores."""
        return Rules(regexes_to_ignore=self.regexes_to_ignore or (), ignore_case=self.ignore_case,
                     ignore_punctuation=self.ignore_punctuation, ignore_numbers=self.ignore_numbers)

    def _check_chat(self) -> None:
        if self.apply_chat_template and self.text is not None:
            raise PawError("--apply-chat-template is for --data (multiple choice or --generate); --text scores "
                           "documents as they are")
        if self.apply_chat_template and self.proxy_base is not None:
            raise PawError("--apply-chat-template does not go with proxy-tuning (the two models' templates differ)")
        if self.system_instruction is not None and not self.apply_chat_template:
            raise PawError("--system-instruction is a chat template's system message: add --apply-chat-template")
        if self.system_instruction is not None and not self.system_instruction.strip():
            raise PawError("--system-instruction is empty")
        if self.fewshot_as_multiturn and not self.apply_chat_template:
            raise PawError("--fewshot-as-multiturn is how a chat template shows the few-shot examples: add "
                           "--apply-chat-template")

    def _check_generation(self) -> None:
        """``--generate`` and the flags that go only with it."""
        if self.generate:
            given = [flag for flag, on in (("--text", self.text is not None), ("--format", self.format != "auto"),
                                           ("--proxy-base", self.proxy_base is not None)) if on]
            if given:
                raise PawError(f"--generate reads prompts and answers from --data; {given[0]} does not go with it")
            if not self.until or not all(self.until):
                raise PawError("--until: a stop sequence must not be empty")
            self.rules().check()
            return
        only = [flag for flag, on in (("--max-gen-tokens", self.max_gen_tokens != MAX_GEN_TOKENS),
                                      ("--until", self.until != UNTIL), ("--ignore-case", self.ignore_case),
                                      ("--ignore-punctuation", self.ignore_punctuation),
                                      ("--ignore-numbers", self.ignore_numbers),
                                      ("--regexes-to-ignore", bool(self.regexes_to_ignore))) if on]
        if only:
            raise PawError(f"{only[0]} is for --generate (generation scored by exact match)")

    def _check_text(self) -> None:
        """``--text`` scores documents: none of the multiple-choice flags go with it."""
        given = [flag for flag, on in (("--data", self.data is not None), ("--num-fewshot", self.num_fewshot > 0),
                                       ("--proxy-base", self.proxy_base is not None),
                                       ("--format", self.format != "auto")) if on]
        if given:
            raise PawError(f"--text scores documents by perplexity; {given[0]} is for multiple-choice data")


@dataclass(frozen=True)
class TrainLoraOptions:
    """One LoRA trained on the right answers of a multiple-choice set (``paw train-lora``)."""

    model: str | None = knob(None, "Base model folder, .gguf file or Hub id (org/name[@rev]).")
    data: str | Path | None = knob(None, "Training multiple-choice JSON-lines file (the right answers are learnt).",
                                   cli=Path)
    output: str | Path | None = knob(None, "PEFT adapter folder to create (with metrics.json).", cli=Path)
    rank: int = knob(16, "LoRA rank r.", min=1)
    alpha: float = knob(32.0, "LoRA alpha (scaling alpha / r).")
    target_modules: str = knob("all-linear", "all-linear, or a comma-separated list of module names.")
    steps: int = knob(600, "Optimiser steps.", min=1)
    batch_size: int = knob(6, "Sequences per step.", min=1, max=4096)
    lr: float = knob(1.5e-5, "AdamW learning rate (the peak, under --schedule).")
    seed: int = knob(0, "Random seed; same inputs and seed give byte-identical outputs.")
    eval_data: str | Path | None = knob(None, "Test set: metrics before and after training.", cli=Path)
    format: str = knob("auto", "Data layout: auto (detected from the first line), or one of the readers.",
                       choices=FORMATS)
    limit: int | None = knob(None, "Train on the first N items only.", min=1)
    eval_limit: int | None = knob(None, "Evaluate on the first N items only.", min=1)
    save_every: int | None = knob(None, "Every N steps save OUT/checkpoint-STEP adapter folders and a resumable "
                                        "training state in OUT-work/.", min=1)
    resume: bool = knob(False, "Continue from the training state in OUT-work/ (same settings; a run killed loses "
                               "at most --save-every steps).")
    gradient_checkpointing: bool = knob(False, "Recompute activations in the backward pass: less memory, about a "
                                               "third more compute.")
    fsdp: bool = knob(False, "Under torchrun: shard the model's weights (and the LoRA) over the processes with torch "
                             "FSDP2, for a model that does not fit one device (docs/scale.md).")
    dtype: str = knob("auto", "Model dtype: auto (float32 on CPU, checkpoint dtype on GPU), float32, bfloat16, "
                              "float16.")
    schedule: str = knob("constant", "Learning-rate schedule: constant, warmup (linear, then constant) or cosine.",
                         choices=SCHEDULES)
    warmup: int = knob(0, "Linear warm-up steps of the warmup and cosine schedules.", min=0)
    accumulation: int = knob(1, "Micro-batches of --batch-size per optimiser step (gradient accumulation).", min=1)
    clip: float | None = knob(None, "Clip the gradient norm to this value (0: off) [default: off].", min=0)

    def check(self) -> None:
        require(self, "model", "data", "output")

    def knobs(self) -> dict:
        """The keyword arguments of :func:`paw.evaluate.pipeline.train_lora_adapter` past its three paths."""
        return {k: getattr(self, k) for k in ("rank", "alpha", "target_modules", "steps", "batch_size", "lr", "seed",
                                              "eval_data", "format", "limit", "eval_limit", "save_every", "resume",
                                              "gradient_checkpointing", "fsdp", "dtype", "schedule", "warmup",
                                              "accumulation", "clip")}
