"""The vocabulary mapping file (``paw-vocab-map`` v1): where each target token comes from in the source.

``paw align-vocab`` writes it; ``paw transplant-tokenizer`` and ``paw transfer-lora --vocab-map``
read it. One JSON object::

    {"format": "paw-vocab-map", "version": 1,
     "source": "<source tokenizer spec>", "target": "<target tokenizer spec>",
     "source_size": 151665, "target_size": 128256,
     "coverage": {"exact": 101234, "decompose": 26766, "unmapped": 256},
     "entries": [[target_id, "method", [source_id, ...], [weight, ...]], ...]}

``entries`` is sorted by target id; each weight list sums to 1 (an embedding row of the target is
``sum_k weight_k * E_source[source_id_k]``), except for the methods in :data:`LINEAR_METHODS`,
whose weights are least-squares coefficients of a linear map (donor-aware OMP, ``omp``). Target
ids missing from ``entries`` are unmapped and counted under ``coverage["unmapped"]``; consumers
initialise them with a fallback (the mean row).

This module also writes the ``paw analyze-tokenizers`` output folder (:func:`write_analysis`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.io.atomic import atomic_dir, atomic_file
from paw.io.manifest import dumps
from paw.io.reports import save_figure

FORMAT = "paw-vocab-map"
VERSION = 1
LINEAR_METHODS = frozenset({"omp"})  # weights are free coefficients, not an average: no sum-to-1 check

__all__ = ["VocabMapping", "read_vocab_map", "write_vocab_map", "mapping_to_json", "write_analysis"]


@dataclass
class VocabMapping:
    """``entries[target_id] = (method, [source ids], [weights])``; ids absent from entries are unmapped."""

    source_size: int
    target_size: int
    entries: dict[int, tuple[str, list[int], list[float]]]
    source: str = ""
    target: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # free-form provenance written beside the entries

    def coverage(self) -> dict[str, int]:
        """Target ids per method, plus ``unmapped``: ``{'exact': 250, 'decompose': 40, 'unmapped': 10}``."""
        counts = Counter(method for method, _, _ in self.entries.values())
        out = {m: counts[m] for m in sorted(counts)}
        out["unmapped"] = self.target_size - len(self.entries)
        return out

    def validate(self, *, where: str = "mapping") -> None:
        """Ids in range, equal-length lists, weights summing to 1 (to 1e-4)."""
        for tid, (method, src, w) in self.entries.items():
            if not 0 <= tid < self.target_size:
                raise PawError(f"target id {tid} outside 0..{self.target_size - 1}", path=where)
            if not src or len(src) != len(w):
                raise PawError(f"entry for target id {tid} ({method}) has {len(src)} source ids and "
                               f"{len(w)} weights", path=where)
            bad = [s for s in src if not 0 <= s < self.source_size]
            if bad:
                raise PawError(f"entry for target id {tid} names source id {bad[0]} outside "
                               f"0..{self.source_size - 1}", path=where)
            if not all(math.isfinite(x) for x in w) or (
                    method not in LINEAR_METHODS and not math.isclose(sum(w), 1.0, abs_tol=1e-4)):
                raise PawError(f"weights of target id {tid} sum to {sum(w):.6g}, not 1", path=where)


def mapping_to_json(mapping: VocabMapping) -> dict[str, Any]:
    entries = [[tid, m, [int(s) for s in src], [round(float(x), 8) for x in w]]
               for tid, (m, src, w) in sorted(mapping.entries.items())]
    return {"format": FORMAT, "version": VERSION, "source": mapping.source, "target": mapping.target,
            "source_size": mapping.source_size, "target_size": mapping.target_size,
            "coverage": mapping.coverage(), "entries": entries, **mapping.extra}


def write_vocab_map(path: str | Path, mapping: VocabMapping) -> Path:
    """Write the mapping JSON atomically (one entry per line, so that diffs and ``grep`` work)."""
    mapping.validate()
    head = {"format": FORMAT, "version": VERSION, "source": mapping.source, "target": mapping.target,
            "source_size": mapping.source_size, "target_size": mapping.target_size,
            "coverage": mapping.coverage(), **mapping.extra}
    head_text = dumps(head).rstrip().rstrip("}").rstrip()
    lines = ",\n".join(_entry_line(t, *mapping.entries[t]) for t in sorted(mapping.entries))
    body = f'"entries": [\n{lines}\n  ]' if lines else '"entries": []'
    with atomic_file(path, "w", encoding="utf-8") as f:
        f.write(f"{head_text},\n  {body}\n}}\n")
    return Path(path)


def _entry_line(t: int, method: str, src: list[int], w: list[float]) -> str:
    ids = ", ".join(str(int(s)) for s in src)
    weights = ", ".join(repr(round(float(x), 8)) for x in w)
    return f"    [{int(t)}, {json.dumps(method)}, [{ids}], [{weights}]]"


def read_vocab_map(path: str | Path) -> VocabMapping:
    """Read and check a ``paw-vocab-map`` file; any defect is a PawError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise PawError("no such vocabulary mapping file", path=path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as err:  # ValueError: 5000-digit integers too
        raise PawError(f"not valid JSON ({str(err)[:200]})", path=path) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PawError(f"not a vocabulary mapping (expected \"format\": \"{FORMAT}\")", path=path)
    if data.get("version") != VERSION:
        raise PawError(f"unsupported {FORMAT} version {data.get('version')!r} (this PAW reads {VERSION})", path=path)
    for key in ("source_size", "target_size"):  # consumers compare them with real sizes before allocating
        size = data.get(key)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise PawError(f"{key} is {str(size)[:40]}, not a positive integer", path=path)
    if not isinstance(data.get("entries"), list):
        raise PawError("entries is not a list", path=path)
    try:
        entries = {int(t): (str(m), [int(s) for s in src], [float(x) for x in w]) for t, m, src, w in data["entries"]}
        mapping = VocabMapping(int(data["source_size"]), int(data["target_size"]), entries,
                               str(data.get("source", "")), str(data.get("target", "")))
    except (KeyError, TypeError, ValueError, OverflowError) as err:  # OverflowError: int(Infinity)
        raise PawError(f"malformed mapping ({type(err).__name__}: {err})", path=path) from None
    if len(entries) != len(data["entries"]):
        raise PawError("a target id appears twice in entries", path=path)
    mapping.validate(where=str(path))
    return mapping


# ----- paw analyze-tokenizers output folder -----------------------------------------------------
def write_analysis(outdir: str | Path, *, report: Mapping[str, Any], rows: list[dict[str, Any]],
                   source_only: list[str], target_only: list[str], figures: Mapping[str, Any],
                   overwrite: bool = False) -> Path:
    """Write ``report.json``, ``encoding.csv``, ``source_only.txt``, ``target_only.txt`` and PNG figures.

    Figures are matplotlib figures saved without the software/date metadata, so equal inputs give
    byte-identical PNGs.
    """
    with atomic_dir(outdir, overwrite=overwrite) as tmp:
        (tmp / "report.json").write_text(dumps(report), encoding="utf-8")
        buf = io.StringIO()
        if rows:
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        (tmp / "encoding.csv").write_text(buf.getvalue(), encoding="utf-8")
        (tmp / "source_only.txt").write_text("".join(f"{t}\n" for t in source_only), encoding="utf-8")
        (tmp / "target_only.txt").write_text("".join(f"{t}\n" for t in target_only), encoding="utf-8")
        for name, fig in figures.items():
            save_figure(fig, tmp / name, dpi=100)
    return Path(outdir)
