"""The group table: every name in exactly one module group, plus its layer."""

from __future__ import annotations

import math

import pytest

from paw.taskvec.groups import GROUP_ORDER, aggregate, groups_of, layer_group, module_group


@pytest.mark.parametrize(("name", "expected"), [
    ("model.embed_tokens.weight", ["embed"]),
    ("transformer.wte.weight", ["embed"]),
    ("transformer.wpe.weight", ["embed"]),
    ("token_embedding.weight", ["embed"]),
    ("lm_head.weight", ["lm_head"]),
    ("output.weight", ["lm_head"]),
    ("model.layers.0.self_attn.q_proj.weight", ["attn", "layer_0"]),
    ("model.layers.11.self_attn.o_proj.bias", ["attn", "layer_11"]),
    ("transformer.h.3.attn.c_attn.weight", ["attn", "layer_3"]),
    ("layers.2.attention.wq.weight", ["attn", "layer_2"]),
    ("model.layers.7.mlp.gate_proj.weight", ["mlp", "layer_7"]),
    ("model.layers.7.mlp.down_proj.weight", ["mlp", "layer_7"]),
    ("transformer.h.3.mlp.c_fc.weight", ["mlp", "layer_3"]),
    ("layers.2.feed_forward.w1.weight", ["mlp", "layer_2"]),
    ("encoder.layer.4.intermediate.dense.weight", ["mlp", "layer_4"]),
    ("model.layers.0.input_layernorm.weight", ["norm", "layer_0"]),
    ("model.layers.0.self_attn.q_norm.weight", ["norm", "layer_0"]),
    ("transformer.h.0.ln_1.weight", ["norm", "layer_0"]),
    ("transformer.ln_f.weight", ["norm"]),
    ("model.norm.weight", ["norm"]),
    ("score.weight", ["other"]),
    ("model.layers.5.some_adapter.weight", ["other", "layer_5"]),
])
def test_group_table(name, expected):
    assert groups_of(name) == expected


def test_bert_attention_output_is_not_the_lm_head():
    assert module_group("bert.encoder.layer.0.attention.output.dense.weight") == "attn"
    assert layer_group("model.embed_tokens.weight") is None


def test_aggregate_sums_squares_and_keeps_every_module_group():
    rows = [("model.layers.0.mlp.up_proj.weight", 6, 9.0, 5.0),
            ("model.layers.1.mlp.up_proj.weight", 6, 16.0, 7.0),
            ("model.layers.1.self_attn.q_proj.weight", 4, 0.0, 0.0),
            ("model.layers.10.input_layernorm.weight", 2, 4.0, 2.0)]
    groups = aggregate(rows)
    assert list(groups)[:len(GROUP_ORDER)] == list(GROUP_ORDER)
    assert list(groups)[len(GROUP_ORDER):] == ["layer_0", "layer_1", "layer_10"]  # numeric order
    assert groups["mlp"] == {"l2": 5.0, "l1": 12.0, "param_count": 12}
    assert groups["layer_1"] == {"l2": 4.0, "l1": 7.0, "param_count": 10}
    assert groups["embed"] == {"l2": 0.0, "l1": 0.0, "param_count": 0}
    total = sum(groups[g]["l2"] ** 2 for g in GROUP_ORDER)
    assert math.isclose(total, 29.0)
