"""The knobs of ``paw bench real``, apart from its work: the source of its flags and ``--config`` keys
(:mod:`paw.knobs`), read at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.bench import DISTILL_STEPS_PER_LORA_STEP, comma_names, distill_steps_for
from paw.errors import PawError
from paw.knobs import knob, require

SMOL, GEMMA = "smollm2-135m-instruct", "gemma-3-270m"
PARTS = ("eval", "tokenizers", "transfer", "merge", "tasks")
DEFAULT_PARTS = PARTS[:4]   # 'tasks' (real task LoRAs, paw.bench.real.tasks) takes hours on a CPU: asked for by name
# paw.bench.real.task_sets.TASKS, spelled here so that --help reads no task module (a test compares)
REAL_TASK_NAMES = ("arc-easy", "piqa", "boolq")


@dataclass(frozen=True)
class RealOptions:
    """Knobs of ``paw bench real``; the defaults are the documented run (15.5 min on 2 cores)."""

    models: str | None = knob(None, f"Folder written by scripts/real_models.sh (holds {SMOL}/ and {GEMMA}/).",
                              cli=Path, parse=str)
    data: str | None = knob(None, "Commonsense folder with raw/*.jsonl (ARC, OpenBookQA, PIQA, BoolQ, Winogrande).",
                            cli=Path, parse=str)   # part 'eval' and 'tasks'
    parts: tuple[str, ...] = knob(DEFAULT_PARTS, f"Parts to run (comma list): {', '.join(DEFAULT_PARTS)}; and tasks "
                                  "(real task LoRAs moved both ways: hours on a CPU, resumable with --workdir).",
                                  cli=str, parse=comma_names)
    eval_items: int = knob(100, "Seeded subset of each evaluation set.")
    task_items: int = knob(60, "Held-out items of the LoRA tasks.")
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_steps: int = knob(40, "LoRA training steps.")
    lora_batch: int = 8
    lora_lr: float = 2e-3
    distill_steps: int | None = knob(None, f"Steps of the distillation. Default: {DISTILL_STEPS_PER_LORA_STEP} x "
                                           "--lora-steps.")   # the rule of `paw bench transfer`
    methods: tuple[str, ...] | None = knob(None, "Transfer methods (comma list). Default: auto and every method.",
                                           cli=str, parse=lambda text: comma_names(text) or None)
    layer_map: str = "relative-depth"    # 30 SmolLM2 layers against 18 Gemma layers
    seed: int = knob(0, "Subset, task and LoRA seed.")
    n_boot: int = 1000
    batch_size: int = 16
    device: str = "cpu"                  # the command gives its --device, resolved
    real_tasks: tuple[str, ...] = knob(("arc-easy", "piqa"), "Tasks of the part 'tasks' (comma list): "
                                       f"{', '.join(REAL_TASK_NAMES)}.", cli=str, parse=comma_names)

    @property
    def distill_budget(self) -> int:
        return distill_steps_for(self.lora_steps, self.distill_steps)

    def check(self) -> None:
        require(self, "models")
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
            from paw.bench.real.task_sets import TASKS

            unknown = [t for t in self.real_tasks if t not in TASKS]
            if unknown:
                raise PawError(f"--real-tasks: unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
        if any(p in self.parts for p in ("eval", "tasks")) and not (self.data and (Path(self.data) / "raw").is_dir()):
            raise PawError("parts 'eval' and 'tasks' need --data: the commonsense folder with raw/*.jsonl",
                           path=self.data or "")


@dataclass(frozen=True)
class RealRun:
    """Where ``paw bench real`` writes and keeps its fine-tunes: nothing the results depend on."""

    output: str | Path | None = knob(None, "Folder for results.json, results.md, real.png.", short="-o", cli=Path)
    workdir: str | Path | None = knob(None, "Where fine-tunes and merges are kept (default: temporary).", cli=Path)

    def check(self) -> None:
        require(self, "output")


CELL_MOVES = ("lora", "main")   # a cell's VARIANT beside paw.bench.real.tasks.VARIANTS: the LoRA alone, the main move
CHECKS = ("scores", "distill")  # what --check-device compares (paw.bench.real.device_check)


@dataclass(frozen=True)
class RealCell:
    """Instead of the parts: one cell of the part 'tasks' on its own (:mod:`paw.bench.real.cell`; a GPU lease
    runs each in its own process, on a work folder that may hold the main run's scores and not its adapters)."""

    cell: tuple[str, ...] | None = knob(None, "Instead of the parts: one cell of part 'tasks', kept in --workdir "
                                        "(VARIANT: lora, main or a variant).", metavar="TASK SOURCE TARGET VARIANT")
    stand_in_loras: bool = knob(False, "With --cell for base-teacher: one-step LoRAs stand in for uncached ones.")

    def check(self, models: str | Path) -> None:
        """The cell names a task, two model folders under ``models`` and a move; ``--stand-in-loras`` only
        with the base-teacher control (the other moves' teachers use the LoRA)."""
        from paw.bench.real.task_sets import TASKS
        from paw.bench.real.tasks import VARIANTS

        if self.cell is None:
            if self.stand_in_loras:
                raise PawError("--stand-in-loras goes with --cell TASK SOURCE TARGET base-teacher")
            return
        if len(self.cell) != 4:
            raise PawError(f"--cell takes TASK SOURCE TARGET VARIANT, not {len(self.cell)} value(s): "
                           f"{' '.join(self.cell)}")
        task, source, target, move = self.cell
        if task not in TASKS:
            raise PawError(f"--cell: unknown task {task!r}; choose from {', '.join(TASKS)}")
        if move not in (*CELL_MOVES, *VARIANTS):
            raise PawError(f"--cell: unknown variant {move!r}; choose from {', '.join((*CELL_MOVES, *VARIANTS))}")
        for name in (source, target):
            if not (Path(models) / name / "config.json").is_file():
                raise PawError(f"--cell: no model folder {name}/ here", path=models)
        if self.stand_in_loras and move != "base-teacher":
            raise PawError("--stand-in-loras applies to the base-teacher control only (the others' teachers use the "
                           "LoRA)")


@dataclass(frozen=True)
class RealCheck:
    """Instead of the parts: does ``--device`` score the real models as the CPU does (:mod:`paw.bench.real.device_check`;
    the first lines of a GPU lease's log)."""

    check_device: tuple[str, ...] | None = knob(None, f"Instead of the parts: --device against the CPU (comma list): "
                                                f"{', '.join(CHECKS)}.", cli=str, parse=comma_names)

    def check(self) -> None:
        unknown = [c for c in self.check_device or () if c not in CHECKS]
        if unknown:
            raise PawError(f"--check-device: unknown check {unknown[0]!r}; choose from {', '.join(CHECKS)}")
