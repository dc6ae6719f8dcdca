"""BPE merge planning (paw.vocab.extend): new tokens become reachable, old encodings do not change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paw.bytelevel.alphabet import bytes_to_unicode, str_to_token, token_to_str
from paw.vocab.extend import bpe_pieces, plan_bpe_merges


def test_docstring_example():
    vocab = {"h", "e", "l", "o", "he", "ll"}
    plan = plan_bpe_merges(["hello"], vocab, [("h", "e"), ("l", "l")])
    assert plan.merges == [("he", "ll"), ("hell", "o")]
    assert plan.entries == ["hell", "hello"] and plan.intermediates == ["hell"]


def test_bpe_pieces_follows_ranks():
    ranks = {("h", "e"): 0, ("l", "l"): 1, ("he", "ll"): 2}
    assert bpe_pieces("hello", ranks) == ["hell", "o"]
    assert bpe_pieces("olleh", ranks) == ["o", "ll", "e", "h"]


def test_already_produced_and_shared_prefix():
    vocab = {"a", "b", "c", "ab"}
    plan = plan_bpe_merges(["ab", "abc", "abcab"], vocab, [("a", "b")])
    assert plan.already_produced == ["ab"]
    assert plan.merges == [("ab", "c"), ("abc", "ab")]  # the second word reuses the first one's token
    assert plan.intermediates == []


def test_byte_alphabet_matches_tokenizers():
    from tokenizers import pre_tokenizers

    assert set(bytes_to_unicode().values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert token_to_str(b" hi\n") == "ĠhiĊ"
    assert str_to_token("ĠhiĊ") == b" hi\n"
    with pytest.raises(KeyError):
        str_to_token("日")


WORD = st.text(alphabet="abcd", min_size=1, max_size=7)


@settings(max_examples=150, deadline=None)
@given(old_words=st.lists(WORD, max_size=6), new_words=st.lists(WORD, min_size=1, max_size=6),
       texts=st.lists(WORD, min_size=1, max_size=10))
def test_every_new_word_encodes_to_itself_and_untouched_text_keeps_its_pieces(old_words, new_words, texts):
    # an "old tokenizer": merges that build old_words left to right
    old = plan_bpe_merges(old_words, set("abcd"), [])
    vocab = set("abcd") | set(old.entries)
    plan = plan_bpe_merges(new_words, vocab, old.merges)
    ranks_old = {p: i for i, p in enumerate(old.merges)}
    ranks_new = {p: i for i, p in enumerate(old.merges + plan.merges)}
    for w in new_words:
        assert bpe_pieces(w, ranks_new) == [w]
    new_entries = set(plan.entries)
    for t in texts:
        pieces = bpe_pieces(t, ranks_new)
        if not new_entries.intersection(pieces):
            assert pieces == bpe_pieces(t, ranks_old)


def test_max_intermediates_rejects_long_chains_and_rolls_back():
    vocab = set("abcdefgh")
    plan = plan_bpe_merges(["abcdefgh", "ab", "abc"], vocab, [], max_intermediates=1)
    assert plan.rejected == ["abcdefgh"]  # would need 6 intermediates
    assert plan.merges == [("a", "b"), ("ab", "c")] and plan.intermediates == []
    assert bpe_pieces("abcdefgh", {p: i for i, p in enumerate(plan.merges)}) == ["abc", "d", "e", "f", "g", "h"]


def test_duplicate_merges_do_not_collide_with_new_ranks():
    merges = [("a", "b"), ("a", "b"), ("c", "d")]  # a hand-edited file with a duplicate
    plan = plan_bpe_merges(["abcd"], {"a", "b", "c", "d", "ab", "cd"}, merges)
    ranks = {}
    for i, p in enumerate(merges + plan.merges):
        ranks.setdefault(p, i)
    assert bpe_pieces("abcd", ranks) == ["abcd"]
