"""The memory prediction (paw.memory): parameter counts from a config against real models, the parts by hand,
and the student's set-up (float32 LoRA factors on a bf16 base, gradient checkpointing).

The check against a measured peak RSS of a Llama-3.2-1B-shaped pair is scripts/bench_scale_memory.py
(several GB of RAM; its figures are in docs/scale.md).
"""

from __future__ import annotations

import pytest

from paw.memory import ADAM_BYTES, Shape, dtype_bytes, plan, plan_line, predict

LLAMA_3_2_1B = dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                    tie_word_embeddings=True)
QWEN2_5_7B = dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                  num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False)


@pytest.mark.parametrize("tied", [True, False])
def test_parameter_count_equals_the_model_built_from_the_config(tied):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(LLAMA_3_2_1B, num_hidden_layers=2, tie_word_embeddings=tied)  # 2 of its 16 layers: faster
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    assert Shape.of(config).parameters == sum(p.numel() for p in model.parameters())


def test_published_sizes():
    assert round(Shape.of(LLAMA_3_2_1B).parameters / 1e9, 2) == 1.24
    assert round(Shape.of(QWEN2_5_7B).parameters / 1e9, 2) == 7.62   # Qwen2.5-7B's q/k/v biases are not counted


def test_lora_parameters_and_the_parts_by_hand():
    shape = Shape(hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=10, tied=True)
    # r (out + in) per module: q 8+8, k 4+8, v 4+8, o 8+8, gate 16+8, up 16+8, down 8+16 = 128 per unit rank
    assert shape.lora_parameters(2) == 2 * 2 * 128
    assert shape.lora_parameters(2, ("q", "v")) == 2 * 2 * (16 + 12)
    p = predict(shape, lora_rank=2, batch_size=4, seq_tokens=5, kept_tokens=3, world=2, student_bytes=4)
    assert p["per_device_rows"] == 2 and p["tokens_per_device_step"] == 10
    parts = p["parts"]
    assert parts["student_weights"] == shape.parameters * 4 and parts["lora_and_adam"] == 512 * ADAM_BYTES
    assert parts["logits"] == 2 * 3 * 10 * 4 * 4            # rows x kept x vocab x float32 x 4 copies
    assert parts["activations"] == 10 * 2 * (18 * 8 + 5 * 16) * 4
    assert p["peak_bytes"] == sum(parts.values())


def test_offloading_the_teacher_moves_the_peak_to_generation():
    shape = Shape.of(LLAMA_3_2_1B)
    small = dict(teacher=shape, student_bytes=2, teacher_bytes=2, batch_size=2)  # activations below a teacher
    kept, freed = predict(shape, **small), predict(shape, **small, offload_teacher=True)
    assert kept["phase"] == "training" and freed["phase"] == "generation"
    assert freed["peak_bytes"] < kept["peak_bytes"]
    assert freed["parts"]["teacher_weights"] == shape.parameters * 2


def test_gradient_checkpointing_and_more_devices_lower_the_peak():
    base = dict(lora_rank=16, batch_size=16, steps=20000, max_new_tokens=64, n_inputs=10000, device_type="cuda",
                dtype="bfloat16")
    one = plan(LLAMA_3_2_1B, **base)
    assert plan(LLAMA_3_2_1B, **base, gradient_checkpointing=True)["predicted_peak_bytes"] < one["predicted_peak_bytes"]
    eight = plan(LLAMA_3_2_1B, **base, world=8)
    assert eight["predicted_peak_bytes"] < one["predicted_peak_bytes"]
    assert eight["predicted_seconds"] == pytest.approx(one["predicted_seconds"] / 8, rel=1e-3)
    assert plan({"model_type": "llama"}, **base) is None  # no shape fields: no prediction, no error


def test_a_distillation_plans_memory_alone_and_its_line_says_no_time():
    # distill says its time once its models are loaded, at a measured rate (paw.transfer.distill.cost)
    base = dict(lora_rank=16, batch_size=16, steps=300, max_new_tokens=64, n_inputs=1000, device_type="cpu")
    timed, memory = plan(LLAMA_3_2_1B, **base), plan(LLAMA_3_2_1B, **base, timed=False)
    assert "predicted_seconds" not in memory and "rate_flop_per_s_per_device" not in memory["assumptions"]
    assert memory["predicted_peak_bytes"] == timed["predicted_peak_bytes"] and memory["parts"] == timed["parts"]
    assert plan_line(timed).startswith(plan_line(memory) + ", about ")
    assert "FLOP" not in plan_line(memory)


def test_fsdp_splits_the_student_and_its_adam_state_and_adds_the_gathered_units_by_hand():
    shape = Shape(hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=10, tied=True)
    layer = (8 * 8 + 4 * 8 + 4 * 8 + 8 * 8 + 16 * 8 + 16 * 8 + 8 * 16) + 2 * 8   # seven projections, two norms
    assert shape.layer_parameters == layer and shape.parameters == 10 * 8 + 2 * layer + 8
    args = dict(teacher=shape, lora_rank=2, batch_size=4, seq_tokens=5, kept_tokens=3, world=4, student_bytes=2,
                teacher_bytes=2)
    whole, split = predict(shape, **args)["parts"], predict(shape, **args, fsdp=True)["parts"]
    assert split["student_weights"] == shape.parameters * 2 // 4 and split["lora_and_adam"] == 512 * ADAM_BYTES // 4
    assert split["fsdp_gathered"] == (10 * 8 + 2 * layer) * 2       # embeddings (tied head) and two layers, bf16
    assert split["teacher_weights"] == whole["teacher_weights"]      # the teacher is not sharded
    assert "fsdp_gathered" not in predict(shape, **{**args, "world": 1}, fsdp=True)["parts"]
    eight = dict(lora_rank=16, batch_size=16, steps=100, max_new_tokens=64, n_inputs=1000, device_type="cuda",
                 dtype="bfloat16", world=8, teacher_config=QWEN2_5_7B)
    p = plan(QWEN2_5_7B, **eight, fsdp=True)
    assert p["assumptions"]["fsdp"] is True
    assert p["predicted_peak_bytes"] < plan(QWEN2_5_7B, **eight)["predicted_peak_bytes"] - 10 * 2**30


def test_dtype_bytes():
    assert dtype_bytes("auto", "cpu") == 4 and dtype_bytes("auto", "cuda", {"torch_dtype": "float32"}) == 4
    assert dtype_bytes("auto", "cuda", {}) == 2 and dtype_bytes("float16", "cpu") == 2


def test_lora_factors_stay_float32_on_a_bf16_base(tiny_llama):
    import torch

    from paw.evaluate.train import wrap_lora
    from paw.io.lm import load_lm
    from paw.memory import prepare_student

    model, _ = load_lm(tiny_llama, device="cpu", dtype="bfloat16")
    peft_model = wrap_lora(model, rank=4, alpha=8, target_modules="all-linear", seed=0)
    with torch.no_grad():
        for p in peft_model.parameters():
            if p.requires_grad:
                p.data = p.data.bfloat16()   # as if PEFT had kept the base's dtype
    prepare_student(peft_model, gradient_checkpointing=True)
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    assert peft_model.base_model.model.is_gradient_checkpointing
    frozen = [p for p in peft_model.parameters() if not p.requires_grad]
    assert all(p.dtype == torch.bfloat16 for p in frozen)
    ids = torch.tensor([[1, 5, 9, 4]])
    peft_model.train()
    peft_model(input_ids=ids, labels=ids).loss.backward()   # checkpointed backward reaches the factors
    assert all(p.grad is not None for p in trainable)
