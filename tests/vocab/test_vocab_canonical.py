"""Canonical token bytes on byte-level, SentencePiece and WordPiece vocabularies, and rank files."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from paw.errors import PawError
from paw.io.tokenizer import CL100K_PATTERN, open_tokenizer

TEXT = "Hello world, the quick fox 北京 🤗"


def _hf(ranks: dict[bytes, int], pattern: str | None):
    """The one rank-table converter's output, loaded by the ``tokenizers`` library."""
    from tokenizers import Tokenizer

    from paw.io.bpe_tokenizer_json import tokenizer_json_doc

    return Tokenizer.from_str(json.dumps(tokenizer_json_doc(ranks, pattern, {})))


def test_gpt2_byte_alphabet():
    from paw.bytelevel.alphabet import unicode_to_bytes

    dec = unicode_to_bytes()
    assert len(dec) == 256 and sorted(dec.values()) == list(range(256))
    assert dec["Ġ"] == 0x20 and dec["Ċ"] == 0x0A and dec["A"] == 0x41 and dec["ĉ"] == 0x09


def test_byte_level_tokens_are_their_bytes(trained):
    tok = open_tokenizer(trained["byte-bpe"])
    assert tok.kind == "byte-level"
    ids = tok.encode(TEXT)
    assert b"".join(tok.token_bytes(i) for i in ids) == TEXT.encode("utf-8")
    stored = tok.backend.id_to_token(tok.bytes_to_id[b" the"])
    assert stored == "Ġthe"


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_byte_level_round_trip_any_text(trained, text):
    tok = open_tokenizer(trained["byte-bpe"])
    assert b"".join(tok.token_bytes(i) for i in tok.encode(text)) == text.encode("utf-8")


# Assigned code points only: tiktoken's and tokenizers' regex engines carry their own Unicode tables,
# which may classify a code point that a newer Unicode version assigned differently (see bpe's docs).
@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(exclude_categories=("Cn", "Cs")), min_size=1, max_size=60),
                min_size=1, max_size=4))
def test_tiktoken_fast_path_matches_tokenizers(trained, texts):
    fast, slow = open_tokenizer(trained["byte-bpe"]), open_tokenizer(trained["byte-bpe"], fast=False)
    assert fast.fast is not None and slow.fast is None
    # a special token's text is plain text to the tiktoken path and the token to `tokenizers`, as
    # TokenizerInfo.encode documents (hypothesis draws '<|eos|>' from the source's string constants)
    assume(not any(s.content in t for s in fast.specials.values() for t in texts))
    assert fast.encode_batch(texts) == slow.encode_batch(texts)
    assert fast.encode_with_ends(texts) == slow.encode_with_ends(texts)


def test_fast_twin_is_built_on_first_use(trained):
    """Opening runs no tiktoken parity check; the first encode does, once."""
    tok = open_tokenizer(trained["byte-bpe"])
    assert tok.make_fast is not None and "fast" not in vars(tok)
    ids = tok.encode(TEXT)
    assert vars(tok)["fast"] is not None and tok.fast.encode_ordinary(TEXT) == ids


def test_sentencepiece_space_and_byte_fallback(trained):
    tok = open_tokenizer(trained["sentencepiece-bpe"])
    assert tok.kind == "sentencepiece"
    assert len(tok.byte_fallback_ids) == 256
    text = TEXT + " ᚠ"
    ids = tok.encode(text)
    # Prepend('▁') adds one leading space; the rune (unseen in training) comes as <0xE1><0x9A><0xA0>
    assert b"".join(tok.token_bytes(i) for i in ids) == (" " + text).encode("utf-8")
    fallback = [i for i in ids if i in tok.byte_fallback_ids]
    assert b"".join(tok.token_bytes(i) for i in fallback) == "ᚠ".encode()
    vocab = tok.backend.get_vocab()
    spaced = [p for p in vocab if "▁" in p and len(p) > 2]
    assert spaced and all(tok.token_bytes(vocab[p]) == p.replace("▁", " ").encode() for p in spaced)
    # a regular piece beats the byte-fallback piece with the same bytes
    assert tok.bytes_to_id[b" "] not in tok.byte_fallback_ids


def test_wordpiece_word_initial_gets_a_space(trained):
    tok = open_tokenizer(trained["wordpiece"])
    assert tok.kind == "wordpiece"
    ids = tok.encode("Hello world, the")
    assert b"".join(tok.token_bytes(i) for i in ids) == b" Hello world , the"
    cont = next(i for i in range(tok.size) if (tok.backend.id_to_token(i) or "").startswith("##"))
    assert tok.token_bytes(cont) == tok.backend.id_to_token(cont)[2:].encode()


def test_canonical_forms_make_conventions_comparable(trained):
    """Stored strings barely overlap between byte-level and SentencePiece; canonical bytes do."""
    bl, sp = open_tokenizer(trained["byte-bpe"]), open_tokenizer(trained["sentencepiece-bpe"])
    stored = set(bl.backend.get_vocab()) & set(sp.backend.get_vocab())
    canonical = set(bl.bytes_to_id) & set(sp.bytes_to_id)
    assert b" and" in canonical
    assert not any("Ġ" in s or "▁" in s for s in stored)
    assert len(canonical) > len(stored) + 100


def test_specials_and_roles(trained):
    tok = open_tokenizer(trained["byte-bpe"])
    from paw.vocab.roles import role_id

    assert [role_id(tok, r) for r in ("bos", "eos", "pad", "unk")] == [0, 1, 2, 3]
    assert tok.special_ids == [0, 1, 2, 3] and tok.added_ids == []
    assert tok.token_bytes(1) == b"<|eos|>"


def _llama3_ranks(limit: int) -> dict[bytes, int]:
    """The first ``limit`` ranks of quicktok's Llama-3 table (prefix-closed, so still a valid BPE)."""
    import struct
    from importlib import resources

    data = resources.files("quicktok").joinpath("data/llama3.vocab").read_bytes()
    (n,), off, ranks = struct.unpack_from("<I", data, 0), 4, {}
    for _ in range(n):
        (length,) = struct.unpack_from("<H", data, off)
        token = data[off + 2: off + 2 + length]
        (rank,) = struct.unpack_from("<I", data, off + 2 + length)
        off += 6 + length
        if rank < limit:
            ranks[token] = rank
    return ranks


@pytest.fixture(scope="module")
def llama3_small(tmp_path_factory):
    ranks = _llama3_ranks(3000)
    path = tmp_path_factory.mktemp("rank") / "llama3-3k.tiktoken"
    path.write_text("".join(f"{base64.b64encode(b).decode()} {r}\n" for b, r in sorted(ranks.items(),
                                                                                         key=lambda kv: kv[1])))
    return path, ranks


def test_tiktoken_file_matches_tiktoken_and_hf_conversion(llama3_small):
    import tiktoken

    path, ranks = llama3_small
    tok = open_tokenizer(path)
    assert tok.kind == "tiktoken" and tok.size == 3000 and tok.pattern == CL100K_PATTERN
    ref = tiktoken.Encoding("ref", pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens={})
    hf = _hf(ranks, CL100K_PATTERN)
    from paw.data import sample_texts

    for text in sample_texts("multi"):
        ids = tok.encode(text)
        assert ids == ref.encode_ordinary(text)
        assert hf.encode(text, add_special_tokens=False).ids == ids
        assert b"".join(tok.token_bytes(i) for i in ids) == text.encode()


def test_paw_bpe_model_file(llama3_small, tmp_path):
    from paw.io.bpe_paw_model import write_paw_model

    path, ranks = llama3_small
    model = write_paw_model(tmp_path / "m", mergeable_ranks=ranks, pattern=CL100K_PATTERN,
                            special_tokens={"<|end|>": 3000})
    tok = open_tokenizer(model)
    ref = open_tokenizer(path)
    assert tok.kind == "paw-bpe" and tok.special_ids == [3000]
    assert tok.encode(TEXT) == ref.encode(TEXT)


def test_paw_bpe_model_without_pattern_is_one_piece(llama3_small, tmp_path):
    """No pattern means no pre-tokenization, for open_tokenizer as for PAW's own encoder."""
    from paw.bpe import BpeEncoder
    from paw.io.bpe_paw_model import write_paw_model

    _, ranks = llama3_small
    tok = open_tokenizer(write_paw_model(tmp_path / "m", mergeable_ranks=ranks, pattern=None, special_tokens={}))
    text = "year 20261121"  # cl100k cuts digits in threes; one piece merges across them
    assert tok.pattern is None and tok.encode(text) == BpeEncoder(ranks, None, {}).encode(text)
    assert tok.encode(text) != open_tokenizer(llama3_small[0]).encode(text)


@pytest.mark.parametrize("content", ["{not json", '{"model": 3}', "garbage line\n"])
def test_unreadable_tokenizer_is_a_paw_error(tmp_path, content):
    path = tmp_path / "tokenizer.json"
    path.write_text(content)
    with pytest.raises(PawError, match="tokenizer.json"):
        open_tokenizer(path)


@pytest.mark.parametrize("name", ["qwen2", "gpt4"])
def test_rank_file_pattern_and_hf_conversion(llama3_small, name):
    """Named patterns reach the encoder; possessive 'gpt4' still converts for tokenizers (Oniguruma)."""
    from paw.bpe.patterns import resolve_pattern

    path, ranks = llama3_small
    tok = open_tokenizer(path, pattern=resolve_pattern(name))
    digits = [tok.token_bytes(i) for i in tok.encode("year 20261121")]
    assert (b"2" in digits) == (name == "qwen2")  # qwen2 splits single digits, cl100k groups of 3
    hf = _hf(ranks, resolve_pattern(name))
    from paw.data import sample_texts

    for text in sample_texts("multi") + ["year 20261121  \n\n x"]:
        assert hf.encode(text, add_special_tokens=False).ids == tok.encode(text)


def test_cli_rank_pattern(cli, llama3_small, tmp_path):
    path, _ = llama3_small
    res = cli("analyze-tokenizers", "-s", path, "-t", path, "-o", tmp_path / "a", "--rank-pattern", "qwen2",
              "--no-plots")
    assert res.exit_code == 0, res.stderr
    res = cli("analyze-tokenizers", "-s", path, "-t", path, "-o", tmp_path / "b", "--rank-pattern", "gpt5")
    assert res.exit_code == 2 and "unknown pattern" in res.stderr and not (tmp_path / "b").exists()
