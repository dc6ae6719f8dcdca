"""Pre-tokenization patterns: the regex that cuts text into pieces before BPE sees it.

BPE never merges across a piece boundary, so the pattern decides, for example, that `` the`` keeps
its leading space and that digits come in runs of at most three (cl100k, Llama-3) or one (Qwen2).
Names map to the exact strings the production tokenizers use; anything else given where a name is
expected is treated as a custom regex (compiled with the ``regex`` module, which knows ``\\p{L}``).
"""

from __future__ import annotations

from functools import lru_cache

from paw.errors import PawError

PATTERNS: dict[str, str | None] = {}


def register_pattern(name: str, pattern: str | None) -> None:
    """Add a named pattern (``None`` means: the whole text is one piece)."""
    PATTERNS[name] = pattern


# GPT-2 (Radford et al. 2019); also Hugging Face's ByteLevel pre-tokenizer with use_regex=True.
register_pattern("gpt2", r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
# cl100k_base (GPT-4), as shipped by tiktoken 0.7+.
register_pattern("gpt4", r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
# Llama-3 (tokenizer.json of Meta-Llama-3): cl100k's older spelling.
register_pattern("llama3", r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# Qwen2 / Qwen2.5 / Qwen3: like Llama-3 but single digits.
register_pattern("qwen2", r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# o200k_base (GPT-4o), from tiktoken.
register_pattern("o200k", "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
]))
register_pattern("none", None)

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


def pattern_name(pattern: str | None) -> str | None:
    """The registered name of a regex, or ``None`` for a custom one."""
    for name, known in PATTERNS.items():
        if known == pattern:
            return name
    return None


@lru_cache(maxsize=32)
def compile_pattern(pattern: str):
    """Compile with the ``regex`` module (``\\p{..}`` classes, possessive quantifiers)."""
    import regex

    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise PawError(f"invalid pre-tokenization regex {pattern!r}: {exc}") from None


def to_oniguruma(pattern: str) -> str:
    """Spell a pattern for Hugging Face ``tokenizers`` (Oniguruma, Ruby syntax).

    Oniguruma reads ``X{1,3}+`` as "``X{1,3}`` one or more times", not as a possessive repeat, so
    cl100k's ``\\p{N}{1,3}+`` would glue any number of digits together. An atomic group means the
    same thing in both engines: ``\\p{N}{1,3}+`` -> ``(?>\\p{N}{1,3})``.
    """
    import regex

    return regex.sub(r"(\\p\{\w+\}|\\.|\[(?:\\.|[^\]])*\]|[^\\\[\]()|])(\{\d+(?:,\d*)?\})\+", r"(?>\1\2)", pattern)
