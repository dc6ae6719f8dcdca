"""Proxy-tuning: a target model scored with another model's adapter shift added per choice, no training.

Liu et al. 2024 ("Tuning Language Models by Proxy", arXiv 2401.08565) and Mitchell et al. 2023
(emulated fine-tuning, arXiv 2310.12962) add a small tuned model's log-probability shift (tuned
minus untuned) to a large base model at decoding time. On multiple-choice items the shift is taken
per choice, each model summing its own tokens of the same text, so the models need not share a
tokenizer:

    score(choice) = target(choice) + scale * (expert(choice) - anti_expert(choice))

where the expert is the source base with its adapter and the anti-expert the same base without it.
It is the ceiling of what ``paw transfer-lora --method distill --target shift`` can train into a LoRA.
"""

from __future__ import annotations

from collections.abc import Sequence

from paw.errors import PawError


def proxy_scores(target: Sequence[tuple[float, int]], expert: Sequence[tuple[float, int]],
                 anti: Sequence[tuple[float, int]], scale: float = 1.0) -> list[tuple[float, int]]:
    """Per choice ``(target + scale * (expert - anti), target's token count)``, in the order given.

    >>> proxy_scores([(-3.0, 2), (-1.0, 1)], [(-1.0, 3), (-2.0, 3)], [(-2.0, 3), (-2.0, 3)])
    [(-2.0, 2), (-1.0, 1)]
    """
    if not len(target) == len(expert) == len(anti):
        raise PawError(f"proxy-tuning needs one score per choice from each model ({len(target)}, {len(expert)}, "
                       f"{len(anti)})")
    return [(t + scale * (e - a), n) for (t, n), (e, _), (a, _) in zip(target, expert, anti, strict=True)]
