"""What ``paw demo`` is asked to do: the source of its flags and of its ``--config`` keys (:mod:`paw.knobs`).
Apart from :mod:`paw.demo` because ``paw --help`` imports it: no I/O here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.knobs import knob


@dataclass(frozen=True)
class DemoOptions:
    """The one-command tour on tiny local models (``paw demo``)."""

    outdir: str | Path = knob(Path("paw_demo"), "Folder for every model, report and plot.", cli=Path)
    quick: bool = knob(False, "16 facts and 100 LoRA steps instead of 24 and 200: the two LoRA trainings take half "
                              "as long, the whole demo about a quarter less.")
