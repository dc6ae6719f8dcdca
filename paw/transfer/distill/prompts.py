"""What a distillation trains on: label-free task inputs, as :class:`Prompt` s.

A prompt is a text the teacher continues and, for multiple-choice inputs, the ``(context,
continuation)`` pairs of its choices (never which one is right). They come from

- a file of task inputs (:func:`prompts_from`; answers of a multiple-choice file are dropped);
- :func:`generic_prompts`, the embedded sample text cut into sentence prefixes (no task data);
- :func:`paw.transfer.distill.synthesis.synthesize`, the teacher writing new inputs from a few seeds.

What the teacher writes after them is :mod:`paw.transfer.distill.generation`'s.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from paw.errors import PawError
from paw.evaluate.items import MCItem

START = "own"  # sequences start with the tokenizer's own special tokens (paw.evaluate.encode.encode_pair)


@dataclass(frozen=True)
class Prompt:
    """A task input: ``text`` for the teacher to continue; ``pairs`` its choices as (context, continuation)."""

    text: str
    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, value: str | MCItem | Prompt) -> Prompt:
        """From a plain string, or an :class:`MCItem` whose answer is dropped (one choice: the answer, dropped too).

        >>> Prompt.of(MCItem("2 + 2 =", (" 3", " 4"), 1)).pairs
        (('2 + 2 =', ' 3'), ('2 + 2 =', ' 4'))
        """
        if isinstance(value, Prompt):
            return value
        if isinstance(value, MCItem):
            pairs = tuple(value.pairs()) if len(value.choices) >= 2 else ()
            text = value.question.partition("_")[0].rstrip() if value.fill_blank else value.question
            return cls(text, pairs)
        return cls(str(value))


def prompts_from(values: Sequence[str | MCItem | Prompt], *, what: str = "prompts") -> list[Prompt]:
    """Prompts with blank texts dropped and exact duplicates merged (first kept); PawError when none is left."""
    seen: set[Prompt] = set()
    out = []
    for value in values:
        prompt = Prompt.of(value)
        if prompt.text.strip() and prompt not in seen:
            seen.add(prompt)
            out.append(prompt)
    if not out:
        raise PawError(f"no {what}: nothing to distill on")
    return out


def generic_prompts(lines: Sequence[str], *, min_words: int = 3, step: int = 3) -> list[Prompt]:
    """Sentence prefixes of generic text: every ``step``-th word boundary after ``min_words`` words.

    >>> [p.text for p in generic_prompts(["The cat sat on the mat today."], step=2)]
    ['The cat sat', 'The cat sat on the']
    """
    out = []
    for line in lines:
        for sentence in re.split(r"(?<=[.!?])\s+", line.strip()):
            words = sentence.split()
            out += [Prompt(" ".join(words[:k])) for k in range(min_words, len(words) - 1, step)]
    return prompts_from(out, what="generic prompts")


def split_holdout(prompts: list[Prompt], fraction: float, *, seed: int, cap: int = 64) -> tuple[list[Prompt], list[Prompt]]:
    """``(train, held_out)``: a seeded ``fraction`` (at most ``cap``, none when fewer than 10 prompts) set aside."""
    n = min(cap, int(len(prompts) * fraction)) if len(prompts) >= 10 else 0
    order = list(range(len(prompts)))
    random.Random(f"holdout-{seed}").shuffle(order)
    held = set(order[:n])
    return [p for i, p in enumerate(prompts) if i not in held], [p for i, p in enumerate(prompts) if i in held]
