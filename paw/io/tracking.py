"""Experiment tracking: ``none``, a metrics CSV, or swanlab or Weights & Biases in offline mode.

>>> tracker = make_tracker("csv", "runs/lora", {"rank": 16})  # doctest: +SKIP
>>> tracker.log({"train/loss": 2.31}, step=10)  # doctest: +SKIP
>>> tracker.finish()  # doctest: +SKIP

Every tracker writes under ``run_dir`` only. ``swanlab`` runs with ``mode="offline"`` and
``log_dir=run_dir/swanlog``: nothing leaves the machine; ``swanlab sync <run folder>`` uploads it
later if the user wants. ``wandb`` runs offline under ``run_dir/wandb`` too (``wandb sync`` uploads
it), unless ``WANDB_MODE`` in the environment says otherwise (``online``, ``disabled``). Which
tracker a command uses is the ``--track`` option.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from paw.errors import PawError
from paw.io.manifest import write_json


class Tracker(Protocol):
    """What commands call: ``log`` scalar metrics at a step, ``finish`` once at the end."""

    run_dir: Path | None

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


class NullTracker:
    """``--track none``: keeps nothing."""

    run_dir = None

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class CsvTracker:
    """``--track csv``: ``run_dir/metrics.csv`` in long form (``step,metric,value``) + ``config.json``.

    Long form because metrics come and go (train loss every few steps, test accuracy once);
    ``pandas.read_csv(...).pivot(index="step", columns="metric", values="value")`` gives the wide table.
    """

    def __init__(self, run_dir: str | Path, config: Mapping[str, Any], shown: Path | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_json(self.run_dir / "config.json", dict(config))
        self.path = self.run_dir / "metrics.csv"
        self.shown = (shown or self.run_dir) / "metrics.csv"  # where the user will find it
        self.path.unlink(missing_ok=True)  # a new file: a hard link or symlink left there is never written through
        self._file = self.path.open("w", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)
        self._writer.writerow(["step", "metric", "value"])

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for name, value in metrics.items():
            if _is_scalar(value):
                self._writer.writerow([step, name, repr(float(value))])
        self._file.flush()

    def finish(self) -> None:
        if not self._file.closed:
            self._file.close()
            _say(f"metrics CSV: {self.shown}")


class _LibraryRun:
    """What the swanlab and wandb trackers share: a library run (``self._run``) that takes the scalars, its
    output hushed when it finishes; where the logs are is said once, at the start."""

    _run: Any = None

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        scalars = {k: float(v) for k, v in metrics.items() if _is_scalar(v)}
        if scalars and self._run is not None:
            self._run.log(scalars, step=step)

    def finish(self) -> None:
        if self._run is not None:
            with _hushed():
                self._run.finish()
            self._run = None


class SwanlabTracker(_LibraryRun):
    """``--track swanlab``: a swanlab run in offline mode under ``run_dir/swanlog``."""

    def __init__(self, run_dir: str | Path, config: Mapping[str, Any], shown: Path | None = None):
        try:
            import swanlab
        except ImportError:
            raise PawError("--track swanlab needs the swanlab package (pip install swanlab)") from None
        self.run_dir = Path(run_dir)
        log_dir = self.run_dir / "swanlog"
        log_dir.mkdir(parents=True, exist_ok=True)
        config = dict(config)
        with _hushed():  # swanlab prints its banner and its sync hint at start and again at finish
            self._run = swanlab.init(mode="offline", log_dir=str(log_dir), project=str(config.get("project", "paw")),
                                     name=str(config.get("name", self.run_dir.name)), config=_plain(config),
                                     reinit=True)
        self.log_dir = log_dir
        where = getattr(self._run, "dir", None) or log_dir
        _say(f"swanlab offline logs: {where} (nothing is uploaded; `swanlab sync {where}` publishes them)")


class WandbTracker(_LibraryRun):
    """``--track wandb``: a Weights & Biases run under ``run_dir/wandb``, offline unless ``WANDB_MODE`` is set."""

    def __init__(self, run_dir: str | Path, config: Mapping[str, Any], shown: Path | None = None):
        try:
            import wandb
        except ImportError:
            raise PawError("--track wandb needs the wandb package (pip install wandb)") from None
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config = dict(config)
        mode = os.environ.get("WANDB_MODE", "").strip() or "offline"  # the user's environment decides, else offline
        with _hushed():  # wandb prints its banner, its run folder and its sync hint
            self._run = wandb.init(dir=str(self.run_dir), mode=mode, project=str(config.get("project", "paw")),
                                   name=str(config.get("name", (shown or self.run_dir).name)), config=_plain(config))
        where = Path(getattr(self._run, "dir", None) or self.run_dir)
        shown_where = (shown / where.relative_to(self.run_dir)) if shown and where.is_relative_to(self.run_dir) \
            else where
        if mode == "offline":
            run_folder = shown_where.parent if shown_where.name == "files" else shown_where
            _say(f"wandb offline run: {run_folder} (nothing is uploaded; `wandb sync {run_folder}` publishes it)")
        else:
            _say(f"wandb run ({mode}): {getattr(self._run, 'url', None) or shown_where}")


TRACKERS: dict[str, Callable[..., Any]] = {  # (run_dir, config, shown) -> tracker
    "none": lambda run_dir, config, shown=None: NullTracker(),
    "csv": CsvTracker,
    "swanlab": SwanlabTracker,
    "wandb": WandbTracker,
}


_PACKAGES = {"swanlab": "swanlab", "wandb": "wandb"}  # tracker -> the package it needs


def check_kind(kind: str) -> str:
    """Refuse an unknown ``--track`` value, or one whose package is not installed, before any heavy work."""
    if kind not in TRACKERS:
        raise PawError(f"--track {kind!r}: choose one of {', '.join(TRACKERS)}")
    package = _PACKAGES.get(kind)
    if package is not None and not _installed(package):
        raise PawError(f"--track {kind} needs the {package} package (pip install {package})")
    return kind


def _installed(package: str) -> bool:
    """Whether ``import package`` would find it, without importing it (wandb takes seconds to import)."""
    import importlib.util

    if package in sys.modules:  # imported already (or blocked: None)
        return sys.modules[package] is not None
    return importlib.util.find_spec(package) is not None


def make_tracker(kind: str, run_dir: str | Path, config: Mapping[str, Any] | None = None, *,
                 shown: str | Path | None = None) -> Tracker:
    """The tracker named ``kind`` (``none``, ``csv``, ``swanlab``, ``wandb``) writing under ``run_dir``.

    ``shown`` is the folder named in what it prints, when ``run_dir`` is a staging folder that will
    be renamed to it.
    """
    return TRACKERS[check_kind(kind)](Path(run_dir), dict(config or {}), Path(shown) if shown else None)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


def _plain(config: Mapping[str, Any]) -> dict[str, Any]:
    """Config values swanlab and wandb can store: scalars and strings as they are, anything else as text."""
    return {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v) for k, v in config.items()}


def _hushed():
    """Keep a library's console chatter out of PAW's output (what matters is said once by PAW)."""
    import contextlib
    import io

    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def _say(message: str) -> None:
    print(f"[paw] {message}", file=sys.stderr, flush=True)


def log_once(kind: str, run_dir: str | Path, config: Mapping[str, Any], metrics: Mapping[str, Any],
             *, step: int = 0, shown: str | Path | None = None) -> Path | None:
    """For one-shot commands (transfer, merge, eval): log ``metrics`` once and finish.

    Returns ``run_dir`` (``None`` for ``kind='none'``). Non-scalar values are left out; nested
    dicts are flattened with ``/`` (``{"summary": {"similarity": 0.9}}`` -> ``summary/similarity``).
    """
    tracker = make_tracker(kind, run_dir, config, shown=shown)
    try:
        tracker.log(_flat(metrics), step=step)
    finally:
        tracker.finish()
    return None if kind == "none" else Path(run_dir)


def log_steps(kind: str, run_dir: str | Path, config: Mapping[str, Any],
              points: Iterable[tuple[int, Mapping[str, Any]]]) -> Path | None:
    """For a finished training whose curve is in its record: log ``(step, metrics)`` in order, then finish.

    Each ``metrics`` is flattened as in :func:`log_once`. Returns ``run_dir`` (``None`` for ``kind='none'``).
    """
    tracker = make_tracker(kind, run_dir, config)
    try:
        for step, metrics in points:
            tracker.log(_flat(metrics), step=step)
    finally:
        tracker.finish()
    return None if kind == "none" else Path(run_dir)


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(_flat(value, name))
        else:
            out[name] = value
    return out
