"""PAW's encoder against tiktoken built from the real cl100k, Llama-3, Qwen and o200k rank tables."""

from __future__ import annotations

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from paw.bpe import BpeEncoder
from paw.bpe.encoder import _bpe_heap, bpe_ranks
from paw.errors import PawError

TEXTS = [
    "Hello world! The quick brown fox jumps over the lazy dog. It's 12:45, isn't it? I'LL see you.",
    "光合作用是绿色植物利用阳光把水和二氧化碳转化为糖和氧气的过程。北京是中华人民共和国的首都。",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\n",
    "emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️‍🔥 and kaomoji (╯°□°）╯︵ ┻━┻",
    "   leading spaces\t\ttabs\r\nCRLF\n\n\n   \n  trailing   ",
    " " * 300 + "x" + "\n" * 70 + "1234567890" * 20 + "!!!???" * 30,
    "Mixed: naïve café Ünïcödé — “quotes” ‘single’ … ½ ² ⅓ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🤖 ½",
    "日本語のテキストと한국어 텍스트 and русский текст, العربية, हिन्दी",
    "",
    "a",
    "<|endoftext|> as plain text <|im_start|>",
]

NAMES = ["cl100k", "llama3", "qwen3", "o200k"]


@pytest.fixture(scope="session")
def encoders(real_tables):
    """``name -> (paw encoder, tiktoken encoding)`` over the same ranks, pattern and specials."""
    cache = {}

    def get(name):
        if name not in cache:
            ranks, specials, pattern = real_tables(name)
            cache[name] = (BpeEncoder(ranks, pattern, specials),
                           tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials))
        return cache[name]

    return get


@pytest.mark.parametrize("name", NAMES)
def test_identical_ids_to_tiktoken(encoders, name):
    paw, ref = encoders(name)
    for text in TEXTS:
        assert paw.encode_ordinary(text) == ref.encode_ordinary(text), text[:40]
        assert paw.encode_ordinary(text) == paw.encode_ordinary(text)  # cached path gives the same answer
        assert paw.decode(paw.encode_ordinary(text)) == text


def test_known_ids_cl100k(encoders):
    paw, _ = encoders("cl100k")
    assert paw.encode("hello world") == [15339, 1917]  # the ids everyone knows from the OpenAI cookbook


@pytest.mark.parametrize("name", ["cl100k", "llama3"])
def test_special_tokens_like_tiktoken(encoders, name):
    paw, ref = encoders(name)
    special = next(iter(paw.special_tokens))
    text = f"before {special} after {special}"
    with pytest.raises(PawError, match="special token"):
        paw.encode(text)
    with pytest.raises(ValueError):
        ref.encode(text)
    assert paw.encode(text, allowed_special="all") == ref.encode(text, allowed_special="all")
    assert paw.encode(text, allowed_special={special}) == ref.encode(text, allowed_special={special})
    assert paw.encode(text, disallowed_special=()) == ref.encode(text, disallowed_special=())
    assert paw.encode(text, allowed_special="all").count(paw.special_tokens[special]) == 2


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_unicode_round_trips(encoders, text):
    paw, _ = encoders("llama3")
    ids = paw.encode_ordinary(text)
    assert paw.decode(ids) == text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


# Exact against tiktoken on every code point that Python's Unicode database assigns. Unassigned ones
# (category Cn) are left out: PAW's pre-tokenizer classifies letters through the `regex` package,
# whose Unicode tables can be newer than tiktoken's (regex 2026.11.19 calls U+3D000 a letter, so
# '\U0003d000/A' splits as ['\U0003d000', '/A'] where tiktoken gives ['\U0003d000/', 'A']).
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cn", "Cs")), max_size=200))
def test_any_assigned_unicode_matches_tiktoken(encoders, text):
    paw, ref = encoders("llama3")
    assert paw.encode_ordinary(text) == ref.encode_ordinary(text)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" \n\t0123aé中😀.-_")), min_size=40, max_size=400))
def test_heap_merge_equals_simple_scan(encoders, text):
    ranks = encoders("cl100k")[0].ranks
    piece = text.encode()
    assert _bpe_heap(piece, ranks) == _simple(piece, ranks)
    assert bpe_ranks(piece, ranks) == _simple(piece, ranks)


def _simple(piece, ranks):
    """tiktoken's ``_educational.bpe_encode`` transcribed: rescan for the lowest rank every step."""
    parts = [bytes([b]) for b in piece]
    while True:
        best = None
        for i, pair in enumerate(zip(parts[:-1], parts[1:], strict=True)):
            rank = ranks.get(pair[0] + pair[1])
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            return [ranks[p] for p in parts]
        i = best[1]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def test_batch_uses_processes_and_keeps_order(encoders):
    paw, ref = encoders("qwen3")
    texts = TEXTS * 5
    assert paw.encode_batch(texts, processes=2, disallowed_special=()) == [ref.encode_ordinary(t) for t in texts]


def _pid(state, items):
    import os
    import time

    time.sleep(0.2)  # long enough that the second worker takes chunks too
    return [(state, os.getpid()) for _ in items]


def test_map_processes_spreads_work_over_processes():
    import os

    from paw.bpe.parallel import map_processes

    out = map_processes(_pid, range(40), state="s", processes=2)
    assert len(out) == 40 and {s for s, _ in out} == {"s"}
    assert len({pid for _, pid in out}) == 2 and os.getpid() not in {pid for _, pid in out}


def test_decode_unknown_id_is_a_paw_error(encoders):
    paw, _ = encoders("cl100k")
    with pytest.raises(PawError, match="not in this vocabulary"):
        paw.decode([10**9])


def test_no_pattern_means_one_piece():
    ranks = {bytes([b]): b for b in range(256)} | {b"ab": 256, b"abab": 257}
    enc = BpeEncoder(ranks, None)
    assert enc.encode("ababa") == [257, ord("a")]
    assert enc.encode("") == []


def test_encode_large_cuts_safely_and_matches(encoders):
    paw, ref = encoders("cl100k")
    text = "\n".join(TEXTS[:8]) * 40 + "<|endoftext|>"
    ids = paw.encode_large(text, processes=2, chunk_chars=500, allowed_special="all")
    assert ids == ref.encode(text, allowed_special="all")
    with pytest.raises(PawError, match="special token"):
        paw.encode_large(text, processes=2, chunk_chars=500)
