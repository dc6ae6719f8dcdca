"""The cost of a distillation (paw.transfer.distill.cost): the FLOPs by hand, the seconds at a rate, the line said
before the work."""

from __future__ import annotations

import pytest

from paw.transfer.distill.cost import Rows, Scoring, Size, Work, flops, line, padded, seconds, work_of

STUDENT, TEACHER = Size(body=100, head=10, weight_bytes=440), Size(body=300, head=20, weight_bytes=1000)


def test_padded_batches_by_hand():
    # make_batch drops the last token (only a target) and pads to the longest row; forward_logits keeps the
    # longest continuation's positions for every row
    assert padded([[(5, 2), (9, 1)], [(4, 3)], []]) == [2 * 8 + 3, 2 * 2 + 3]


def test_flops_by_part_by_hand():
    passes = {"text": [20, 4], "teacher_text": [30, 4], "choices": [10, 2], "look_text": [40, 8],
              "look_teacher_text": [50, 8], "look_choices": [6, 2], "check_text": [8, 2], "check_teacher_text": [9, 2],
              "check_choices": [0, 0], "prefill": [12, 12], "decode": [5, 5], "teacher_choices": [7, 3],
              "excess_text": [11, 4], "base_choices": [3, 1]}
    w = Work(steps=10, passes=passes, check_every=4, teacher_per_step=True)
    s = {k: 2 * 100 * n + 2 * 10 * k for k, (n, k) in ()} or None   # noqa: F841 (spelled out below)
    text, t_text, choices = 2 * 100 * 20 + 2 * 10 * 4, 2 * 300 * 30 + 2 * 20 * 4, 2 * 100 * 10 + 2 * 10 * 2
    look = (2 * 100 * 40 + 2 * 10 * 8) + (2 * 300 * 50 + 2 * 20 * 8) + (2 * 100 * 6 + 2 * 10 * 2)
    check = (2 * 100 * 8 + 2 * 10 * 2) + (2 * 300 * 9 + 2 * 20 * 2)
    parts = flops(STUDENT, TEACHER, w)
    assert parts == {
        "generation": (2 * 300 * 12 + 2 * 20 * 12) + (2 * 300 * 5 + 2 * 20 * 5) + (2 * 300 * 7 + 2 * 20 * 3),
        "excess": 2 * (2 * 300 * 11 + 2 * 20 * 4),   # the teacher with and without its adapter
        "student_base": 0,
        "targets": 0,                                # the teacher runs per step: nothing made beforehand
        "agreement": 2 * look,                       # before and after
        # per step: the student forward and backward (2 passes) on the text and the choices, the teacher's
        # forward; and 10 // 4 = 2 stop checks
        "training": 10 * (2 * text + t_text + 2 * choices) + 2 * check,
    }
    assert parts["training"] == 10 * (2 * 4_080 + 18_160 + 2 * 2_040) + 2 * (1_640 + 5_480)


def test_targets_made_once_per_input_by_hand():
    """With a shared vocabulary the token KL's target is made once per continuation before training: the
    steps, the stop checks and the agreement run no teacher (and under shift no base either)."""
    passes = {"text": [20, 4], "teacher_text": [30, 4], "choices": [10, 2], "look_text": [40, 8],
              "look_teacher_text": [50, 8], "look_choices": [6, 2], "check_text": [8, 2], "check_teacher_text": [9, 2],
              "excess_text": [11, 4]}
    text, choices, every = 2 * 100 * 20 + 2 * 10 * 4, 2 * 100 * 10 + 2 * 10 * 2, (11, 4)
    t_every, s_every = 2 * 300 * 11 + 2 * 20 * 4, 2 * 100 * 11 + 2 * 10 * 4
    look = (2 * 100 * 40 + 2 * 10 * 8) + (2 * 100 * 6 + 2 * 10 * 2)
    check = 2 * 100 * 8 + 2 * 10 * 2
    w = Work(steps=10, passes=passes, check_every=4, teacher_per_step=True, targets_cached=True)
    parts = flops(STUDENT, TEACHER, w)
    assert every == tuple(passes["excess_text"])
    assert parts["targets"] == t_every
    assert parts["training"] == 10 * (2 * text + 2 * choices) + 2 * check
    assert parts["agreement"] == 2 * look
    shifted = flops(STUDENT, TEACHER, Work(steps=10, passes=passes, teacher_per_step=True, targets_cached=True,
                                           shift=True))
    assert shifted["targets"] == 2 * t_every + s_every        # the teacher, its base, the student's base
    assert shifted["training"] == 10 * (2 * text + 2 * choices)


def test_shift_checkpointing_and_sequence_level_by_hand():
    passes = {"text": [20, 4], "teacher_text": [30, 4], "choices": [10, 2], "teacher_choices": [7, 3],
              "base_choices": [3, 1]}
    w = Work(steps=1, passes=passes, teacher_per_step=True, shift=True, checkpointing=True, excess=False)
    text, t_text, choices = 4_080, 18_160, 2_040
    parts = flops(STUDENT, TEACHER, w)
    # three passes per train pass; both models again without their adapters for the shift's target
    assert parts["training"] == 3 * text + t_text + (t_text + text) + 3 * choices
    assert parts["student_base"] == 2 * 100 * 3 + 2 * 10 * 1 and parts["excess"] == 0
    assert parts["generation"] == 2 * (2 * 300 * 7 + 2 * 20 * 3)     # the teacher scores the choices twice
    text_free = Work(steps=1, passes=passes, text=False)
    assert flops(STUDENT, TEACHER, text_free)["training"] == 2 * choices   # only the choices carry a loss


def test_work_of_the_batches_the_run_makes():
    def row(prompt, choices=(), grouped=(0, 0)):   # prompt tokens; choices as (length, continuation) rows
        return Rows(text=(prompt + 2, 2), teacher_text=(prompt + 3, 2), choices=tuple(choices),
                    teacher_scoring=Scoring(whole=tuple(choices)), teacher_prompt=prompt + 1,
                    scoring=Scoring(grouped, () if grouped != (0, 0) else tuple(choices)))

    train = [row(3, [(6, 2), (9, 4)], grouped=(10, 6)), row(5), row(8, [(4, 1)])]
    w = work_of(train, [], order=[[0, 1], [2, 0]], accumulation=2, measured=[0, 2], checked=2, new=2,
                check_every=10)
    p = w.passes
    assert w.steps == 2 and w.decode_steps == 1 * 2           # one batch of 3 written, 2 tokens
    # micro-batches [0], [1], [2], [0]: widths 4, 6, 9, 4 (length - 1), over 2 steps
    assert p["text"] == [(4 + 6 + 9 + 4) / 2, (2 + 2 + 2 + 2) / 2]
    assert p["choices"] == [(2 * 8 + 0 + 3 + 2 * 8) / 2, (2 * 4 + 0 + 1 + 2 * 4) / 2]
    assert p["look_text"] == [2 * 9, 2 * 2] and p["look_choices"] == [3 * 8, 3 * 4]   # inputs 0 and 2, one batch
    assert p["check_text"] == [2 * 6, 2 * 2]                   # the first two inputs
    assert p["prefill"] == [3 * 9, 3 * 9] and p["decode"] == [3, 3]   # prompts of 4, 6, 9 teacher tokens
    assert p["teacher_choices"] == [3 * 8, 3 * 4]             # longest first, 8 a batch: (9, 4), (6, 2), (4, 1)
    assert p["base_choices"] == [10 + 3, 6 + 1]                # input 0's context run once; input 2's row whole
    assert p["excess_text"] == [3 * 10, 3 * 2]                 # the teacher's rows: 6, 8 and 11 tokens


def test_seconds_at_the_rate_over_devices_and_the_bandwidth_floor():
    passes = {"text": [20, 4], "look_text": [40, 8], "prefill": [12, 12], "decode": [5, 5]}
    w = Work(steps=10, passes=passes, decode_steps=4, world=2)
    parts = flops(STUDENT, TEACHER, w)
    s = seconds(STUDENT, TEACHER, w, rate=1e3)
    assert s["training"] == pytest.approx(parts["training"] / 1e3 / 2)    # the steps are shared over 2 devices
    assert s["agreement"] == pytest.approx(parts["agreement"] / 1e3)      # every device measures it
    assert s["generation"] == pytest.approx(parts["generation"] / 1e3 / 2)
    # a teacher of 1 TB: its weight reads bound the writing, 4 forward calls x 1e12 bytes at 2e10 B/s
    heavy = Size(body=300, head=20, weight_bytes=10**12)
    assert seconds(STUDENT, heavy, w, rate=1e3)["generation"] == pytest.approx(4 * 1e12 / 2e10 / 2)


def test_size_of_a_model_counts_the_tied_head_once(tiny_llama):
    from paw.io.lm import load_lm

    model, _ = load_lm(tiny_llama, device="cpu")
    embed = model.get_input_embeddings().weight
    size = Size.of(model)
    total = sum(p.numel() for p in model.parameters())
    tied = model.get_output_embeddings().weight is embed
    assert size.head == embed.numel() and size.body == total - embed.numel() * (1 if tied else 2)
    assert size.weight_bytes == 4 * total


def test_the_line_says_at_most_for_the_cap_and_the_earliest_stop():
    e = {"total_flop": 2.5e13, "total_seconds": 7500.0, "steps": 563, "earliest": {"steps": 100, "total_seconds": 1400},
         "rate": {"flop_per_s": 3.3e9, "on": "1 CPU thread"}}
    assert line(e) == ("about 25 TFLOP of work: at most 2 h 5 min (the 563-step cap), 23 min 20 s if the agreement "
                       "levels off at the first check it can (step 100), at 3.3 GFLOP/s measured on 1 CPU thread")
