"""Open a Hugging Face ``tokenizer.json`` (any model type) as a :class:`TokenizerInfo`.

Every stored piece is turned into the bytes it stands for (see :mod:`paw.io.tokenizer`); special
and added tokens come from ``added_tokens``, their roles from ``tokenizer_config.json`` beside it.
A byte-level BPE whose merges follow its token ids also gets a tiktoken twin for speed
(:attr:`TokenizerInfo.fast`), built on first use.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from paw.bytelevel.alphabet import str_to_token
from paw.errors import PawError
from paw.io.bpe_tokenizer_json import pretokenizer_pattern
from paw.io.tokenizer_info import SpecialToken, TokenizerInfo

CONFIG_ROLES = ("bos", "eos", "pad", "unk", "cls", "sep", "mask")  # the ``<role>_token`` keys of tokenizer_config.json
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


def guess_role(content: str) -> str | None:
    """The role a special token's spelling implies, or None."""
    for role, names in _ROLE_NAMES.items():
        if content in names:
            return role
    return "chat" if _CHAT_MARKER.search(content) else None


_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def read_tokenizer_json(path: Path, spec: str, *, fast: bool = True) -> TokenizerInfo:
    """``path`` is a ``tokenizer.json``; ``spec`` is what the user named (kept for messages)."""
    from tokenizers import Tokenizer

    data = read_json_or_none(path)
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
    roles = _configured_roles(read_json_object_or_none(folder / "tokenizer_config.json") or {})
    config = read_json_object_or_none(folder / "config.json")
    specials = {}
    for i, t in added.items():
        content, special = t["content"], bool(t.get("special"))
        if byte_fallback and _BYTE_TOKEN.match(content):  # byte pieces declared as added tokens
            vocab[i] = bytes([int(content[3:5], 16)])
            fallback.add(i)
            continue
        specials[i] = SpecialToken(i, content, special, roles.get(content))
        vocab[i] = None if special else content.encode("utf-8")
    unk = model.get("unk_token")
    info = TokenizerInfo(spec, kind, vocab, specials, embedding_rows=embedding_rows(config), folder=folder,
                         byte_fallback_ids=frozenset(fallback), unk_id=backend.token_to_id(unk) if unk else None,
                         backend=backend, config=config)
    if fast and kind == "byte-level":
        pattern = _tiktoken_pattern(data, pieces)
        if pattern is not None:
            ids = list(pieces.values())
            info.make_fast = lambda: _tiktoken_twin(info, pattern, ids)
    return info


# ----- the tiktoken twin ------------------------------------------------------------------------
def _tiktoken_pattern(data: dict, pieces: dict[str, int]) -> str | None:
    """The split regex when tiktoken with ranks = ids provably encodes like this BPE, else None.

    tiktoken merges the adjacent pair whose concatenation has the lowest rank; tokenizers merges
    the pair listed first. With ranks = ids the two agree when the pre-tokenizer is a plain regex
    split and the merge order follows the ids of the merged tokens, which is checked here.
    """
    model = data["model"]
    pre = data.get("pre_tokenizer")
    if (not _plain_byte_level_split(pre) or data.get("normalizer") or model.get("dropout")
            or model.get("byte_fallback") or model.get("continuing_subword_prefix")
            or model.get("end_of_word_suffix")):
        return None
    last = -1
    for m in model.get("merges") or []:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        rank = pieces.get(a + b)
        if rank is None or rank <= last:
            return None
        last = rank
    return pretokenizer_pattern(pre)


def _plain_byte_level_split(pre: Any) -> bool:
    """``ByteLevel(use_regex=True)`` or ``Split(regex, isolated) + ByteLevel(use_regex=False)``, no prefix space."""
    if not isinstance(pre, dict):
        return False
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True) \
            and not steps[0].get("add_prefix_space"):
        return True
    return (len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel"
            and not steps[1].get("use_regex") and not steps[1].get("add_prefix_space")
            and str(steps[0].get("behavior", "")).lower() == "isolated" and not steps[0].get("invert")
            and "Regex" in (steps[0].get("pattern") or {}))


def _tiktoken_twin(info: TokenizerInfo, pattern: str, ids: list[int]):
    """A tiktoken Encoding (ranks = the ids of the vocabulary pieces) that gives the ``tokenizers``
    backend's ids on the embedded sample texts, or None."""
    import tiktoken

    ranks = {info.vocab[i]: i for i in ids if i not in info.specials}
    if len(ranks) != len(ids) - len(set(ids) & set(info.specials)):  # two pieces with the same bytes
        return None
    if any(bytes([b]) not in ranks for b in range(256)):
        # tiktoken needs every single byte as a token (it panics on text with a missing one);
        # SmolLM2's vocabulary lacks 21 of them, so its text goes through ``tokenizers``
        return None
    try:
        enc = tiktoken.Encoding(info.spec, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    except Exception:  # a pattern tiktoken's regex engine rejects
        return None
    probe = _probe_texts()
    slow = [e.ids for e in info.backend.encode_batch(probe, add_special_tokens=False)]
    return enc if enc.encode_ordinary_batch(probe) == slow else None


def _probe_texts() -> list[str]:
    """The non-empty lines of PAW's embedded English and multilingual samples."""
    from importlib import resources

    data = resources.files("paw.data")
    return [line for name in ("sample_multi.txt", "sample_en.txt")
            for line in data.joinpath(name).read_text(encoding="utf-8").splitlines() if line.strip()]


# ----- kinds and canonical forms ----------------------------------------------------------------
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


def _canon_byte_level(piece: str, _prefix: str) -> bytes:
    try:  # str.translate + latin-1 runs in C: 150k pieces in ~0.1 s
        return str_to_token(piece)
    except KeyError:  # a piece outside the GPT-2 alphabet: take it as text
        return piece.encode("utf-8")


_CANONICAL = {
    "byte-level": _canon_byte_level,
    "sentencepiece": lambda piece, _p: piece.replace("▁", " ").encode("utf-8"),
    "wordpiece": lambda piece, p: piece[len(p):].encode("utf-8") if piece.startswith(p) and piece != p
    else b" " + piece.encode("utf-8"),
    "other": lambda piece, _p: piece.encode("utf-8"),
}


# ----- side files -------------------------------------------------------------------------------
def _configured_roles(tcfg: dict) -> dict[str, str]:
    """content -> role from ``tokenizer_config.json`` (``bos_token: '<s>'`` or ``{'content': '<s>'}``)."""
    out = {}
    for role in CONFIG_ROLES:
        value = tcfg.get(f"{role}_token")
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and value not in out:
            out[value] = role
    return out


def embedding_rows(config: dict | None) -> int | None:
    """``vocab_size`` of a model ``config.json`` (or of its ``text_config``), or None."""
    if not config:
        return None
    for cfg in (config, config.get("text_config") or {}):
        if isinstance(cfg.get("vocab_size"), int):
            return cfg["vocab_size"]
    return None


def read_json_or_none(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PawError(f"not valid JSON ({err})", path=path) from None


def read_json_object_or_none(path: Path) -> dict | None:
    """:func:`read_json_or_none` for files that must hold an object (``config.json``, ``tokenizer_config.json``)."""
    data = read_json_or_none(path)
    if data is not None and not isinstance(data, dict):
        raise PawError(f"expected a JSON object at the top level, got a {type(data).__name__}", path=path)
    return data
