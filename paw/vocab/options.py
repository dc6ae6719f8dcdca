"""What the tokenizer commands are asked to do: one frozen dataclass per command, the source of its flags and of
its ``--config`` keys (:mod:`paw.knobs`).

``analyze-tokenizers`` -> :class:`AnalyzeOptions`, ``align-vocab`` -> :class:`AlignOptions`,
``transplant-tokenizer`` -> :class:`TransplantOptions`, ``heal-transplant`` -> :class:`HealOptions` and
``extend-tokenizer`` -> :class:`ExtendOptions`. Each pipeline of :mod:`paw.vocab.pipelines`,
:mod:`paw.vocab.heal_pipeline` and :mod:`paw.vocab.extend_pipeline` takes its object and the run's
:class:`~paw.knobs.RunOptions`::

    transplant_tokenizer(TransplantOptions(model="tiny/base", tokenizer="other-tok", output="moved", check=False))

Light on purpose (``paw --help`` imports it): the registries' names, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.knobs import knob, require
from paw.train.recipe import SCHEDULES  # light: no torch
from paw.vocab.align import methods_help  # light: the alignment registry, no torch or numpy
from paw.vocab.embed import FALLBACKS
from paw.vocab.omp import DEFAULT_BATCH, DEFAULT_K
from paw.vocab.resize import INITS
from paw.vocab.transplant import HEAD_POLICIES


def items(values) -> tuple[str, ...] | None:
    """What the parser reads for a repeatable flag (``--corpus a b``), as a field holds it: a tuple of strings, or
    None."""
    return tuple(map(str, values)) or None


def _files(help: str, **more):
    return knob(None, help, cli=list[Path], parse=items, **more)


def _rank_pattern():
    return knob(None, "Pre-tokenizer regex for tiktoken rank files, which store none: gpt2, gpt4, llama3, qwen2, "
                      "o200k or a regex (default: a known file's such as cl100k_base.tiktoken, else gpt4 = cl100k).")


def _methods():
    return knob(None, methods_help(), cli=list[str], parse=items)


def _anchors():
    return knob(8, "Shared tokens per target token for 'semantic'.", min=1)


@dataclass(frozen=True)
class AnalyzeOptions:
    """Two tokenizers compared on a corpus (``paw analyze-tokenizers``)."""

    source: str | None = knob(None, "Source tokenizer: HF folder/ID, tokenizer.json, tiktoken rank file, PAW BPE "
                                    ".model or a model .gguf.", short="-s")
    target: str | None = knob(None, "Target tokenizer (same kinds as --source).", short="-t")
    outdir: str | Path | None = knob(None, "Output folder (report.json, encoding.csv, ...).", short="-o", cli=Path)
    corpus: tuple[str, ...] | None = _files("Text or .jsonl files (one text per line); default: the embedded "
                                            "multilingual sample.")
    plots: bool = knob(True, "Write the PNG figures.", flag="--plots/--no-plots")
    rank_pattern: str | None = _rank_pattern()

    def check(self) -> None:
        require(self, "source", "target", "outdir")


@dataclass(frozen=True)
class AlignOptions:
    """Every target token mapped to source tokens (``paw align-vocab``)."""

    source: str | None = knob(None, "Source tokenizer (where embeddings come from).", short="-s")
    target: str | None = knob(None, "Target tokenizer (rows to build).", short="-t")
    output: str | Path | None = knob(None, "Mapping JSON to write (paw-vocab-map v1).", short="-o", cli=Path)
    method: tuple[str, ...] | None = _methods()
    source_model: str | None = knob(None, "Model whose embeddings 'semantic' uses.")
    corpus: tuple[str, ...] | None = _files("Text files for 'frequency' token counts.")
    anchors: int = _anchors()
    rank_pattern: str | None = _rank_pattern()

    def check(self) -> None:
        require(self, "source", "target", "output")


@dataclass(frozen=True)
class TransplantOptions:
    """A model given a new tokenizer (``paw transplant-tokenizer``), optionally healed after."""

    model: str | None = knob(None, "Model folder (with its own tokenizer).")
    tokenizer: str | None = knob(None, "New tokenizer T (HF folder, tokenizer.json, tiktoken or PAW BPE file); "
                                       "default with --donor: the donor's.")
    output: str | Path | None = knob(None, "Output model folder.", short="-o", cli=Path)
    method: tuple[str, ...] | None = _methods()
    vocab_map: str | Path | None = knob(None, "Use this paw-vocab-map file instead of aligning.", cli=Path)
    init: str = knob("mean", "Rows no method maps: mean (of the source rows) or zero.", choices=FALLBACKS)
    head: str = knob("mapping", "Untied output-head rows: 'mapping' (same weights as the input rows) or 'first' "
                                "(first piece of each decomposition).", choices=HEAD_POLICIES)
    corpus: tuple[str, ...] | None = _files("Texts for 'frequency' and the semantic check (default: the "
                                            "embedded multilingual sample).")
    check: bool = knob(True, "Run the hidden-state semantic check.", flag="--check/--no-check")
    check_texts: int = knob(64, "Texts used by the semantic check.", min=1)
    anchors: int = _anchors()
    donor: str | None = knob(None, "The model whose tokenizer T is: fit each new token as a sparse combination of "
                                   "shared tokens on the donor's rows (OMP, Goddard & Neto 2025, arXiv 2506.06607) "
                                   "and apply it to the model's rows; replaces --method.")
    omp_k: int = knob(DEFAULT_K, "Shared tokens (anchors) per new token for --donor.", min=1)
    omp_batch: int = knob(DEFAULT_BATCH, "Tokens fitted at once with --donor (memory ~ batch x anchors floats).",
                          min=1)
    resume: bool = knob(False, "[--donor] Take the OMP fits a stopped run kept in OUT-work/ (each batch is kept as "
                               "it is done) and fit only the rest.")
    heal_steps: int = knob(0, "Then train the non-exact rows this many steps on --heal-corpus (see paw "
                              "heal-transplant).", min=0)
    heal_corpus: tuple[str, ...] | None = _files("Text or .jsonl files for --heal-steps.")
    rank_pattern: str | None = _rank_pattern()

    def validate(self) -> None:
        """The files are named, and the two heal flags go together (a corpus without steps, or steps without a
        corpus, is an error). Not ``check``: that is the ``--check`` field."""
        require(self, "model", "output")
        if self.heal_steps and not self.heal_corpus:
            raise PawError("--heal-steps needs --heal-corpus FILE (the text the rows are trained on)")
        if self.heal_corpus and not self.heal_steps:
            raise PawError("--heal-corpus is given but --heal-steps is 0: pass --heal-steps N")

    def heal(self) -> HealOptions | None:
        """The heal run ``--heal-steps`` asks for (its other knobs at their defaults), or None."""
        return HealOptions(steps=self.heal_steps, corpus=self.heal_corpus) if self.heal_steps else None


@dataclass(frozen=True)
class HealOptions:
    """Knobs of a heal run (``paw heal-transplant``, and ``transplant-tokenizer --heal-steps``); :meth:`check`
    names the flag at fault before any model is read."""

    model: str | Path | None = knob(None, "A folder written by paw transplant-tokenizer.", cli=Path)
    corpus: tuple[str, ...] | None = _files("Training text: text or .jsonl files.")
    output: str | Path | None = knob(None, "Output model folder.", short="-o", cli=Path)
    steps: int = knob(100, "Optimizer steps.", min=1)
    eval_corpus: tuple[str, ...] | None = _files("Held-out text for the bits-per-byte check (default: every "
                                                 "10th text of --corpus, not trained on).")
    original: str | Path | None = knob(None, "The model before the transplant: its bits per byte on its own "
                                             "tokenizer is drawn in the curve as the level to reach.", cli=Path)
    lr: float = knob(1e-3, "Adam learning rate of the trained rows.")
    batch: int = knob(8, "Windows per step.", min=1)
    seq_len: int = knob(128, "Tokens per window.", min=2)
    eval_every: int = knob(0, "Steps between checks (0: steps / 5).", min=0)
    eval_texts: int = knob(200, "Held-out texts scored at each check.", min=1)
    seed: int = knob(0, "Window sampling seed.")
    warmup: int = 10                 # linear learning-rate warm-up, steps (no flag)
    schedule: str = knob("warmup", "Learning-rate schedule: constant, warmup (linear, then constant) or cosine.",
                         choices=SCHEDULES)
    accumulation: int = knob(1, "Micro-batches of --batch windows per optimiser step.", min=1)
    clip: float | None = knob(1.0, "Clip the gradient norm to this value (0: off).", min=0)

    def check(self) -> None:
        if self.steps < 1:
            raise PawError(f"--heal-steps must be at least 1, got {self.steps}")
        if not self.corpus:
            raise PawError("healing needs a text corpus: pass --heal-corpus FILE (text or .jsonl)")
        for name in ("lr",):
            if not getattr(self, name) > 0:
                raise PawError(f"--heal-{name} must be positive, got {getattr(self, name)}")
        for name in ("batch", "seq_len", "eval_texts"):
            if getattr(self, name) < 1:
                raise PawError(f"--heal-{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        self.plan().recipe()   # schedule, warmup, accumulation and clip, checked by the loop's recipe

    def plan(self):
        """The :class:`~paw.vocab.heal.HealPlan` these knobs make."""
        from paw.vocab.heal import HealPlan

        every = self.eval_every or max(1, self.steps // 5)
        return HealPlan(steps=self.steps, lr=self.lr, batch=self.batch, seq_len=self.seq_len, eval_every=every,
                        warmup=self.warmup, seed=self.seed, schedule=self.schedule,
                        accumulation=self.accumulation, clip=self.clip or None)

    def changes(self) -> dict:
        """The optimiser knobs set away from their defaults, for ``paw_heal.json`` (a default run's record is
        what it was before they existed)."""
        return {k: getattr(self, k) for k in ("schedule", "accumulation", "clip")
                if getattr(self, k) != getattr(HealOptions, k)}


@dataclass(frozen=True)
class ExtendOptions:
    """Tokens added to a model's tokenizer, its embeddings grown to match (``paw extend-tokenizer``)."""

    model: str | Path | None = knob(None, "Model folder with tokenizer.json.", cli=Path)
    output: str | Path | None = knob(None, "Folder to write (model + tokenizer).", cli=Path)
    tokens: tuple[str, ...] | None = knob(None, "Tokens to add: --tokens A B C (or repeat the option).",
                                          cli=list[str], parse=items, verbatim=True)
    tokens_file: str | Path | None = knob(None, "Text file, one token per line (kept verbatim, spaces included).",
                                          cli=Path)
    from_tokenizer: str | Path | None = knob(None, "Add every token of this tokenizer that the model lacks (HF "
                                                   "tokenizer.json / folder, or a `paw bpe train` .model).", cli=Path)
    skip_numbers: bool = knob(True, "With --from-tokenizer: leave out its number strings ('2024', ' 12'). Most "
                                    "pre-tokenizers split digit runs, so they could only be added tokens, which would "
                                    "change how every number in old text tokenizes.",
                              flag="--skip-numbers/--keep-numbers")
    special: bool = knob(False, "Add them as special (added, unsplittable) tokens.")
    init: str = knob("interpolate", "How new rows start.", choices=INITS)
    pad_to_multiple: int = knob(0, "Pad the row count to a multiple of N (0: no padding; 64 or 128 are usual).",
                                min=0, max=65536)
    max_intermediates: int = knob(-1, "A token whose merge chain needs more new intermediate tokens than this is "
                                      "added as an added token instead (-1: no limit).")

    def check(self) -> None:
        require(self, "model", "output")
