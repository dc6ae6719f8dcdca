"""Progress off a terminal: plain lines every few seconds and at the end, on stderr; a fake clock."""

from __future__ import annotations

import pytest

from paw import progress
from paw.errors import PawError
from paw.progress import format_duration, status, track


class FakeClock:
    """Time that moves only when a test says so: ``clock.now += 2.5``."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(progress, "_clock", fake)
    monkeypatch.delenv("PAW_PROGRESS", raising=False)
    monkeypatch.delenv("PAW_PROGRESS_EVERY", raising=False)
    return fake


def _run(n: int, clock: FakeClock, seconds_per_item: float, **kwargs) -> list[int]:
    seen = []
    for i in track(range(n), "distilling", unit="steps", **kwargs):
        seen.append(i)
        clock.now += seconds_per_item
    return seen


def test_long_work_prints_a_line_every_ten_seconds_and_at_the_end(clock, capsys):
    assert _run(900, clock, 0.25) == list(range(900))  # 225 s of work
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == ""  # stdout stays the command's own
    assert len(lines) == 23  # at 10, 20, ..., 220 s, then the end
    assert lines[0] == "[paw] distilling: 40/900 steps (4%), 4.0 steps/s, ETA 3 min 35 s"
    assert lines[-1] == "[paw] distilling: 900/900 steps (100%), 4.0 steps/s, took 3 min 45 s"


def test_a_resumed_run_counts_from_where_it_stopped_and_times_only_its_own_items(clock, capsys):
    # 125 of 300 steps were done by a stopped run; this one does the last 175 at 4 s a step
    seen = []
    for i in track(range(125, 300), "distilling", total=300, unit="steps", start=125):
        seen.append(i)
        clock.now += 4.0
    assert seen == list(range(125, 300))
    lines = capsys.readouterr().err.splitlines()
    # the old line read '3/175 steps (1%)'; one counting the stopped run's steps read 128/12 s = 11 steps/s
    assert lines[0] == "[paw] distilling: 128/300 steps (42%), 0.25 steps/s, ETA 11 min 28 s"
    assert lines[-1] == "[paw] distilling: 300/300 steps (100%), 0.25 steps/s, took 11 min 40 s"


def test_a_resumed_run_with_nothing_left_says_so_without_dividing_by_zero(clock, capsys, monkeypatch):
    monkeypatch.setenv("PAW_PROGRESS", "1")
    assert list(track(range(300, 300), "distilling", total=300, unit="steps", start=300)) == []
    assert capsys.readouterr().err == "[paw] distilling: 300/300 steps (100%), took 0 s\n"


def test_short_work_prints_nothing_unless_forced(clock, capsys, monkeypatch):
    _run(20, clock, 0.1)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PAW_PROGRESS", "1")
    _run(20, clock, 0.1)
    assert capsys.readouterr().err == "[paw] distilling: 20/20 steps (100%), 10.0 steps/s, took 2.0 s\n"


def test_paw_progress_0_silences_lines_and_status(clock, capsys, monkeypatch):
    monkeypatch.setenv("PAW_PROGRESS", "0")
    assert _run(100, clock, 1.0) == list(range(100))
    status("building target 'upgrade'")
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("PAW_PROGRESS")
    status("building target 'upgrade'")
    assert capsys.readouterr().err == "[paw] building target 'upgrade'\n"


def test_interval_from_the_environment(clock, capsys, monkeypatch):
    monkeypatch.setenv("PAW_PROGRESS_EVERY", "60")
    _run(900, clock, 0.25)
    assert len(capsys.readouterr().err.splitlines()) == 4  # at 60, 120, 180 s, then the end
    monkeypatch.setenv("PAW_PROGRESS_EVERY", "soon")
    with pytest.raises(PawError, match="PAW_PROGRESS_EVERY=soon"):
        _run(3, clock, 1.0)


def test_unknown_total_and_slow_items(clock, capsys):
    items = (i for i in range(3))  # a generator: no len()
    for _ in track(items, "scoring"):
        clock.now += 8.0
    assert capsys.readouterr().err.splitlines() == [
        "[paw] scoring: 2, 0.12 items/s",
        "[paw] scoring: 3, 0.12 items/s, took 24 s",
    ]


def test_a_terminal_gets_the_bar_not_lines(clock, capsys, monkeypatch):
    drawn = []
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(progress, "_bar", lambda items, description, total, start: (drawn.append(total), *items)[1:])
    assert _run(30, clock, 1.0) == list(range(30))
    assert drawn == [30] and capsys.readouterr().err == ""


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0042, "0.0042 s"), (0.25, "0.25 s"), (4.2, "4.2 s"), (9.97, "10 s"), (42, "42 s"), (59.6, "1 min"),
    (190, "3 min 10 s"), (3600, "1 h"), (7500, "2 h 5 min"), (200_000, "2 d 7 h"), (float("inf"), "unknown"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_a_loop_that_stops_early_still_ends_with_its_line(clock, capsys, monkeypatch):
    monkeypatch.setenv("PAW_PROGRESS", "1")
    monkeypatch.setenv("PAW_PROGRESS_EVERY", "60")
    for i in track(range(44), "BPE", unit="merges"):
        clock.now += 0.5
        if i == 34:
            break
    assert capsys.readouterr().err == "[paw] BPE: 35/44 merges (79%), 2.0 merges/s, took 18 s\n"
