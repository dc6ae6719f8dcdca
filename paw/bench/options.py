"""Every knob of the transfer quality benchmark in one flat dataclass, and its build from strings."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from paw.bench import distill_steps_for
from paw.bench.conditions import chosen
from paw.bench.targets import TARGETS
from paw.bench.tasks import DEFAULT_TASKS, TASKS, missing_sets
from paw.errors import PawError


@dataclass(frozen=True)
class BenchOptions:
    """Every knob of the benchmark, with the defaults of the published table."""

    seeds: tuple[int, ...] = (0, 1)             # task data + LoRA seeds (the models are built once)
    tasks: tuple[str, ...] = DEFAULT_TASKS      # facts, facts-heldout, rule (facts-known by name)
    targets: tuple[str, ...] = tuple(TARGETS)   # upgrade, pruned, grown, distilled, tokenizer, unrelated
    methods: tuple[str, ...] | None = None      # transfer methods; None = auto + every registered one
    items: int = 300                            # held-out items per task and seed
    hidden_size: int = 64                       # source model shape (Llama, GQA)
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 176
    vocab_size: int = 768                       # byte-level BPE trained on the source corpus
    pretrain_steps: int = 400                   # source (and unrelated, distilled) pretraining steps
    heal_fraction: float = 0.25                 # healing / further-training steps, fraction of pretraining
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_steps: int = 300
    lora_batch: int = 16
    lora_lr: float = 3e-3
    model_seed: int = 0                         # initialisation / corpus-order seed of the models
    n_boot: int = 1000                          # bootstrap replicates for the recovered fraction
    commonsense: str | None = None              # folder of *_formatted.jsonl; None = embedded fallback
    device: str = "cpu"                         # tiny models run fastest on the CPU, even beside a GPU
    threads: int = 1                            # torch CPU threads: tiny models run best on one
    distill: tuple[str, ...] = ("inputs", "synth", "generic")  # distill rows (paw.bench.conditions); () = none
    #                                        ("inputs-shift" ...: the same inputs, the shift target)
    distill_steps: int | None = None            # distillation steps; None = DISTILL_STEPS_PER_LORA_STEP x lora_steps
    distill_token_focus: float = 0.0            # distill's --token-focus in every distill row (the ablation)
    distill_lr: float | None = None             # distill's learning rate; None = lora_lr (the LoRAs' recipe)
    jobs: int = 1                               # worker processes for the (seed, task) units (fork, or spawn)

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


def quick_options(**overrides: Any) -> BenchOptions:
    """A seconds-long configuration for tests (tiny models, few steps, few items)."""
    base = BenchOptions(seeds=(0,), items=20, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                        intermediate_size=64, vocab_size=300, pretrain_steps=20, batch_size=4, seq_len=32,
                        lora_steps=10, lora_batch=4, n_boot=50)
    return replace(base, **overrides)


def _csv(value: str, cast=str) -> tuple:
    return tuple(cast(v.strip()) for v in value.split(",") if v.strip())


def options_from(*, seeds: str, tasks: str, targets: str, methods: str, items: int, hidden_size: int,
                 num_layers: int, pretrain_steps: int, lora_steps: int, lora_rank: int, data: Path | None,
                 device: str, quick: bool, distill: str = "inputs,synth,generic", distill_steps: int | None = None,
                 jobs: int = 1, model_seed: int = 0, threads: int = 1, distill_token_focus: float = 0.0,
                 distill_lr: float | None = None) -> BenchOptions:
    """:class:`BenchOptions` from command-line strings (comma lists), checked.

    ``quick`` starts from :func:`quick_options`: the sizes and step counts given here are ignored, the
    lists, ``data``, device, distill, jobs, model seed and threads are kept.
    ``distill``: comma list of distill input budgets (inputs, synth, generic) or ``none``.
    """
    try:
        seed_values = _csv(seeds, int)
    except ValueError:
        raise PawError(f"--seeds {seeds!r}: expected comma-separated integers such as 0,1") from None
    if data is not None and not Path(data).is_dir():
        raise PawError("--data: not a folder of *_formatted.jsonl files", path=data)
    if data is not None and missing_sets(data):
        raise PawError(f"--data: lacks {', '.join(missing_sets(data))}", path=data)
    base = quick_options() if quick else BenchOptions(hidden_size=hidden_size, num_layers=num_layers,
                                                      intermediate_size=(hidden_size * 11 // 4) // 8 * 8,
                                                      pretrain_steps=pretrain_steps, lora_steps=lora_steps,
                                                      lora_rank=lora_rank, items=items)
    opts = replace(base, seeds=seed_values, tasks=_csv(tasks) or base.tasks, targets=_csv(targets) or base.targets,
                   methods=_csv(methods) or None, commonsense=str(data) if data else None, device=device,
                   distill=() if distill.strip() == "none" else _csv(distill), distill_steps=distill_steps, jobs=jobs,
                   model_seed=model_seed, threads=threads, distill_token_focus=distill_token_focus,
                   distill_lr=distill_lr)
    opts.check()
    return opts
