"""Multiple-choice data set layouts: JSON records -> :class:`~paw.evaluate.items.MCItem`, with their prompts.

One small reader per on-disk layout, kept in the :data:`READERS` registry; ``format="auto"``
picks the first reader whose ``detect`` accepts the first record. Layouts:

==========  =============================================================  ====================
name        fields                                                         prompt -> choices
==========  =============================================================  ====================
formatted   ``input``, ``options``, ``target_idx`` (``target``, ``dataset``)  per ``dataset``
arc         ``question``, ``choices.text/label``, ``answerKey``            ``Question: q\\nAnswer:``
openbookqa  ``question_stem``, ``choices.text/label``, ``answerKey``       ``q`` (as lm-eval)
piqa        ``goal``, ``sol1``, ``sol2``, ``label`` or ``answer``          ``Question: q\\nAnswer:``
winogrande  ``sentence`` with ``_``, ``option1``, ``option2``, ``answer``  fill the blank
boolq       ``question``, ``passage``, boolean ``answer``                  `` no`` / `` yes``
hellaswag   ``ctx`` (or ``ctx_a``/``ctx_b``), ``endings``, ``label``      ``activity: ctx``
mc          ``question``, ``choices`` (list), ``answer`` (index/letter/text) ``question``
==========  =============================================================  ====================

Choices are scored as continuations of the prompt, with a leading space (`` " " + choice``), the
lm-evaluation-harness convention. Winogrande items use partial scoring (see ``MCItem.fill_blank``).
The records come from :func:`paw.io.mcdata.read_records` (JSON lines, or ARC's Python-literal
lines); this module decides what the model is asked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.evaluate.items import BLANK, MCItem
from paw.io.mcdata import Record, read_records
from paw.registry import Registry


@dataclass(frozen=True)
class Reader:
    """``detect(first_record) -> bool`` and ``parse(record) -> MCItem`` for one layout."""

    detect: Callable[[Record], bool]
    parse: Callable[[Record], MCItem]
    help: str
    keys: tuple[str, ...] = ()


READERS: Registry[Reader] = Registry("data format")


def reader(name: str, *, keys: tuple[str, ...], help: str, extra: Callable[[Record], bool] | None = None):
    """Register ``parse`` under ``name``; it is detected when the record has all ``keys`` (and ``extra``)."""

    def register(parse: Callable[[Record], MCItem]) -> Callable[[Record], MCItem]:
        def detect(record: Record) -> bool:
            return all(k in record for k in keys) and (extra is None or extra(record))

        READERS.add(name, Reader(detect, parse, help, keys))
        return parse

    return register


# --------------------------------------------------------------------------- helpers

_OPTION_PREFIX = re.compile(r"^\s*([A-Za-z]|\d{1,2})\s*[:.)]\s?")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def strip_labels(options: list[str]) -> list[str]:
    """Drop ``"A: "``-style labels, only when every option carries the expected one in order.

    >>> strip_labels(["A: dry palms", "B: wet palms"])
    ['dry palms', 'wet palms']
    >>> strip_labels(["1: one", "2: two"])
    ['one', 'two']
    >>> strip_labels(["A: x", "the B: y"])  # not a consistent labelling: left alone
    ['A: x', 'the B: y']
    """
    matches = [_OPTION_PREFIX.match(o) for o in options]
    if not all(matches):
        return list(options)
    labels = [m.group(1).upper() for m in matches]  # type: ignore[union-attr]
    n = len(options)
    if labels not in (list(_LETTERS[:n]), [str(i) for i in range(1, n + 1)]):
        return list(options)
    return [o[m.end():] for o, m in zip(options, matches, strict=True)]  # type: ignore[union-attr]


def _continuations(choices: list[str]) -> tuple[str, ...]:
    return tuple(" " + str(c).strip() for c in choices)


def _index(answer: Any, labels: list[str], n: int) -> int:
    """``'C'`` with labels A..D -> 2; ``'2'`` with labels 1..4 -> 1; an int is a 0-based index."""
    if isinstance(answer, bool):
        raise ValueError(f"answer {answer!r} is not an index or label")
    if isinstance(answer, int):
        index = answer
    else:
        key = str(answer).strip()
        if key not in labels:
            raise ValueError(f"answer {answer!r} is not one of the labels {labels}")
        index = labels.index(key)
    if not 0 <= index < n:
        raise ValueError(f"answer index {index} out of range for {n} choices")
    return index


def _labelled(record: Record, question: str, prompt: str, what: str) -> MCItem:
    choices = record["choices"]
    if not isinstance(choices, dict) or "text" not in choices:
        raise ValueError(f"{what}: 'choices' must be an object with 'text' and 'label' lists")
    texts = list(choices["text"])
    labels = [str(label) for label in choices.get("label", _LETTERS[: len(texts)])]
    answer = _index(str(record["answerKey"]), labels, len(texts))
    return MCItem(prompt.format(q=question.strip()), _continuations(texts), answer, str(record.get("id", "")))


# --------------------------------------------------------------------------- readers

PROMPTS = {  # prompt per data set name, for the ``formatted`` layout that records ``dataset``
    "arc": "Question: {q}\nAnswer:",
    "openbookqa": "{q}",
    "piqa": "Question: {q}\nAnswer:",
    "boolq": "{q}\nAnswer:",  # formatted BoolQ input is already "Question: ...\nPassage: ..."
}


def _prompt_for(dataset: str) -> str:
    name = dataset.lower()
    for key, prompt in PROMPTS.items():
        if name.startswith(key):
            return prompt
    return "{q}\nAnswer:"


_BOOL_WORDS = {"false": "no", "true": "yes", "no": "no", "yes": "yes"}


def _formatted_answer(record: Record, options: list[str]) -> int:
    """The index named by ``target`` (an option label, ``"1"``/``"2"``, or the option text), else ``target_idx``.

    ``target`` wins because real files carry ``target_idx = ord(label) - ord('A')`` for ARC items
    whose labels are digits: ``target "2"`` with options ``"1: ..", "2: .."`` has ``target_idx -15``.
    """
    target = str(record.get("target", "")).strip()
    stripped = strip_labels(options)
    labels = [o[: len(o) - len(s)].strip().rstrip(":.)").strip() for o, s in zip(options, stripped, strict=True)]
    if stripped != options and target in labels:
        return labels.index(target)
    if target in [o.strip() for o in options]:
        return [o.strip() for o in options].index(target)
    if target in [str(i) for i in range(1, len(options) + 1)] and not any(o.strip().isdigit() for o in options):
        return int(target) - 1  # Winogrande "1"/"2"
    return _index(int(record["target_idx"]), [], len(options))


@reader("formatted", keys=("input", "options", "target_idx"),
        help="input, options, target, target_idx (ARC/OBQA options 'A: text' lose the label)")
def _formatted(record: Record) -> MCItem:
    dataset = str(record.get("dataset", ""))
    options = [str(o) for o in record["options"]]
    answer = _formatted_answer(record, options)
    question = str(record["input"])
    if dataset.startswith("winogrande") or (str(record.get("task_type")) == "pronoun_resolution"
                                            and BLANK in question):
        return MCItem(question, tuple(o.strip() for o in options), answer, str(record.get("id", "")),
                      fill_blank=True)
    if dataset.startswith("boolq") and all(o.strip().lower() in _BOOL_WORDS for o in options):
        options = [_BOOL_WORDS[o.strip().lower()] for o in options]
    return MCItem(_prompt_for(dataset).format(q=question.strip()), _continuations(strip_labels(options)),
                  answer, str(record.get("id", "")))


@reader("arc", keys=("question", "choices", "answerKey"), help="ARC: question, choices.text/label, answerKey",
        extra=lambda r: isinstance(r["choices"], dict))
def _arc(record: Record) -> MCItem:
    return _labelled(record, str(record["question"]), PROMPTS["arc"], "arc")


@reader("openbookqa", keys=("question_stem", "choices", "answerKey"),
        help="OpenBookQA: question_stem, choices.text/label, answerKey")
def _openbookqa(record: Record) -> MCItem:
    return _labelled(record, str(record["question_stem"]), PROMPTS["openbookqa"], "openbookqa")


@reader("piqa", keys=("goal", "sol1", "sol2"), help="PIQA: goal, sol1, sol2, label|answer (0/1)")
def _piqa(record: Record) -> MCItem:
    label = record["label"] if "label" in record else record["answer"]
    answer = _index(int(label), [], 2)
    return MCItem(PROMPTS["piqa"].format(q=str(record["goal"]).strip()),
                  _continuations([record["sol1"], record["sol2"]]), answer, str(record.get("id", "")))


@reader("winogrande", keys=("sentence", "option1", "option2"),
        help="Winogrande: sentence with _, option1, option2, answer '1'|'2' (partial scoring)")
def _winogrande(record: Record) -> MCItem:
    sentence = str(record["sentence"])
    if BLANK not in sentence:
        raise ValueError("sentence has no '_' blank to fill")
    answer = _index(str(record["answer"]), ["1", "2"], 2)
    options = (str(record["option1"]).strip(), str(record["option2"]).strip())
    return MCItem(sentence, options, answer, str(record.get("id", record.get("qID", ""))), fill_blank=True)


@reader("boolq", keys=("question", "passage", "answer"), help="BoolQ: question, passage, answer (bool) -> no/yes")
def _boolq(record: Record) -> MCItem:
    if not isinstance(record["answer"], bool):
        raise ValueError(f"answer {record['answer']!r} is not true/false")
    question = str(record["question"]).strip().rstrip("?")
    prompt = f"{str(record['passage']).strip()}\nQuestion: {question}?\nAnswer:"
    return MCItem(prompt, (" no", " yes"), int(record["answer"]), str(record.get("id", record.get("idx", ""))))


def _hellaswag_clean(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


@reader("hellaswag", keys=("endings",), help="HellaSwag: ctx (or ctx_a, ctx_b), endings, label, activity_label",
        extra=lambda r: "ctx" in r or "ctx_a" in r)
def _hellaswag(record: Record) -> MCItem:
    if "ctx_a" in record:
        ctx = f"{record['ctx_a']} {str(record.get('ctx_b', '')).capitalize()}".strip()
    else:
        ctx = str(record["ctx"])
    activity = str(record.get("activity_label", "")).strip()
    query = _hellaswag_clean(f"{activity}: {ctx}" if activity else ctx)
    endings = [_hellaswag_clean(str(e)) for e in record["endings"]]
    answer = _index(int(record["label"]), [], len(endings))
    return MCItem(query, _continuations(endings), answer, str(record.get("ind", record.get("id", ""))))


@reader("mc", keys=("question", "choices", "answer"),
        help="flat: question, choices (list), answer (0-based index, letter or the choice text)",
        extra=lambda r: isinstance(r["choices"], list))
def _flat(record: Record) -> MCItem:
    choices = [str(c) for c in record["choices"]]
    answer = record["answer"]
    if isinstance(answer, str) and answer in choices:
        index = choices.index(answer)
    elif isinstance(answer, str) and not answer.strip().isdigit():
        index = _index(answer.strip().upper(), list(_LETTERS[: len(choices)]), len(choices))
    else:
        index = _index(int(answer), [], len(choices))
    return MCItem(str(record["question"]), _continuations(choices), index, str(record.get("id", "")))


# --------------------------------------------------------------------------- file level

def detect_format(record: Record) -> str | None:
    """The first registered layout that recognises ``record`` (``None`` when none does)."""
    return next((name for name, r in READERS.items() if r.detect(record)), None)


def read_items(path: str | Path, format: str = "auto", limit: int | None = None) -> list[MCItem]:
    """Read a JSON-lines multiple-choice file into items (the first ``limit`` when given).

    >>> items = read_items("arc-easy_test.jsonl", limit=2)  # doctest: +SKIP
    >>> items[0].choices[items[0].answer]  # doctest: +SKIP
    ' Sunlight is the source of energy for nearly all ecosystems.'
    """
    path = Path(path)
    if format != "auto" and format not in READERS:
        raise PawError(f"unknown data format {format!r}; choose auto or one of {', '.join(READERS)}")
    if not path.is_file():
        raise PawError("no such data file", path=path)
    items: list[MCItem] = []
    name = None if format == "auto" else format
    for number, record in read_records(path):
        if limit is not None and len(items) >= limit:
            break
        if name is None:
            name = detect_format(record)
            if name is None:
                raise PawError(f"line {number}: cannot tell the layout from its fields {sorted(record)}; "
                               f"pass --format, one of {', '.join(READERS)}", path=path)
        items.append(_parse(READERS[name], name, record, path, number))
    if not items:
        raise PawError("no items in data file", path=path)
    return items


def _parse(entry: Reader, name: str, record: Record, path: Path, number: int) -> MCItem:
    missing = [k for k in entry.keys if k not in record]
    if missing:
        found = detect_format(record)
        hint = f" (it looks like {found})" if found else ""
        raise PawError(f"line {number}: {name} item lacks field(s) {', '.join(missing)}{hint}", path=path)
    try:
        item = entry.parse(record)
    except KeyError as err:
        raise PawError(f"line {number}: {name} item lacks field {err}", path=path) from None
    except (ValueError, TypeError, AttributeError) as err:
        raise PawError(f"line {number}: bad {name} item ({err})", path=path) from None
    if len(item.choices) < 2:
        raise PawError(f"line {number}: {name} item has {len(item.choices)} choice(s); need at least 2", path=path)
    return item
