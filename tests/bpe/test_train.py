"""The trainer: hand-checked merges and merge-for-merge equality with Hugging Face's BpeTrainer."""

from __future__ import annotations

import json
import sysconfig
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paw.bpe import PATTERNS, train_bpe, train_tokenizer
from paw.bpe.patterns import compile_pattern
from paw.bpe.pretokenize import count_pretokens, cut_text
from paw.bytelevel.alphabet import byte_order, token_to_str
from paw.errors import PawError


def test_hand_example_counts_and_overlaps():
    # (a, b): 2 in "aaab" + 3 in "ab" = 5; (a, a): 2 per "aaab" x 2 = 4 -> merged second
    result = train_bpe({b"aaab": 2, b"ab": 3}, 258)
    assert result.merges == [(b"a", b"b"), (b"a", b"a")]
    assert result.counts == [5, 2]  # after "aa|ab", only one (a, a) is left per word
    assert result.ranks[b"ab"] == 256 and result.ranks[b"aa"] == 257


def test_ties_follow_gpt2_byte_order_not_byte_values():
    # Both pairs occur once. In byte values " " (32) < "b" (98), but in GPT-2 order "b" is rank 65 and
    # " " (written "Ġ") rank 220, so BpeTrainer merges (b, c) first; so must we.
    assert byte_order().index(ord(" ")) == 220 and byte_order().index(ord("b")) == 65
    assert train_bpe({b" a": 1, b"bc": 1}, 257).merges == [(b"b", b"c")]
    assert _hf_merges([" a", "bc"], 257, PATTERNS["gpt2"]) == [("b", "c")]


def test_stops_when_pairs_run_out_and_at_min_frequency():
    assert len(train_bpe({b"abc": 1}, 1000).merges) == 2
    assert train_bpe({b"ab": 3, b"cd": 1}, 1000, min_frequency=2).merges == [(b"a", b"b")]


def test_vocab_size_includes_specials_and_bytes():
    bpe = train_tokenizer(["low lower lowest " * 20], 260, pattern=PATTERNS["gpt2"], special_tokens=["<s>", "</s>"])
    assert len(bpe.mergeable_ranks) + len(bpe.special_tokens) == 260
    assert bpe.special_tokens == {"<s>": 258, "</s>": 259}
    with pytest.raises(PawError, match="too small"):
        train_tokenizer(["x"], 257, pattern=None, special_tokens=["<s>", "</s>"])
    with pytest.raises(PawError, match="empty"):
        train_tokenizer(["", ""], 300, pattern=PATTERNS["gpt2"])


# ------------------------------------------------------------------ parity with BpeTrainer


DATA = Path(__file__).resolve().parents[1] / "data" / "commonsense"


def corpus(megabytes: float) -> list[str]:
    """Python's own sources interleaved with the carried commonsense QA slices (English prose)."""
    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*/*.py"))
    shared = sorted((DATA / "raw").glob("*.jsonl"))
    docs, size = [], 0
    for i, path in enumerate(stdlib):
        for p in [path] + ([shared[i]] if i < len(shared) else []):
            text = p.read_text(encoding="utf-8", errors="replace")[:300_000]
            docs.append(text)
            size += len(text.encode())
            if size >= megabytes * 1e6:
                return docs
    return docs


def _hf_merges(docs: list[str], vocab_size: int, pattern: str, min_frequency: int = 0) -> list[tuple[str, str]]:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def _paw_merges(docs, vocab_size, pattern, min_frequency=0):
    counts = count_pretokens(docs, pattern, processes=1)
    result = train_bpe(counts, vocab_size, min_frequency=min_frequency)
    return [(token_to_str(a), token_to_str(b)) for a, b in result.merges]


@pytest.mark.parametrize("pattern", ["gpt2", "qwen2"])
def test_merges_equal_bpetrainer_small(pattern):
    docs = corpus(0.6)
    hf = _hf_merges(docs, 1500, PATTERNS[pattern])
    assert len(hf) == 1500 - 256
    assert _paw_merges(docs, 1500, PATTERNS[pattern]) == hf


def test_merges_equal_bpetrainer_with_min_frequency():
    docs = corpus(0.3)
    hf = _hf_merges(docs, 5000, PATTERNS["llama3"], min_frequency=40)
    assert len(hf) < 5000 - 256  # the threshold, not the size, stopped it
    assert _paw_merges(docs, 5000, PATTERNS["llama3"], min_frequency=40) == hf


@pytest.mark.slow
@pytest.mark.parametrize("pattern", ["gpt2", "llama3"])
def test_merges_equal_bpetrainer_5mb_8k(pattern):
    docs = corpus(5)
    hf = _hf_merges(docs, 8000, PATTERNS[pattern])
    assert len(hf) == 8000 - 256
    assert _paw_merges(docs, 8000, PATTERNS[pattern]) == hf


@pytest.mark.parametrize("name", ["gpt2", "gpt4", "llama3", "qwen2", "o200k"])
def test_cutting_texts_for_workers_keeps_counts_exact(name):
    prose = [p.read_text(encoding="utf-8") for p in sorted(DATA.glob("*/*.jsonl"))]  # a safe cut at every line
    text = "\n".join(corpus(0.2) + prose) + "\nend  \n\n  12345 héllo\nworld's\n"
    pattern = PATTERNS[name]
    chunks = cut_text(text, pattern, size=5000)
    assert len(chunks) > 20 and "".join(chunks) == text
    whole = Counter(p.encode() for p in compile_pattern(pattern).findall(text))
    assert count_pretokens([text], pattern, processes=2) == dict(whole)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" \n\r\t\n\nab1.)'s中")), max_size=300),
       st.sampled_from(["gpt2", "gpt4", "llama3", "qwen2", "o200k"]))
def test_cut_points_never_change_the_pieces(text, name):
    pattern = PATTERNS[name]
    split = compile_pattern(pattern).findall
    assert [p for chunk in cut_text(text, pattern, size=3) for p in split(chunk)] == split(text)
