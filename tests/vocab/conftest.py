"""Fixtures for tokenizer analysis, alignment and transplant tests.

``handmade`` builds two tiny tokenizers whose figures can be derived by hand (see the docstring);
``trained`` saves the three zoo tokenizer kinds trained on the same embedded text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paw.bytelevel.alphabet import token_to_str

SP_SPECIALS = ["<unk>", "<s>", "</s>"]


def _gpt2(s: str) -> str:
    return token_to_str(s.encode("utf-8"))


def byte_level_json(multi: list[str], merges: list[tuple[str, str]], specials: list[str]) -> str:
    """A GPT-2 style byte-level BPE: 256 single bytes (ids 0..255), then ``multi``, then ``specials``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {token_to_str(bytes([b])): b for b in range(256)}  # id = byte value
    for t in multi:
        vocab[_gpt2(t)] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(_gpt2(a), _gpt2(b)) for a, b in merges]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok.to_str()


def sentencepiece_json(pieces: list[str], merges: list[tuple[str, str]]) -> str:
    """Llama-2 style: <unk> <s> </s>, <0x00>..<0xFF>, then ``pieces`` (with ``▁``), byte fallback."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    vocab = {s: i for i, s in enumerate(SP_SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for p in pieces:
        vocab[p] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SP_SPECIALS])
    return tok.to_str()


@pytest.fixture(scope="session")
def handmade(tmp_path_factory) -> dict[str, Path]:
    """Source: byte-level, 256 bytes + {' t','he',' the',' c','at',' cat'} + <s>, </s> (264 ids).
    Target: SentencePiece, 3 specials + 256 byte pieces + 7 single characters + the same six pieces
    spelled with ``▁`` + ``▁cats`` (273 ids). By hand: distinct bytes 262 vs 263, common 262, only
    ``' cats'`` is target-only; Jaccard 262/263, overlap coefficient 1.
    """
    root = tmp_path_factory.mktemp("handmade")
    (root / "src").mkdir()
    (root / "tgt").mkdir()
    multi = [" t", "he", " the", " c", "at", " cat"]
    src_merges = [(" ", "t"), ("h", "e"), (" t", "he"), (" ", "c"), ("a", "t"), (" c", "at")]
    (root / "src" / "tokenizer.json").write_text(byte_level_json(multi, src_merges, ["<s>", "</s>"]))
    singles = ["▁", "t", "h", "e", "c", "a", "s"]
    pieces = singles + ["▁t", "he", "▁the", "▁c", "at", "▁cat", "▁cats"]
    tgt_merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "c"), ("a", "t"), ("▁c", "at"), ("▁cat", "s")]
    (root / "tgt" / "tokenizer.json").write_text(sentencepiece_json(pieces, tgt_merges))
    (root / "tgt" / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                                     "unk_token": "<unk>"}))
    return {"source": root / "src", "target": root / "tgt"}


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> dict[str, Path]:
    from paw import zoo
    from paw.data import sample_texts

    root = tmp_path_factory.mktemp("trained")
    out = {}
    for kind in ("byte-bpe", "sentencepiece-bpe", "wordpiece"):
        tok = zoo.train_tokenizer(sample_texts("multi") + sample_texts("en"), 400, kind=kind)
        tok.save_pretrained(root / kind)
        out[kind] = root / kind
    return out
