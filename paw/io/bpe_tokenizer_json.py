"""A Hugging Face ``tokenizer.json`` whose model is a byte-level BPE (GPT-2, Llama-3, Qwen2 ...).

Read as a :class:`~paw.io.bpe_table.BpeFile`, and made from a rank table in one place,
:func:`tokenizer_json_doc`, so that what PAW writes encodes exactly like tiktoken.
"""

from __future__ import annotations

import json
from pathlib import Path

from paw.bytelevel.alphabet import str_to_token, token_to_str
from paw.bytelevel.patterns import PATTERNS, to_oniguruma
from paw.bytelevel.ranks import all_merges
from paw.errors import PawError
from paw.io.atomic import atomic_file
from paw.io.bpe_table import MAX_TOKEN_ID, BpeFile, check_specials


def read_bpe_tokenizer_json(path: Path) -> BpeFile:
    """A byte-level BPE ``tokenizer.json`` as a :class:`BpeFile`; any other model type is refused."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PawError(f"not valid JSON: {str(exc)[:200]}", path=path) from None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        kind = model.get("type") if isinstance(model, dict) else model
        raise PawError(f"tokenizer.json model is {kind!r}, not a byte-level BPE", path=path)
    # added tokens are special tokens; many files (GPT-2, PAW's) also list them in the model vocabulary
    added = data.get("added_tokens", [])
    if not isinstance(added, list) or not all(isinstance(t, dict) and isinstance(t.get("content"), str)
                                              and "id" in t for t in added):
        raise PawError("tokenizer.json 'added_tokens' is not a list of {content, id} objects", path=path)
    specials = {t["content"]: t["id"] for t in added}
    ranks = _hf_ranks(path, model["vocab"], specials)
    check_specials(path, ranks, specials)
    merges_b = _hf_merges(path, model.get("merges", []), ranks)
    return BpeFile(ranks, pretokenizer_pattern(data.get("pre_tokenizer"), path), specials, "hf", merges_b)


def _hf_ranks(path: Path, vocab: dict, specials: dict[str, int]) -> dict[bytes, int]:
    """The ordinary tokens of ``model.vocab``: byte-level spellings with distinct ids in ``0..2**32-1``."""
    ranks: dict[bytes, int] = {}
    owner: dict[int, str] = {}
    for tok, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= MAX_TOKEN_ID:
            raise PawError(f"tokenizer.json vocabulary gives {tok!r} the id {i!r}, not an integer in "
                           f"0..{MAX_TOKEN_ID}", path=path)
        if specials.get(tok) == i:
            continue
        if i in owner:
            raise PawError(f"tokenizer.json vocabulary gives {owner[i]!r} and {tok!r} the same id {i}", path=path)
        try:
            token = str_to_token(tok)
        except KeyError:
            raise PawError("tokenizer.json vocabulary is not byte-level (a character is outside the GPT-2 "
                           "byte alphabet; SentencePiece-style BPE is not supported)", path=path) from None
        if not token:
            raise PawError(f"tokenizer.json vocabulary holds an empty token (id {i})", path=path)
        ranks[token], owner[i] = i, tok
    return ranks


def _hf_merges(path: Path, merges, ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """``merges[k]`` as byte pairs; both parts and their join must be tokens of the vocabulary
    (``tokenizers`` refuses the file otherwise: ``MergeTokenOutOfVocabulary``)."""
    if not isinstance(merges, list):
        raise PawError("tokenizer.json 'merges' is not a list", path=path)
    out = []
    for k, m in enumerate(merges):
        pair = m.split(" ") if isinstance(m, str) else m
        if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise PawError(f"tokenizer.json merges[{k}] is {m!r}, not two tokens", path=path)
        try:
            left, right = str_to_token(pair[0]), str_to_token(pair[1])
        except KeyError:
            raise PawError(f"tokenizer.json merges[{k}] is not byte-level", path=path) from None
        for part in (left, right, left + right):
            if part not in ranks:
                raise PawError(f"tokenizer.json merges[{k}] {pair[0]} {pair[1]}: "
                               f"{token_to_str(part)!r} is not a token of the vocabulary", path=path)
        out.append((left, right))
    return out


def pretokenizer_pattern(pre: dict | None, path: str | Path = "tokenizer.json") -> str | None:
    """The regex of a ``Split`` pre-tokenizer, or GPT-2's for ``ByteLevel(use_regex=True)``.

    A regex PAW wrote for Oniguruma (:func:`paw.bytelevel.patterns.to_oniguruma`) comes back in its
    registered spelling, so cl100k's ``\\p{N}{1,3}+`` survives a round trip through ``tokenizer.json``.
    """
    if not isinstance(pre, dict):
        return None
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    for step in steps:
        if step.get("type") == "Split":
            pattern = step.get("pattern", {})
            if "Regex" in pattern:  # give back the registered spelling of a pattern PAW wrote
                known = [p for p in PATTERNS.values() if p and to_oniguruma(p) == pattern["Regex"]]
                return known[0] if known else pattern["Regex"]
            raise PawError("Split pre-tokenizer with a plain-string pattern is not supported", path=path)
        if step.get("type") == "ByteLevel" and step.get("use_regex", True):
            return PATTERNS["gpt2"]
    return None


def write_hf_tokenizer_json(path: str | Path, *, mergeable_ranks: dict[bytes, int], pattern: str | None,
                            special_tokens: dict[str, int]) -> Path:
    """Write :func:`tokenizer_json_doc` atomically; ``tokenizers`` and ``transformers`` load it."""
    data = tokenizer_json_doc(mergeable_ranks, pattern, special_tokens, path=path)
    with atomic_file(path, encoding="utf-8", newline="\n") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
    return Path(path)


def tokenizer_json_doc(mergeable_ranks: dict[bytes, int], pattern: str | None, special_tokens: dict[str, int],
                       *, path: str | Path = "tokenizer.json") -> dict:
    """A byte-level BPE ``tokenizer.json`` document that encodes exactly like tiktoken with the same ranks.

    The merge list holds every split of every token whose halves are tokens
    (:func:`paw.bytelevel.ranks.all_merges`, as transformers' TikTokenConverter does), not only the one
    merge that built each token: tiktoken merges any adjacent pair whose join is a token, so with
    ranks ``ca, ac, acac, cac`` it encodes ``aacac`` as ``a|acac`` through ``(a, cac)``, a split that
    never builds ``acac`` from its bytes. ``ignore_merges`` is on, so a piece that is itself a token
    stays whole, as in tiktoken. ``pattern=None`` keeps the whole text as one piece.
    """
    vocab = {token_to_str(tok): rank for tok, rank in sorted(mergeable_ranks.items(), key=lambda kv: kv[1])}
    # `tokenizers` ignores the ids in "added_tokens" and numbers added tokens after the vocabulary,
    # unless the content is in the model vocabulary: list special tokens there, under their own ids
    for content, tid in special_tokens.items():
        if vocab.get(content, tid) != tid:
            raise PawError(f"special token {content!r} is spelled like the ordinary token {vocab[content]}",
                           path=path)
        vocab[content] = tid
    merges = [[token_to_str(a), token_to_str(b)] for a, b in all_merges(mergeable_ranks)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    split = {"type": "Split", "pattern": {"Regex": pattern and to_oniguruma(pattern)}, "behavior": "Isolated", "invert": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": tid, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}
                         for tok, tid in sorted(special_tokens.items(), key=lambda kv: kv[1])],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]} if pattern else byte_level,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }
