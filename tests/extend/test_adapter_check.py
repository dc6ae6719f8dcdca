"""`paw adapter check` / `resize-base` on the real failure: extend, train a LoRA on the bigger base,
load on the old base (PEFT fails with a size mismatch), diagnose, fix, and get the adapter's logits."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from paw.adaptercheck.fit import check_fit, table
from paw.vocab.extend_pipeline import extend_tokenizer
from paw.vocab.options import ExtendOptions
from tests.extend.conftest import logits, make_adapter
from tests.io.fake_hub import card_of

WORDS = [" hello", " zebra", "PAW"]


@pytest.fixture(scope="module")
def extended(tmp_path_factory, tiny_llama, tiny_qwen):
    """{'llama'|'qwen': (old base, extended base, new ids)}."""
    root = tmp_path_factory.mktemp("adapter-check")
    out = {}
    for name, base in (("llama", tiny_llama), ("qwen", tiny_qwen)):
        extend_tokenizer(ExtendOptions(model=base, output=root / f"{name}-ext", tokens=tuple(WORDS), init="interpolate"))
        manifest = json.loads((root / f"{name}-ext" / "paw_extend.json").read_text())
        out[name] = (base, root / f"{name}-ext", sorted(i for route in manifest["new_tokens"].values() for i in route.values()))
    return root, out


CASES = [("save", "llama", True), ("lora-embed", "llama", False), ("tokens", "qwen", True)]


@pytest.mark.parametrize(("kind", "arch", "ship_tokenizer"), CASES)
def test_reproduce_diagnose_fix(cli, extended, kind, arch, ship_tokenizer):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, models = extended
    base, ext, new_ids = models[arch]
    adapter = make_adapter(ext, root / f"{kind}-adapter", kind=kind, new_ids=new_ids, seed=5,
                           tokenizer=ship_tokenizer)
    old_rows, rows = AutoModelForCausalLM.from_pretrained(base).config.vocab_size, max(new_ids) + 1

    # 1. the failure users hit: the base loaded at its old size
    with warnings.catch_warnings(), pytest.raises((RuntimeError, IndexError)) as failure:
        warnings.simplefilter("ignore")
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)
    if kind != "tokens":
        assert "size mismatch for base_model.model.model.embed_tokens" in str(failure.value)

    # 2. diagnosis from headers: exit 2, a table, the size the adapter expects, the fix
    res = cli("adapter", "check", "--adapter", adapter, "--base", base)
    assert res.exit_code == 2
    assert res.stdout.splitlines()[0].split() == ["check", "module", "adapter", "base", "ok", "note"]
    at_least = "at least " if kind == "tokens" else ""
    assert res.stderr.strip().splitlines() == [
        next(x for x in res.stderr.splitlines() if x.startswith("error: "))]
    assert f"adapter expects a vocabulary of {at_least}{rows} rows, base has {old_rows}" in res.stderr
    assert f"paw adapter resize-base --adapter {adapter} --base {base} --output" in res.stdout

    # 3. the fix
    fixed = root / f"{kind}-fixed"
    args = [] if ship_tokenizer else ["--tokenizer", ext]
    res = cli("adapter", "resize-base", "--adapter", adapter, "--base", base, "--output", fixed, *args)
    assert res.exit_code == 0, res.stderr
    assert f"{old_rows} -> {rows} rows" in res.stdout
    meta, body = card_of(fixed)
    assert meta == {"library_name": "transformers", "tags": ["paw", "resize-base"]}
    assert f"- embedding rows: {old_rows} -> {rows}" in body and f"so that the adapter `{adapter}`" in body
    assert cli("adapter", "check", "--adapter", adapter, "--base", fixed).exit_code == 0

    # 4. it loads and gives the trained adapter's logits, new tokens included
    tok = AutoTokenizer.from_pretrained(fixed)
    ids = tok.encode("she said hello to the zebra and PAW", add_special_tokens=False)
    assert set(new_ids) & set(ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(ext), adapter).eval()
        got = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(fixed), adapter).eval()
    assert torch.equal(logits(want, ids), logits(got, ids))


def test_check_fits_and_bad_inputs(cli, extended, tiny_lora, tiny_llama, tmp_path):
    res = cli("adapter", "check", "--adapter", tiny_lora, "--base", tiny_llama)
    assert res.exit_code == 0 and "fits:" in res.stdout and "NO" not in res.stdout
    res = cli("adapter", "resize-base", "--adapter", tiny_lora, "--base", tiny_llama, "--output", tmp_path / "o")
    assert res.exit_code == 2 and "carries no vocabulary-sized tensor" in res.stderr
    res = cli("adapter", "check", "--adapter", tmp_path, "--base", tiny_llama)
    assert res.exit_code == 2 and "adapter_config.json is missing" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


BASE = {"model.embed_tokens.weight": (100, 8), "model.layers.0.self_attn.q_proj.weight": (8, 8),
        "model.layers.0.mlp.down_proj.weight": (8, 16), "lm_head.weight": (100, 8)}
P = "base_model.model."


def test_check_fit_shapes_by_hand():
    good = {P + "model.layers.0.mlp.down_proj.lora_A.weight": (2, 16),
            P + "model.layers.0.mlp.down_proj.lora_B.weight": (8, 2)}
    report = check_fit({"target_modules": ["down_proj"]}, good, BASE)
    assert report.ok and report.expected_vocab is None
    transposed = {P + "model.layers.0.mlp.down_proj.lora_A.weight": (2, 8),
                  P + "model.layers.0.mlp.down_proj.lora_B.weight": (16, 2)}
    report = check_fit({"target_modules": ["down_proj", "o_proj"], "modules_to_save": ["score"]}, transposed, BASE)
    assert [(r.check, r.module, r.note) for r in report.failures()] == [
        ("save", "score", "no such module in base"),
        ("target", "o_proj", "no such module in base"),
        ("lora", "model.layers.0.mlp.down_proj", "adapter implies (16, 8)")]
    assert not report.vocab_mismatch


def test_check_fit_vocab_from_each_kind_of_tensor():
    embed_lora = {P + "model.embed_tokens.lora_embedding_A": (2, 120), P + "model.embed_tokens.lora_embedding_B": (8, 2)}
    r = check_fit({}, embed_lora, BASE)
    assert (r.expected_vocab, r.base_vocab, r.vocab_mismatch, r.vocab_is_lower_bound) == (120, 100, True, False)
    head_copy = {P + "lm_head.modules_to_save.weight": (130, 8), P + "lm_head.original_module.weight": (130, 8)}
    tied = {k: v for k, v in BASE.items() if k != "lm_head.weight"}
    r = check_fit({}, head_copy, tied, tied=True)  # the tied head is the embedding
    assert r.expected_vocab == 130 and [x.module for x in r.failures()] == ["lm_head.weight"]
    tokens = {P + "model.embed_tokens.token_adapter.trainable_tokens_delta": (2, 8)}
    r = check_fit({"trainable_token_indices": [5, 99]}, tokens, BASE)
    assert r.ok and not r.vocab_mismatch
    r = check_fit({"trainable_token_indices": [5, 104]}, tokens, BASE)
    assert (r.expected_vocab, r.vocab_is_lower_bound, r.vocab_mismatch) == (105, True, True)
    assert "index 104 needs >= 105 rows" in "\n".join(table(r))


def test_non_lora_adapter_is_refused(cli, tiny_llama, tmp_path):
    from paw.io.manifest import write_json

    write_json(tmp_path / "adapter_config.json", {"peft_type": "IA3"})
    res = cli("adapter", "check", "--adapter", tmp_path, "--base", tiny_llama)
    assert res.exit_code == 2 and "adapter type IA3 is not supported" in res.stderr
