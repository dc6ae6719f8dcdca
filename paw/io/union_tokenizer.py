"""Token tables for merges across vocabularies, and the merged ``tokenizer.json`` / ``tokenizer_config.json``.

:func:`read_token_table` gives a model folder's tokens by string (``tokenizer.json``'s vocabulary
and its added tokens, as ``tokenizer.get_vocab()`` lists them) with each added token's record;
:func:`union_tokenizer_files` returns the base's two files with new added tokens appended, for the
writer to put beside the merged weights. No merge arithmetic here (that is :mod:`paw.merge.union`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.io.json_file import read_json, read_json_if_exists

_ADDED_KEYS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")


@dataclass
class TokenTable:
    """``ids``: token string -> id; ``added``: token string -> its ``added_tokens`` record (without id)."""

    ids: dict[str, int]
    added: dict[str, dict[str, Any]]


def _folder(model: str | Path) -> Path:
    path = Path(model)
    return path if path.is_dir() else path.parent


def read_token_table(model: str | Path) -> TokenTable:
    """The tokens of ``model``'s ``tokenizer.json`` (a model folder or a weight file beside one)."""
    path = _folder(model) / "tokenizer.json"
    if not path.is_file():
        raise PawError("no tokenizer.json: a merge across vocabularies needs each model's tokenizer", path=path)
    doc = read_json(path)
    vocab = (doc.get("model") or {}).get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        vocab = {piece: i for i, (piece, _score) in enumerate(vocab)}
    if not isinstance(vocab, dict):
        raise PawError("tokenizer.json has no model.vocab PAW can read", path=path)
    ids = {str(k): int(v) for k, v in vocab.items()}
    added = {}
    for entry in doc.get("added_tokens") or []:
        ids[entry["content"]] = int(entry["id"])
        added[entry["content"]] = {k: entry[k] for k in _ADDED_KEYS if k in entry}
    return TokenTable(ids, added)


def union_tokenizer_files(base: str | Path, new: list[dict[str, Any]], *,
                          chat_template: str | None = None) -> dict[str, dict[str, Any]]:
    """``{"tokenizer.json": ..., "tokenizer_config.json": ...}`` of ``base`` with the ``new`` added tokens.

    ``new`` holds full ``added_tokens`` records (``id``, ``content``, ``special``, ...), ids past the
    base's. ``tokenizer_config.json`` lists them under ``added_tokens_decoder`` where the base's does.
    """
    folder = _folder(base)
    doc = copy.deepcopy(read_json(folder / "tokenizer.json"))
    doc["added_tokens"] = [*(doc.get("added_tokens") or []), *new]
    config = dict(read_json_if_exists(folder / "tokenizer_config.json") or {})
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for entry in new:
            decoder[str(entry["id"])] = {k: v for k, v in entry.items() if k != "id"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    return {"tokenizer.json": doc, "tokenizer_config.json": config}
