"""Files of the gain gate (``paw transfer-lora --check-data``): a staging folder, the gate's report, publishing.

The gated transfer is written into a private folder beside the output (:func:`staging`), scored
there, and only then moved into place (:func:`publish`, atomic like every PAW output); a gate that
refuses leaves nothing behind. :func:`add_gate` puts the gate's block into ``transfer_report.json``
and writes ``gate.md`` for people. This module knows files, not what the figures mean.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from paw.io.atomic import atomic_dir
from paw.io.finite import nonfinite_policy
from paw.io.json_file import read_json
from paw.io.manifest import dumps
from paw.io.model_card import refresh_files

REPORT_JSON = "transfer_report.json"   # the transfer's report, every method's (paw.io.transfer_report)
GATE_MD = "gate.md"


def _existing_ancestor(path: Path) -> Path:
    for folder in path.absolute().parents:
        if folder.is_dir():
            return folder
    return Path.cwd()


@contextlib.contextmanager
def staging(output: str | Path) -> Iterator[Path]:
    """A fresh folder ``.<output name>.gate-*`` beside ``output`` (its nearest existing parent), removed on exit."""
    output = Path(output)
    folder = Path(tempfile.mkdtemp(prefix=f".{output.name}.gate-", dir=_existing_ancestor(output)))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def add_gate(folder: str | Path, *, gate: dict[str, Any], markdown: str, check_input: dict[str, Any],
             warning: str | None = None) -> None:
    """``gate`` into ``folder/transfer_report.json`` (with ``inputs.check_data`` and ``warning``), ``markdown`` as ``gate.md``."""
    folder = Path(folder)
    report = read_json(folder / REPORT_JSON)
    report["gate"] = gate
    report.setdefault("inputs", {})["check_data"] = check_input
    if warning:
        report["warnings"] = [*report.get("warnings", []), warning]
    (folder / REPORT_JSON).write_text(dumps(report), encoding="utf-8")
    (folder / GATE_MD).write_text(markdown, encoding="utf-8")


def publish(staged: str | Path, output: str | Path, *, overwrite: bool, allow_nonfinite: bool = False) -> Path:
    """Move every file of ``staged`` into ``output`` atomically (``overwrite`` replaces an existing one)."""
    with nonfinite_policy(allow_nonfinite), atomic_dir(output, overwrite=overwrite) as tmp:
        for entry in sorted(Path(staged).iterdir()):
            shutil.move(str(entry), str(tmp / entry.name))
        refresh_files(tmp)  # the card lists what was added since it was written (gate.md, the extraction's files)
    return Path(output)
