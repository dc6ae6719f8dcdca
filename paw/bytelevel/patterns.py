"""Pre-tokenization patterns: the regex that cuts text into pieces before BPE sees it.

BPE never merges across a piece boundary, so the pattern decides, for example, that `` the`` keeps
its leading space and that digits come in runs of at most three (cl100k, Llama-3) or one (Qwen2).
Names map to the exact strings the production tokenizers use. The table is plain data that file
readers and writers share; compiling and checking a pattern (with the ``regex`` module, which knows
``\\p{L}``) is :mod:`paw.bpe.patterns`' work.
"""

from __future__ import annotations

import re

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


# a possessive counted repeat: one atom (\p{..}, an escape, a [class] or a plain character), then {m,n}+
_POSSESSIVE_REPEAT = re.compile(r"(\\p\{\w+\}|\\.|\[(?:\\.|[^\]])*\]|[^\\\[\]()|])(\{\d+(?:,\d*)?\})\+")


def to_oniguruma(pattern: str) -> str:
    """Spell a pattern for Hugging Face ``tokenizers`` (Oniguruma, Ruby syntax).

    Oniguruma reads ``X{1,3}+`` as "``X{1,3}`` one or more times", not as a possessive repeat, so
    cl100k's ``\\p{N}{1,3}+`` would glue any number of digits together. An atomic group means the
    same thing in both engines: ``\\p{N}{1,3}+`` -> ``(?>\\p{N}{1,3})``.
    """
    return _POSSESSIVE_REPEAT.sub(r"(?>\1\2)", pattern)
