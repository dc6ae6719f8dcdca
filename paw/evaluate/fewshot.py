"""Few-shot prompts: K solved examples from a few-shot source before each question, drawn as lm-eval draws them.

lm-evaluation-harness builds a multiple-choice context from K examples of the task's few-shot split
(its training split, when it has one), each ``doc_to_text + target_delimiter + answer``, joined by the
``fewshot_delimiter`` and followed by it and the question::

    Question: Which gas do plants take in?\\nAnswer: carbon dioxide\\n\\n      <- example 1 (of K)
    Question: ...\\nAnswer: ...\\n\\n                                        <- example K
    Question: <the item>\\nAnswer:                                          <- scored as before

The examples are drawn by lm-eval's default ``ContextSampler``, reproduced here call for call: one
``random.Random(seed)`` for the whole run, and for each item in order ``rnd.sample(pool, K)``; where
the item itself is in the pool (the source is the evaluated file), ``rnd.sample(pool, K + 1)`` with the
item removed, as lm-eval does when its few-shot split is the test split. With lm-eval's default few-shot
seed (1234) and the same pool in the same order, the examples are lm-eval's own
(``scripts/parity_eval_lmeval.py --num-fewshot 5``). An item is never its own example: one that a
separate source holds too (the same question, choices and answer) is drawn around like the evaluated
file's, where lm-eval would keep it.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import TypeVar

from paw.errors import PawError
from paw.evaluate.items import GenItem, MCItem

Item = TypeVar("Item", MCItem, GenItem)

FEWSHOT_DELIMITER = "\n\n"   # lm-eval's default, between examples and before the question


_NOT_CONTENT = ("id", "group", "prefix", "shots")


def _key(item: MCItem | GenItem) -> tuple:
    """What makes two items the same item: their fields but the id, group and few-shot examples (for an
    :class:`MCItem` the question, choices, answer and fill_blank; for a :class:`GenItem` the question and
    references)."""
    return tuple(getattr(item, f.name) for f in dataclasses.fields(item) if f.name not in _NOT_CONTENT)


def draw(items: Sequence[Item], pool: Sequence[Item], k: int, *, seed: int) -> list[list[int]]:
    """Indices into ``pool`` of the ``k`` examples of every item, in order (lm-eval's ``ContextSampler.sample``).

    >>> pool = [MCItem(f"q{i}", (" a", " b"), 0) for i in range(5)]
    >>> draw(pool[:2], pool, 2, seed=1234)   # never an item's own index
    [[3, 4], [0, 4]]
    """
    if k < 1:
        return [[] for _ in items]
    where: dict[tuple, list[int]] = {}
    for i, example in enumerate(pool):
        where.setdefault(_key(example), []).append(i)
    rnd = random.Random(seed)
    indices = list(range(len(pool)))
    drawn = []
    for item in items:
        own = set(where.get(_key(item), ()))
        if len(indices) - len(own) < k:
            raise PawError(f"{k} few-shot examples asked for, but the few-shot source holds only "
                           f"{len(indices) - len(own)} other than the item {item.id or item.question[:40]!r}")
        if not own:
            drawn.append(rnd.sample(indices, k))
            continue
        picked = [i for i in rnd.sample(indices, k + 1) if i not in own][:k]
        if len(picked) < k:   # the pool holds the item twice and both were drawn: lm-eval draws again without it
            picked = rnd.sample([i for i in indices if i not in own], k)
        drawn.append(picked)
    return drawn


def with_examples(items: Sequence[Item], pool: Sequence[Item], k: int, *,
                  seed: int) -> tuple[list[Item], list[list[int]]]:
    """``items`` with ``k`` solved examples of ``pool`` before each question (:attr:`MCItem.prefix`, and each
    example's (context, answer) in :attr:`MCItem.shots` for a multi-turn chat), and the examples' indices into
    ``pool``. Multiple-choice items or generation items (:class:`GenItem`), the same kind in both.

    >>> pool = [MCItem("Q: 1 + 1 =", (" 2", " 3"), 0), MCItem("Q: 2 + 1 =", (" 4", " 3"), 1)]
    >>> shot, _ = with_examples([MCItem("Q: 2 + 2 =", (" 4", " 5"), 0)], pool, 1, seed=0)
    >>> shot[0].pairs()[0]
    ('Q: 2 + 1 = 3\\n\\nQ: 2 + 2 =', ' 4')
    """
    drawn = draw(items, pool, k, seed=seed)
    shot = [dataclasses.replace(item, prefix="".join(pool[i].solved() + FEWSHOT_DELIMITER for i in picks),
                                shots=tuple(pool[i].shot() for i in picks))
            for item, picks in zip(items, drawn, strict=True)]
    return shot, drawn
