"""The token KL's target made once per input (:mod:`paw.transfer.distill.targets`): the same loss as the per-batch
passes, no teacher pass during training, and the per-batch passes again past the cache's budget."""

from __future__ import annotations

import pytest
import torch


def _pair(src, src_lora, independent):
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill.run import _side

    return (_side(src, open_tokenizer(src), "cpu", adapter=src_lora),
            _side(independent, open_tokenizer(independent), "cpu"))


@pytest.mark.parametrize("target", ["teacher", "shift"])
def test_cached_targets_give_the_per_batch_loss(src, src_lora, independent, target):
    from paw.io.adapter import read_adapter
    from paw.transfer.distill import targets, train
    from paw.transfer.distill.lora import _student, _vocabulary
    from paw.transfer.distill.prompts import Prompt

    teacher, student = _pair(src, src_lora, independent)
    vocab = _vocabulary(teacher, student, byte_kl=False)
    prompts = [Prompt("the cat sat on"), Prompt("a red apple"), Prompt("one two three four five")]
    examples = train.examples(prompts, teacher, student, 3, "cpu", vocab)
    peft_model = _student(read_adapter(src_lora), student.model, None, None, None, None, 0, "cpu")
    try:
        with torch.no_grad():   # a trained-looking student: not its base
            for name, p in peft_model.named_parameters():
                if "lora_B" in name:
                    p.add_(0.05)
        shift = (train.Shift(1.5, teacher_off=teacher.model.disable_adapter, student_off=peft_model.disable_adapter)
                 if target == "shift" else None)
        batch = examples[:2]   # another padding than the cache's batch of three
        fresh = train._sequence_losses(peft_model, teacher.model, batch, vocab, train.PAD_ID, "cpu", shift=shift)[0]
        note = targets.cache(examples, peft_model, teacher.model, vocab, "cpu", shift)
        assert note["cached"] and note["bytes"] > 0
        assert all(e.token_target.shape[0] == e.sequence.n_cont for e in examples)
        calls = []
        hook = teacher.model.register_forward_hook(lambda *_: calls.append(1))
        try:
            kept = train._sequence_losses(peft_model, teacher.model, batch, vocab, train.PAD_ID, "cpu", shift=shift)[0]
        finally:
            hook.remove()
        assert calls == []   # the teacher did not run: its target came from the cache
        assert set(kept) == set(fresh)
        for name in fresh:
            assert kept[name].item() == pytest.approx(fresh[name].item(), rel=1e-5, abs=1e-7)
    finally:
        peft_model.unload()


def test_over_the_budget_nothing_is_cached(src, src_lora, independent):
    from paw.io.adapter import read_adapter
    from paw.transfer.distill import targets, train
    from paw.transfer.distill.lora import _student, _vocabulary
    from paw.transfer.distill.prompts import Prompt

    teacher, student = _pair(src, src_lora, independent)
    vocab = _vocabulary(teacher, student, byte_kl=False)
    examples = train.examples([Prompt("the cat sat on")], teacher, student, 3, "cpu", vocab)
    peft_model = _student(read_adapter(src_lora), student.model, None, None, None, None, 0, "cpu")
    try:
        note = targets.cache(examples, peft_model, teacher.model, vocab, "cpu", budget=1)
    finally:
        peft_model.unload()
    assert not note["cached"] and "over 1 bytes" in note["why"]
    assert examples[0].token_target is None


def test_distillation_trains_without_the_teacher_once_its_targets_are_cached(src, src_lora, independent, monkeypatch):
    """A whole run: the report says the targets were cached, the teacher runs no forward pass in the training
    steps, and the adapter is the one the per-batch passes train (up to float noise)."""
    from paw.io.adapter import read_adapter
    from paw.transfer.distill import distill_lora, fit, targets

    adapter = read_adapter(src_lora)

    def run():
        teacher, student = _pair(src, src_lora, independent)
        calls = []
        train = fit.train

        def counted(peft_model, teacher_model, *args, **kwargs):
            hook = teacher_model.register_forward_hook(lambda *_: calls.append(1))
            try:
                return train(peft_model, teacher_model, *args, **kwargs)
            finally:
                hook.remove()

        with monkeypatch.context() as m:
            m.setattr(fit, "train", counted)
            moved, report = distill_lora(adapter, teacher, student, prompts="generic", steps=6, batch_size=4, lr=1e-2,
                                         max_new_tokens=3, seed=3, progress=False)
        return moved, report, len(calls)

    cached, report, calls = run()
    assert report["distill"]["token_targets"]["cached"] and calls == 0
    monkeypatch.setattr(targets, "CACHE_BYTES", 0)
    fresh, report_fresh, calls_fresh = run()
    assert not report_fresh["distill"]["token_targets"]["cached"] and calls_fresh > 0
    for key, value in cached.tensors.items():
        assert torch.allclose(value, fresh.tensors[key], atol=1e-5), key
