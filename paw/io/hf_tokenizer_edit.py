"""Read and write Hugging Face ``tokenizer.json`` folders for vocabulary extension.

:class:`HfTokenizerJson` is a parsed ``tokenizer.json`` with byte-level aware lookups;
:func:`save_tokenizer_folder` writes an edited document beside the source folder's side files.
The edit itself (new BPE vocabulary with merges, or added tokens) is
:func:`paw.vocab.tokenizer_edit.extend_tokenizer_json`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from paw.bytelevel.alphabet import str_to_token
from paw.errors import PawError
from paw.io.bpe_files import read_bpe
from paw.io.hub import resolve_path
from paw.io.json_file import read_json
from paw.io.manifest import write_json

TOKENIZER_JSON = "tokenizer.json"
# copied beside the edited tokenizer.json; slow-tokenizer files (tokenizer.model, vocab.json,
# merges.txt, added_tokens.json) are left out because they would not know the new tokens
SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass
class HfTokenizerJson:
    """A parsed ``tokenizer.json`` and where it came from."""

    doc: dict
    path: Path

    @property
    def model(self) -> dict:
        return self.doc.get("model") or {}

    @cached_property
    def kind(self) -> str:
        """``'byte-bpe'``, ``'bpe'``, ``'wordpiece'``, ``'unigram'``, ``'wordlevel'``."""
        mtype = str(self.model.get("type", "")).lower()
        if mtype == "bpe" and _has_byte_level(self.doc.get("pre_tokenizer")):
            return "byte-bpe"
        return mtype or "unknown"

    def vocab(self) -> dict[str, int]:
        vocab = self.model.get("vocab") or {}
        if isinstance(vocab, list):  # unigram: [[piece, score], ...]
            return {piece: i for i, (piece, _score) in enumerate(vocab)}
        return dict(vocab)

    def merges(self) -> list[tuple[str, str]]:
        out = []
        for m in self.model.get("merges") or []:
            a, b = m.split(" ", 1) if isinstance(m, str) else m
            out.append((a, b))
        return out

    def added(self) -> list[dict]:
        return list(self.doc.get("added_tokens") or [])

    def size(self) -> int:
        """Number of ids: 1 + the largest id of the vocabulary and the added tokens."""
        ids = list(self.vocab().values()) + [int(t["id"]) for t in self.added()]
        return max(ids) + 1 if ids else 0

    def token_bytes(self, token: str) -> bytes | None:
        """The bytes a vocabulary entry stands for (``'Ġhi' -> b' hi'``, ``'<0x0A>' -> b'\\n'``)."""
        if self.kind == "byte-bpe":
            try:
                return str_to_token(token)
            except KeyError:  # a character outside the byte-level alphabet
                return None
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            return bytes([int(token[3:5], 16)])
        return token.replace("▁", " ").encode("utf-8")

    def byte_table(self) -> dict[bytes, int]:
        """``bytes -> id`` for every vocabulary entry and added token."""
        table: dict[bytes, int] = {}
        for token, i in self.vocab().items():
            b = self.token_bytes(token)
            if b is not None:
                table.setdefault(b, i)
        for t in self.added():
            table.setdefault(t["content"].encode("utf-8"), int(t["id"]))
        return table

    def backend(self):
        """A ``tokenizers.Tokenizer`` for this document."""
        from tokenizers import Tokenizer

        try:
            return Tokenizer.from_str(json.dumps(self.doc))
        except Exception as err:
            raise PawError(f"the tokenizers library cannot load this tokenizer ({err})", path=self.path) from None


def _has_byte_level(pre_tokenizer) -> bool:
    if not isinstance(pre_tokenizer, dict):
        return False
    if pre_tokenizer.get("type") == "ByteLevel":
        return True
    return any(_has_byte_level(p) for p in pre_tokenizer.get("pretokenizers") or [])


def open_tokenizer_json(spec: str | Path) -> HfTokenizerJson:
    """Read ``tokenizer.json`` from a model folder or the file itself."""
    path = resolve_path(spec, what="tokenizer")
    if path.is_dir():
        path = path / TOKENIZER_JSON
        if not path.exists():
            raise PawError(f"no {TOKENIZER_JSON} in this folder (PAW edits fast tokenizers; save the "
                           "tokenizer once with transformers to create it)", path=path.parent)
    doc = read_json(path)
    _check_loads(doc, path)
    return HfTokenizerJson(doc, path)


def _check_loads(doc: dict, path: Path) -> None:
    """Refuse a document the ``tokenizers`` library cannot load (a BPE vocab that is a list, an id that
    is a string, ...): every lookup below trusts its structure."""
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_str(json.dumps(doc))
    except Exception as err:  # tokenizers raises a bare Exception with serde's message
        raise PawError(f"tokenizers cannot load this file ({str(err).splitlines()[0]})", path=path) from None


def read_token_list(spec: str | Path) -> list[bytes]:
    """Every regular token of another tokenizer as bytes, in id (rank) order.

    ``spec`` is a HF tokenizer folder / ``tokenizer.json``, or a PAW BPE ``.model`` file written by
    ``paw bpe train``. Special tokens are left out.
    """
    path = resolve_path(spec, what="tokenizer")
    if path.is_dir() or path.suffix == ".json":
        tok = open_tokenizer_json(path)
        special = {t["content"] for t in tok.added() if t.get("special")}
        out = []
        for token, _ in sorted(tok.vocab().items(), key=lambda kv: kv[1]):
            b = tok.token_bytes(token)
            if b is not None and token not in special:
                out.append(b)
        return out
    bpe = read_bpe(path)
    return [b for b, _ in sorted(bpe.mergeable_ranks.items(), key=lambda kv: kv[1])]


def added_entry(i: int, text: str, special: bool) -> dict:
    """One ``added_tokens`` record of ``tokenizer.json``."""
    return {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def save_tokenizer_folder(doc: dict, source: str | Path, dest: str | Path, *,
                          new_tokens: Sequence[Any] = ()) -> list[str]:
    """Write ``doc`` as ``dest/tokenizer.json`` with the side files of folder ``source``; return names written.

    A ``tokenizer_config.json`` that lists ``added_tokens_decoder`` (older transformers) gets the
    new added tokens there too, so both transformers 4 and 5 see them. ``new_tokens`` are
    :class:`paw.vocab.tokenizer_edit.NewToken` (``id``, ``text``, ``how``).
    """
    source, dest = Path(source), Path(dest)
    if source.is_file():
        source = source.parent
    # compact: json's C encoder only runs without indent (an indented 10 MB vocabulary takes ~10 s)
    (dest / TOKENIZER_JSON).write_text(json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")
    written = [TOKENIZER_JSON]
    for name in SIDE_FILES:
        if not (source / name).is_file():
            continue
        if name == "tokenizer_config.json":
            config = read_json(source / name)
            decoder = config.get("added_tokens_decoder")
            if isinstance(decoder, dict):
                for t in new_tokens:
                    if t.how in ("added", "special"):
                        entry = added_entry(t.id, t.text, t.how == "special")
                        decoder[str(t.id)] = {k: v for k, v in entry.items() if k != "id"}
            write_json(dest / name, config)
        else:
            (dest / name).write_bytes((source / name).read_bytes())
        written.append(name)
    return written


def read_tokens_file(path: str | Path) -> list[str]:
    """Tokens to add, one per line, kept verbatim (a leading space is part of the token); a ``.json``
    file holds a list of strings instead. Blank lines are ignored."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PawError("file not found", path=path) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise PawError(f"not valid JSON ({err})", path=path) from None
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise PawError("expected a JSON list of strings", path=path)
        return [t for t in data if t]
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PawError("file not found", path=path) from None
    except UnicodeDecodeError:
        raise PawError("not UTF-8 text", path=path) from None
    tokens = [line for line in text.split("\n") if line.strip()]
    if not tokens:
        raise PawError("no tokens in this file", path=path)
    return [t.removesuffix("\r") for t in tokens]
