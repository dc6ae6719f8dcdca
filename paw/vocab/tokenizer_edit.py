"""Extend a Hugging Face ``tokenizer.json`` in memory: new BPE vocabulary with merges, or added tokens.

Two ways to give a tokenizer new tokens:

- *real vocabulary* (byte-level BPE: GPT-2, Llama 3, Qwen2, ``paw zoo`` tokenizers): the token
  enters ``model.vocab`` and merges that build it are appended to ``model.merges``
  (:func:`paw.vocab.extend.plan_bpe_merges`). Encoding then *produces* the token inside running
  text, exactly like a token the tokenizer was trained with.
- *added tokens* (everything else, special tokens, and strings a pre-tokenizer would split such
  as ``"New York"``): entries of ``added_tokens``, matched as literal strings before the model
  runs.

:func:`extend_tokenizer_json` does the edit and checks with the ``tokenizers`` library that each
new BPE token encodes to itself; :func:`paw.io.hf_tokenizer_edit.save_tokenizer_folder` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paw.bytelevel.alphabet import str_to_token, token_to_str
from paw.io.hf_tokenizer_edit import HfTokenizerJson, added_entry
from paw.vocab.extend import bpe_pieces, plan_bpe_merges


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
            b = str_to_token(entry)
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
        doc.setdefault("added_tokens", []).append(added_entry(next_id, text, special))
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
        return token_to_str(b)
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if backend.pre_tokenizer is None:
        return token_to_str(text.encode("utf-8"))
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
        return [self._vocab[p] for p in bpe_pieces(token_to_str(b), self._ranks) if p in self._vocab]


def _force_unproduced(new: HfTokenizerJson, created: list[NewToken]) -> None:
    """Check each requested BPE token encodes to its own id; register the rare exception as an added token.

    Tokens that are fragments of a UTF-8 character cannot be encoded on their own and are skipped.
    """
    backend = new.backend()
    by_id = {i: entry for entry, i in new.vocab().items()}
    for t in created:
        try:
            text = str_to_token(by_id[t.id]).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if t.how == "bpe" and backend.encode(text, add_special_tokens=False).ids != [t.id]:
            new.doc.setdefault("added_tokens", []).append(added_entry(t.id, text, False))
            t.how = "added"
