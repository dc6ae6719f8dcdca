"""Progress bars on stderr for long work (rich, which comes with typer).

Bars are drawn only when stderr is a terminal or ``PAW_PROGRESS=1``; logs and tests stay clean.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def _enabled() -> bool:
    flag = os.environ.get("PAW_PROGRESS")
    return flag == "1" if flag is not None else sys.stderr.isatty()


def track(items: Iterable[T], description: str, *, total: int | None = None) -> Iterator[T]:
    """``for name in track(names, 'task vectors'): ...`` with a bar, ETA and count."""
    if not _enabled():
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)


def status(message: str) -> None:
    """One line of progress text on stderr (``[paw] message``)."""
    print(f"[paw] {message}", file=sys.stderr, flush=True)
