"""Distillation losses and prompt sources against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from paw.errors import PawError
from paw.evaluate.items import MCItem
from paw.transfer.distill import loss
from paw.transfer.distill.prompts import Prompt, generic_prompts, prompts_from, split_holdout
from paw.transfer.distill.synthesis import (
    MAX_SEEDS,
    check_seeds,
    few_shot_context,
    template_end,
    template_start,
)

KL_HALF_QUARTER = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)  # KL([.5, .5] || [.25, .75])


def test_token_kl_matches_hand_value_and_ignores_masked_positions():
    teacher = torch.log(torch.tensor([[[0.5, 0.5], [1.0, 1e-30]]]))
    student = torch.tensor([[[0.0, math.log(3)], [5.0, -5.0]]])
    mask = torch.tensor([[True, False]])
    assert float(loss.token_kl(student, teacher, mask)) == pytest.approx(KL_HALF_QUARTER, abs=1e-6)
    same = loss.token_kl(teacher.clone(), teacher, torch.tensor([[True, True]]))
    assert float(same) == pytest.approx(0.0, abs=1e-6)


def test_to_student_vocab_reorders_renormalises_and_zeroes_missing_columns():
    logits = torch.tensor([[[0.0, 1.0, 2.0]]])
    out = loss.to_student_vocab(logits, torch.tensor([2, 0, -1])).exp()
    e = math.exp(2.0) + 1.0
    assert out[0, 0].tolist() == pytest.approx([math.exp(2.0) / e, 1.0 / e, 0.0])
    # the student's extra (unmapped) column gets no mass, yet KL stays finite where the teacher has none
    kl = loss.token_kl(torch.zeros(1, 1, 3), torch.log(out), torch.tensor([[True]]))
    assert math.isfinite(float(kl))


def test_choice_kl_with_padding_and_agreement():
    student = torch.tensor([[0.0, math.log(3), 99.0], [1.0, 0.0, 0.0]])
    teacher = torch.tensor([[0.0, 0.0, -99.0], [0.0, 2.0, 0.0]])
    valid = torch.tensor([[True, True, False], [True, True, True]])
    p = torch.softmax(torch.tensor([0.0, 2.0, 0.0]), 0)
    q = torch.softmax(torch.tensor([1.0, 0.0, 0.0]), 0)
    second = float((p * (p.log() - q.log())).sum())
    assert float(loss.choice_kl(student, teacher, valid)) == pytest.approx((KL_HALF_QUARTER + second) / 2, abs=1e-6)
    assert loss.choice_agreement(student, teacher, valid) == (0, 2)  # row 1: 1 vs 0; row 2: 0 vs 1
    assert loss.choice_agreement(teacher, teacher, valid) == (2, 2)
    ties = torch.tensor([[1.0, 1.0, 0.0]])
    assert loss._first_argmax(ties).tolist() == [0]


def test_sequence_nll_and_top1_agreement():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 2.0], [9.0, 0.0]]])
    targets = torch.tensor([[0, 0, 1]])
    mask = torch.tensor([[True, True, False]])
    expected = (-math.log(math.exp(2) / (math.exp(2) + 1)) - math.log(1 / (math.exp(2) + 1))) / 2
    assert float(loss.sequence_nll(logits, targets, mask)) == pytest.approx(expected, abs=1e-6)
    assert loss.top1_agreement(logits, targets, mask) == (1, 2)


def test_prompts_drop_answers_blanks_and_repeats():
    items = [MCItem("2 + 2 =", (" 3", " 4"), 1), MCItem("Fact: x is", (" red",), 0), "  ", "2 + 2 ="]
    prompts = prompts_from(items)
    assert prompts == [Prompt("2 + 2 =", (("2 + 2 =", " 3"), ("2 + 2 =", " 4"))), Prompt("Fact: x is"),
                       Prompt("2 + 2 =")]  # a one-choice item is its answer: dropped with it
    with pytest.raises(PawError, match="no prompts"):
        prompts_from(["", " "])
    with pytest.raises(PawError, match=f"at most {MAX_SEEDS}"):
        check_seeds([Prompt(str(i)) for i in range(MAX_SEEDS + 1)])


def test_generic_prompts_and_holdout_split():
    # prefixes of 3, 5, ... words, each leaving at least two words for the teacher to continue
    assert [p.text for p in generic_prompts(["The cat sat on the mat today. It was warm and dry here."], step=2)] == [
        "The cat sat", "The cat sat on the", "It was warm"]
    prompts = [Prompt(str(i)) for i in range(40)]
    train, held = split_holdout(prompts, 0.1, seed=3)
    assert len(held) == 4 and len(train) == 36 and not set(train) & set(held)
    assert split_holdout(prompts, 0.1, seed=3) == (train, held)
    assert split_holdout(prompts[:9], 0.5, seed=0) == (prompts[:9], [])


def test_synthesis_template_end_and_few_shot_layout():
    import random

    seeds = [Prompt("Word: road. Again:"), Prompt("Word: tree. Again:"), Prompt("Word: sea. Again:")]
    assert template_end(seeds) == ". Again:"
    assert template_end([Prompt("Kavo Milret likes the colour"), Prompt("Brin Tal likes the colour")]) == \
        " likes the colour"
    assert template_end([Prompt("Ann Bar likes the colour"), Prompt("Tom Ter likes the colour")]) == \
        " likes the colour"  # not "r likes...": the ending starts at a word boundary
    assert template_end([Prompt("a cat"), Prompt("a bat")]) == ""  # "at" is inside a word
    assert template_end([Prompt("x ."), Prompt("y .")]) == ""  # one character is no template
    context = few_shot_context(seeds, random.Random(0))
    assert context.endswith("\n") and sorted(context.splitlines()) == sorted(s.text for s in seeds)
    two_line = [Prompt("Question: why?\nAnswer:"), Prompt("Question: how?\nAnswer:")]
    assert few_shot_context(two_line, random.Random(0)).count("\n\n") == 2  # examples apart by a blank line


def test_synthesis_template_start():
    arc = [Prompt("Question: Which list?\nAnswer:"), Prompt("Question: A team of surveyors\nAnswer:")]
    assert template_start(arc) == "Question:"   # the shared space is left to the teacher's next token
    assert template_start([Prompt("Word: road. Again:"), Prompt("Word: rose. Again:")]) == "Word:"  # not 'Word: ro'
    assert template_start([Prompt("Word: road. Again:"), Prompt("Word: road, Again:")]) == "Word: road"
    assert template_start([Prompt("Kavo likes the colour"), Prompt("Brin likes the colour")]) == ""
    assert template_start([Prompt("a cat"), Prompt("a bat")]) == ""   # one character is no template
    assert template_start([Prompt("What is"), Prompt("What is it")]) == "What is"   # a whole seed, at a boundary


def test_agreement_inputs_are_a_seeded_sample_in_their_order():
    from paw.transfer.distill.lora import agreement_inputs

    pool = list(range(1000))
    a, b, other = (agreement_inputs(pool, s, most=256) for s in (0, 0, 1))
    assert a == b and a != other and len(a) == len(set(a)) == 256 and a == sorted(a)
    assert agreement_inputs(pool[:7], 0, most=256) == pool[:7]


def test_aligned_kl_renormalises_over_shared_tokens_only():
    # teacher ids 0, 1 are the student's 1, 0; the teacher's id 2 and the student's id 2 are not shared
    columns = torch.tensor([1, 0, -1])
    teacher = torch.tensor([[0.0, 0.0, 5.0]])          # over the shared ids: p = [0.5, 0.5]
    student = torch.tensor([[0.0, math.log(3), 9.0]])  # over the shared ids: q = [0.25, 0.75]
    assert float(loss.aligned_kl(student, teacher, columns)) == pytest.approx(KL_HALF_QUARTER, abs=1e-6)
    same = loss.aligned_kl(torch.tensor([[0.0, 0.0, -3.0]]), torch.tensor([[0.0, 0.0, 7.0]]), columns)
    assert float(same) == pytest.approx(0.0, abs=1e-6)


def test_tail_drop_compares_the_last_fraction_with_the_one_before():
    from paw.transfer.distill.loss import tail_drop

    assert tail_drop([4.0, 4.0, 2.0, 2.0], 0.5) == 0.5
    assert tail_drop([1.0] * 30, 0.2) == 0.0
    assert tail_drop([3.0] * 9 + [2.0, 2.0, 2.0, 1.0, 1.0, 1.0], 0.2) == 0.5  # the last 3 against the 3 before
    assert tail_drop([1.0, float("nan")] * 10, 0.2) == 0.0   # NaN steps (nothing to train on) are skipped
    assert tail_drop([2.0] * 9, 0.2) is None                 # a fifth of 9 steps is one value: too few
