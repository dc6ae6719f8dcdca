"""The real tasks of ``paw bench real --parts tasks`` and their splits, fixed before any transfer result
(docs/distill.md#real-tasks says why)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.evaluate.formats import read_items


@dataclass(frozen=True)
class TaskSplit:
    """Where a task's training inputs and test items come from (file stems under ``<data>/raw``).

    ``test=None``: the set has one labelled split; it is cut into two seeded disjoint parts, the
    first for training, the second for testing: halves, or ``test_size`` test items and the rest.
    """

    train: str
    test: str | None = None
    test_size: int | None = None


TASKS = {  # decided before any transfer result; docs/distill.md#real-tasks says why
    "arc-easy": TaskSplit("arc-easy_train", "arc-easy_test"),   # 2,251 / 2,376
    # the second task since 2026-11-26 (BoolQ's ~600-token passages cost ~40 h of 2 CPU cores for both
    # directions; no BoolQ or PIQA transfer result had been seen): 838 training inputs / 1,000 test items
    "piqa": TaskSplit("piqa_validation", test_size=1000),
    "boolq": TaskSplit("boolq_validation"),            # 3,270 -> 1,635 train inputs / 1,635 test items (GPU)
}


def split(items: list, task: TaskSplit, test_items: list | None, seed: int) -> tuple[list, list]:
    """``(train, test)`` of a task: its two splits, or two seeded disjoint parts of its one split.

    >>> split(list(range(6)), TaskSplit("x"), None, 0) == split(list(range(6)), TaskSplit("x"), None, 0)
    True
    >>> sorted(sum(split(list(range(6)), TaskSplit("x"), None, 0), []))
    [0, 1, 2, 3, 4, 5]
    >>> [len(part) for part in split(list(range(10)), TaskSplit("x", test_size=3), None, 0)]
    [7, 3]
    """
    if test_items is not None:
        return list(items), list(test_items)
    order = list(range(len(items)))
    random.Random(f"paw-real-task-halves-{seed}").shuffle(order)
    cut = len(items) // 2 if task.test_size is None else len(items) - task.test_size
    if cut < 1 or cut >= len(items):
        raise PawError(f"{task.train}: {len(items)} items cannot give {len(items) - cut} test items and a training part")
    return [items[i] for i in sorted(order[:cut])], [items[i] for i in sorted(order[cut:])]


def load_task(data: str | Path, name: str, seed: int) -> tuple[list, list]:
    """The training and test items of task ``name`` from the commonsense folder's ``raw/`` files."""
    if name not in TASKS:
        raise PawError(f"unknown real task {name!r}; choose from {', '.join(TASKS)}")
    t = TASKS[name]
    raw = Path(data) / "raw"
    train = read_items(raw / f"{t.train}.jsonl")
    return split(train, t, read_items(raw / f"{t.test}.jsonl") if t.test else None, seed)
