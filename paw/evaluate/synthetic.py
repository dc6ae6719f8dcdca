"""Small synthetic multiple-choice tasks that a random tiny model cannot do and a LoRA can learn.

A *fact task* pairs made-up names with answers: ``"Fact: the colour of zorbin is"`` ->
``" red" | " blue" | " green" | " gold"``, the answer drawn at random (seeded) per name. A freshly
initialised model scores near chance (1 / number of choices); a few hundred LoRA steps store the
table. Two tasks with different relations (colour, home) give two fine-tunes for task vectors and
merging. Deterministic in ``seed``: same items, same order.
"""

from __future__ import annotations

import random

from paw.evaluate.items import MCItem

_SYLLABLES = ["ka", "zo", "ri", "mu", "te", "lo", "vi", "sa", "ne", "bu", "dor", "fin", "gal", "pix", "qua", "wen"]

RELATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "colour": ("Fact: the colour of {name} is", ("red", "blue", "green", "gold")),
    "home": ("Fact: {name} lives in the", ("sea", "forest", "city", "desert")),
}


def made_up_names(n: int, *, seed: int = 0) -> list[str]:
    """``n`` distinct pronounceable two- or three-syllable names, e.g. ``'zoridor'``."""
    rng = random.Random(seed)
    names: list[str] = []
    while len(names) < n:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 3))))
        if name not in names:
            names.append(name)
    return names


def fact_task(relation: str = "colour", *, n: int = 24, seed: int = 0) -> list[MCItem]:
    """``n`` items of one relation over ``made_up_names(n, seed=seed)``; answers uniform at random.

    >>> fact_task("colour", n=2)[0].question  # doctest: +SKIP
    'Fact: the colour of pixbu is'
    """
    template, values = RELATIONS[relation]
    rng = random.Random(f"{relation}-{seed}")
    items = []
    for i, name in enumerate(made_up_names(n, seed=seed)):
        answer = rng.randrange(len(values))
        items.append(MCItem(template.format(name=name), tuple(" " + v for v in values), answer,
                            id=f"{relation}-{i}"))
    return items


def tokenizer_corpus(*tasks: list[MCItem], repeat: int = 8) -> list[str]:
    """Lines to add to a tiny tokenizer's training text so that the tasks' names and answers become
    single tokens (a 400-token BPE then spells ``Fact: the colour of pixzone is`` in 7 tokens)."""
    lines = [item.question + item.choices[item.answer] for task in tasks for item in task] * repeat
    answers = " ".join(choice for task in tasks for choice in dict.fromkeys(c for i in task for c in i.choices))
    return lines + [answers] * (2 * repeat)
