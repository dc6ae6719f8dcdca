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
lm-evaluation-harness convention; the choice texts are kept as the file has them (PIQA has 230
solutions ending in a space, which lm-eval scores too), except that the flat ``mc`` layout takes a
choice's own leading space as that separator. Winogrande items use partial scoring (see
``MCItem.fill_blank``).

Every item is checked as it is read, and a bad one is refused with the file and line: choices must
be a list of non-empty strings (not a string, null or an empty list), labels as many as the
choices, and an answer index an integer (not a boolean) in range.
The records come from :func:`paw.io.mcdata.read_records` (JSON lines, or ARC's Python-literal
lines); this module decides what the model is asked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
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
    answer: dict[str, Callable[[Record], Any]] | None = None  # answer field -> placeholder, for unlabeled inputs


READERS: Registry[Reader] = Registry("data format")


def reader(name: str, *, keys: tuple[str, ...], help: str, extra: Callable[[Record], bool] | None = None,
           answer: dict[str, Callable[[Record], Any]] | None = None):
    """Register ``parse`` under ``name``; it is detected when the record has all ``keys`` (and ``extra``).

    ``answer`` maps the layout's answer field(s) to a placeholder value, so that a file of the same
    layout without answers (unlabeled task inputs, as distillation takes) is read too, by
    :func:`items_from_records` with ``labels=False``.
    """

    def register(parse: Callable[[Record], MCItem]) -> Callable[[Record], MCItem]:
        def detect(record: Record) -> bool:
            return all(k in record for k in keys) and (extra is None or extra(record))

        READERS.add(name, Reader(detect, parse, help, keys, answer))
        return parse

    return register


def _unlabeled(record: Record) -> Record | None:
    """``record`` with a placeholder answer when it is an item of a known layout that lacks only its
    answer field(s); None when it carries an answer or no layout knows it."""
    name = next((n for n, r in READERS.items() if r.detect(record)), None)
    candidates = [READERS[name]] if name is not None else list(READERS.values())
    for entry in candidates:
        if not entry.answer or any(k in record for k in entry.answer):
            continue
        try:
            filled = {**record, **{k: make(record) for k, make in entry.answer.items()}}
        except (KeyError, TypeError, IndexError, AttributeError):
            continue
        if entry.detect(filled):
            return filled
    return None


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
    """lm-eval's continuations: the target delimiter ``" "`` + the choice text as given."""
    return tuple(" " + c for c in choices)


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages: ``None -> 'null'``, ``True -> 'a boolean'``."""
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", tuple: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _text(value: Any, field: str) -> str:
    """A text field (question, passage, ...): a string, possibly empty."""
    if not isinstance(value, str):
        raise ValueError(f"{field} is {_kind(value)}, not a string")
    return value


def _texts(value: Any, field: str) -> list[str]:
    """The choices of one item: a non-empty list of non-blank strings.

    >>> _texts("ab", "choices")
    Traceback (most recent call last):
    ValueError: choices is a string, not a list of choices
    """
    if not isinstance(value, list | tuple):
        raise ValueError(f"{field} is {_kind(value)}, not a list of choices")
    if not value:
        raise ValueError(f"{field} is an empty list")
    return [_choice(entry, f"{field}[{k}]") for k, entry in enumerate(value)]


def _choice(value: Any, field: str) -> str:
    """One answer choice: a string with something in it."""
    if not isinstance(value, str):
        raise ValueError(f"{field} is {_kind(value)}, not a string")
    if not value.strip():
        raise ValueError(f"{field} is an empty string")
    return value


def _as_index(value: Any, n: int, field: str) -> int:
    """A 0-based answer index: an integer (or its decimal digits, as HellaSwag keeps labels) in ``[0, n)``.

    ``True``, ``1.0`` and ``None`` are refused: a boolean or a float is no index, whatever Python's
    ``int()`` makes of it.
    """
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} is {_short(value) if value is None else f'{_kind(value)} ({_short(value)})'}, "
                         "not an integer index")
    if not 0 <= value < n:
        raise ValueError(f"{field} index {value} out of range for {n} choices")
    return value


def _short(value: Any, width: int = 40) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _index(answer: Any, labels: list[str], n: int) -> int:
    """``'C'`` with labels A..D -> 2; ``'2'`` with labels 1..4 -> 1."""
    if not isinstance(answer, str | int) or isinstance(answer, bool):
        raise ValueError(f"answer is {_kind(answer)} ({_short(answer)}), not a label")
    key = str(answer).strip()
    if key not in labels:
        raise ValueError(f"answer {_short(answer)} is not one of the labels {labels}")
    return _as_index(labels.index(key), n, "answer")


def _labelled(record: Record, question: str, prompt: str, what: str) -> MCItem:
    choices = record["choices"]
    if not isinstance(choices, dict) or "text" not in choices:
        raise ValueError(f"choices is {_kind(choices)}; {what} wants an object with 'text' and 'label' lists")
    texts = _texts(choices["text"], "choices.text")
    labels = choices.get("label", list(_LETTERS[: len(texts)]))
    if not isinstance(labels, list | tuple) or isinstance(labels, str):
        raise ValueError(f"choices.label is {_kind(labels)}, not a list of labels")
    if len(labels) != len(texts):
        raise ValueError(f"{len(texts)} choices but {len(labels)} labels: choices.text and choices.label disagree")
    if any(isinstance(label, bool) or not isinstance(label, str | int) for label in labels):
        raise ValueError(f"choices.label holds a value that is not a string: {_short(labels)}")
    answer = _index(record["answerKey"], [str(label) for label in labels], len(texts))
    return MCItem(prompt.format(q=question.strip()), _continuations(texts), answer, str(record.get("id", "")))


def _first_label(record: Record) -> Any:
    """The first choice label of an ARC-style record (a placeholder answer for unlabeled inputs)."""
    choices = record["choices"]
    return choices.get("label", ["A"])[0]


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
    return _as_index(record["target_idx"], len(options), "target_idx")


@reader("formatted", keys=("input", "options", "target_idx"), answer={"target_idx": lambda r: 0},
        help="input, options, target, target_idx (ARC/OBQA options 'A: text' lose the label)")
def _formatted(record: Record) -> MCItem:
    dataset = str(record.get("dataset", ""))
    options = _texts(record["options"], "options")
    answer = _formatted_answer(record, options)
    question = _text(record["input"], "input")
    if dataset.startswith("winogrande") or (str(record.get("task_type")) == "pronoun_resolution"
                                            and BLANK in question):
        return MCItem(question, tuple(o.strip() for o in options), answer, str(record.get("id", "")),
                      fill_blank=True)
    if dataset.startswith("boolq") and all(o.strip().lower() in _BOOL_WORDS for o in options):
        options = [_BOOL_WORDS[o.strip().lower()] for o in options]
    return MCItem(_prompt_for(dataset).format(q=question.strip()), _continuations(strip_labels(options)),
                  answer, str(record.get("id", "")))


@reader("arc", keys=("question", "choices", "answerKey"), help="ARC: question, choices.text/label, answerKey",
        extra=lambda r: isinstance(r["choices"], dict), answer={"answerKey": lambda r: _first_label(r)})
def _arc(record: Record) -> MCItem:
    return _labelled(record, _text(record["question"], "question"), PROMPTS["arc"], "arc")


@reader("openbookqa", keys=("question_stem", "choices", "answerKey"), answer={"answerKey": lambda r: _first_label(r)},
        help="OpenBookQA: question_stem, choices.text/label, answerKey")
def _openbookqa(record: Record) -> MCItem:
    return _labelled(record, _text(record["question_stem"], "question_stem"), PROMPTS["openbookqa"], "openbookqa")


@reader("piqa", keys=("goal", "sol1", "sol2"), help="PIQA: goal, sol1, sol2, label|answer (0/1)",
        answer={"label": lambda r: 0, "answer": lambda r: 0})
def _piqa(record: Record) -> MCItem:
    field = "label" if "label" in record else "answer"
    answer = _as_index(record.get(field), 2, field)
    solutions = [_choice(record[key], key) for key in ("sol1", "sol2")]
    return MCItem(PROMPTS["piqa"].format(q=_text(record["goal"], "goal").strip()),
                  _continuations(solutions), answer, str(record.get("id", "")))


@reader("winogrande", keys=("sentence", "option1", "option2"),
        help="Winogrande: sentence with _, option1, option2, answer '1'|'2' (partial scoring)",
        answer={"answer": lambda r: "1"})
def _winogrande(record: Record) -> MCItem:
    sentence = _text(record["sentence"], "sentence")
    if BLANK not in sentence:
        raise ValueError("sentence has no '_' blank to fill")
    answer = _index(record["answer"], ["1", "2"], 2)
    options = tuple(_choice(record[key], key).strip() for key in ("option1", "option2"))
    return MCItem(sentence, options, answer, str(record.get("id", record.get("qID", ""))), fill_blank=True)


@reader("boolq", keys=("question", "passage", "answer"), help="BoolQ: question, passage, answer (bool) -> no/yes",
        answer={"answer": lambda r: False})
def _boolq(record: Record) -> MCItem:
    if not isinstance(record["answer"], bool):
        raise ValueError(f"answer {_short(record['answer'])} is not true/false")
    question = _text(record["question"], "question").strip().rstrip("?")
    prompt = f"{_text(record['passage'], 'passage').strip()}\nQuestion: {question}?\nAnswer:"
    return MCItem(prompt, (" no", " yes"), int(record["answer"]), str(record.get("id", record.get("idx", ""))))


def _hellaswag_clean(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


@reader("hellaswag", keys=("endings",), help="HellaSwag: ctx (or ctx_a, ctx_b), endings, label, activity_label",
        extra=lambda r: "ctx" in r or "ctx_a" in r, answer={"label": lambda r: 0})
def _hellaswag(record: Record) -> MCItem:
    if "ctx_a" in record:
        ctx = f"{record['ctx_a']} {str(record.get('ctx_b', '')).capitalize()}".strip()
    else:
        ctx = str(record["ctx"])
    activity = str(record.get("activity_label", "")).strip()
    query = _hellaswag_clean(f"{activity}: {ctx}" if activity else ctx)
    endings = [_hellaswag_clean(e) for e in _texts(record["endings"], "endings")]
    answer = _as_index(record.get("label"), len(endings), "label")
    return MCItem(query, _continuations(endings), answer, str(record.get("ind", record.get("id", ""))))


@reader("mc", keys=("question", "choices", "answer"),
        help="flat: question, choices (list), answer (0-based index, letter or the choice text)",
        extra=lambda r: not isinstance(r["choices"], dict),  # a string or null here is refused by name
        answer={"answer": lambda r: 0})
def _flat(record: Record) -> MCItem:
    choices = _texts(record["choices"], "choices")
    answer = record["answer"]
    if isinstance(answer, str) and answer in choices:
        index = choices.index(answer)
    elif isinstance(answer, str) and not answer.strip().isdecimal():
        index = _index(answer.strip().upper(), list(_LETTERS[: len(choices)]), len(choices))
    else:
        index = _as_index(answer, len(choices), "answer")
    # a choice's own leading space is the separator (quiz files write " red"); lm-eval's layouts add it
    return MCItem(_text(record["question"], "question"), tuple(" " + c.removeprefix(" ") for c in choices), index,
                  str(record.get("id", "")))


# --------------------------------------------------------------------------- file level

def detect_format(record: Record, *, labels: bool = True) -> str | None:
    """The first registered layout that recognises ``record`` (``None`` when none does); with
    ``labels=False`` also a record of a layout that lacks only its answer field."""
    if not labels:
        record = _unlabeled(record) or record
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
    return items_from_records(read_records(path), path, format=format, limit=limit)


def items_from_records(records: Iterable[tuple[int, Record]], path: str | Path, *, format: str = "auto",
                       limit: int | None = None, labels: bool = True) -> list[MCItem]:
    """Items of ``(line number, record)`` pairs already read; ``path`` names the file in a refusal.

    ``labels=False`` accepts records without their answer field (unlabeled task inputs): such an
    item gets a placeholder answer (the first choice) that means nothing and must not be scored.
    """
    path = Path(path)
    items: list[MCItem] = []
    name = None if format == "auto" else format
    for number, record in records:
        if limit is not None and len(items) >= limit:
            break
        if not labels:
            record = _unlabeled(record) or record
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
    group = record.get("group")
    if group is None:
        return item
    if isinstance(group, bool) or not isinstance(group, str | int) or not str(group).strip():
        raise PawError(f"line {number}: 'group' must be a non-empty string or an integer, not {group!r}", path=path)
    return dataclasses.replace(item, group=str(group))
