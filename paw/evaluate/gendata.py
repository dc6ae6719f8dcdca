"""The data of ``paw eval --generate``: JSON lines of a prompt and its reference answers.

One object per line (read by :func:`paw.io.mcdata.read_records`, as multiple-choice files are)::

    {"question": "Question: What is the capital of France?\\nAnswer:", "answer": "Paris"}
    {"question": "Q: Who wrote Hamlet?\\nA:", "answer": ["Shakespeare", "William Shakespeare"], "id": "q2"}
    {"question": "Q: Largest planet?\\nA:", "answer": {"aliases": ["Jupiter", "jupiter"]}}

- ``question``: the prompt, as the model sees it (write the ``Question: ...\\nAnswer:`` around it yourself);
- ``answer``: the reference, a list of references (a match with any counts), or an object with an
  ``aliases`` list (TriviaQA's layout, whose aliases lm-eval's ``triviaqa`` task compares with);
- ``id``: optional, kept in the per-item file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.evaluate.items import GenItem
from paw.io.mcdata import Record, read_records

FIELDS = ("question", "answer")


def read_gen_items(path: str | Path, *, limit: int | None = None) -> list[GenItem]:
    """The first ``limit`` (all when None) generation items of ``path``; a bad line is one PawError naming it."""
    path = Path(path)
    if not path.is_file():
        raise PawError("no such data file", path=path)
    items: list[GenItem] = []
    for number, record in read_records(path):
        if limit is not None and len(items) >= limit:
            break
        items.append(_item(record, path, number))
    if not items:
        raise PawError("no items in data file", path=path)
    return items


def _item(record: Record, path: Path, number: int) -> GenItem:
    missing = [k for k in FIELDS if k not in record]
    if missing:
        raise PawError(f"line {number}: a --generate item lacks field(s) {', '.join(missing)} (it needs "
                       f"'question', the prompt, and 'answer', the reference or a list of them)", path=path)
    question = record["question"]
    if not isinstance(question, str) or not question.strip():
        raise PawError(f"line {number}: 'question' must be a non-empty string, not {_short(question)}", path=path)
    return GenItem(question, _references(record["answer"], path, number), str(record.get("id", "")))


def _references(answer: Any, path: Path, number: int) -> tuple[str, ...]:
    if isinstance(answer, dict) and "aliases" in answer:
        answer = answer["aliases"]
    values = [answer] if isinstance(answer, str) else answer
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v.strip() for v in values):
        raise PawError(f"line {number}: 'answer' must be a non-empty string, a list of them or an object with an "
                       f"'aliases' list, not {_short(answer)}", path=path)
    return tuple(values)


def _short(value: Any, width: int = 40) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
