"""The cache of ``paw bench real --parts tasks``: every score and adapter kept in the task's work folder as
it is made, so that a run killed after hours resumes where it stopped (:class:`Cache`)."""

from __future__ import annotations

import time
from pathlib import Path

from paw.errors import PawError
from paw.io.adapter import LoraAdapter, read_adapter, write_adapter
from paw.io.json_file import read_json_if_exists
from paw.io.manifest import write_json
from paw.lora import tensors_digest


class Failed(PawError):
    """A condition that gave no adapter (a diverged distillation), kept in the cache as a result."""


class Cache:
    """Scores and adapters of one task kept in ``folder`` as they are made: a rerun reuses them.

    A score file names the adapter it scored (:func:`paw.lora.tensors_digest`) and is made again for any other
    adapter: a work folder that kept its scores but lost its adapters (a new machine, a GPU lease)
    must not pair old scores with a LoRA trained again. Score files from before the digest are
    reused unless their adapter was made in this process. ``keep_scores`` reuses every score file
    whatever adapter is at hand: for a caller whose adapters only stand in for the ones scored
    (``paw bench real --cell ... --stand-in-loras``, :mod:`paw.bench.real.cell`)."""

    def __init__(self, folder: Path, *, keep_scores: bool = False):
        self.folder = folder
        self.keep_scores = keep_scores
        self.made: set[str] = set()   # digests of the adapters this process trained or distilled

    def scores(self, key: str, make, adapter: LoraAdapter | None = None, *,
               source: LoraAdapter | None = None, field: str = "correct") -> tuple[list, float]:
        """``(per-item outcomes, seconds)`` of ``make()``, cached under ``key``. ``source``: for a moved
        adapter, the LoRA it was moved from, named in the file (``source_lora``) because the source's own
        score file may have scored another copy of that LoRA (one trained again on a new machine).
        ``field``: what the values are called in the file (``choice_ll`` for per-choice log-likelihoods)."""
        path = self.folder / f"{key}.json"
        found = read_json_if_exists(path)
        digest = None if adapter is None or self.keep_scores else tensors_digest(adapter.tensors)
        if found is not None and self._scored(found, digest):
            return found[field], found["seconds"]
        t = time.perf_counter()
        correct = make()
        seconds = time.perf_counter() - t
        names = ({} if digest is None else {"adapter": digest}) | (
            {} if source is None else {"source_lora": tensors_digest(source.tensors)})
        write_json(path, {field: correct, "seconds": seconds} | names)
        return correct, seconds

    def _scored(self, found: dict, digest: str | None) -> bool:
        """Whether a cached score file scored the adapter of ``digest`` (None: no adapter to check)."""
        if digest is None:
            return True
        if "adapter" in found:
            return found["adapter"] == digest
        return digest not in self.made   # written before digests: its adapter was read, not made anew

    def found(self, key: str) -> list[int] | None:
        """The per-item outcomes cached under ``key``, or None."""
        found = read_json_if_exists(self.folder / f"{key}.json")
        return None if found is None else found["correct"]

    def adapter(self, key: str, make) -> tuple[LoraAdapter, float, dict]:
        folder = self.folder / key
        found = read_json_if_exists(self.folder / f"{key}.meta.json")
        if found is not None and "failed" in found:  # a run that cannot give an adapter is a result too
            raise Failed(found["failed"])
        if found is not None:  # written after the adapter folder: the folder is complete
            return read_adapter(folder), found["seconds"], found.get("report", {})
        t = time.perf_counter()
        try:
            adapter, report = make()
        except Failed:
            raise
        except PawError as e:  # e.g. a synthesis that wrote nothing usable: on record at once (the bench's
            # results file comes only at the end, sessions later on a CPU), made again on a rerun (a fix counts)
            write_json(self.folder / f"{key}.failed.json", {"seconds": time.perf_counter() - t, "failed": str(e)})
            raise
        seconds = time.perf_counter() - t
        at = report.get("diverged_at_step")
        if at is not None:
            why = f"the distillation diverged (NaN/Inf loss) at step {at}; no adapter"
            write_json(self.folder / f"{key}.meta.json", {"seconds": seconds, "report": report, "failed": why})
            raise Failed(why)
        write_adapter(folder, adapter, overwrite=True)
        write_json(self.folder / f"{key}.meta.json", {"seconds": seconds, "report": report})
        self.made.add(tensors_digest(adapter.tensors))
        return adapter, seconds, report
