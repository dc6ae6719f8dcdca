"""PAW's one training wing: a :class:`Recipe` (steps, rate schedule, accumulation, clipping, seed) and the
one optimiser loop :func:`run` that every trainer (LoRA, full fine-tuning, distillation, transplant
healing, the benchmark's pretraining) drives with its own loss and batches."""

from paw.train.loop import NonFiniteLoss, Run, run
from paw.train.recipe import SCHEDULES, Recipe

__all__ = ["SCHEDULES", "NonFiniteLoss", "Recipe", "Run", "run"]
