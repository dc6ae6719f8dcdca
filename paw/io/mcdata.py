"""Read multiple-choice data files as records, and write items back in the flat ``mc`` layout.

Each line is JSON; a line that is not JSON but a Python dict literal (the ARC files written with
``repr``) is parsed with :func:`ast.literal_eval`, which evaluates literals only, never code. Which
fields make a question, and how it is prompted, is :mod:`paw.evaluate.formats`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from paw.errors import PawError
from paw.io.atomic import atomic_file

Record = dict[str, Any]


class FlatItem(Protocol):
    """What :func:`write_items` reads of an item (:class:`paw.evaluate.items.MCItem` has it all)."""

    question: str
    choices: tuple[str, ...]
    answer: int
    id: str
    fill_blank: bool


def read_records(path: Path) -> Iterator[tuple[int, Record]]:
    """``(line_number, dict)`` for every non-blank line; JSON, else a Python dict literal."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as err:
        raise PawError(f"cannot read data file ({err.strerror})", path=path) from None
    with handle:
        number = 0
        try:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield number, parse_record(line, path, number)
        except UnicodeDecodeError as err:
            raise PawError(f"line {number + 1}: not UTF-8 text (byte {err.start} of a read block: "
                           f"{err.object[err.start:err.start + 1]!r}); is this a JSON-lines file?", path=path) from None


def parse_record(line: str, path: Path, number: int) -> Record:
    """One line already read -> its record; ``path`` and ``number`` name it in a refusal."""
    try:
        record = json.loads(line)
    except RecursionError:
        raise PawError(f"line {number}: JSON nested too deeply to be a data record", path=path) from None
    except json.JSONDecodeError as err:
        try:  # ARC raw files are Python reprs: {'id': 'x', ...}; literal_eval runs no code
            record = ast.literal_eval(line.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise PawError(f"line {number}: not a JSON object ({err.msg} at column {err.colno})",
                           path=path) from None
    if not isinstance(record, dict):
        raise PawError(f"line {number}: expected a JSON object, got {type(record).__name__}", path=path)
    return record


def write_items(path: str | Path, items: Sequence[FlatItem]) -> Path:
    """Write items in the flat ``mc`` layout (``question``, ``choices`` without the leading space,
    ``answer`` index, ``id``), one JSON object per line; :func:`paw.evaluate.formats.read_items`
    reads them back equal."""
    if any(item.fill_blank for item in items):
        raise PawError("fill-the-blank items have no flat mc form", path=path)
    with atomic_file(path, "w", encoding="utf-8") as handle:
        for item in items:
            record = {"question": item.question, "choices": [c.removeprefix(" ") for c in item.choices],
                      "answer": item.answer, "id": item.id}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return Path(path)


def write_records(path: str | Path, records: Sequence[dict], *, overwrite: bool = False, inputs=()) -> Path:
    """One JSON object per line (``paw eval --per-item``), written atomically; never over an input."""
    with atomic_file(path, overwrite=overwrite, inputs=inputs, encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return Path(path)
