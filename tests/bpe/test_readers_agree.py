"""One reading path: ``read_bpe`` and ``open_tokenizer`` see the same file the same way, and the one
rank-table -> ``tokenizer.json`` converter encodes like tiktoken."""

from __future__ import annotations

import json
import random

import pytest

from paw.bpe import PATTERNS, BpeEncoder
from paw.bytelevel.alphabet import base_ranks
from paw.data import sample_texts
from paw.io.bpe_files import read_bpe
from paw.io.bpe_tiktoken import TIKTOKEN_PATTERNS, TIKTOKEN_SPECIALS, write_tiktoken_ranks
from paw.io.bpe_tokenizer_json import tokenizer_json_doc
from paw.io.tokenizer import CL100K_PATTERN, open_tokenizer

TEXTS = sample_texts("multi") + ["year 20261121  \n\n x", "I'LL don't WE'VE\n  ", "<|endoftext|> tail  "]


def _official(name: str, ranks: dict[bytes, int], monkeypatch) -> dict:
    """tiktoken's own definition of encoding ``name`` (pattern, special tokens), with ``ranks`` in
    place of the file it would download."""
    from tiktoken_ext import openai_public

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *a, **k: ranks)
    return getattr(openai_public, name)()


def _tokenizers(ranks: dict[bytes, int], pattern: str | None, specials: dict[str, int] | None = None):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(json.dumps(tokenizer_json_doc(ranks, pattern, specials or {})))


def test_cl100k_pattern_is_tiktokens(monkeypatch):
    """cl100k's regex is the possessive 'gpt4' spelling, not Llama-3's: they cut trailing space apart."""
    official = _official("cl100k_base", {b"a": 0}, monkeypatch)
    assert CL100K_PATTERN == PATTERNS["gpt4"] == official["pat_str"] != PATTERNS["llama3"]
    ranks = base_ranks() | {b"\n ": 256}
    gpt4, llama3 = (BpeEncoder(ranks, PATTERNS[n], {}) for n in ("gpt4", "llama3"))
    assert gpt4.encode("hi\n ")[2:] == [256] and llama3.encode("hi\n ")[2:] == [ranks[b"\n"], ranks[b" "]]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_known_rank_files_match_tiktoken(name, monkeypatch):
    official = _official(name, {b"a": 0}, monkeypatch)
    assert PATTERNS[TIKTOKEN_PATTERNS[name]] == official["pat_str"]
    assert TIKTOKEN_SPECIALS[name] == official["special_tokens"]


def test_both_readers_agree_on_cl100k_base(real_tables, tmp_path, monkeypatch):
    """The issue's file: open_tokenizer once found 0 special tokens and Llama-3's pattern, read_bpe 5 and gpt4's."""
    import tiktoken

    ranks, _, _ = real_tables("cl100k")
    official = _official("cl100k_base", ranks, monkeypatch)
    path = write_tiktoken_ranks(tmp_path / "cl100k_base.tiktoken", ranks)
    bpe, tok = read_bpe(path), open_tokenizer(path)
    assert bpe.special_tokens == {s.content: i for i, s in tok.specials.items()} == official["special_tokens"]
    assert len(tok.special_ids) == 5 and tok.size == 100277
    assert bpe.pattern == tok.pattern == official["pat_str"]
    ref = tiktoken.Encoding(**official)
    paw = BpeEncoder(bpe.mergeable_ranks, bpe.pattern, bpe.special_tokens)
    want = [ref.encode_ordinary(t) for t in TEXTS]
    assert tok.encode_batch(TEXTS) == want == [paw.encode_ordinary(t) for t in TEXTS]


def test_unnamed_rank_file_defaults_and_sidecar_specials(tmp_path):
    """A rank file says nothing: read_bpe reports no pattern, open_tokenizer encodes with cl100k's
    unless told; both take special tokens from a tokenizer_config.json beside the file."""
    ranks = base_ranks() | {b"hi": 256, b"\n ": 257}
    path = write_tiktoken_ranks(tmp_path / "mine.tiktoken", ranks)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"added_tokens_decoder": {"260": {"content": "<|end|>", "special": True}}}))
    bpe, tok = read_bpe(path), open_tokenizer(path)
    assert bpe.pattern is None and tok.pattern == CL100K_PATTERN
    assert bpe.special_tokens == {"<|end|>": 260} and tok.special_ids == [260] and tok.size == 261
    assert tok.encode("hi\n ") == [256, 257]
    assert open_tokenizer(path, pattern=PATTERNS["llama3"]).encode("hi\n ") == [256, ranks[b"\n"], ranks[b" "]]


def test_converter_keeps_every_split_hand_example():
    """Ranks ca < ac < acac < cac. tiktoken on 'aacac': a a c a c -> a a ca c -> a a cac -> a acac.
    'acac' cannot be built from its own bytes (a ca c is stuck below rank(cac)), so a list with one
    merge per buildable token has none for it and stops at a a cac; every split keeps (a, cac)."""
    import tiktoken

    ranks = base_ranks() | {b"ca": 256, b"ac": 257, b"acac": 258, b"cac": 259}
    pattern = PATTERNS["gpt2"]
    ref = tiktoken.Encoding("hand", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    assert ref.encode_ordinary("aacac") == [ranks[b"a"], 258]
    assert _tokenizers(ranks, pattern).encode("aacac").ids == [ranks[b"a"], 258]
    assert ["a", "cac"] in tokenizer_json_doc(ranks, pattern, {})["model"]["merges"]


def test_converter_matches_tiktoken_on_random_tables():
    """Random rank tables over a three-letter alphabet, where merge orders get tangled: on 45 of 300
    such tables a converter with one merge per token encodes some short string unlike tiktoken."""
    import tiktoken

    for seed in range(40):
        rng = random.Random(seed)
        ranks, tokens = base_ranks(), [b"a", b"b", b"c"]
        while len(ranks) < 256 + 25:
            token = rng.choice(tokens) + rng.choice(tokens)
            if token not in ranks:
                ranks[token] = len(ranks)
                tokens.append(token)
        ref = tiktoken.Encoding("r", pat_str=r"\p{L}+|\s+", mergeable_ranks=ranks, special_tokens={})
        hf = _tokenizers(ranks, r"\p{L}+|\s+")
        for _ in range(100):
            text = "".join(rng.choice("abc") for _ in range(rng.randrange(2, 12)))
            assert hf.encode(text).ids == ref.encode_ordinary(text), (seed, text)


def test_rank_tokenizer_as_tokenizer_json(real_tables, tmp_path):
    """TokenizerInfo.tokenizer_json() of a rank file goes through the same converter and keeps
    cl100k's special ids, gap included."""
    from tokenizers import Tokenizer

    ranks, _, _ = real_tables("cl100k")
    small = {b: r for b, r in ranks.items() if r < 4000}
    tok = open_tokenizer(write_tiktoken_ranks(tmp_path / "cl100k_base.tiktoken", small))
    hf = Tokenizer.from_str(tok.tokenizer_json())
    assert hf.token_to_id("<|endofprompt|>") == 100276 and hf.token_to_id("<|endoftext|>") == 100257
    assert [e.ids for e in hf.encode_batch(TEXTS[:-1], add_special_tokens=False)] == tok.encode_batch(TEXTS[:-1])
