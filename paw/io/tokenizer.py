"""Open any tokenizer as a :class:`TokenizerInfo`: canonical token bytes, special tokens, a fast encoder.

Vocabularies are stored in different conventions, so comparing the stored strings is wrong: Qwen's
byte-level ``Ġthe``, Llama-2's SentencePiece ``▁the`` and BERT's WordPiece word-initial ``the`` are
the same piece of text. PAW compares the **canonical form** of a token, the bytes it stands for:

=====================  ==================================  ==============================
convention             stored                              canonical bytes
=====================  ==================================  ==============================
byte-level BPE         ``Ġthe``, ``åĮ`` (GPT-2 alphabet)   ``b' the'``, ``b'\\xe5\\x8c'``
SentencePiece BPE      ``▁the``, ``<0xE5>`` (byte fallback) ``b' the'``, ``b'\\xe5'``
WordPiece              ``the`` (word-initial), ``##the``    ``b' the'``, ``b'the'``
tiktoken / PAW BPE     rank table entries (raw bytes)       the bytes themselves
=====================  ==================================  ==============================

WordPiece drops whitespace, so the space is a choice: a word-initial piece gets a leading space
(the way a word appears in running text, like ``Ġthe`` and ``▁the``), a ``##`` continuation gets
none. Punctuation is word-initial in WordPiece, so ``,`` becomes ``b' ,'``; exact matches against
byte-level ``,`` therefore miss and fall through to decomposition.

Supported inputs (:func:`open_tokenizer`): a Hugging Face folder with ``tokenizer.json`` (or a model
ID in the local cache), a ``tokenizer.json`` file, a tiktoken rank file (``<base64> <rank>`` lines),
and a PAW BPE ``.model`` file (through :func:`paw.io.bpe_files.read_bpe`).

>>> tok = open_tokenizer("tiny/base")                 # doctest: +SKIP
>>> tok.token_bytes(tok.encode(" the")[0])            # doctest: +SKIP
b' the'
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paw.errors import PawError

__all__ = ["SpecialToken", "TokenizerInfo", "open_tokenizer", "read_corpus", "byte_decoder", "CL100K_PATTERN", "ROLES"]

# tiktoken's cl100k_base split pattern, also Llama-3's; the default for rank files without one
CL100K_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
ROLES = ("bos", "eos", "pad", "unk", "cls", "sep", "mask", "chat")
# special-token names by role, used when tokenizer_config.json does not say (first match wins)
_ROLE_NAMES = {
    "bos": ("<s>", "<|begin_of_text|>", "<|bos|>", "<bos>", "<|startoftext|>", "[CLS]"),
    "eos": ("</s>", "<|end_of_text|>", "<|endoftext|>", "<|eos|>", "<eos>", "<|im_end|>", "[SEP]"),
    "pad": ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>", "<|fim_pad|>"),
    "unk": ("<unk>", "<|unk|>", "[UNK]"),
    "cls": ("[CLS]",), "sep": ("[SEP]",), "mask": ("[MASK]", "<mask>"),
}
_CHAT_MARKER = re.compile(r"im_start|im_end|im_sep|start_header_id|end_header_id|eot_id|start_of_turn|"
                          r"end_of_turn|\[/?INST\]|<\|(user|assistant|system)\|>|<\|eom_id\|>", re.I)
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_TIKTOKEN_LINE = re.compile(rb"^[A-Za-z0-9+/]+=* \d+\s*$")


def byte_decoder() -> dict[str, int]:
    """GPT-2's printable alphabet back to bytes: ``'Ġ' -> 0x20``, ``'A' -> 0x41`` (256 entries)."""
    from paw.bpe.bytelevel import unicode_to_bytes

    return unicode_to_bytes()


@dataclass(frozen=True)
class SpecialToken:
    """A token outside the regular vocabulary: ``special`` (control) or an added text token."""

    id: int
    content: str
    special: bool
    role: str | None = None  # one of ROLES, or None


@dataclass
class TokenizerInfo:
    """One tokenizer, seen through canonical bytes.

    ``vocab[i]`` is the canonical bytes of id ``i`` for regular tokens and non-special added
    tokens, ``None`` for special tokens and unused ids. ``size`` is the id space (max id + 1),
    ``embedding_rows`` the model's embedding rows when a ``config.json`` sits beside the tokenizer.
    """

    spec: str
    kind: str  # 'byte-level' | 'sentencepiece' | 'wordpiece' | 'tiktoken' | 'paw-bpe' | 'other'
    vocab: list[bytes | None]
    specials: dict[int, SpecialToken]
    embedding_rows: int | None = None
    folder: Path | None = None  # where the tokenizer files live (copied by transplant)
    byte_fallback_ids: frozenset[int] = frozenset()
    unk_id: int | None = None
    backend: Any = field(default=None, repr=False)  # tokenizers.Tokenizer or tiktoken.Encoding
    config: dict | None = field(default=None, repr=False)  # the model config.json, when at hand
    # a tiktoken encoder giving the same ids as ``backend`` (byte-level BPE only; 2-3x faster)
    fast: Any = field(default=None, repr=False)

    # ----- sizes and lookups -------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def added_ids(self) -> list[int]:
        return sorted(i for i, s in self.specials.items() if not s.special)

    @property
    def special_ids(self) -> list[int]:
        return sorted(i for i, s in self.specials.items() if s.special)

    @property
    def regular_ids(self) -> list[int]:
        """Ids of the model vocabulary proper (not added, not special)."""
        return [i for i, b in enumerate(self.vocab) if b is not None and i not in self.specials]

    def token_bytes(self, token_id: int) -> bytes:
        """Canonical bytes of a regular/added token, the UTF-8 content of a special token."""
        if not 0 <= token_id < len(self.vocab):
            raise PawError(f"token id {token_id} outside the vocabulary (size {len(self.vocab)})", path=self.spec)
        b = self.vocab[token_id]
        if b is None:
            s = self.specials.get(token_id)
            return s.content.encode("utf-8") if s else b""
        return b

    @functools.cached_property
    def bytes_to_id(self) -> dict[bytes, int]:
        """Canonical bytes -> id; on duplicates a regular token beats a byte-fallback one, then lower id."""
        out: dict[bytes, int] = {}
        order = sorted(range(len(self.vocab)), key=lambda i: (i not in self.byte_fallback_ids, -i))
        for i in order:
            b = self.vocab[i]
            if b is not None:
                out[b] = i
        return out

    def role_id(self, role: str) -> int | None:
        """Id of the first special token with ``role`` (bos, eos, pad, unk, ...), or None."""
        ids = [i for i, s in sorted(self.specials.items()) if s.role == role]
        return ids[0] if ids else None

    # ----- encoding -----------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added BOS/EOS.

        Special-token strings written in the text (``<|endoftext|>``) are encoded as plain text by
        rank files and the tiktoken path, and as the special token by the ``tokenizers`` path.
        """
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self.kind in _RANK_KINDS:
            return self.backend.encode_ordinary_batch(list(texts), num_threads=2)
        if self.fast is not None:
            return self.fast.encode_ordinary_batch(list(texts), num_threads=2)
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def encode_with_ends(self, texts: Sequence[str]) -> tuple[list[list[int]], list[list[int]]]:
        """Ids and each token's end offset in **characters** of the text (for boundary agreement).

        Byte-level tokens that split a character end where that character ends, so boundaries are
        compared at character granularity for every tokenizer kind.
        """
        texts = list(texts)
        if self.kind in _RANK_KINDS or self.fast is not None:
            ids = self.encode_batch(texts)
            return ids, [_char_ends(t, [len(self.vocab[i] or b"") for i in row]) for t, row in zip(texts, ids, strict=True)]
        encs = self.backend.encode_batch(texts, add_special_tokens=False)
        return [e.ids for e in encs], [[o[1] for o in e.offsets] for e in encs]

    def tokenizer_json(self) -> str:
        """The tokenizer as ``tokenizer.json`` text (rank tables are converted to byte-level BPE)."""
        if self.kind in _RANK_KINDS:
            from paw.vocab.convert import ranks_to_tokenizer

            ranks = {b: i for i, b in enumerate(self.vocab) if b is not None and i not in self.specials}
            specials = {s.content: i for i, s in self.specials.items()}
            return ranks_to_tokenizer(ranks, self.backend._pat_str, specials).to_str()
        return self.backend.to_str()


_RANK_KINDS = ("tiktoken", "paw-bpe")


def _char_ends(text: str, byte_lens: list[int]) -> list[int]:
    """Byte end offsets of tokens -> character end offsets (ceil to the next character end)."""
    import numpy as np

    ends = np.cumsum(byte_lens, dtype=np.int64)
    if text.isascii():
        return ends.tolist()
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    widths = 1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000)
    char_end_bytes = np.cumsum(widths)
    return (np.searchsorted(char_end_bytes, ends, side="left") + 1).tolist()


# ----- opening ----------------------------------------------------------------------------------
def open_tokenizer(spec: str | Path, *, pattern: str | None = None, fast: bool = True) -> TokenizerInfo:
    """Open a tokenizer folder, ``tokenizer.json``, tiktoken rank file or PAW BPE ``.model`` file.

    ``pattern`` is the pre-tokenizer regex for tiktoken rank files, which do not store one
    (default: cl100k / Llama-3's). Anything unreadable is a :class:`PawError` naming the file.
    With ``fast``, a byte-level BPE ``tokenizer.json`` whose merges follow its token ids (GPT-2,
    Llama-3, Qwen2 and the zoo's do) is encoded by tiktoken, after a parity check on the embedded
    samples; otherwise the ``tokenizers`` library encodes.
    """
    from paw.io.hub import resolve_path

    path = resolve_path(spec, what="tokenizer")
    if path.is_file() and path.suffix.lower() == ".gguf":  # transformers' conversion of its vocabulary
        from paw.io.gguf import gguf_side_folder

        path = gguf_side_folder(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return _open_hf(path / "tokenizer.json", str(spec), fast)
        for name in sorted(path.iterdir()):
            if name.suffix in (".tiktoken", ".model") and name.is_file():
                return _open_file(name, str(spec), pattern)
        raise PawError("folder has no tokenizer.json, *.tiktoken or *.model file", path=path)
    return _open_file(path, str(spec), pattern, fast)


def _open_file(path: Path, spec: str, pattern: str | None, fast: bool = True) -> TokenizerInfo:
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.lstrip().startswith(b"{"):
        return _open_hf(path, spec, fast)
    first = head.split(b"\n", 1)[0]
    if _TIKTOKEN_LINE.match(first):
        return _open_tiktoken(path, spec, pattern)
    try:
        from paw.io.bpe_files import read_bpe
    except ImportError:
        raise PawError("not a tokenizer.json or tiktoken rank file (PAW BPE reader not available)",
                       path=path) from None
    bpe = read_bpe(path)
    return _from_ranks(spec, "paw-bpe", bpe.mergeable_ranks, bpe.pattern or CL100K_PATTERN,
                       dict(bpe.special_tokens), folder=path.parent)


def _open_tiktoken(path: Path, spec: str, pattern: str | None) -> TokenizerInfo:
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except ValueError:
                raise PawError(f"line {lineno} is not '<base64> <rank>' (tiktoken rank file)", path=path) from None
    specials = _sidecar_specials(path, max(ranks.values(), default=-1) + 1)
    return _from_ranks(spec, "tiktoken", ranks, pattern or CL100K_PATTERN, specials, folder=path.parent)


def _sidecar_specials(path: Path, first_id: int) -> dict[str, int]:
    """Special tokens of a rank file from ``tokenizer_config.json`` beside it, if any."""
    cfg = _read_json_or_none(path.parent / "tokenizer_config.json") or {}
    decoder = cfg.get("added_tokens_decoder") or {}
    return {v["content"]: int(k) for k, v in decoder.items() if isinstance(v, dict) and "content" in v}


def _from_ranks(spec: str, kind: str, ranks: dict[bytes, int], pattern: str, specials: dict[str, int],
                *, folder: Path | None) -> TokenizerInfo:
    import tiktoken

    if not ranks:
        raise PawError("empty rank table", path=spec)
    size = max([*ranks.values(), *specials.values()]) + 1
    vocab: list[bytes | None] = [None] * size
    for b, r in ranks.items():
        vocab[r] = b
    try:
        enc = tiktoken.Encoding(Path(spec).name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    except Exception as err:
        raise PawError(f"cannot build a BPE encoder from the rank table ({err})", path=spec) from None
    special_info = {i: SpecialToken(i, s, True, _guess_role(s)) for s, i in specials.items()}
    for i in special_info:
        vocab[i] = None
    config = _read_json_or_none(folder / "config.json") if folder else None
    return TokenizerInfo(spec, kind, vocab, special_info, embedding_rows=_embedding_rows(config),
                         folder=folder, backend=enc, config=config)


def _open_hf(path: Path, spec: str, fast: bool = True) -> TokenizerInfo:
    from tokenizers import Tokenizer

    data = _read_json_or_none(path)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise PawError("not a tokenizers JSON file (no 'model' object)", path=path)
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as err:
        raise PawError(f"tokenizers cannot load this file ({str(err).splitlines()[0]})", path=path) from None
    model = data["model"]
    kind = _hf_kind(data)
    raw = model.get("vocab") or {}
    pieces = {p: i for i, (p, _) in enumerate(raw)} if isinstance(raw, list) else dict(raw)
    added = {int(t["id"]): t for t in data.get("added_tokens") or []}
    size = max([*pieces.values(), *added, -1]) + 1
    canon = _CANONICAL[kind]
    prefix = model.get("continuing_subword_prefix") or "##"
    vocab: list[bytes | None] = [None] * size
    fallback: set[int] = set()
    byte_fallback = bool(model.get("byte_fallback")) or model.get("type") == "Unigram"
    for piece, i in pieces.items():
        if byte_fallback and (m := _BYTE_TOKEN.match(piece)):
            vocab[i] = bytes([int(m.group(1), 16)])
            fallback.add(i)
        else:
            vocab[i] = canon(piece, prefix)
    folder = path.parent
    tcfg = _read_json_or_none(folder / "tokenizer_config.json") or {}
    config = _read_json_or_none(folder / "config.json")
    roles = _configured_roles(tcfg)
    specials = {}
    for i, t in added.items():
        content, special = t["content"], bool(t.get("special"))
        if byte_fallback and _BYTE_TOKEN.match(content):  # byte pieces declared as added tokens
            vocab[i] = bytes([int(content[3:5], 16)])
            fallback.add(i)
            continue
        specials[i] = SpecialToken(i, content, special, roles.get(content) or _guess_role(content))
        vocab[i] = None if special else content.encode("utf-8")
    unk = model.get("unk_token")
    unk_id = backend.token_to_id(unk) if unk else None
    info = TokenizerInfo(spec, kind, vocab, specials, embedding_rows=_embedding_rows(config), folder=folder,
                         byte_fallback_ids=frozenset(fallback), unk_id=unk_id, backend=backend, config=config)
    if fast and kind == "byte-level":
        info.fast = _tiktoken_twin(data, pieces, info)
    return info


_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _split_pattern(pre: Any) -> str | None:
    """The regex of a ``Split(regex) + ByteLevel(use_regex=False)`` or ``ByteLevel(use_regex=True)``."""
    if not isinstance(pre, dict):
        return None
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True) \
            and not steps[0].get("add_prefix_space"):
        return _GPT2_PATTERN
    if len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel" \
            and not steps[1].get("use_regex") and not steps[1].get("add_prefix_space") \
            and str(steps[0].get("behavior", "")).lower() == "isolated" and not steps[0].get("invert") \
            and "Regex" in (steps[0].get("pattern") or {}):
        return steps[0]["pattern"]["Regex"]
    return None


def _tiktoken_twin(data: dict, pieces: dict[str, int], info: TokenizerInfo):
    """A tiktoken Encoding with the same output as the tokenizers BPE, or None if not provably so.

    tiktoken merges the adjacent pair whose concatenation has the lowest rank; tokenizers merges
    the pair listed first. With ranks = ids the two agree when merge order follows the ids of the
    merged tokens, which is checked here, and then confirmed on the embedded sample texts.
    """
    import tiktoken

    model = data["model"]
    pattern = _split_pattern(data.get("pre_tokenizer"))
    if (pattern is None or data.get("normalizer") or model.get("dropout") or model.get("byte_fallback")
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")):
        return None
    last = -1
    for m in model.get("merges") or []:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        rank = pieces.get(a + b)
        if rank is None or rank <= last:
            return None
        last = rank
    ranks = {info.vocab[i]: i for i in pieces.values() if i not in info.specials}
    if len(ranks) != len(pieces) - len(set(pieces.values()) & set(info.specials)):
        return None
    if any(bytes([b]) not in ranks for b in range(256)):
        # tiktoken needs every single byte as a token (it panics on text with a missing one);
        # SmolLM2's vocabulary lacks 21 of them, so its text goes through ``tokenizers``
        return None
    try:
        enc = tiktoken.Encoding(info.spec, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    except Exception:  # a pattern tiktoken's regex engine rejects
        return None
    from paw.zoo import sample_texts

    probe = sample_texts("multi") + sample_texts("en")
    slow = [e.ids for e in info.backend.encode_batch(probe, add_special_tokens=False)]
    return enc if enc.encode_ordinary_batch(probe) == slow else None


def _walk_types(node: Any) -> list[str]:
    """All ``type`` values in a nested normalizer/pre-tokenizer/decoder description."""
    if isinstance(node, dict):
        return [node.get("type", ""), *[t for v in node.values() for t in _walk_types(v)]]
    if isinstance(node, list):
        return [t for v in node for t in _walk_types(v)]
    return []


def _hf_kind(data: dict) -> str:
    model_type = data["model"].get("type")
    if model_type == "WordPiece":
        return "wordpiece"
    types = _walk_types([data.get("pre_tokenizer"), data.get("decoder")])
    if "ByteLevel" in types:
        return "byte-level"
    text = json.dumps([data.get("normalizer"), data.get("pre_tokenizer"), data.get("decoder")])
    if model_type == "Unigram" or "Metaspace" in types or "▁" in text or "\\u2581" in text:
        return "sentencepiece"
    return "other"


@functools.cache
def _byte_table() -> dict[int, str]:
    return {ord(c): chr(b) for c, b in byte_decoder().items()}


def _canon_byte_level(piece: str, _prefix: str) -> bytes:
    try:  # str.translate + latin-1 runs in C: 150k pieces in ~0.1 s
        return piece.translate(_byte_table()).encode("latin-1")
    except UnicodeEncodeError:  # a piece outside the GPT-2 alphabet: take it as text
        return piece.encode("utf-8")


_CANONICAL = {
    "byte-level": _canon_byte_level,
    "sentencepiece": lambda piece, _p: piece.replace("▁", " ").encode("utf-8"),
    "wordpiece": lambda piece, p: piece[len(p):].encode("utf-8") if piece.startswith(p) and piece != p
    else b" " + piece.encode("utf-8"),
    "other": lambda piece, _p: piece.encode("utf-8"),
}


def _configured_roles(tcfg: dict) -> dict[str, str]:
    """content -> role from ``tokenizer_config.json`` (``bos_token: '<s>'`` or ``{'content': '<s>'}``)."""
    out = {}
    for role in ROLES:
        value = tcfg.get(f"{role}_token")
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and value not in out:
            out[value] = role
    return out


def _guess_role(content: str) -> str | None:
    for role, names in _ROLE_NAMES.items():
        if content in names:
            return role
    return "chat" if _CHAT_MARKER.search(content) else None


def _embedding_rows(config: dict | None) -> int | None:
    if not config:
        return None
    for cfg in (config, config.get("text_config") or {}):
        if isinstance(cfg.get("vocab_size"), int):
            return cfg["vocab_size"]
    return None


def _read_json_or_none(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PawError(f"not valid JSON ({err})", path=path) from None


def read_corpus(paths: Sequence[str | Path]) -> list[str]:
    """Non-empty lines of text files; for ``.jsonl`` files the ``text`` field (or all string fields).

    Long lines are kept whole; an unreadable or non-UTF-8 file is a PawError naming it.
    """
    lines: list[str] = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise PawError("no such corpus file", path=path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise PawError(f"corpus is not UTF-8 text ({err.reason} at byte {err.start})", path=path) from None
        if path.suffix == ".jsonl":
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    lines.extend(_jsonl_texts(line, path, n))
        else:
            lines.extend(line for line in text.splitlines() if line.strip())
    if not lines:
        raise PawError("corpus has no non-empty lines", path=", ".join(map(str, paths)))
    return lines


def _jsonl_texts(line: str, path: Path, n: int) -> list[str]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        raise PawError(f"line {n} is not JSON", path=path) from None
    if isinstance(obj, dict) and isinstance(obj.get("text"), str):
        return [obj["text"]]
    values = obj.values() if isinstance(obj, dict) else [obj]
    return [v for v in values if isinstance(v, str) and v.strip()]
