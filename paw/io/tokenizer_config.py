"""``tokenizer_config.json`` that transformers 4 and 5 both read.

transformers 5 saves a tokenizer built on ``tokenizers`` with ``tokenizer_class: TokenizersBackend``,
a class transformers 4 does not have: there ``AutoTokenizer.from_pretrained`` fails on the folder
("Tokenizer class TokenizersBackend does not exist"). ``PreTrainedTokenizerFast`` loads the same
``tokenizer.json`` in both (in transformers 5 it is another name of ``TokenizersBackend``), so every
tokenizer folder PAW writes names that class instead. A folder with a ``tokenizer.json`` and no
``tokenizer_config.json`` (a ``tokenizers``-only export) gets a minimal one: transformers 4 cannot
open a folder that has neither it nor a ``config.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paw.io.manifest import rewrite_json, write_json

CONFIG_NAME = "tokenizer_config.json"
PORTABLE_CLASS = "PreTrainedTokenizerFast"     # transformers 4.x and 5.x: the tokenizer.json-backed class
NEW_ONLY_CLASSES = frozenset({"TokenizersBackend"})  # transformers 5 names a 4.x AutoTokenizer refuses


def portable_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with a transformers-5-only ``tokenizer_class`` replaced by ``PreTrainedTokenizerFast``.

    >>> portable_config({"tokenizer_class": "TokenizersBackend", "bos_token": "<s>"})
    {'tokenizer_class': 'PreTrainedTokenizerFast', 'bos_token': '<s>'}
    >>> portable_config({"tokenizer_class": "LlamaTokenizer"})   # a model's own class is kept
    {'tokenizer_class': 'LlamaTokenizer'}
    """
    out = dict(config)
    if out.get("tokenizer_class") in NEW_ONLY_CLASSES:
        out["tokenizer_class"] = PORTABLE_CLASS
    return out


def minimal_config(roles: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A ``tokenizer_config.json`` for a bare ``tokenizer.json``; ``roles`` maps ``bos`` -> ``'<s>'``, ...

    >>> minimal_config({"eos": "<|endoftext|>"})
    {'tokenizer_class': 'PreTrainedTokenizerFast', 'clean_up_tokenization_spaces': False, 'eos_token': '<|endoftext|>'}
    """
    config: dict[str, Any] = {"tokenizer_class": PORTABLE_CLASS, "clean_up_tokenization_spaces": False}
    config.update({f"{role}_token": content for role, content in (roles or {}).items()})
    return config


def make_portable(folder: str | Path) -> bool:
    """Rewrite ``folder/tokenizer_config.json`` where :func:`portable_config` changes it, or write
    :func:`minimal_config` where a ``tokenizer.json`` has none; True when a file was written.
    A file that needs nothing is left byte for byte."""
    folder = Path(folder)
    path = folder / CONFIG_NAME
    if not path.is_file():
        if not (folder / "tokenizer.json").is_file():
            return False
        write_json(path, minimal_config())
        return True
    return rewrite_json(path, portable_config)
