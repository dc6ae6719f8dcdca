"""Progress on stderr for long work, so stdout stays parseable.

On a terminal, a rich bar (description, bar, count, time left). Off a terminal (a log file, a pipe,
CI) plain lines instead, at most one every ``PAW_PROGRESS_EVERY`` seconds (default 10) and one when
the work ends::

    [paw] distilling: 120/900 steps (13%), 4.1 steps/s, ETA 3 min 10 s
    [paw] distilling: 900/900 steps (100%), 4.0 steps/s, took 3 min 45 s

Work that ends within the first interval prints no line, so short commands and tests stay quiet.
``PAW_PROGRESS=0`` silences all of it (bars, lines and ``[paw]`` status lines); ``PAW_PROGRESS=1``
forces it: off a terminal, every piece of work then ends with its line, however short.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from paw.distributed import is_main
from paw.errors import PawError

T = TypeVar("T")

EVERY = 10.0  # seconds between two progress lines off a terminal (PAW_PROGRESS_EVERY overrides)
_clock = time.monotonic  # tests put a fake clock here


def _flag() -> str | None:
    """'0' (silent), '1' (forced) or None (the default: bar on a terminal, lines for long work).

    Silent on every rank but 0 of a ``torchrun`` group, so N processes show one bar.
    """
    if not is_main():
        return "0"
    flag = os.environ.get("PAW_PROGRESS", "").strip()
    return flag if flag in ("0", "1") else None


def _every() -> float:
    text = os.environ.get("PAW_PROGRESS_EVERY", "").strip()
    if not text:
        return EVERY
    try:
        every = float(text)
    except ValueError:
        every = math.nan
    if not every >= 0 or math.isinf(every):
        raise PawError(f"PAW_PROGRESS_EVERY={text} is not a number of seconds (default {EVERY:g})")
    return every


def track(items: Iterable[T], description: str, *, total: int | None = None, unit: str = "",
          start: int = 0) -> Iterator[T]:
    """``for step in track(range(900), 'distilling', unit='steps'): ...`` with progress on stderr.

    ``start``: items a stopped run already did, counted in ``total`` (``range(start, total)`` is what is
    left). The count starts there (``126/300``), and the rate and time left count only this run's items.
    """
    flag = _flag()
    if flag == "0":
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = start + len(items)  # type: ignore[arg-type]
    if sys.stderr.isatty():
        yield from _bar(items, description, total, start)
        return
    lines = Lines(description, total=total, unit=unit, every=_every(), always_end=flag == "1", start=start)
    done = start  # items done, this run's handed-out ones included (each is finished when the loop asks for the next)
    try:
        for item in items:
            done += 1
            yield item
            lines.update(done)
    finally:  # also when the loop stops early (a `break`, an error): the line says where
        lines.end(done)


def _bar(items: Iterable[T], description: str, total: int | None, start: int = 0) -> Iterator[T]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total, completed=start)
        for item in items:
            yield item
            progress.advance(task)


class Lines:
    """Plain progress lines for a log, timed by ``clock`` (seconds).

    >>> lines = Lines("distilling", total=900, unit="steps", clock=lambda: 0.0)  # started at 0 s
    >>> lines.line(120, 29.3, end=False)  # what update(120) prints at 29.3 s, 10 s after the last line
    '[paw] distilling: 120/900 steps (13%), 4.1 steps/s, ETA 3 min 10 s'
    >>> resumed = Lines("distilling", total=900, unit="steps", start=780, clock=lambda: 0.0)  # 780 done before
    >>> resumed.line(900, 29.3, end=True)  # the rate counts this run's 120 steps only
    '[paw] distilling: 900/900 steps (100%), 4.1 steps/s, took 29 s'
    """

    def __init__(self, description: str, *, total: int | None, unit: str = "", every: float = EVERY,
                 always_end: bool = False, clock=None, stream=None, start: int = 0):
        self.description, self.total, self.unit, self.every = description, total, unit, every
        self.begun = start  # items done before this run (a resumed one): in the count, not in the rate
        self.always_end = always_end  # PAW_PROGRESS=1: the last line even for work shorter than `every`
        self.clock = clock or _clock
        self.stream = stream  # None: sys.stderr when printing (pytest's capsys swaps it)
        self.start = self.clock()
        self.next_at = self.start + every
        self.printed = 0

    def update(self, done: int) -> None:
        """Print a line if ``every`` seconds passed since the last one (or the start)."""
        now = self.clock()
        if now >= self.next_at:
            self._print(done, now, end=False)
            self.next_at = now + self.every

    def end(self, done: int) -> None:
        """The last line, when lines were printed, the work took ``every`` seconds or it is forced."""
        now = self.clock()
        if self.printed or self.always_end or now - self.start >= self.every:
            self._print(done, now, end=True)

    def line(self, done: int, now: float, *, end: bool) -> str:
        elapsed = max(now - self.start, 0.0)
        unit = f" {self.unit}" if self.unit else ""
        rate = (done - self.begun) / elapsed if elapsed > 0 else math.inf
        parts = [f"{done}/{self.total}{unit} ({100 * done // max(self.total, 1)}%)" if self.total is not None
                 else f"{done}{unit}"]
        if math.isfinite(rate):
            parts.append(f"{_rate(rate)} {self.unit or 'items'}/s")
        if end:
            parts.append(f"took {format_duration(elapsed)}")
        elif self.total is not None and rate > 0 and math.isfinite(rate):
            parts.append(f"ETA {format_duration((self.total - done) / rate)}")
        return f"[paw] {self.description}: {', '.join(parts)}"

    def _print(self, done: int, now: float, *, end: bool) -> None:
        print(self.line(done, now, end=end), file=self.stream or sys.stderr, flush=True)
        self.printed += 1


def _rate(per_second: float) -> str:
    """``4.1``, ``230``, ``0.25``: two significant digits below 10, whole numbers from 100."""
    if per_second >= 100:
        return f"{per_second:.0f}"
    return f"{per_second:.1f}" if per_second >= 1 else f"{per_second:.2g}"


def format_duration(seconds: float) -> str:
    """A duration as a person says it.

    >>> [format_duration(s) for s in (0.25, 4.2, 42, 190, 7500, 200000)]
    ['0.25 s', '4.2 s', '42 s', '3 min 10 s', '2 h 5 min', '2 d 7 h']
    """
    if not math.isfinite(seconds) or seconds < 0:
        return "unknown"
    if seconds < 1:
        return f"{seconds:.2g} s"
    if seconds < 9.95:  # 9.96 would read '10.0 s'
        return f"{seconds:.1f} s"
    whole = round(seconds)
    for size, name, small_size, small_name in ((86400, "d", 3600, "h"), (3600, "h", 60, "min"), (60, "min", 1, "s")):
        if whole >= size:
            big, rest = divmod(whole, size)
            small = rest // small_size
            return f"{big} {name} {small} {small_name}" if small else f"{big} {name}"
    return f"{whole} s"


def status(message: str) -> None:
    """One line of progress text on stderr (``[paw] message``); none with ``PAW_PROGRESS=0``."""
    if _flag() != "0":
        print(f"[paw] {message}", file=sys.stderr, flush=True)
