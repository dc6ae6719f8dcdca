"""Run a function over chunks of a list on every core (processes: BPE in Python holds the GIL).

The shared state (an encoder with a 100k-entry rank table, a compiled pattern) reaches the
workers by ``fork`` where the platform has it, so nothing large is pickled per task.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

_STATE: Any = None


def _init(state: Any) -> None:
    global _STATE
    _STATE = state


def _call(task):
    fn, chunk = task
    return fn(_STATE, chunk)


def map_chunks(fn: Callable[[Any, list], Any], items: Sequence, *, state: Any, processes: int | None = None,
               chunks_per_process: int = 4) -> list:
    """``[fn(state, chunk) for chunk in chunks(items)]`` with the chunks spread over processes.

    Chunks are contiguous and results come back in order, so flattening them keeps item order.
    ``processes=1`` (or a single item) runs in this process.
    """
    items = list(items)
    processes = min(processes or os.cpu_count() or 1, max(1, len(items)))
    if processes <= 1:
        return [fn(state, items)]
    n = min(len(items), processes * chunks_per_process)
    bounds = [round(i * len(items) / n) for i in range(n + 1)]
    tasks = [(fn, items[a:b]) for a, b in pairwise(bounds)]
    if "fork" in mp.get_all_start_methods():
        _init(state)
        ctx, init, args = mp.get_context("fork"), None, ()
    else:
        ctx, init, args = mp.get_context("spawn"), _init, (state,)
    try:
        with ctx.Pool(processes, initializer=init, initargs=args) as pool:
            return pool.map(_call, tasks)
    finally:
        _init(None)


def map_processes(fn: Callable[[Any, list], list], items: Sequence, *, state: Any,
                  processes: int | None = None) -> list:
    """Like :func:`map_chunks` but flattens: one result per item, in item order."""
    return [x for part in map_chunks(fn, items, state=state, processes=processes) for x in part]
