"""PAW .model, tiktoken rank files and tokenizer.json: round trips, and loading in HF libraries."""

from __future__ import annotations

import json

import pytest

from paw.bpe import PATTERNS, BpeEncoder, train_tokenizer
from paw.errors import PawError
from paw.io.bpe_files import read_bpe, read_text_files
from paw.io.bpe_paw_model import write_paw_model
from paw.io.bpe_tiktoken import write_tiktoken_ranks
from paw.io.bpe_tokenizer_json import write_hf_tokenizer_json

SAMPLES = [
    "The lowest lower low, 1234567 apples and 89 pears!\n\n  indented\tline  ",
    "北京是中国的首都。 emoji 😀 <|endoftext|> café",
    "def f(x):\n    return x ** 2  # comment\n",
    "",
]


@pytest.fixture(scope="module")
def trained():
    text = "\n".join(SAMPLES[:3]) * 30 + "the quick brown fox jumps over the lazy dog 2024 " * 40
    return train_tokenizer([text], 350, pattern=PATTERNS["gpt4"], special_tokens=["<|endoftext|>", "<|pad|>"])


def test_paw_model_round_trip(trained, tmp_path):
    path = write_paw_model(tmp_path / "tok", mergeable_ranks=trained.mergeable_ranks, pattern=trained.pattern,
                           special_tokens=trained.special_tokens, merges=trained.merges)
    assert path.read_text().splitlines()[0] == "paw-bpe v1"
    back = read_bpe(path)
    assert (back.kind, back.mergeable_ranks, back.pattern, back.special_tokens, back.merges) == (
        "paw", trained.mergeable_ranks, trained.pattern, trained.special_tokens, trained.merges)
    vocab = (tmp_path / "tok.vocab").read_text().splitlines()
    assert len(vocab) == len(trained.mergeable_ranks) + 2 and vocab[256].startswith("256\t[")
    assert "<- [" in vocab[256] and vocab[-1] == "349\t<|pad|>\t(special)"


def test_paw_model_from_ranks_only_and_refusal(trained, tmp_path):
    write_paw_model(tmp_path / "r", mergeable_ranks=trained.mergeable_ranks, pattern=None, special_tokens={})
    assert read_bpe(tmp_path / "r.model").mergeable_ranks == trained.mergeable_ranks
    broken = {bytes([b]): i for i, b in enumerate(range(256))} | {b"abc": 256}  # BPE cannot build "abc"
    with pytest.raises(PawError, match="merge list"):
        write_paw_model(tmp_path / "b", mergeable_ranks=broken, pattern=None, special_tokens={})
    assert not (tmp_path / "b.model").exists()


def test_tiktoken_rank_file_round_trip(trained, tmp_path):
    import tiktoken.load

    path = write_tiktoken_ranks(tmp_path / "cl100k_base.tiktoken", trained.mergeable_ranks)
    assert tiktoken.load.load_tiktoken_bpe(str(path)) == trained.mergeable_ranks
    back = read_bpe(path)
    assert back.kind == "tiktoken" and back.mergeable_ranks == trained.mergeable_ranks
    assert back.pattern == PATTERNS["gpt4"] and back.special_tokens["<|endoftext|>"] == 100257  # known by name
    assert read_bpe(write_tiktoken_ranks(tmp_path / "mine.tiktoken", trained.mergeable_ranks)).pattern is None


def test_hf_export_loads_and_encodes_identically(trained, tmp_path):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    path = write_hf_tokenizer_json(tmp_path / "tokenizer.json", mergeable_ranks=trained.mergeable_ranks,
                                   pattern=trained.pattern, special_tokens=trained.special_tokens)
    paw = trained.encoder()
    hf = Tokenizer.from_file(str(path))
    fast = PreTrainedTokenizerFast(tokenizer_file=str(path))
    for text in SAMPLES + ["12345678901 and 1 22 333 4444", "x" * 200 + " " * 50 + "\n\n\n"]:
        ids = paw.encode(text, allowed_special="all")
        assert hf.encode(text).ids == ids
        assert fast.encode(text, add_special_tokens=False) == ids
        assert hf.decode(ids, skip_special_tokens=False) == text
    back = read_bpe(path)
    assert (back.kind, back.mergeable_ranks, back.pattern, back.special_tokens) == (
        "hf", trained.mergeable_ranks, trained.pattern, trained.special_tokens)


def test_hf_export_keeps_special_ids_with_gaps(trained, tmp_path):
    """``tokenizers`` renumbers added tokens unless they are in the model vocabulary (cl100k has a gap)."""
    from tokenizers import Tokenizer

    specials = {"<|end of text|>": 400, "<|中|>": 1000}
    path = write_hf_tokenizer_json(tmp_path / "tokenizer.json", mergeable_ranks=trained.mergeable_ranks,
                                   pattern=trained.pattern, special_tokens=specials)
    text = "low <|end of text|> lower<|中|>"
    ids = BpeEncoder(trained.mergeable_ranks, trained.pattern, specials).encode(text, allowed_special="all")
    assert 400 in ids and ids[-1] == 1000
    assert Tokenizer.from_file(str(path)).encode(text).ids == ids
    back = read_bpe(path)
    assert back.special_tokens == specials and back.mergeable_ranks == trained.mergeable_ranks


def test_read_gpt2_style_tokenizer_json(tmp_path):
    """A tokenizer.json trained by ``tokenizers`` itself (ByteLevel pre-tokenizer, special in vocab)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(SAMPLES) * 20], trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    bpe = read_bpe(tmp_path)  # a folder means its tokenizer.json
    assert bpe.pattern == PATTERNS["gpt2"] and bpe.special_tokens == {"<|endoftext|>": 0}
    n_vocab = len(json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"])
    assert b"<|endoftext|>" not in bpe.mergeable_ranks and len(bpe.mergeable_ranks) == n_vocab - 1 > 300
    paw = BpeEncoder(bpe.mergeable_ranks, bpe.pattern, bpe.special_tokens)
    for text in SAMPLES:
        assert paw.encode(text, allowed_special="all") == tok.encode(text).ids


def test_bad_files_are_paw_errors(tmp_path):
    (tmp_path / "junk.txt").write_text("this is not a tokenizer\n")
    with pytest.raises(PawError, match="base64"):
        read_bpe(tmp_path / "junk.txt")
    with pytest.raises(PawError, match="not found"):
        read_bpe(tmp_path / "missing.model")
    (tmp_path / "wp.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}))
    with pytest.raises(PawError, match="not a byte-level BPE"):
        read_bpe(tmp_path / "wp.json")
    (tmp_path / "sp.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"▁the": 0}, "merges": []}}))
    with pytest.raises(PawError, match="not byte-level"):
        read_bpe(tmp_path / "sp.json")
    (tmp_path / "v2.model").write_text("paw-bpe v2\n")
    with pytest.raises(PawError, match="version"):
        read_bpe(tmp_path / "v2.model")
    (tmp_path / "cut.model").write_text("paw-bpe v1\npattern null\n")
    with pytest.raises(PawError, match="malformed"):
        read_bpe(tmp_path / "cut.model")
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(PawError, match=r"not valid UTF-8 \(byte 3"):
        read_text_files([tmp_path / "latin1.txt"])


@pytest.mark.slow
def test_hf_export_of_cl100k_matches_tiktoken(real_tables, tmp_path):
    """The full cl100k table through tokenizer.json (possessive ``{1,3}+`` rewritten for Oniguruma)."""
    import tiktoken
    from tokenizers import Tokenizer

    ranks, specials, pattern = real_tables("cl100k")
    path = write_hf_tokenizer_json(tmp_path / "tokenizer.json", mergeable_ranks=ranks, pattern=pattern,
                                   special_tokens=specials)
    hf, ref = Tokenizer.from_file(str(path)), tiktoken.Encoding("c", pat_str=pattern, mergeable_ranks=ranks,
                                                                 special_tokens=specials)
    for text in SAMPLES + ["1234567 12 1", "   x\n\n  \n", "I'LL don't WE'VE"]:
        assert hf.encode(text).ids == ref.encode(text, allowed_special="all")


# ----- rank files that contradict themselves are refused at read time, naming the line ----------
def _tiktoken_lines(ranks: dict[bytes, int]) -> list[str]:
    import base64

    return [f"{base64.b64encode(t).decode()} {r}" for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]


def _tiktoken_variants(ranks):
    import base64

    lines = _tiktoken_lines(ranks)
    b64 = lines[300].split()[0]
    return {
        "dup-rank": (lines + [f"{base64.b64encode(b'zzqq').decode()} 300"], rf"line {len(lines) + 1}: rank 300 is "
                     r"already the rank of the token on line 301"),
        "dup-token": (lines + [f"{b64} {len(lines)}"], rf"line {len(lines) + 1}: token .* already has rank 300"),
        "missing-byte": (lines[:65] + lines[66:], r"1 of the 256 single bytes are not tokens"),
        "bad-base64": (lines + [f"=== {len(lines)}"], r"line \d+ is not 'base64-token rank'"),
        "huge-rank": (lines + [f"{base64.b64encode(b'zzqq').decode()} {2**32}"], r"rank 4294967296 is above"),
        "signed-rank": (lines + [f"{base64.b64encode(b'zzqq').decode()} +5"], r"not 'base64-token rank'"),
    }


@pytest.mark.parametrize("case", ["dup-rank", "dup-token", "missing-byte", "bad-base64", "huge-rank", "signed-rank"])
def test_bad_tiktoken_rank_files_are_refused_naming_the_line(trained, tmp_path, case):
    lines, match = _tiktoken_variants(trained.mergeable_ranks)[case]
    path = tmp_path / "bad.tiktoken"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PawError, match=match) as info:
        read_bpe(path)
    assert str(path) in str(info.value)


def test_a_sidecar_config_with_bad_ids_is_a_one_line_refusal(trained, tmp_path):
    path = write_tiktoken_ranks(tmp_path / "r.tiktoken", trained.mergeable_ranks)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"x1": {"content": "<s>"}}}))
    with pytest.raises(PawError, match="'x1' is not"):
        read_bpe(path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"5": {"content": "<s>"}}}))
    with pytest.raises(PawError, match="special token '<s>' has id 5, which the ordinary token"):
        read_bpe(path)


def _paw_model_lines(trained, tmp_path) -> list[str]:
    path = write_paw_model(tmp_path / "good", mergeable_ranks=trained.mergeable_ranks, pattern=trained.pattern,
                           special_tokens=trained.special_tokens, merges=trained.merges)
    return path.read_text().splitlines()


def _edit(lines, at, text):
    return lines[:at] + [text] + lines[at + 1:]


@pytest.mark.parametrize("case", ["rank-beyond", "rank-negative", "rank-later", "dup-byte", "trailing", "count",
                                  "special-clash", "pattern-type", "superscript"])
def test_bad_paw_model_files_are_refused_naming_the_line(trained, tmp_path, case):
    lines = _paw_model_lines(trained, tmp_path)
    byte_line = lines[3].split()
    n_tok = len(trained.mergeable_ranks)
    variants = {
        "rank-beyond": (_edit(lines, 5, "0 99999"), r"line 6: the merge names rank 99999, which is not a token of "
                                                     r"the vocabulary \(ranks 0..255"),
        "rank-negative": (_edit(lines, 5, "-1 3"), r"line 6 is not 'left_rank right_rank'"),
        "rank-later": (_edit(lines, 6, "0 257"), r"line 7: the merge names rank 257"),
        "dup-byte": (_edit(lines, 3, " ".join(["bytes", *byte_line[1:3], byte_line[1], *byte_line[4:]])),
                     r"line 4 must list each of the bytes 0..255 once"),
        "trailing": (lines + ["0 1"], rf"line {len(lines) + 1}: text after the last"),
        "count": (_edit(lines, 4, "merges 999999"), r"999999 merges announced"),
        "special-clash": (_edit(lines, 2, 'special_tokens {"<|x|>": 7}'), r"has id 7, which the ordinary token"),
        "pattern-type": (_edit(lines, 1, "pattern 5"), r"line 2 is not the JSON"),
        "superscript": (_edit(lines, 5, "0 ²"), r"line 6 is not 'left_rank right_rank'"),
    }
    assert n_tok > 258
    text, match = variants[case]
    path = tmp_path / "bad.model"
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    with pytest.raises(PawError, match=match) as info:
        read_bpe(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("case", ["merge-part", "merge-join", "dup-id", "id-type", "merge-shape"])
def test_bad_tokenizer_json_vocabularies_are_refused(trained, tmp_path, case):
    path = write_hf_tokenizer_json(tmp_path / "tokenizer.json", mergeable_ranks=trained.mergeable_ranks,
                                   pattern=trained.pattern, special_tokens={})
    data = json.loads(path.read_text())
    model = data["model"]
    if case == "merge-part":
        model["merges"].append(["Ġzzq", "a"])
        match = r"merges\[\d+\] Ġzzq a: 'Ġzzq' is not a token of the vocabulary"
    elif case == "merge-join":
        pair = next((a, b) for a in "abcdefgh" for b in "xyzqjkvw" if a + b not in model["vocab"])
        model["merges"].append(list(pair))
        match = rf"merges\[\d+\] {pair[0]} {pair[1]}: '{pair[0]}{pair[1]}' is not a token"
    elif case == "dup-id":
        model["vocab"]["Ġzzq"] = 300
        match = r"the same id 300"
    elif case == "id-type":
        model["vocab"]["Ġzzq"] = "301"
        match = r"the id '301', not an integer"
    else:
        model["merges"].append(["a", "b", "c"])
        match = r"not two tokens"
    path.write_text(json.dumps(data))
    with pytest.raises(PawError, match=match):
        read_bpe(path)
