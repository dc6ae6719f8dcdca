"""``--target shift``: the student learns its own base plus the adapter's shift, checked against hand values
and against a direct computation from the three models (teacher with and without its adapter, student base)."""

from __future__ import annotations

import math

import pytest
import torch

from paw.transfer.distill import loss


def test_shift_choice_target_against_hand_values():
    # the adapter raised choice 0 by 1 nat in the teacher; the student's base is indifferent
    target = loss.shift_choice_target(torch.tensor([[0.0, 0.0]]), torch.tensor([[-1.0, -2.0]]), torch.tensor([[-2.0, -2.0]]))
    assert target.tolist() == [[1.0, 0.0]]
    p = loss.choice_logprobs(target, torch.tensor([[True, True]])).exp()
    assert p[0, 0].item() == pytest.approx(math.e / (1 + math.e), abs=1e-6)
    half = loss.shift_choice_target(torch.tensor([[-3.0, -1.0]]), torch.tensor([[-1.0, -2.0]]), torch.tensor([[-2.0, -2.0]]),
                                    scale=0.5)
    assert half.tolist() == [[-2.5, -1.0]]   # -3 + 0.5 * 1, -1 + 0.5 * 0


def test_shift_token_target_against_hand_values():
    sb = torch.log(torch.tensor([[0.5, 0.5]]))
    t, tb = torch.log(torch.tensor([[0.8, 0.2]])), torch.log(torch.tensor([[0.5, 0.5]]))
    assert loss.shift_token_target(sb, t, tb).exp()[0].tolist() == pytest.approx([0.8, 0.2], abs=1e-6)
    # a student base of [0.2, 0.8] keeps its lean, moved by the adapter's odds x4: [0.5, 0.5]
    sb2 = torch.log(torch.tensor([[0.2, 0.8]]))
    assert loss.shift_token_target(sb2, t, tb).exp()[0].tolist() == pytest.approx([0.5, 0.5], abs=1e-6)
    # a column the teacher has not (-inf) keeps the student's base there; `shared` drops it and renormalises
    t3 = torch.log(torch.tensor([[0.8, 0.2, 0.0]]))
    tb3 = torch.log(torch.tensor([[0.5, 0.5, 0.0]]))
    sb3 = torch.log(torch.tensor([[0.25, 0.25, 0.5]]))
    out = loss.shift_token_target(sb3, t3, tb3).exp()[0]
    raw = torch.tensor([0.25 * 1.6, 0.25 * 0.4, 0.5])
    assert out.tolist() == pytest.approx((raw / raw.sum()).tolist(), abs=1e-6)
    shared = loss.shift_token_target(sb3, t3, tb3, shared=torch.tensor([True, True, False])).exp()[0]
    assert shared.tolist() == pytest.approx([0.8, 0.2, 0.0], abs=1e-6)
    # kl_rows of the target against itself is 0, against a uniform student KL([.8,.2] || [.5,.5])
    log_p = torch.log(torch.tensor([[0.8, 0.2]]))
    expected = 0.8 * math.log(1.6) + 0.2 * math.log(0.4)
    assert loss.kl_rows(torch.zeros(1, 2), log_p).item() == pytest.approx(expected, abs=1e-6)


def _lm_pair(world, lora=None):
    from paw.io.lm import load_lm
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import LM

    teacher, tok_s = load_lm(world["source"], adapter=lora or world["lora"], device="cpu")
    student, tok_t = load_lm(world["target"], device="cpu")
    return (LM(teacher, tok_s, "s", tokenizer_info=open_tokenizer(world["source"])),
            LM(student, tok_t, "t", tokenizer_info=open_tokenizer(world["target"])))


def _direct_choice_scores(model, tokenizer, prompts):
    from paw.evaluate.encode import encode_pair, pad_id_of
    from paw.evaluate.mc import score_encoded
    from paw.transfer.distill.prompts import START

    encoded = [encode_pair(tokenizer, c, x, start=START) for p in prompts for c, x in p.pairs]
    return [ll for ll, _ in score_encoded(model, encoded, pad_id=pad_id_of(tokenizer), device="cpu", progress=False)]


def test_the_choice_target_is_the_students_base_plus_the_adapters_shift(world):
    """Across tokenizers, on inputs with choices: each model scored directly, the training target of every
    input equals student_base + scale x (teacher - teacher_base), and its loss is the KL to it."""
    from paw.transfer.distill import train
    from paw.transfer.distill.lora import _student
    from paw.transfer.distill.prompts import Prompt
    from paw.transfer.distill.run import read_inputs

    teacher, student = _lm_pair(world)
    prompts = [Prompt.of(x) for x in read_inputs(world["root"] / "items.jsonl")][:6]
    direct_t = _direct_choice_scores(teacher.model, teacher.tokenizer, prompts)
    with teacher.model.disable_adapter():
        direct_tb = _direct_choice_scores(teacher.model, teacher.tokenizer, prompts)
    direct_sb = _direct_choice_scores(student.model, student.tokenizer, prompts)
    assert max(abs(a - b) for a, b in zip(direct_t, direct_tb, strict=True)) > 0.1   # the adapter moved them

    examples = train.examples(prompts, teacher, student, 2, "cpu", shift=True)
    from paw.io.adapter import read_adapter

    peft_model = _student(read_adapter(world["lora"]), student.model, None, None, None, None, 0, "cpu")
    try:
        train.add_student_base(examples, peft_model, "cpu")
        shift = train.Shift(0.7, teacher_off=teacher.model.disable_adapter, student_off=peft_model.disable_adapter)
        choice_loss, s_ll, target, valid = train._choice_loss(peft_model, examples, train.PAD_ID, "cpu", shift)
        expected = [sb + 0.7 * (t - tb) for sb, t, tb in zip(direct_sb, direct_t, direct_tb, strict=True)]
        assert target[valid].tolist() == pytest.approx(expected, abs=1e-4)
        # a fresh LoRA (B = 0) is the student's base: its scores are the base's
        assert s_ll[valid].tolist() == pytest.approx(direct_sb, abs=1e-4)
        assert choice_loss.item() == pytest.approx(loss.choice_kl(s_ll, target, valid).item(), abs=1e-6)
        assert choice_loss.item() > 0
    finally:
        peft_model.unload()


def test_the_token_target_with_a_shared_vocabulary_is_base_plus_shift(src, src_lora, independent):
    """Same tokenizer: the token KL is taken to log_softmax(log p_student_base + scale (log p_t - log p_tb)),
    each computed here from the three models directly."""
    from paw.evaluate.encode import make_batch
    from paw.evaluate.mc import forward_logits
    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import train
    from paw.transfer.distill.lora import _student, _vocabulary
    from paw.transfer.distill.prompts import Prompt
    from paw.transfer.distill.run import _side

    teacher = _side(src, open_tokenizer(src), "cpu", adapter=src_lora)
    student = _side(independent, open_tokenizer(independent), "cpu")
    vocab = _vocabulary(teacher, student, byte_kl=False)
    assert vocab.shared
    examples = train.examples([Prompt("the cat sat on"), Prompt("a red apple")], teacher, student, 3, "cpu", vocab)
    peft_model = _student(read_adapter(src_lora), student.model, None, None, None, None, 0, "cpu")
    try:
        # a trained-looking student: every B factor nudged, so the student is not its base
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_B" in name:
                    p.add_(0.05)
        shift = train.Shift(1.5, teacher_off=teacher.model.disable_adapter, student_off=peft_model.disable_adapter)
        parts, logits, _, mask, _ = train._sequence_losses(peft_model, teacher.model, examples, vocab, train.PAD_ID, "cpu",
                                                           shift=shift)
        assert set(parts) == {train.TOKEN_KL}   # the teacher's text is no target under the shift
        batch = make_batch([e.sequence for e in examples], pad_id=train.PAD_ID, padding_side="left")
        with torch.no_grad():
            t_lp = torch.log_softmax(forward_logits(teacher.model, batch, "cpu")[0].float(), -1)
            with teacher.model.disable_adapter():
                tb_lp = torch.log_softmax(forward_logits(teacher.model, batch, "cpu")[0].float(), -1)
            with peft_model.disable_adapter():
                sb_lp = torch.log_softmax(forward_logits(peft_model, batch, "cpu")[0].float(), -1)
        target = torch.log_softmax(sb_lp + 1.5 * (t_lp - tb_lp), -1)
        log_q = torch.log_softmax(logits.float(), -1)
        kl = (target.exp() * (target - log_q)).sum(-1)[mask].mean()
        assert parts[train.TOKEN_KL].item() == pytest.approx(kl.item(), rel=1e-4)
    finally:
        peft_model.unload()


def _zeroed(lora: str, out):
    """The adapter with every B factor set to zero: it changes nothing."""
    from paw.io.adapter import LoraAdapter, read_adapter, write_adapter

    a = read_adapter(lora)
    tensors = {k: (torch.zeros_like(v) if "lora_B" in k else v) for k, v in a.tensors.items()}
    write_adapter(out, LoraAdapter(config=a.config, tensors=tensors))
    return out


@pytest.mark.parametrize("pair", ["choices across tokenizers", "text with a shared vocabulary"])
def test_an_adapter_with_zero_B_shifts_nothing_and_the_student_learns_nothing(pair, world, src, src_lora, independent,
                                                                             tmp_path):
    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import distill_lora
    from paw.transfer.distill.run import _side, read_inputs

    if pair == "choices across tokenizers":
        zero = _zeroed(world["lora"], tmp_path / "zero")
        teacher, student = _lm_pair(world, lora=zero)
        prompts = read_inputs(world["root"] / "items.jsonl")
    else:
        zero = _zeroed(src_lora, tmp_path / "zero")
        teacher = _side(src, open_tokenizer(src), "cpu", adapter=zero)
        student = _side(independent, open_tokenizer(independent), "cpu")
        prompts = "generic"
    moved, report = distill_lora(read_adapter(zero), teacher, student, prompts=prompts, steps=4, lr=1e-2,
                                 max_new_tokens=3, init="none", target="shift", progress=False)
    b = {k: v for k, v in moved.tensors.items() if "lora_B" in k}
    assert b and all(bool((v == 0).all()) for v in b.values())   # exactly: not one step moved them
    d = report["distill"]
    assert d["target"]["kind"] == "shift" and "sequence-nll" not in d["losses"]
    if pair == "choices across tokenizers":
        assert d["target"]["choice_inputs"] == 16 and d["target"]["choice_inputs_moved"] == 0


def test_the_shift_target_moves_the_facts_onto_a_target_of_another_family(cli, world, tmp_path):
    """End to end from the command line: across tokenizers the shift is carried on the choices alone."""
    import json

    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm

    out = tmp_path / "moved"
    result = cli("transfer-lora", "--method", "distill", "--adapter", world["lora"], "--source-base", world["source"],
                 "--target-base", world["target"], "--output", out, "--device", "cpu", "--prompts",
                 world["root"] / "items.jsonl", "--max-steps", "40", "--lr", "1e-2", "--max-new-tokens", "2",
                 "--target", "shift")
    assert result.exit_code == 0, result.stderr
    d = json.loads((out / "transfer_report.json").read_text())["distill"]
    assert d["losses"] == ["choice-kl"] and d["target"]["kind"] == "shift" and d["target"]["scale"] == 1.0
    assert d["target"]["choice_inputs_moved"] == 16 and d["target"]["text"].startswith("not carried")
    accuracy = {}
    for name, adapter in (("base", None), ("moved", out)):
        model, tok = load_lm(world["target"], adapter=adapter, device="cpu")
        accuracy[name] = evaluate(model, tok, world["task"], progress=False)["accuracy"]
    assert accuracy["moved"] >= accuracy["base"] + 0.25, accuracy   # 0.375 -> 0.69 when written


def test_the_shift_target_is_refused_where_it_cannot_be_carried(cli, world, tmp_path):
    base = ("transfer-lora", "--method", "distill", "--adapter", world["lora"], "--source-base", world["source"],
            "--target-base", world["target"], "--device", "cpu", "--max-steps", "2")
    plain = cli(*base, "--output", tmp_path / "a", "--prompts", world["root"] / "questions.txt", "--target", "shift")
    assert plain.exit_code == 2 and "--target shift cannot be carried" in plain.stderr and "--byte-kl" in plain.stderr
    assert not (tmp_path / "a").exists()
    for flags, says in ((("--target", "student"), "Invalid value for '--target'"),
                        (("--target", "shift", "--shift-scale", "0"), "--shift-scale 0"),
                        (("--shift-scale", "2"), "--shift-scale is for --target shift"),
                        (("--target", "shift", "--token-focus", "0.5"), "--token-focus")):
        r = cli(*base, "--output", tmp_path / "b", "--prompts", world["root"] / "items.jsonl", *flags)
        assert r.exit_code == 2 and says in r.stderr, (flags, r.stderr)
    assert not (tmp_path / "b").exists()


def test_paw_eval_proxy_tuning_equals_the_three_models_scores_combined(cli, world, tmp_path):
    """``paw eval --proxy-base --proxy-adapter``: every choice scored as target + scale (expert - anti-expert),
    recomputed here from each model's own per-choice log-likelihoods (the two tokenizers differ)."""
    import json

    from paw.evaluate.mc import argmax_choice, evaluate
    from paw.io.lm import load_lm

    def lls(base, adapter=None):
        model, tok = load_lm(base, adapter=adapter, device="cpu")
        return evaluate(model, tok, world["task"], progress=False, per_item=True)["choice_logprobs"]

    target, expert, anti = lls(world["target"]), lls(world["source"], world["lora"]), lls(world["source"])
    for scale in (1.0, 0.5):
        out = tmp_path / f"proxy-{scale}.json"
        r = cli("eval", "--model", world["target"], "--data", world["root"] / "items.jsonl", "--proxy-base",
                world["source"], "--proxy-adapter", world["lora"], "--proxy-scale", str(scale), "--output", out)
        assert r.exit_code == 0, r.stderr
        picks = [argmax_choice([t + scale * (e - a) for t, e, a in zip(ts, es, as_, strict=True)])
                 for ts, es, as_ in zip(target, expert, anti, strict=True)]
        expected = sum(int(p == item.answer) for p, item in zip(picks, world["task"], strict=True)) / len(picks)
        metrics = json.loads(out.read_text())["metrics"]
        assert metrics["accuracy"] == expected and metrics["proxy"]["scale"] == scale
        assert "target alone" in r.stdout and f"accuracy       {expected:.4f}" in r.stdout
    assert expected > metrics["proxy"]["target_alone"]["accuracy"]   # the facts carried at scoring time
    for flags, says in ((("--proxy-base", world["source"]), "needs both"),
                        (("--proxy-scale", "2"), "--proxy-scale is for"),
                        (("--proxy-base", world["source"], "--proxy-adapter", world["lora"], "--proxy-scale", "nan"),
                         "--proxy-scale")):
        r = cli("eval", "--model", world["target"], "--data", world["root"] / "items.jsonl", *flags)
        assert r.exit_code == 2 and says in r.stderr, (flags, r.stderr)
