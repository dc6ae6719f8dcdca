"""Write report files (CSV tables, JSON, matplotlib figures) atomically and reproducibly.

Identical inputs must give byte-identical files, so numbers are written with Python's shortest
round-trip ``repr`` (``0.1`` stays ``0.1``, NaN is ``nan``), JSON with sorted keys, and figures
without the creation date or software version that matplotlib stamps by default. Each file is
built beside its destination and renamed into place (``paw.io.atomic.atomic_file``).

    write_csv(out / "stats.csv", [{"param": "w", "l2": 0.5}], ["param", "l2"])
    save_figure(fig, out / "bars.png")
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.io.atomic import atomic_file
from paw.io.manifest import dumps

# metadata keys that would otherwise embed a date or a version string, per figure format
_FIGURE_METADATA = {
    "png": {"Software": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
    "svg": {"Creator": None, "Date": None},
}


def format_value(value: Any) -> str:
    """One CSV cell: ``0.25 -> '0.25'``, ``float('nan') -> 'nan'``, ``3 -> '3'``, ``None -> ''``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    try:  # numpy scalars and 0-d tensors
        if hasattr(value, "item") and not isinstance(value, (str, bytes)):
            return format_value(value.item())
    except (ValueError, RuntimeError):
        pass
    return str(value)


def write_csv(path: str | Path, rows: Iterable[Mapping[str, Any] | Sequence[Any]],
              columns: Sequence[str]) -> Path:
    """Write ``rows`` (dicts keyed by column, or sequences in column order) under a header row."""
    path = Path(path)
    with atomic_file(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(columns)
        for row in rows:
            if isinstance(row, Mapping):
                missing = [c for c in columns if c not in row]
                if missing:
                    raise PawError(f"row lacks column(s) {missing}", path=path)
                cells = [row[c] for c in columns]
            else:
                cells = list(row)
                if len(cells) != len(columns):
                    raise PawError(f"row has {len(cells)} cells for {len(columns)} columns", path=path)
            out.writerow([format_value(c) for c in cells])
    return make_readable(path)


def make_readable(path: str | Path) -> Path:
    """Give a file (0644) or folder (0755), minus the umask, the modes of a plain ``open``.

    Temporary files and folders are created private (0600/0700); reports are meant to be shared.
    """
    path = Path(path)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
    return path


def write_json(path: str | Path, data: Any) -> Path:
    """Deterministic JSON (``paw.io.manifest.dumps``), written atomically."""
    path = Path(path)
    with atomic_file(path, "w", encoding="utf-8") as f:
        f.write(dumps(json_safe(data)))
    return make_readable(path)


def save_figure(fig, path: str | Path, *, dpi: int = 100) -> Path:
    """Save a matplotlib ``Figure`` (png, pdf or svg by suffix) with no date or version stamped in.

    Use ``matplotlib.figure.Figure`` directly rather than ``pyplot`` so no global state or GUI
    backend is involved; the Agg canvas renders identically run after run.
    """
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in _FIGURE_METADATA:
        raise PawError(f"unsupported figure format {fmt!r} (use {', '.join(_FIGURE_METADATA)})", path=path)
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "paw", "pdf.compression": 6}):
        with atomic_file(path, "wb") as f:
            fig.savefig(f, format=fmt, dpi=dpi, metadata=_FIGURE_METADATA[fmt])
    return make_readable(path)


def json_safe(data: Any) -> Any:
    """NaN and infinities are not JSON: ``{'x': nan} -> {'x': None}`` so every reader accepts it."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, Mapping):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    return data
