"""Distillation on the shared loop (:mod:`paw.train`): the old loop's bytes with the old defaults, and the
loop's schedules, accumulation, clipping and non-finite stop.

Each pinning case runs :func:`paw.transfer.distill.distill_lora` twice in this process: once as it is, once with its
training loop swapped for the frozen old one (``tests/train/reference_loops.py``), and compares every LoRA
tensor with ``torch.equal`` and the loss curves exactly.
"""

from __future__ import annotations

import json

import pytest

from tests.train import reference_loops as old
from tests.train.spy import cosine_lrs, optimiser_steps, warmup_lrs


def both(monkeypatch, run):
    from paw.transfer.distill import lora

    new = run()
    with monkeypatch.context() as m:
        m.setattr(lora.fit, "train", old.distill_train)
        before = run()
    return new, before


def assert_same_adapter(new, before):
    import torch

    (a, report_a), (b, report_b) = new, before
    assert a.tensors.keys() == b.tensors.keys() and a.tensors
    assert [k for k in a.tensors if not torch.equal(a.tensors[k], b.tensors[k])] == []
    assert report_a["distill"]["curve"] == report_b["distill"]["curve"]
    assert any(not torch.equal(v, torch.zeros_like(v)) for v in a.tensors.values())


@pytest.mark.parametrize("steps", [5, None])   # None: the automatic budget, stopped by the probe
def test_distillation_with_a_shared_tokenizer_writes_the_old_loops_adapter(src, src_lora, independent, monkeypatch,
                                                                         steps):
    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import distill_lora
    from paw.transfer.distill.run import _side

    adapter = read_adapter(src_lora)

    def run():
        teacher = _side(src, open_tokenizer(src), "cpu", adapter=src_lora)
        student = _side(independent, open_tokenizer(independent), "cpu")
        return distill_lora(adapter, teacher, student, prompts="generic", steps=steps, batch_size=4, lr=1e-2,
                            max_new_tokens=3, seed=3, progress=False)

    new, before = both(monkeypatch, run)
    assert_same_adapter(new, before)
    if steps is None:
        assert "probe" in new[1]["distill"]["curve"]


def test_distillation_across_tokenizers_with_choices_writes_the_old_loops_adapter(world, monkeypatch):
    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import distill_lora
    from paw.transfer.distill.run import _side, read_inputs

    adapter = read_adapter(world["lora"])
    prompts = read_inputs(world["root"] / "items.jsonl")

    def run():
        teacher = _side(world["source"], open_tokenizer(world["source"]), "cpu", adapter=world["lora"])
        student = _side(world["target"], open_tokenizer(world["target"]), "cpu")
        return distill_lora(adapter, teacher, student, prompts=prompts, steps=4, batch_size=4, lr=1e-2,
                            max_new_tokens=2, byte_kl=True, seed=1, progress=False)

    assert_same_adapter(*both(monkeypatch, run))


def shared(src, src_lora, independent, **kw):
    """A 5-step distillation of ``src_lora`` into ``independent`` (same tokenizer), with the steps it took."""
    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import distill_lora
    from paw.transfer.distill.run import _side

    teacher = _side(src, open_tokenizer(src), "cpu", adapter=src_lora)
    student = _side(independent, open_tokenizer(independent), "cpu")
    with optimiser_steps() as seen:
        moved, report = distill_lora(read_adapter(src_lora), teacher, student, prompts="generic",
                                     **{"steps": 5, "batch_size": 4, "lr": 1e-2, "max_new_tokens": 3, "seed": 3,
                                        "progress": False, **kw})
    return moved, report["distill"], seen


@pytest.mark.parametrize("schedule,expected", [("warmup", warmup_lrs(1e-2, 3, 5)), ("cosine", cosine_lrs(1e-2, 2, 5))])
def test_each_step_runs_at_the_schedules_rate(src, src_lora, independent, schedule, expected):
    _, d, seen = shared(src, src_lora, independent, schedule=schedule, warmup=3 if schedule == "warmup" else 2)
    assert [lr for lr, _ in seen] == pytest.approx(expected, rel=1e-12)
    assert d["schedule"] == schedule and len(d["curve"]["loss"]) == 5


def test_clipping_bounds_the_gradient_norm(src, src_lora, independent):
    _, _, free = shared(src, src_lora, independent)
    _, d, clipped = shared(src, src_lora, independent, clip=1e-3)
    assert max(norm for _, norm in free) > 1e-2
    assert all(norm <= 1e-3 * (1 + 1e-4) for _, norm in clipped) and d["clip"] == 1e-3


def test_a_nan_loss_at_step_3_stops_the_run_at_step_3(src, src_lora, independent, monkeypatch):
    from paw.transfer.distill import fit
    from tests.train.spy import poisoned_call

    calls = poisoned_call(monkeypatch, fit, "_batch_parts", 3,
                          poison=lambda parts: {k: v * float("nan") for k, v in parts.items()})
    _, d, seen = shared(src, src_lora, independent, steps=6)
    assert d["diverged_at_step"] == 3 and len(calls) == 3 and len(seen) == 3


def test_two_micro_batches_of_two_train_as_one_batch_of_four(world):
    """The shift target across tokenizers trains on the choice KL alone, a mean over rows of equal weight."""
    import torch

    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import distill_lora
    from paw.transfer.distill.run import _side, read_inputs

    def run(**kw):
        teacher = _side(world["source"], open_tokenizer(world["source"]), "cpu", adapter=world["lora"])
        student = _side(world["target"], open_tokenizer(world["target"]), "cpu")
        return distill_lora(read_adapter(world["lora"]), teacher, student,
                            prompts=read_inputs(world["root"] / "items.jsonl"), steps=3, lr=1e-3, max_new_tokens=2,
                            target="shift", seed=2, progress=False, **kw)

    (whole, a), (split, b) = run(batch_size=4), run(batch_size=2, accumulation=2)
    assert a["distill"]["losses"] == ["choice-kl"] and b["distill"]["accumulation"] == 2
    assert b["distill"]["curve"]["loss"] == pytest.approx(a["distill"]["curve"]["loss"], rel=1e-5)
    # AdamW divides by each gradient's own scale, so an element whose gradient is float noise may step by up to
    # lr (1e-3) either way: the factors agree to a tenth of one step, the losses to float precision
    assert all(torch.allclose(whole.tensors[k], split.tensors[k], atol=1e-4) for k in whole.tensors)


def test_cli_distill_takes_the_recipe_flags(cli, src, src_lora, independent, tmp_path):
    out = tmp_path / "moved"
    result = cli("transfer-lora", "--method", "distill", "--adapter", src_lora, "--source-base", src,
                 "--target-base", independent, "--output", out, "--prompts", "generic", "--max-steps", "3",
                 "--max-new-tokens", "2", "--lr", "1e-2", "--schedule", "cosine", "--warmup", "1",
                 "--accumulation", "2", "--clip", "1", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    d = json.loads((out / "transfer_report.json").read_text())["distill"]
    assert (d["schedule"], d["warmup"], d["accumulation"], d["clip"]) == ("cosine", 1, 2, 1.0)
    bad = cli("transfer-lora", "--method", "distill", "--adapter", src_lora, "--source-base", src,
              "--target-base", independent, "--output", tmp_path / "bad", "--prompts", "generic", "--schedule", "step")
    assert bad.exit_code == 2 and "--schedule" in bad.stderr
