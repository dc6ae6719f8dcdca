"""Every tokenizer folder PAW writes names a class transformers 4 and 5 both have.

transformers 5 writes ``tokenizer_class: TokenizersBackend``; transformers 4.45-4.57 (inside PAW's
declared range) refuses that name. ``scripts/check_min_versions.py`` loads real outputs in a pinned
environment; these tests pin the file content in the normal one, offline.
"""

from __future__ import annotations

import json

from paw.io.tokenizer_config import PORTABLE_CLASS, make_portable, minimal_config, portable_config


def _config(folder) -> dict:
    return json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))


def test_portable_config_replaces_only_the_new_backend_name():
    v5 = {"tokenizer_class": "TokenizersBackend", "backend": "tokenizers", "bos_token": "<|bos|>"}
    assert portable_config(v5) == {"tokenizer_class": "PreTrainedTokenizerFast", "backend": "tokenizers",
                                   "bos_token": "<|bos|>"}
    assert v5["tokenizer_class"] == "TokenizersBackend"  # the input is not changed
    for kept in ("LlamaTokenizer", "GPT2Tokenizer", "PreTrainedTokenizerFast", None):
        assert portable_config({"tokenizer_class": kept}) == {"tokenizer_class": kept}
    assert minimal_config({"eos": "</s>", "pad": "<pad>"}) == {
        "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
        "eos_token": "</s>", "pad_token": "<pad>"}


def test_make_portable_rewrites_fills_in_or_leaves_alone(tmp_path):
    v5, own, bare, empty = (tmp_path / n for n in ("v5", "own", "bare", "empty"))
    for folder in (v5, own, bare, empty):
        folder.mkdir()
    (v5 / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend", "eos_token": "</s>"}))
    own_text = '{"tokenizer_class": "GPT2Tokenizer",   "eos_token": "</s>"}'
    (own / "tokenizer_config.json").write_text(own_text)
    (bare / "tokenizer.json").write_text("{}")
    assert [make_portable(f) for f in (v5, own, bare, empty)] == [True, False, True, False]
    assert _config(v5) == {"eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"}
    assert (own / "tokenizer_config.json").read_text() == own_text  # byte for byte
    assert _config(bare) == {"clean_up_tokenization_spaces": False, "tokenizer_class": "PreTrainedTokenizerFast"}
    assert list(empty.iterdir()) == []


def test_zoo_model_names_the_portable_class_and_loads(tiny_llama):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    config = _config(tiny_llama)
    assert config["tokenizer_class"] == PORTABLE_CLASS
    assert (config["bos_token"], config["eos_token"], config["pad_token"], config["unk_token"]) == (
        "<|bos|>", "<|eos|>", "<|pad|>", "<|unk|>")
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    text = "Hello world, tokenizers compress text."
    raw = Tokenizer.from_file(str(tiny_llama / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    assert tok(text, add_special_tokens=False)["input_ids"] == raw
    assert (tok.bos_token, tok.eos_token, tok.pad_token_id) == ("<|bos|>", "<|eos|>", 2)


def test_written_checkpoint_carries_the_portable_config(tmp_path, tiny_llama):
    """A folder saved by transformers 5 as the tokenizer source: the output names the portable class,
    keeps every other key, and copies the other tokenizer files unchanged."""
    from paw.io.writer import write_checkpoint

    src = tmp_path / "v5-saved"
    src.mkdir()
    (src / "tokenizer.json").write_bytes((tiny_llama / "tokenizer.json").read_bytes())
    v5 = {**_config(tiny_llama), "tokenizer_class": "TokenizersBackend", "backend": "tokenizers"}
    (src / "tokenizer_config.json").write_text(json.dumps(v5))
    out = write_checkpoint(tmp_path / "out", {}, config={"model_type": "llama"}, tokenizer_from=src)
    assert _config(out) == {**v5, "tokenizer_class": "PreTrainedTokenizerFast"}
    assert (out / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    assert json.loads((src / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"
