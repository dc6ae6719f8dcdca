"""Pre-tokenization patterns, compiled: a name or a custom regex in, a compiled ``regex`` out.

The table of named patterns is plain data in :mod:`paw.bytelevel.patterns` (file readers share
it); anything else given where a name is expected is treated as a custom regex, compiled with the
``regex`` module, which knows ``\\p{L}`` and possessive quantifiers.
"""

from __future__ import annotations

from functools import lru_cache

from paw.bytelevel.patterns import PATTERNS
from paw.errors import PawError

_REGEX_HINT = set("\\[]()|?*+{}^$")


def resolve_pattern(name_or_regex: str | None) -> str | None:
    """``'gpt4'`` -> its regex; a string with regex syntax passes through; ``'none'``/``None`` -> ``None``.

    An unknown plain word (``'gpt5'``) is refused with the list of names, since it is more likely a
    typo than a regex meant to match that literal word.
    """
    if name_or_regex is None:
        return None
    if name_or_regex in PATTERNS:
        return PATTERNS[name_or_regex]
    if not _REGEX_HINT & set(name_or_regex):
        raise PawError(f"unknown pattern {name_or_regex!r}; choose one of {', '.join(PATTERNS)} or give a regex")
    compile_pattern(name_or_regex)
    return name_or_regex


@lru_cache(maxsize=32)
def compile_pattern(pattern: str):
    """Compile with the ``regex`` module (``\\p{..}`` classes, possessive quantifiers)."""
    import regex

    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise PawError(f"invalid pre-tokenization regex {pattern!r}: {exc}") from None
