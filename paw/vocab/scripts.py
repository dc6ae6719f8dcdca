"""Label a line of text with its writing system (or ``code`` / ``numbers``), fast enough for 10 MB.

The label is the script with the most letters in the line; Japanese wins over Chinese as soon as
kana appear. A line is ``code`` when brackets, ``=``, ``;`` and friends make up at least 6% of its
non-space characters, ``numbers`` when digits make up 40%. A heuristic, meant for per-script
averages in ``paw analyze-tokenizers``, not for language identification.

>>> script_of("北京是中国的首都。"), script_of("for (i = 0; i < n; ++i) {}"), script_of("3.14 2.71")
('chinese', 'code', 'numbers')
"""

from __future__ import annotations

import numpy as np

# (first code point, last code point, script): searched with np.searchsorted
_RANGES = [
    (0x0041, 0x005A, "latin"), (0x0061, 0x007A, "latin"), (0x00C0, 0x024F, "latin"),
    (0x0370, 0x03FF, "greek"), (0x0400, 0x04FF, "cyrillic"), (0x0590, 0x05FF, "hebrew"),
    (0x0600, 0x06FF, "arabic"), (0x0900, 0x097F, "devanagari"), (0x0E00, 0x0E7F, "thai"),
    (0x1100, 0x11FF, "korean"), (0x1E00, 0x1EFF, "latin"), (0x3040, 0x30FF, "japanese"),
    (0x3400, 0x4DBF, "chinese"), (0x4E00, 0x9FFF, "chinese"), (0xAC00, 0xD7AF, "korean"),
]
SCRIPTS = sorted({r[2] for r in _RANGES}) + ["code", "numbers", "other"]
_STARTS = np.array([r[0] for r in _RANGES])
_ENDS = np.array([r[1] for r in _RANGES])
_NAMES = [r[2] for r in _RANGES]
_ASCII_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))
_DIGITS = b"0123456789"
_CODE = b"{}()[];=<>+*/|&^%$#@\\_"
_SPACE = b" \t\r\n"


def _count(data: bytes, chars: bytes) -> int:
    return len(data) - len(data.translate(None, chars))


def script_of(line: str) -> str:
    """The dominant script of ``line``: 'latin', 'chinese', ..., 'code', 'numbers' or 'other'."""
    if line.isascii():
        data = line.encode("ascii")
        nonspace = len(data) - _count(data, _SPACE)
        if nonspace == 0:
            return "other"
        if _count(data, _CODE) >= 0.06 * nonspace:
            return "code"
        if _count(data, _DIGITS) >= 0.4 * nonspace:
            return "numbers"
        return "latin" if _count(data, _ASCII_LETTERS) else "other"
    cps = np.frombuffer(line.encode("utf-32-le"), dtype=np.uint32)
    pos = np.searchsorted(_STARTS, cps, side="right") - 1
    inside = (pos >= 0) & (cps <= _ENDS[np.maximum(pos, 0)])
    if not inside.any():
        digits = int(((cps >= 48) & (cps <= 57)).sum())
        return "numbers" if digits >= 0.4 * max(1, int((cps > 32).sum())) else "other"
    counts: dict[str, int] = {}
    for idx, n in zip(*np.unique(pos[inside], return_counts=True), strict=True):
        counts[_NAMES[idx]] = counts.get(_NAMES[idx], 0) + int(n)
    if counts.get("japanese"):
        return "japanese"
    return max(sorted(counts), key=counts.__getitem__)
