"""Edit a Hugging Face ``tokenizer.json``: add tokens as BPE vocabulary with merges, or as added tokens.

Two ways to give a tokenizer new tokens:

- *real vocabulary* (byte-level BPE: GPT-2, Llama 3, Qwen2, ``paw zoo`` tokenizers): the token
  enters ``model.vocab`` and merges that build it are appended to ``model.merges``
  (:func:`paw.vocab.extend.plan_bpe_merges`). Encoding then *produces* the token inside running
  text, exactly like a token the tokenizer was trained with.
- *added tokens* (everything else, special tokens, and strings a pre-tokenizer would split such
  as ``"New York"``): entries of ``added_tokens``, matched as literal strings before the model
  runs.

:func:`extend_tokenizer_json` does the edit in memory and checks with the ``tokenizers`` library
that each new BPE token encodes to itself; :func:`save_tokenizer_folder` writes the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from paw.errors import PawError
from paw.io.checkpoint import read_json
from paw.io.hub import resolve_path
from paw.io.manifest import write_json
from paw.vocab.extend import bpe_pieces, bytes_to_symbols, plan_bpe_merges, symbols_to_bytes

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
            return symbols_to_bytes(token)
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
    return HfTokenizerJson(read_json(path), path)


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
    try:
        from paw.io.bpe_files import read_bpe
    except ImportError:
        raise PawError("reading PAW BPE .model files needs paw.io.bpe_files (not installed in this "
                       "checkout); pass a tokenizer.json instead", path=path) from None
    bpe = read_bpe(path)
    return [b for b, _ in sorted(bpe.mergeable_ranks.items(), key=lambda kv: kv[1])]


@dataclass
class NewToken:
    """One id the extension created: its text, how it was added, and its pieces under the old tokenizer."""

    text: str
    id: int
    how: str  # 'bpe', 'bpe-intermediate', 'added', 'special'
    pieces: list[int] = field(default_factory=list)


@dataclass
class TokenizerExtension:
    """Result of :func:`extend_tokenizer_json`: the new document and a report of what changed."""

    doc: dict
    tokens: list[NewToken]
    present: list[str]
    skipped: list[str]
    merges_added: int
    old_size: int
    size: int

    def count(self, how: str) -> int:
        return sum(t.how == how for t in self.tokens)


def _display(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return repr(b)


def _dedupe(tokens: list[bytes | str]) -> list[bytes]:
    seen, out = set(), []
    for t in tokens:
        b = t.encode("utf-8") if isinstance(t, str) else bytes(t)
        if b and b not in seen:
            seen.add(b)
            out.append(b)
    return out


def extend_tokenizer_json(tok: HfTokenizerJson, tokens: list[bytes | str], *, special: bool = False,
                          max_intermediates: int | None = None) -> TokenizerExtension:
    """Add ``tokens`` to ``tok`` (see the module doc for which way); the input is not modified.

    ``max_intermediates``: a token whose merge chain would need more new intermediate tokens
    than this becomes an added token instead (None: no limit).
    """
    old = tok.backend()
    old_pieces = _OldPieces(old, tok)
    table = tok.byte_table()
    wanted = _dedupe(tokens)
    present = [_display(b) for b in wanted if b in table]
    todo = [b for b in wanted if b not in table]
    doc = _copy_for_edit(tok.doc)
    new = HfTokenizerJson(doc, tok.path)
    next_id = tok.size()
    created: list[NewToken] = []
    skipped: list[str] = []
    merges_added = 0
    as_added: list[bytes] = []
    if tok.kind == "byte-bpe" and not special:
        words, by_word = [], {}  # byte-level symbols -> requested bytes
        for b in todo:
            word = _single_pretoken(old, b)
            if word is None:
                as_added.append(b)
            else:
                words.append(word)
                by_word[word] = b
        plan = plan_bpe_merges(words, tok.vocab(), tok.merges(), max_intermediates=max_intermediates)
        as_added += [by_word[w] for w in plan.rejected]
        inter = set(plan.intermediates)
        vocab = doc["model"]["vocab"]
        for entry in plan.entries:
            vocab[entry] = next_id
            b = symbols_to_bytes(entry)
            created.append(NewToken(_display(b), next_id, "bpe-intermediate" if entry in inter else "bpe",
                                    old_pieces(b)))
            next_id += 1
        strings = isinstance((doc["model"].get("merges") or [["", ""]])[0], str)
        doc["model"]["merges"] = list(doc["model"].get("merges") or []) + [
            f"{a} {b}" if strings else [a, b] for a, b in plan.merges]
        merges_added = len(plan.merges)
        _force_unproduced(new, created)
    else:
        as_added = todo
    for b in as_added:
        try:
            text = b.decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(repr(b))
            continue
        doc.setdefault("added_tokens", []).append(_added_entry(next_id, text, special))
        created.append(NewToken(text, next_id, "special" if special else "added", old_pieces(b)))
        next_id += 1
    return TokenizerExtension(doc, created, present, skipped, merges_added, tok.size(), new.size())


def _copy_for_edit(doc: dict) -> dict:
    """Copy of a tokenizer.json document deep enough that editing vocab, merges and added tokens
    leaves ``doc`` untouched (a full deep copy of a 128k vocabulary costs seconds)."""
    out = dict(doc)
    out["model"] = dict(doc.get("model") or {})
    for key in ("vocab", "merges"):
        value = out["model"].get(key)
        if isinstance(value, dict | list):
            out["model"][key] = type(value)(value)
    out["added_tokens"] = [dict(t) for t in doc.get("added_tokens") or []]
    return out


def _single_pretoken(backend, b: bytes) -> str | None:
    """The byte-level symbols of ``b`` when the pre-tokenizer keeps it in one piece, else None."""
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:  # a fragment of a character (BPE vocabularies have them)
        return bytes_to_symbols(b)
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if backend.pre_tokenizer is None:
        return bytes_to_symbols(text.encode("utf-8"))
    pieces = backend.pre_tokenizer.pre_tokenize_str(text)
    return pieces[0][0] if len(pieces) == 1 else None


class _OldPieces:
    """Ids the old tokenizer splits a token into (no BOS/EOS), for ``subtoken-mean``.

    Text goes through the ``tokenizers`` backend; a fragment of a UTF-8 character cannot, and is
    split with :func:`bpe_pieces` over the old merges (vocabulary and ranks built once, on demand).
    """

    def __init__(self, backend, tok: HfTokenizerJson):
        self.backend, self.tok = backend, tok
        self._vocab: dict[str, int] | None = None
        self._ranks: dict[tuple[str, str], int] | None = None

    def __call__(self, b: bytes) -> list[int]:
        try:
            return list(self.backend.encode(b.decode("utf-8"), add_special_tokens=False).ids)
        except UnicodeDecodeError:
            pass
        if self._vocab is None:
            self._vocab = self.tok.vocab()
            self._ranks = {pair: i for i, pair in reversed(list(enumerate(self.tok.merges())))}
        return [self._vocab[p] for p in bpe_pieces(bytes_to_symbols(b), self._ranks) if p in self._vocab]


def _force_unproduced(new: HfTokenizerJson, created: list[NewToken]) -> None:
    """Check each requested BPE token encodes to its own id; register the rare exception as an added token.

    Tokens that are fragments of a UTF-8 character cannot be encoded on their own and are skipped.
    """
    backend = new.backend()
    by_id = {i: entry for entry, i in new.vocab().items()}
    for t in created:
        try:
            text = symbols_to_bytes(by_id[t.id]).decode("utf-8")
        except (KeyError, AttributeError, UnicodeDecodeError):
            continue
        if t.how == "bpe" and backend.encode(text, add_special_tokens=False).ids != [t.id]:
            new.doc.setdefault("added_tokens", []).append(_added_entry(t.id, text, False))
            t.how = "added"


def _added_entry(i: int, text: str, special: bool) -> dict:
    return {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def save_tokenizer_folder(doc: dict, source: str | Path, dest: str | Path, *,
                          new_tokens: list[NewToken] = ()) -> list[str]:
    """Write ``doc`` as ``dest/tokenizer.json`` with the side files of folder ``source``; return names written.

    A ``tokenizer_config.json`` that lists ``added_tokens_decoder`` (older transformers) gets the
    new added tokens there too, so both transformers 4 and 5 see them.
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
                        entry = _added_entry(t.id, t.text, t.how == "special")
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
