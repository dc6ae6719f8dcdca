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
