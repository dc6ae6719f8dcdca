"""The knobs of ``paw bench real``, apart from its work: the CLI reads its defaults at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.bench import distill_steps_for
from paw.errors import PawError

SMOL, GEMMA = "smollm2-135m-instruct", "gemma-3-270m"
PARTS = ("eval", "tokenizers", "transfer", "merge", "tasks")
DEFAULT_PARTS = PARTS[:4]   # 'tasks' (real task LoRAs, paw.bench.real_tasks) takes hours on a CPU: asked for by name


@dataclass(frozen=True)
class RealOptions:
    """Knobs of ``paw bench real``; the defaults are the documented run (15.5 min on 2 cores)."""

    models: str                          # folder holding smollm2-135m-instruct/ and gemma-3-270m/
    data: str | None = None              # commonsense folder with raw/*.jsonl (part 'eval')
    parts: tuple[str, ...] = DEFAULT_PARTS
    eval_items: int = 100                # seeded subset per evaluation set
    task_items: int = 60                 # held-out items of the LoRA tasks
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_steps: int = 40
    lora_batch: int = 8
    lora_lr: float = 2e-3
    distill_steps: int | None = None     # None = DISTILL_STEPS_PER_LORA_STEP x lora_steps, as in `paw bench transfer`
    methods: tuple[str, ...] | None = None   # transfer methods; None = auto and every registered one
    layer_map: str = "relative-depth"    # 30 SmolLM2 layers against 18 Gemma layers
    seed: int = 0
    n_boot: int = 1000
    batch_size: int = 16
    device: str = "cpu"
    real_tasks: tuple[str, ...] = ("arc-easy", "piqa")   # part 'tasks': paw.bench.real_tasks.TASKS

    @property
    def distill_budget(self) -> int:
        return distill_steps_for(self.lora_steps, self.distill_steps)

    def check(self) -> None:
        for name in (SMOL, GEMMA):
            if not (Path(self.models) / name / "config.json").is_file():
                raise PawError(f"no {name}/ model folder here; run scripts/real_models.sh FOLDER first",
                               path=self.models)
        if self.distill_steps is not None and self.distill_steps < 1:
            raise PawError(f"--distill-steps {self.distill_steps}: at least 1")
        unknown = [p for p in self.parts if p not in PARTS]
        if unknown:
            raise PawError(f"unknown part {unknown[0]!r}; choose from {', '.join(PARTS)}")
        if "tasks" in self.parts:
            from paw.bench.real_tasks import TASKS

            unknown = [t for t in self.real_tasks if t not in TASKS]
            if unknown:
                raise PawError(f"--real-tasks: unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
        if any(p in self.parts for p in ("eval", "tasks")) and not (self.data and (Path(self.data) / "raw").is_dir()):
            raise PawError("parts 'eval' and 'tasks' need --data: the commonsense folder with raw/*.jsonl",
                           path=self.data or "")
