"""Read the documents of a perplexity run (``paw eval --text FILE``): plain text, or JSON lines of documents.

- a ``.jsonl`` file: one document per non-blank line, a JSON object with a ``text`` string (or ``page``,
  as lm-eval's wikitext has it), or a JSON string;
- any other file: the whole file is one document, as it is (UTF-8, newlines kept).
"""

from __future__ import annotations

import json
from pathlib import Path

from paw.errors import PawError

TEXT_FIELDS = ("text", "page")


def read_utf8(path: str | Path, *, what: str = "text file") -> str:
    """The whole UTF-8 text of ``path``; a missing or unreadable file, or one that is not UTF-8 (the offset of
    the first bad byte named), is one PawError naming it and ``what`` it was to be."""
    path = Path(path)
    if not path.is_file():
        raise PawError(f"no such {what}", path=path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise PawError(f"not UTF-8 text (byte {err.start}: {err.object[err.start:err.start + 1]!r})", path=path) from None
    except OSError as err:
        raise PawError(f"cannot read {what} ({err.strerror})", path=path) from None


def read_documents(path: str | Path, *, limit: int | None = None) -> list[str]:
    """The documents of ``path`` (the first ``limit`` when given); refuses an empty or non-UTF-8 file."""
    path = Path(path)
    text = read_utf8(path, what="text file")
    documents = _json_lines(text, path) if path.suffix == ".jsonl" else [text]
    documents = [d for d in documents if d.strip()][:limit]
    if not documents:
        raise PawError("no text to score (the file is empty or only whitespace)", path=path)
    return documents


def _json_lines(text: str, path: Path) -> list[str]:
    documents = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise PawError(f"line {number}: not JSON (a .jsonl text file holds one document per line)",
                           path=path) from None
        if isinstance(record, dict):
            record = next((record[k] for k in TEXT_FIELDS if k in record), None)
        if not isinstance(record, str):
            raise PawError(f"line {number}: expected a JSON string or an object with a 'text' string", path=path)
        documents.append(record)
    return documents
