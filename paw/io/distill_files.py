"""Files of ``paw transfer-lora --method distill``: input prompts in, adapter + report + curve out.

Prompt files are read here, once, as numbered lines (:func:`read_prompt_file`), each checked for
length, NUL bytes and UTF-8; :func:`paw.transfer.distill.run.read_inputs` decides what they hold (a
multiple-choice file ``paw eval`` reads, JSON records with a text field, or plain lines): io knows
no layout.
The output folder holds the PEFT adapter (``adapter_model.safetensors``, ``adapter_config.json``
naming the target), ``transfer_report.json`` with its ``distill`` section and ``distill_curve.png``;
no clock time, so equal inputs give equal bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw import __version__
from paw.errors import PawError
from paw.io.adapter import write_adapter_files
from paw.io.atomic import atomic_dir
from paw.io.manifest import dumps
from paw.io.model_card import Card, write_card
from paw.io.reports import save_figure

REPORT_JSON = "transfer_report.json"
CURVE_PNG = "distill_curve.png"
# The longest input line read: 64 KiB of UTF-8 (roughly 16k tokens), far above any prompt or
# multiple-choice item; longer lines are refused, not cut, like every other bad input (a 10 MB line
# used to tokenize for minutes, then ask for 100 TB of attention).
MAX_LINE_BYTES = 64 << 10


def read_prompt_lines(path: str | Path, *, what: str = "prompt file") -> list[str]:
    """The non-blank lines of a prompt file (:func:`read_prompt_file` without the line numbers)."""
    return [text for _, text in read_prompt_file(path, what=what)]


def read_prompt_file(path: str | Path, *, what: str = "prompt file") -> list[tuple[int, str]]:
    """``(line number, text)`` of every non-blank line of a prompt file, each checked before it is kept.

    A missing, unreadable or empty file is a :class:`PawError` naming it; so is a line longer than
    :data:`MAX_LINE_BYTES`, one holding a NUL byte (a binary file) or one that is not UTF-8, naming
    the file and the line number. The file is read one bounded line at a time, so a 10 GB line
    costs 64 KiB of memory to refuse. Lines end at ``\\n`` (``\\r\\n`` too).
    """
    path = Path(path)
    if not path.is_file():
        raise PawError(f"no such {what}", path=path)
    lines = []
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 3), b""), start=1):
                text = _prompt_line(path, what, number, raw)
                if text.strip():
                    lines.append((number, text))
    except OSError as err:
        raise PawError(f"cannot read the {what} ({err.strerror or err})", path=path) from None
    if not lines:
        raise PawError(f"empty {what}: no inputs", path=path)
    return lines


def _prompt_line(path: Path, what: str, number: int, raw: bytes) -> str:
    """One line of at most ``MAX_LINE_BYTES + 3`` bytes read from the file -> its text, or a refusal."""
    body = raw[:-1] if raw.endswith(b"\n") else raw
    body = body[:-1] if body.endswith(b"\r") else body
    if len(body) > MAX_LINE_BYTES:
        raise PawError(f"line {number} of the {what} is longer than {MAX_LINE_BYTES:,} bytes, the limit of "
                       "one input (docs/reliability.md); split or shorten it", path=path)
    if b"\0" in body:
        raise PawError(f"line {number} of the {what} holds a NUL byte: a binary file, not text", path=path)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PawError(f"line {number} of the {what} is not UTF-8 (byte {err.start + 1} of the line)",
                       path=path) from None


def write_distill(output: str | Path, adapter, report: dict, *, curve, command: str, inputs: dict[str, Any],
                  overwrite: bool = False, card: Card | None = None) -> Path:
    """Write the adapter, ``transfer_report.json`` and ``curve`` (a matplotlib figure, built by
    :func:`paw.transfer.distill.plots.curve_figure`) as ``distill_curve.png`` into ``output`` atomically."""
    with atomic_dir(output, overwrite=overwrite) as tmp:
        write_adapter_files(tmp, adapter)
        full = {"paw_version": __version__, "command": command, "inputs": inputs, **report}
        (tmp / REPORT_JSON).write_text(dumps(full), encoding="utf-8")
        save_figure(curve, tmp / CURVE_PNG, dpi=curve.dpi)
        if card is not None:
            write_card(tmp, card)
    return Path(output)
