"""PEFT adapter folders: key mapping, round trip, and PEFT loading what PAW writes."""

from __future__ import annotations

import json

import pytest
import torch

from paw.errors import PawError
from paw.io.adapter import LoraAdapter, adapter_key, read_adapter, split_adapter_key, write_adapter
from paw.io.checkpoint import open_checkpoint


@pytest.mark.parametrize(("key", "expected"), [
    ("base_model.model.model.layers.0.mlp.down_proj.lora_A.weight", ("model.layers.0.mlp.down_proj", "A", "linear")),
    ("base_model.model.model.layers.11.self_attn.q_proj.lora_B.weight", ("model.layers.11.self_attn.q_proj", "B", "linear")),
    ("base_model.model.model.embed_tokens.lora_embedding_A", ("model.embed_tokens", "A", "embedding")),
    ("base_model.model.lm_head.lora_B.default.weight", ("lm_head", "B", "linear")),
    ("base_model.model.lm_head.weight", None),
])
def test_split_adapter_key(key, expected):
    assert split_adapter_key(key) == expected
    if expected and "default" not in key:
        assert adapter_key(*expected) == key


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_read_maps_to_base_keys(tiny_lora, tiny_llama):
    adapter = read_adapter(tiny_lora)
    base = open_checkpoint(tiny_llama)
    mods = adapter.modules()
    assert len(mods) == 2 * 7  # two layers, seven projections
    for m in mods.values():
        assert m.base_key in base
        out, inp = base.shape(m.base_key)
        assert tuple(m.A.shape) == (4, inp) and tuple(m.B.shape) == (out, 4)
        assert m.scaling == pytest.approx(2.0)
        assert float(m.B.abs().sum()) > 0


def test_written_adapter_loads_in_peft_with_same_logits(tmp_path, tiny_lora, tiny_llama):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter = read_adapter(tiny_lora)
    out = write_adapter(tmp_path / "copy", LoraAdapter(dict(adapter.config), dict(adapter.tensors)))
    ids = torch.tensor([[5, 9, 17, 33, 2]])
    ref = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), tiny_lora)
    got = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), out)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama)
    assert torch.equal(_logits(ref, ids), _logits(got, ids))
    assert not torch.allclose(_logits(base, ids), _logits(got, ids))  # the adapter does something


def test_delta_matches_peft_merge(tiny_lora, tiny_llama):
    """B @ A * scaling equals what PEFT adds to the base weight when merging."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), tiny_lora).merge_and_unload()
    base = open_checkpoint(tiny_llama)
    mod = read_adapter(tiny_lora).modules()["model.layers.1.mlp.down_proj"]
    expected = base[mod.base_key] + mod.delta()
    assert torch.allclose(merged.state_dict()[mod.base_key], expected, atol=1e-6)


def test_rank_and_alpha_patterns():
    cfg = {"r": 8, "lora_alpha": 16, "rank_pattern": {"down_proj": 4}, "alpha_pattern": {"layers.1.self_attn.q_proj": 2}}
    ad = LoraAdapter(cfg, {})
    assert ad.rank_of("model.layers.0.mlp.down_proj") == 4
    assert ad.rank_of("model.layers.0.mlp.up_proj") == 8
    assert ad.alpha_of("model.layers.1.self_attn.q_proj") == 2
    assert ad.alpha_of("model.layers.11.self_attn.q_proj") == 16  # dot boundary: 11 is not 1
    assert ad.scaling_of("model.layers.0.mlp.down_proj") == 4.0


def test_bad_adapter_folders(tmp_path, tiny_lora):
    with pytest.raises(PawError, match="adapter_config.json is missing"):
        read_adapter(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    with pytest.raises(PawError, match="no adapter weights"):
        read_adapter(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3"}))
    with pytest.raises(PawError, match="IA3 is not supported"):
        read_adapter(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    from safetensors.torch import save_file

    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 8)},
              str(tmp_path / "adapter_model.safetensors"))
    with pytest.raises(PawError, match="has only factor A"):
        read_adapter(tmp_path)


def _nan_copy(adapter: LoraAdapter) -> tuple[LoraAdapter, str]:
    key = sorted(k for k in adapter.tensors if "lora_B" in k)[0]
    tensors = {k: v.clone() for k, v in adapter.tensors.items()}
    tensors[key].view(-1)[:2] = float("nan")
    return LoraAdapter(config=adapter.config, tensors=tensors), key


def test_write_adapter_refuses_nan_naming_the_file_the_tensor_and_the_flag(tiny_lora, tmp_path):
    from paw.validate import NonFinite

    bad, key = _nan_copy(read_adapter(tiny_lora))
    with pytest.raises(NonFinite) as err:
        write_adapter(tmp_path / "out", bad)
    text = str(err.value)
    assert text.startswith(str(tmp_path / "out" / "adapter_model.safetensors")), text
    assert f"tensor {key!r} holds 2 NaN/Inf" in text and "--allow-nonfinite" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written, no staging, no lock


def test_write_adapter_with_allow_nonfinite_writes_it(tiny_lora, tmp_path):
    bad, key = _nan_copy(read_adapter(tiny_lora))
    write_adapter(tmp_path / "out", bad, allow_nonfinite=True)
    assert torch.isnan(read_adapter(tmp_path / "out").tensors[key]).sum() == 2


def test_a_nan_source_adapter_is_named_by_file_and_tensor(tiny_lora, tmp_path):
    from paw.io.adapter import refuse_nonfinite_adapter
    from paw.validate import NonFinite

    bad, key = _nan_copy(read_adapter(tiny_lora))
    write_adapter(tmp_path / "nan", bad, allow_nonfinite=True)
    refuse_nonfinite_adapter(read_adapter(tiny_lora), why="x")  # a finite adapter passes
    with pytest.raises(NonFinite, match=f"adapter_model.safetensors: tensor '{key}' holds 2 NaN/Inf .*cannot teach"):
        refuse_nonfinite_adapter(read_adapter(tmp_path / "nan"), why="the source adapter cannot teach")
