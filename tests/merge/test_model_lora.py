"""mergekit's ``MODEL+LORA`` inputs and DoRA adapters: applied as PEFT's ``merge_and_unload`` applies them.

The reference is what mergekit does with ``model: base+lora`` (``ModelReference.merged``): PEFT's
``merge_and_unload``, saved, then merged as any model. PAW applies the adapter lazily per tensor;
the tests check each tensor against PEFT's and the whole merge against the same merge of PEFT's
saved copies, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from paw.errors import NotApplicable, PawError
from paw.io.adapter import LoraAdapter, read_adapter, write_adapter
from paw.io.checkpoint import open_checkpoint
from paw.io.lora_model import open_model, split_model_ref
from paw.lora import apply_lora
from paw.merge import MergeOptions, merge
from tests.io.fake_hub import FakeHub, card_of


@pytest.fixture(scope="module")
def adapters(tmp_path_factory, tiny_llama) -> dict[str, Path]:
    """A LoRA on the attention, a DoRA on q/v/down and the embedding (with its saved base_layer copy)."""
    from paw import zoo

    root = tmp_path_factory.mktemp("model-lora")
    return {"lora": zoo.make_lora(tiny_llama, root / "lora", rank=4, alpha=8, seed=3,
                                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
            "dora": zoo.make_lora(tiny_llama, root / "dora", rank=2, alpha=3, seed=4, use_dora=True,
                                  target_modules=["q_proj", "v_proj", "down_proj", "embed_tokens"])}


@pytest.fixture(scope="module")
def peft_merged(adapters, tiny_llama, tmp_path_factory) -> dict[str, Path]:
    """mergekit's way: PEFT's merge_and_unload of each adapter, saved as a model folder."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("peft-merged")
    out = {}
    for name, folder in adapters.items():
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), folder).merge_and_unload()
        model.save_pretrained(root / name)
        out[name] = root / name
    return out


def test_apply_lora_by_hand():
    W, A, B = torch.tensor([[3.0, 0.0]]), torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0]])
    assert apply_lora(W, A, B, 1.0).tolist() == [[3.0, 0.0]]
    A, B = torch.tensor([[0.0, 1.0]]), torch.tensor([[4.0]])   # ΔW = [[0, 4]]
    assert apply_lora(W, A, B, 1.0).tolist() == [[3.0, 4.0]]
    assert apply_lora(W, A, B, 1.0, magnitude=torch.tensor([10.0])).tolist() == [[6.0, 8.0]]


def test_split_model_ref(tmp_path):
    assert split_model_ref("base+lora") == ("base", "lora")
    assert split_model_ref("plain") == ("plain", None)
    (tmp_path / "a+b").mkdir()
    assert split_model_ref(tmp_path / "a+b") == (str(tmp_path / "a+b"), None)  # a folder that exists is a path
    with pytest.raises(PawError, match="write MODEL\\+LORA"):
        split_model_ref("a+b+c")


@pytest.mark.parametrize("kind", ["lora", "dora"])
def test_every_tensor_equals_peft_merge_and_unload(adapters, peft_merged, tiny_llama, kind):
    ours, theirs = open_model(f"{tiny_llama}+{adapters[kind]}"), open_checkpoint(peft_merged[kind])
    assert set(ours) == set(theirs) and ours.name == f"llama+{kind}"
    changed = 0
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name
        changed += not torch.equal(ours[name], open_checkpoint(tiny_llama)[name])
        rows = ours.rows(name, 1, 3)   # a streamed block: the same rows
        torch.testing.assert_close(rows, theirs[name][1:3], atol=1e-6, rtol=0)
    assert changed == (8 if kind == "lora" else 7)   # 4 modules x 2 layers; 3 x 2 + the embedding


def test_dora_modules_carry_their_magnitude(adapters):
    dora = read_adapter(adapters["dora"], dora=None)
    q = dora.modules()["model.layers.0.self_attn.q_proj"]
    assert dora.dora and q.magnitude.shape == (q.B.shape[0],)
    with pytest.raises(PawError, match="is DoRA: its update depends on the base weight"):
        q.delta()
    with pytest.raises(NotApplicable, match="a DoRA adapter \\(use_dora: true\\): this command uses only"):
        read_adapter(adapters["dora"])


def _mergekit_yaml(tmp_path: Path, base: Path, models: list[str], weights: list[float]) -> Path:
    config = {"merge_method": "task_arithmetic", "base_model": str(base),
              "models": [{"model": m, "parameters": {"weight": w}} for m, w in zip(models, weights, strict=True)]}
    path = tmp_path / "mk.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_mergekit_yaml_model_plus_lora_equals_merging_peft_merged_copies(cli, adapters, peft_merged, tiny_llama,
                                                                         tmp_path):
    refs = [f"{tiny_llama}+{adapters['lora']}", f"{tiny_llama}+{adapters['dora']}"]
    r = cli("merge", "--config", _mergekit_yaml(tmp_path, tiny_llama, refs, [0.6, 0.4]), "--output", tmp_path / "ours")
    assert r.exit_code == 0, r.stderr
    (tmp_path / "theirs").mkdir()
    plain = [str(peft_merged["lora"]), str(peft_merged["dora"])]
    r = cli("merge", "--config", _mergekit_yaml(tmp_path / "theirs", tiny_llama, plain, [0.6, 0.4]),
            "--output", tmp_path / "ref")
    assert r.exit_code == 0, r.stderr
    ours, ref = open_checkpoint(tmp_path / "ours"), open_checkpoint(tmp_path / "ref")
    assert set(ours) == set(ref)
    for name in ours:
        assert torch.equal(ours[name], ref[name]), name
    record = json.loads((tmp_path / "ours" / "paw_merge.json").read_text())
    assert record["inputs"]["models"][1]["lora"]["path"] == str(adapters["dora"])
    meta, body = card_of(tmp_path / "ours")  # MODEL+LORA names the model and the adapter, each once
    assert "base_model" not in meta  # local paths: named in the text, where a Hub ID can be added by hand
    assert f"`{tiny_llama}`, `{adapters['lora']}`, `{adapters['dora']}` are local paths, not Hub IDs" in body


def test_model_plus_lora_from_the_hub_is_downloaded_and_both_are_base_models(cli, adapters, tiny_llama, tmp_path,
                                                                            monkeypatch):
    hub = FakeHub(monkeypatch, tmp_path / "cache")
    hub.publish("org/base", tiny_llama)
    hub.publish("org/lora", adapters["lora"])
    r = cli("merge", "--config", _mergekit_yaml(tmp_path, "org/base", ["org/base+org/lora@main"], [1.0]),
            "--output", tmp_path / "ours")
    assert r.exit_code == 0, r.stderr
    assert {c["repo_id"]: c["allow_patterns"] for c in hub.calls}["org/lora"] == ["adapter_config.json",
                                                                                   "adapter_model.safetensors"]
    meta, _ = card_of(tmp_path / "ours")
    assert meta["base_model"] == ["org/base", "org/lora"]
    here = merge(MergeOptions(base=str(tiny_llama), models=[f"{tiny_llama}+{adapters['lora']}"], weights=[1.0],
                              output=str(tmp_path / "here"), device="cpu"))
    assert (tmp_path / "ours" / "model.safetensors").read_bytes() == (here / "model.safetensors").read_bytes()


def test_flags_take_model_plus_lora_too(adapters, peft_merged, tiny_llama, tmp_path):
    ours = merge(MergeOptions(base=str(tiny_llama), models=[f"{tiny_llama}+{adapters['lora']}"], weights=[1.0],
                              output=str(tmp_path / "ours"), device="cpu"))
    ref = open_checkpoint(peft_merged["lora"])
    for name, tensor in open_checkpoint(ours).items():
        torch.testing.assert_close(tensor, ref[name], atol=1e-6, rtol=0)


def test_adapter_space_merge_and_transfer_refuse_dora(cli, adapters, tiny_llama, tmp_path):
    r = cli("merge", "--adapters", adapters["lora"], adapters["dora"], "--output", tmp_path / "m")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert f"{adapters['dora']}: a DoRA adapter (use_dora: true): an adapter-space merge combines LoRA factors" in r.stderr
    r = cli("transfer-lora", "--adapter", adapters["dora"], "--source-base", tiny_llama, "--target-base", tiny_llama,
            "-o", tmp_path / "t")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "a DoRA adapter (use_dora: true): transfer-lora maps the LoRA factors" in r.stderr
    assert not (tmp_path / "m").exists() and not (tmp_path / "t").exists()


def test_adapter_check_reads_dora(cli, adapters, tiny_llama):
    r = cli("adapter", "check", "--adapter", adapters["dora"], "--base", tiny_llama)
    assert r.exit_code == 0, r.stderr
    assert "m(64)" in r.stdout or "m(32)" in r.stdout


def _variant(tmp_path: Path, src: Path, *, config=None, edit=None) -> Path:
    adapter = read_adapter(src, dora=None)
    tensors = dict(adapter.tensors)
    if edit:
        edit(tensors)
    folder = tmp_path / "variant"
    write = LoraAdapter(config={**adapter.config, **(config or {})}, tensors=tensors)
    from paw.io.adapter import write_adapter_files

    folder.mkdir()
    write_adapter_files(folder, write)
    return folder


def _first(tensors, part):
    return next(k for k in sorted(tensors) if part in k)


@pytest.mark.parametrize("case, message", [
    ("not-dora", "holds DoRA magnitude vectors (model.embed_tokens and others) but adapter_config.json does not say "
                 "use_dora: true"),
    ("no-magnitude", "has no lora_magnitude_vector though adapter_config.json says use_dora: true"),
    ("short-magnitude", "DoRA's magnitude vector of this module has"),
])
def test_broken_dora_adapters_are_refused_naming_the_module(adapters, tiny_llama, tmp_path, case, message):
    if case == "not-dora":
        folder = _variant(tmp_path, adapters["dora"], config={"use_dora": False})
    elif case == "no-magnitude":
        folder = _variant(tmp_path, adapters["dora"], edit=lambda t: t.pop(_first(t, "q_proj.lora_magnitude")))
    else:
        folder = _variant(tmp_path, adapters["dora"],
                          edit=lambda t: t.__setitem__(_first(t, "q_proj.lora_magnitude"), torch.ones(3)))
    with pytest.raises(PawError, match=message.replace("(", "\\(").replace(")", "\\)")):
        open_model(f"{tiny_llama}+{folder}")


@pytest.mark.parametrize("case, message", [
    ("three", "write MODEL+LORA (a model and a PEFT adapter, one '+')"),
    ("missing", "nowhere: no such file or folder (adapter)"),
    ("other-base", "lora: module 'model.layers.0.self_attn.k_proj' is 16x32 in the adapter but 24x48 in "),
])
def test_bad_references_exit_2_with_one_line(cli, adapters, tiny_llama, tmp_path, case, message):
    from paw import zoo

    wider = zoo.tiny_model(tmp_path / "wide", "llama", seed=0, hidden_size=48, num_layers=2) if case == "other-base" \
        else None
    ref = {"three": f"{tiny_llama}+{adapters['lora']}+x", "missing": f"{tiny_llama}+{tmp_path / 'nowhere'}",
           "other-base": f"{wider}+{adapters['lora']}"}[case]
    r = cli("merge", "--base", tiny_llama, "--models", ref, "--weights", "1", "--output", tmp_path / "out")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_output_over_the_lora_is_refused(cli, adapters, tiny_llama, tmp_path):
    lora = tmp_path / "lora"
    write_adapter(lora, read_adapter(adapters["lora"]))
    r = cli("merge", "--base", tiny_llama, "--models", f"{tiny_llama}+{lora}", "--weights", "1", "--output", lora,
            "--overwrite")
    assert r.exit_code == 2 and "never modifies its inputs" in r.stderr


def test_a_dora_adapter_loads_where_peft_applies_it(adapters, peft_merged, tiny_llama):
    """``paw eval --adapter`` loads adapters through PEFT (paw.io.lm.load_lm), which honours DoRA."""
    from transformers import AutoModelForCausalLM

    from paw.io.lm import load_lm

    model, _tokenizer = load_lm(tiny_llama, adapter=adapters["dora"], device="cpu")
    merged = AutoModelForCausalLM.from_pretrained(peft_merged["dora"]).eval()
    ids = torch.tensor([[1, 5, 9, 42, 7]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, merged(ids).logits, atol=1e-5, rtol=0)
