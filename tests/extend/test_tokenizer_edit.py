"""Editing tokenizer.json in memory (paw.vocab.tokenizer_edit): formats PAW meets in the wild."""

from __future__ import annotations

import json

from tokenizers import Tokenizer

from paw import zoo
from paw.data import sample_texts
from paw.io.hf_tokenizer_edit import HfTokenizerJson
from paw.vocab.tokenizer_edit import extend_tokenizer_json


def _doc(tmp_path, **edits):
    tok = zoo.train_tokenizer(sample_texts("multi"), 300)
    doc = json.loads(tok.backend_tokenizer.to_str())
    doc.update(edits)
    return HfTokenizerJson(doc, tmp_path / "tokenizer.json")


def _check(ext, words, texts):
    backend = Tokenizer.from_str(json.dumps(ext.doc))
    ids = {t.text: t.id for t in ext.tokens}
    for w in words:
        assert backend.encode(w, add_special_tokens=False).ids == [ids[w]]
    for text in texts:
        assert backend.decode(backend.encode(text, add_special_tokens=False).ids) == text
    return backend


def test_merges_written_as_strings_stay_strings(tmp_path):
    tok = _doc(tmp_path)
    tok.doc["model"]["merges"] = [" ".join(m) for m in tok.doc["model"]["merges"]]  # tokenizers < 0.20 layout
    ext = extend_tokenizer_json(tok, [" photosynthesis", "aaaa"])
    assert all(isinstance(m, str) for m in ext.doc["model"]["merges"])
    assert len(ext.doc["model"]["merges"]) == len(tok.doc["model"]["merges"]) + ext.merges_added
    _check(ext, [" photosynthesis", "aaaa"], ["a photosynthesis aaaa aaaaaaa"])


def test_llama3_style_split_then_bytelevel(tmp_path):
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                                               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    tok = _doc(tmp_path, pre_tokenizer=pre)
    assert tok.kind == "byte-bpe"
    ext = extend_tokenizer_json(tok, [" Zürich", "12345"])
    # "12345" is split into "123" + "45" by the \p{N}{1,3} rule: BPE can never produce it
    assert {t.text: t.how for t in ext.tokens if t.how != "bpe-intermediate"} == {" Zürich": "bpe", "12345": "added"}
    _check(ext, [" Zürich", "12345"], ["in Zürich 12345 times"])


def test_ids_continue_after_added_tokens_and_nothing_is_mutated(tmp_path):
    tok = _doc(tmp_path)
    before = json.dumps(tok.doc)
    ext = extend_tokenizer_json(tok, ["<|tool|>"], special=True)
    assert json.dumps(tok.doc) == before
    assert [(t.id, t.how) for t in ext.tokens] == [(tok.size(), "special")]
    assert ext.doc["added_tokens"][-1]["special"] is True


def test_saved_folder_lists_added_tokens_for_older_transformers(tmp_path):
    from paw.io.hf_tokenizer_edit import save_tokenizer_folder
    from paw.io.manifest import write_json

    tok = _doc(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    write_json(src / "tokenizer_config.json", {"added_tokens_decoder": {"0": {"content": "<|bos|>", "special": True}},
                                               "bos_token": "<|bos|>"})
    (src / "tokenizer.model").write_bytes(b"stale sentencepiece model")
    ext = extend_tokenizer_json(tok, ["<|tool|>"], special=True)
    dest = tmp_path / "dest"
    dest.mkdir()
    written = save_tokenizer_folder(ext.doc, src, dest, new_tokens=ext.tokens)
    assert written == ["tokenizer.json", "tokenizer_config.json"]  # the stale slow-tokenizer file is left out
    decoder = json.loads((dest / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert decoder[str(ext.tokens[0].id)]["content"] == "<|tool|>" and decoder[str(ext.tokens[0].id)]["special"]
    assert json.loads((dest / "tokenizer.json").read_text()) == ext.doc
