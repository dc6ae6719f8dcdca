"""Every knob of the transfer quality benchmark in one flat dataclass, the source of ``paw bench transfer``'s flags
and ``--config`` keys (:mod:`paw.knobs`); :func:`for_run` makes the options the command runs from them.

The fields without a flag (heads, widths, batch sizes, learning rates) are the published table's model and
training recipe: :func:`quick_options` shrinks them, a Python caller may set them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from paw.bench import DISTILL_STEPS_PER_LORA_STEP, comma_names, distill_steps_for
from paw.bench.conditions import CONDITIONS, chosen
from paw.bench.targets import TARGETS
from paw.bench.tasks import DEFAULT_TASKS, TASKS, missing_sets
from paw.device import DEVICE_HELP
from paw.errors import PawError
from paw.knobs import knob, require

_BUDGETS = ", ".join(c.choice for c in CONDITIONS.values() if c.family.option == "distill")


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in comma_names(text))
    except ValueError:
        raise PawError(f"--seeds {text!r}: expected comma-separated integers such as 0,1") from None


def _distill(text: str) -> tuple[str, ...]:
    """``'none'`` -> ``()``: no distillation rows."""
    return () if text.strip() == "none" else comma_names(text)


@dataclass(frozen=True)
class BenchOptions:
    """Every knob of the benchmark, with the defaults of the published table."""

    seeds: tuple[int, ...] = knob((0, 1), "Task-data and LoRA seeds, comma-separated.", cli=str, parse=_seeds)
    tasks: tuple[str, ...] = knob(DEFAULT_TASKS, f"Tasks (comma list): {', '.join(TASKS)}.", cli=str,
                                  parse=lambda text: comma_names(text) or DEFAULT_TASKS)   # facts-known by name
    targets: tuple[str, ...] = knob(tuple(TARGETS), f"Target kinds (comma list): {', '.join(TARGETS)}.", cli=str,
                                    parse=lambda text: comma_names(text) or tuple(TARGETS), shown="all")
    methods: tuple[str, ...] | None = knob(None, "Transfer methods (comma list). Default: auto and every method.",
                                           cli=str, parse=lambda text: comma_names(text) or None)
    items: int = knob(300, "Held-out items per task and seed.")
    hidden_size: int = knob(64, "Source hidden size.", min=4)   # source model shape (Llama, GQA)
    num_layers: int = knob(4, "Source depth.", min=1)
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 176                # for_run: 11/4 of hidden_size, a multiple of 8
    vocab_size: int = 768                       # byte-level BPE trained on the source corpus
    pretrain_steps: int = knob(400, "Source pretraining steps (targets scale with it).", min=1)
    heal_fraction: float = 0.25                 # healing / further-training steps, fraction of pretraining
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    lora_rank: int = knob(8, "LoRA rank.", min=1)
    lora_alpha: float = 16.0
    lora_steps: int = knob(300, "LoRA training steps.", min=1)
    lora_batch: int = 16
    lora_lr: float = 3e-3
    model_seed: int = knob(0, "Initialisation and corpus-order seed of the models (pool runs of several with --merge "
                              "to see the spread between model builds).")
    n_boot: int = 1000                          # bootstrap replicates for the recovered fraction
    commonsense: str | None = knob(None, "Folder of the commonsense *_formatted.jsonl files (ARC, OpenBookQA, PIQA, "
                                         "Winogrande, BoolQ) for the pretraining corpus. Without it the corpus is "
                                         "embedded fallback text, said loudly in the output and in results.json "
                                         "(notes.corpus_fallback).", flag="--data", cli=Path, parse=str)
    device: str = knob("cpu", "Where the tiny models run (the CPU is their fastest: a GPU is slower at this size): "
                              f"{DEVICE_HELP}.")
    threads: int = knob(1, "Torch CPU threads per process (tiny models run best on one).", min=1)
    distill: tuple[str, ...] = knob(("inputs", "synth", "generic"), "Distillation rows (comma list of input budgets: "
                                    f"{_BUDGETS}; -shift: the shift target), or none.", cli=str, parse=_distill)
    distill_steps: int | None = knob(None, f"Steps of each distillation. Default: {DISTILL_STEPS_PER_LORA_STEP} x "
                                           "--lora-steps.")
    distill_token_focus: float = knob(0.0, "Distill's --token-focus in every distill row (0: off).")
    distill_lr: float | None = knob(None, f"Distill's learning rate in every distill row. Default: the LoRAs' own "
                                          f"({lora_lr:g}).")
    jobs: int = knob(1, "Worker processes: the (seed, task) units run side by side, with the same results as one "
                        "(forked; spawned where PyTorch sees a GPU; --device cuda: they share it).")

    @property
    def distill_budget(self) -> int:
        """Steps of every distillation row: the teacher's continuation is a weaker signal per step than a label."""
        return distill_steps_for(self.lora_steps, self.distill_steps)

    @property
    def distill_rate(self) -> float:
        """Learning rate of every distillation row: ``distill_lr``, or the LoRAs' own."""
        return self.lora_lr if self.distill_lr is None else self.distill_lr

    def check(self) -> None:
        unknown = [t for t in self.tasks if t not in TASKS] + [t for t in self.targets if t not in TARGETS]
        if unknown:
            raise PawError(f"unknown task/target {unknown[0]!r}; tasks: {', '.join(TASKS)}; "
                           f"targets: {', '.join(TARGETS)}")
        if not self.seeds:
            raise PawError("give at least one seed")
        chosen(self)  # an unknown row (distill input budget) fails here, before any training
        if not 0 <= self.distill_token_focus <= 1:
            raise PawError(f"--distill-token-focus {self.distill_token_focus}: must be in [0, 1]")
        if self.distill_lr is not None and not 0 < self.distill_lr < float("inf"):
            raise PawError(f"--distill-lr {self.distill_lr}: must be a positive number")
        if self.distill_steps is not None and self.distill_steps < 1:
            raise PawError(f"--distill-steps {self.distill_steps}: at least 1")
        if self.jobs < 1:
            raise PawError(f"--jobs {self.jobs}: at least 1")
        if self.threads < 1:
            raise PawError(f"--threads {self.threads}: at least 1")
        if self.items < 10:
            raise PawError(f"--items {self.items}: at least 10 held-out items per task")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise PawError(f"hidden size {self.hidden_size}, heads {self.num_heads}, KV heads {self.num_kv_heads}: "
                           "heads must divide the hidden size and KV heads the heads")


@dataclass(frozen=True)
class BenchRun:
    """Where ``paw bench transfer`` writes and keeps its models, and how it runs: nothing the results depend on
    but ``quick``, which picks :func:`quick_options`' sizes."""

    output: str | Path | None = knob(None, "Folder for results.json, results.md, recovered.png, kept.png.",
                                     short="-o", cli=Path)
    merge: tuple[Path, ...] | None = knob(None, "Pool finished result folders of runs with other --seeds, --tasks "
                                                "or --model-seed into --output instead of running.",
                                          metavar="<folder>...")
    workdir: str | Path | None = knob(None, "Where models are kept (default: a temporary folder, removed).", cli=Path)
    quick: bool = knob(False, "Seconds-long smoke configuration (tiny everything).")

    def check(self) -> None:
        require(self, "output")


def quick_options(**overrides: Any) -> BenchOptions:
    """A seconds-long configuration for tests (tiny models, few steps, few items)."""
    base = BenchOptions(seeds=(0,), items=20, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                        intermediate_size=64, vocab_size=300, pretrain_steps=20, batch_size=4, seq_len=32,
                        lora_steps=10, lora_batch=4, n_boot=50)
    return replace(base, **overrides)


# What --quick keeps of the options given; the sizes and step counts come from quick_options.
KEPT_BY_QUICK = ("seeds", "tasks", "targets", "methods", "commonsense", "device", "distill", "distill_steps",
                 "distill_token_focus", "distill_lr", "jobs", "model_seed", "threads")


def for_run(options: BenchOptions, *, quick: bool = False) -> BenchOptions:
    """``options`` as ``paw bench transfer`` runs them, checked before any work.

    ``quick`` starts from :func:`quick_options` and keeps :data:`KEPT_BY_QUICK` of ``options`` (the sizes and
    step counts given are ignored); otherwise the MLP width follows the hidden size (11/4 of it, a multiple of
    8: 176 for 64). ``distill: none`` in a config file means no rows, as ``--distill none`` does.
    """
    data = options.commonsense
    if data is not None and not Path(data).is_dir():
        raise PawError("--data: not a folder of *_formatted.jsonl files", path=data)
    if data is not None and missing_sets(data):
        raise PawError(f"--data: lacks {', '.join(missing_sets(data))}", path=data)
    if quick:
        opts = quick_options(**{name: getattr(options, name) for name in KEPT_BY_QUICK})
    else:
        opts = replace(options, intermediate_size=(options.hidden_size * 11 // 4) // 8 * 8)
    opts = replace(opts, distill=() if opts.distill == ("none",) else opts.distill)
    opts.check()
    return opts
