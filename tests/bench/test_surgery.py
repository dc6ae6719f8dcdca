"""Model surgery: exact function preservation where promised, exact equivalences for pruning, bad input."""

from __future__ import annotations

import pytest
import torch

from paw.bench.models import model_from_state_dict
from paw.bench.surgery import (
    _insert_positions,
    grow_state_dict,
    importance_scores,
    prune_by_importance,
    prune_state_dict,
)
from paw.errors import PawError
from paw.zoo import build_model

VOCAB = 97


def _model(arch="llama", **dims):
    dims = {"hidden_size": 32, "num_layers": 3, "num_heads": 4, "num_kv_heads": 2, "vocab_size": VOCAB} | dims
    model = build_model(arch, seed=5, **dims)
    return {k: v.clone() for k, v in model.state_dict().items()}, model.config.to_dict()


def _logits(sd, config, seed=0):
    tokens = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return model_from_state_dict(sd, config)(tokens).logits


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_grow_neurons_and_layers_is_exact(arch):
    sd, cfg = _model(arch)
    big, big_cfg = grow_state_dict(sd, cfg, intermediate_size=100, num_layers=5, seed=1)
    assert big_cfg["num_hidden_layers"] == 5 and big_cfg["intermediate_size"] == 100
    assert big["model.layers.0.mlp.up_proj.weight"].shape == (100, 32)
    # new neurons are live (random gate/up) but write nothing
    assert big["model.layers.0.mlp.up_proj.weight"][64:].abs().sum() > 0
    assert big["model.layers.0.mlp.down_proj.weight"][:, 64:].abs().sum() == 0
    torch.testing.assert_close(_logits(big, big_cfg), _logits(sd, cfg), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: tied embeddings and q/k/v biases
def test_grow_hidden_is_exact_with_rescaled_gains_and_eps(arch):
    sd, cfg = _model(arch)
    big, big_cfg = grow_state_dict(sd, cfg, hidden_size=48, intermediate_size=80, num_layers=4, seed=2)
    assert big_cfg["hidden_size"] == 48 and big_cfg["head_dim"] == 8
    assert big_cfg["rms_norm_eps"] == pytest.approx(cfg["rms_norm_eps"] * 32 / 48)
    scale = (32 / 48) ** 0.5
    torch.testing.assert_close(big["model.norm.weight"][:32], sd["model.norm.weight"] * scale)
    assert big["model.embed_tokens.weight"][:, 32:].abs().sum() == 0
    torch.testing.assert_close(_logits(big, big_cfg), _logits(sd, cfg), atol=1e-5, rtol=1e-5)
    # what is not preserved: the same weights under the OLD eps differ, by O(eps) only
    old_eps = dict(big_cfg, rms_norm_eps=cfg["rms_norm_eps"])
    assert (_logits(big, old_eps) - _logits(sd, cfg)).abs().max() < 1e-3


def test_grown_model_trains_its_new_channels():
    sd, cfg = _model()
    big, big_cfg = grow_state_dict(sd, cfg, hidden_size=40, seed=0)
    model = model_from_state_dict(big, big_cfg).train()
    tokens = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    model(tokens, labels=tokens).loss.backward()
    down = model.model.layers[0].mlp.down_proj.weight.grad
    assert down[32:].abs().sum() > 0  # zero-initialised writer rows receive gradient


def test_grow_then_prune_back_is_the_identity():
    sd, cfg = _model()
    big, big_cfg = grow_state_dict(sd, cfg, intermediate_size=80, num_layers=5, seed=3)
    plan = _insert_positions(3, 5)
    kept = [i for i, old in enumerate(plan) if old is not None]
    back, back_cfg = prune_state_dict(big, big_cfg, layers_keep=kept,
                                      neurons_keep={i: list(range(64)) for i in kept})
    assert back.keys() == sd.keys()
    for name in sd:
        torch.testing.assert_close(back[name], sd[name], atol=0, rtol=0)
    assert back_cfg["intermediate_size"] == 64 and back_cfg["num_hidden_layers"] == 3


def test_insert_positions_spreads_new_layers():
    assert _insert_positions(4, 6) == [0, 1, None, 2, None, 3]
    assert _insert_positions(2, 2) == [0, 1]
    assert _insert_positions(1, 3) == [0, None, None]


def _zeroed(sd, cfg, *, kv_group=None, neurons=None):
    """The source with a KV group's o_proj columns (or neurons' down columns) set to zero in every layer."""
    out = {k: v.clone() for k, v in sd.items()}
    hd, group = cfg["head_dim"], cfg["num_attention_heads"] // cfg["num_key_value_heads"]
    for layer in range(cfg["num_hidden_layers"]):
        if kv_group is not None:
            lo, hi = kv_group * group * hd, (kv_group + 1) * group * hd
            out[f"model.layers.{layer}.self_attn.o_proj.weight"][:, lo:hi] = 0
        if neurons is not None:
            out[f"model.layers.{layer}.mlp.down_proj.weight"][:, neurons] = 0
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_pruning_a_kv_group_equals_silencing_it(arch):
    sd, cfg = _model(arch)
    silenced = _zeroed(sd, cfg, kv_group=0)
    small, small_cfg = prune_state_dict(sd, cfg, kv_heads_keep={i: [1] for i in range(3)})
    assert small_cfg["num_key_value_heads"] == 1 and small_cfg["num_attention_heads"] == 2
    assert small["model.layers.0.self_attn.q_proj.weight"].shape == (16, 32)
    assert small["model.layers.0.self_attn.o_proj.weight"].shape == (32, 16)
    torch.testing.assert_close(small["model.layers.1.self_attn.k_proj.weight"],
                               sd["model.layers.1.self_attn.k_proj.weight"][8:16])
    torch.testing.assert_close(_logits(small, small_cfg), _logits(silenced, cfg), atol=1e-5, rtol=1e-5)


def test_pruning_neurons_and_a_silent_layer_is_exact():
    sd, cfg = _model()
    drop = [3, 10, 40]
    keep = [j for j in range(64) if j not in drop]
    silenced = _zeroed(sd, cfg, neurons=drop)
    silenced["model.layers.1.self_attn.o_proj.weight"].zero_()
    silenced["model.layers.1.mlp.down_proj.weight"].zero_()
    small, small_cfg = prune_state_dict(silenced, cfg, neurons_keep={0: keep, 2: keep}, layers_keep=[0, 2])
    assert small_cfg["intermediate_size"] == 61 and small_cfg["num_hidden_layers"] == 2
    torch.testing.assert_close(small["model.layers.1.mlp.up_proj.weight"],
                               sd["model.layers.2.mlp.up_proj.weight"][keep])
    torch.testing.assert_close(_logits(small, small_cfg), _logits(silenced, cfg), atol=1e-5, rtol=1e-5)


def test_pruning_hidden_channels_slices_every_residual_axis():
    sd, cfg = _model("qwen2")
    keep = [0, 2, 5] + list(range(8, 29))
    small, small_cfg = prune_state_dict(sd, cfg, hidden_keep=keep)
    assert small_cfg["hidden_size"] == 24 and small_cfg["head_dim"] == 8
    torch.testing.assert_close(small["model.embed_tokens.weight"], sd["model.embed_tokens.weight"][:, keep])
    torch.testing.assert_close(small["model.layers.2.self_attn.o_proj.weight"],
                               sd["model.layers.2.self_attn.o_proj.weight"][keep])
    torch.testing.assert_close(small["model.layers.2.mlp.gate_proj.weight"],
                               sd["model.layers.2.mlp.gate_proj.weight"][:, keep])
    assert _logits(small, small_cfg).shape == (2, 11, VOCAB)  # loads strictly and runs


def test_importance_finds_dead_units():
    sd, cfg = _model()
    for layer in range(3):
        sd[f"model.layers.{layer}.mlp.down_proj.weight"][:, [7, 20]] = 0
        sd[f"model.layers.{layer}.self_attn.v_proj.weight"][0:8] = 0  # KV group 0: no OV circuit
        sd[f"model.layers.{layer}.self_attn.k_proj.weight"][0:8] = 0  # ... and no QK circuit
    sd["model.layers.1.self_attn.o_proj.weight"] *= 1e-3
    sd["model.layers.1.mlp.down_proj.weight"] *= 1e-3
    scores = importance_scores(sd, cfg)
    assert scores["neurons"][0][7] == 0 and scores["heads"][2][0] == 0 and scores["heads"][2][1] > 0
    assert int(scores["layers"].argmin()) == 1
    small, small_cfg = prune_by_importance(sd, cfg, heads=2, neurons=62, layers=2, hidden=30)
    assert (small_cfg["num_attention_heads"], small_cfg["intermediate_size"], small_cfg["num_hidden_layers"],
            small_cfg["hidden_size"]) == (2, 62, 2, 30)
    torch.testing.assert_close(small["model.layers.1.self_attn.k_proj.weight"],
                               sd["model.layers.2.self_attn.k_proj.weight"][8:16][:, small_keep(sd, cfg)])


def small_keep(sd, cfg):
    scores = importance_scores(sd, cfg)["hidden"]
    return sorted(torch.argsort(-scores, stable=True)[:30].tolist())


@pytest.mark.parametrize("kwargs, message", [
    ({"neurons_keep": {0: [0, 1], 1: [0, 1, 2]}}, "same number"),
    ({"kv_heads_keep": {0: [0]}}, "same number"),
    ({"hidden_keep": [0, 32]}, r"\[0, 32\)"),
    ({"layers_keep": []}, "nothing kept"),
    ({"neurons_keep": {0: [1, 1]}}, "distinct"),
])
def test_prune_rejects_bad_plans(kwargs, message):
    sd, cfg = _model()
    with pytest.raises(PawError, match=message):
        prune_state_dict(sd, cfg, **kwargs)


def test_bad_sizes_and_unknown_tensors():
    sd, cfg = _model()
    with pytest.raises(PawError, match="multiple of the group size 2"):
        prune_by_importance(sd, cfg, heads=3)
    with pytest.raises(PawError, match="cannot shrink"):
        grow_state_dict(sd, cfg, hidden_size=16)
    with pytest.raises(PawError, match="needs an x \\* w RMSNorm"):
        grow_state_dict(sd, dict(cfg, model_type="gemma"), hidden_size=40)
    with pytest.raises(PawError, match="q_norm"):
        prune_state_dict(dict(sd, **{"model.layers.0.self_attn.q_norm.weight": torch.ones(8)}), cfg)
    with pytest.raises(PawError, match="intermediate_size"):
        prune_state_dict(sd, {k: v for k, v in cfg.items() if k != "intermediate_size"})
