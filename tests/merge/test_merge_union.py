"""Merges across vocabularies: one fine-tune added chat tokens; ``tokenizer_source: union`` keeps them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from paw.merge.union import TokenOverride, build_union, permuted_matrices
from tests.merge.conftest import load_numpy

CHAT = ("<|im_start|>", "<|im_end|>")
EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"


def test_union_lays_each_matrix_on_the_union_ids_by_mergekits_rules():
    base = SimpleNamespace(ids={"a": 0, "b": 1}, added={})
    ft = SimpleNamespace(ids={"b": 0, "a": 1, "<x>": 2}, added={"<x>": {"content": "<x>", "special": True}})
    other = SimpleNamespace(ids={"a": 0, "b": 1, "c": 2}, added={})
    union = build_union([base, ft, other], [2, 3, 3])
    assert union.tokens == ["a", "b", "<x>", "c"]
    assert union.perms == [[0, 1, -1, -1], [1, 0, 2, -1], [0, 1, -1, 2]]
    assert [t["content"] for t in union.new] == ["<x>", "c"] and union.new[0]["id"] == 2 and union.new[0]["special"]
    mats = [torch.tensor([[1.0], [2.0]]), torch.tensor([[20.0], [10.0], [30.0]]), torch.tensor([[5.0], [6.0], [7.0]])]
    laid = permuted_matrices(union, mats)
    # own rows where present; <x> from its only owner (ft), c from its only owner (other)
    assert laid[0].reshape(-1).tolist() == [1, 2, 30, 7]
    assert laid[1].reshape(-1).tolist() == [10, 20, 30, 7]
    assert laid[2].reshape(-1).tolist() == [5, 6, 30, 7]
    # overrides: a forced to zero on everyone; b's default from ft's row of "<x>" (not forced: only for those lacking b)
    laid = permuted_matrices(union, mats, overrides={"a": TokenOverride("zero", True), "c": TokenOverride((1, "<x>"))})
    assert [m.reshape(-1).tolist() for m in laid] == [[0, 2, 30, 30], [0, 20, 30, 30], [0, 6, 30, 7]]
    padded = build_union([base, ft, other], [2, 3, 3], pad_to_multiple_of=3)
    assert padded.rows == 6 and permuted_matrices(padded, mats)[0].reshape(-1).tolist()[4:] == [10.0, 10.0]


def add_chat_tokens(src: Path, dest: Path, seed: int = 0) -> Path:
    """A copy of ``src`` whose tokenizer gained two special tokens and whose embedding and head gained rows."""
    from transformers import AutoTokenizer

    from paw.io.checkpoint import open_checkpoint
    from paw.io.writer import write_checkpoint

    tok = AutoTokenizer.from_pretrained(src)
    tok.add_special_tokens({"additional_special_tokens": list(CHAT)})
    ckpt, gen = open_checkpoint(src), torch.Generator().manual_seed(seed)

    def tensors():
        for name in ckpt:
            t = ckpt[name]
            if name in (EMBED, HEAD):
                t = torch.cat([t, (torch.randn(len(tok) - t.shape[0], t.shape[1], generator=gen) * 0.02).to(t.dtype)])
            yield name, t

    write_checkpoint(dest, tensors(), config={**ckpt.config, "vocab_size": len(tok)}, overwrite=True)
    tok.save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def chat(tmp_path_factory, family):
    """The family's base, its first fine-tune, and its second fine-tune with two chat tokens added."""
    root = tmp_path_factory.mktemp("union")
    return family.base, family.models[0], add_chat_tokens(family.models[1], root / "ft-chat")


def _config(tmp_path: Path, base: Path, a: Path, b: Path, extra: str = "") -> Path:
    cfg = tmp_path / "union.yml"
    cfg.write_text(f"models:\n  - model: {a}\n    parameters: {{weight: 0.5}}\n  - model: {b}\n"
                   f"    parameters: {{weight: 0.5}}\nmerge_method: task_arithmetic\nbase_model: {base}\n"
                   f"dtype: float32\n{extra or 'tokenizer_source: union'}\n")
    return cfg


def test_union_merge_loads_encodes_the_added_tokens_and_merges_shared_rows(cli, chat, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, plain, added = chat
    r = cli("merge", "--config", _config(tmp_path, base, plain, added), "--output", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    n = len(AutoTokenizer.from_pretrained(base))
    ids = tok.encode("<|im_start|>hi<|im_end|>", add_special_tokens=False)
    assert ids[0] == n and ids[-1] == n + 1 and n not in ids[1:-1]   # each added token is one id
    assert tok.convert_tokens_to_ids(list(CHAT)) == [n, n + 1]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert model.model.embed_tokens.weight.shape[0] == n + 2 == model.config.vocab_size
    out, b, p, c = (load_numpy(x) for x in (tmp_path / "out", base, plain, added))
    for name in (EMBED, HEAD):
        shared = b[name] + 0.5 * (p[name] - b[name]) + 0.5 * (c[name][:n] - b[name])
        np.testing.assert_allclose(out[name][:n], shared, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(out[name][n:], c[name][n:])   # only one model has them: its rows
    record = json.loads((tmp_path / "out" / "paw_merge.json").read_text())["union_vocabulary"]
    assert record["added"] == {t: added.name for t in CHAT} and record["rows"] == n + 2


def test_union_token_overrides_and_the_vocab_policy_flag(cli, chat, tmp_path):
    base, plain, added = chat
    extra = ("tokenizer:\n  source: union\n  tokens:\n    \"<|im_end|>\": {source: {kind: zero}, force: true}\n"
             f"    \"<|bos|>\": {{source: {added}, force: true}}\n")
    r = cli("merge", "--config", _config(tmp_path, base, plain, added, extra), "--output", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    out, c = load_numpy(tmp_path / "out"), load_numpy(added)
    n = load_numpy(base)[EMBED].shape[0]
    assert not out[EMBED][n + 1].any()                         # forced to zero for every model
    np.testing.assert_array_equal(out[EMBED][0], c[EMBED][0])  # every model takes the chat model's <|bos|> row
    r = cli("merge", "--base", base, "--models", plain, added, "--vocab-policy", "union", "--weights", "0.5", "0.5",
            "--output", tmp_path / "flags")
    assert r.exit_code == 0, r.stderr
    np.testing.assert_array_equal(load_numpy(tmp_path / "flags")[EMBED][n:], c[EMBED][n:])


def test_a_token_override_naming_another_model_is_refused(cli, chat, tmp_path):
    base, plain, added = chat
    extra = "tokenizer:\n  source: union\n  tokens:\n    \"<|im_end|>\": {source: ./elsewhere}\n"
    r = cli("merge", "--config", _config(tmp_path, base, plain, added, extra), "--output", tmp_path / "out")
    assert r.exit_code == 2 and "tokenizer.tokens.<|im_end|>.source" in r.stderr
    assert not (tmp_path / "out").exists()


def test_tokenizer_source_base_keeps_the_base_vocabulary(cli, chat, tmp_path):
    base, plain, added = chat
    r = cli("merge", "--config", _config(tmp_path, base, plain, added, "tokenizer_source: base"),
            "--output", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    out, b, p, c = (load_numpy(x) for x in (tmp_path / "out", base, plain, added))
    n = b[EMBED].shape[0]
    assert out[EMBED].shape[0] == n   # the added rows are dropped with the tokens, as mergekit does
    np.testing.assert_allclose(out[EMBED], b[EMBED] + 0.5 * (p[EMBED] - b[EMBED]) + 0.5 * (c[EMBED][:n] - b[EMBED]),
                               rtol=1e-6, atol=1e-7)
