"""Benchmarks of PAW's methods on models built on the spot: model surgery and transfer quality."""

# Distillation steps per step of the benchmarks' own LoRAs. The source LoRA learns from labels; the
# student sees each input only through the teacher's continuation, a weaker signal per step. With
# 300 steps (the LoRA's budget) the 150-fact task kept 0.51-0.80 on the targets trained apart; 900
# kept 0.94-0.96 (docs/distill.md, "Steps"). Both `paw bench transfer` and `paw bench real` use it.
DISTILL_STEPS_PER_LORA_STEP = 3


def distill_steps_for(lora_steps: int, distill_steps: int | None) -> int:
    """Steps of a benchmark's distillation: ``distill_steps`` when given, else the rule above."""
    return distill_steps if distill_steps is not None else DISTILL_STEPS_PER_LORA_STEP * lora_steps


# The suffix of a distill row's input budget that trains with distill's --target shift (``inputs-shift``):
# the student learns its own base plus what the adapter changed in the teacher (paw.bench.distill).
SHIFT = "-shift"


def comma_names(text: str) -> tuple[str, ...]:
    """A comma list as a benchmark flag takes it: ``'facts, rule,'`` -> ``('facts', 'rule')``."""
    return tuple(v.strip() for v in text.split(",") if v.strip())
