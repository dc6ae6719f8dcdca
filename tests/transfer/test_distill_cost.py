"""The cost of a distillation (paw.transfer.distill.cost): the FLOPs by hand, a rate measured by the probe and
used for every part, one line said before the work, and the prediction beside the measured seconds in the report."""

from __future__ import annotations

import itertools

import pytest

from paw.transfer.distill.cost import (
    Rows,
    Scoring,
    Size,
    Stopwatch,
    Work,
    flops,
    line,
    padded,
    seconds,
    with_measured,
    work_of,
)

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
        "agreement": 2 * look,                       # before and after
        # per step: the student forward and backward (2 passes) on the text and the choices, the teacher's
        # forward; and 10 // 4 = 2 stop checks
        "training": 10 * (2 * text + t_text + 2 * choices) + 2 * check,
    }
    assert parts["training"] == 10 * (2 * 4_080 + 18_160 + 2 * 2_040) + 2 * (1_640 + 5_480)


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


def test_measure_rate_times_one_training_steps_passes_with_the_clock(tiny_llama, monkeypatch):
    import torch

    from paw.io.lm import load_lm
    from paw.transfer.distill import cost

    model, _ = load_lm(tiny_llama, device="cpu")
    wanted = {n: p.requires_grad for n, p in model.named_parameters()}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ticks, cpu = itertools.count(0.0, 2.5), itertools.count(0.0, 1.5)   # the timed passes: 2.5 s, 1.5 CPU s
    monkeypatch.setattr(cost, "_clock", lambda: next(ticks))
    monkeypatch.setattr(cost, "_cpu_clock", lambda: next(cpu))
    batches = {"text": [(7, 2)] * 3, "choices": [(5, 1), (6, 2)]}
    rate = cost.measure_rate(model, batches=batches, device=torch.device("cpu"))
    size = Size.of(model)
    assert rate["seconds"] == 2.5 and rate["cpu_seconds"] == 1.5
    # forward and backward: 3 rows x 6 tokens (the last one is only a target), 2 kept each; then the
    # choices padded to 5 tokens, 2 kept each (the longer continuation)
    assert rate["batches"] == {"text": [3, 18, 6], "choices": [2, 10, 4]}
    assert rate["flop"] == 2 * (2 * size.body * 18 + 2 * size.head * 6) + 2 * (2 * size.body * 10 + 2 * size.head * 4)
    assert rate["flop_per_s"] == rate["flop"] / 2.5
    assert rate["repeats"] == 1   # 2.5 s: long enough to time once
    quick = itertools.count(0.0, 0.1)   # 0.1 s a step: timed until 0.25 s have passed, three times, and averaged
    monkeypatch.setattr(cost, "_clock", lambda: next(quick))
    again = cost.measure_rate(model, batches=batches, device=torch.device("cpu"))
    assert again["repeats"] == 3 and again["seconds"] == 0.1 and again["cpu_seconds"] == 1.5 / 3
    half = Size(body=size.body // 2, head=size.head)
    assert cost.measure_rate(model, batches=batches, device=torch.device("cpu"), size=half)["flop"] < rate["flop"]
    assert {n: p.requires_grad for n, p in model.named_parameters()} == wanted   # frozen only while it ran
    assert all(p.grad is None and torch.equal(p, before[n]) for n, p in model.named_parameters())


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


def test_with_measured_judges_the_steps_that_ran_in_wall_and_cpu_time():
    w = Work(steps=10, passes={"text": [16, 4], "look_text": [32, 8]})   # training 65.6 s at the cap, agreement 13.12 s
    predicted = {"student": vars(STUDENT), "teacher": vars(STUDENT), "work": vars(w), "device_type": "cpu",
                 "rate": {"flop_per_s": 1e3, "seconds": 2.0, "cpu_seconds": 1.0}}   # the probe had half a CPU
    wall, cpu = iter([0, 0, 30, 30, 43, 44]), iter([0, 0, 15, 15, 21.5, 22])
    watch = Stopwatch(clock=lambda: next(wall), cpu_clock=lambda: next(cpu))
    with watch("training"):
        pass
    with watch("agreement"):
        pass
    out = with_measured(predicted, watch, steps_run=5)
    ran = out["predicted_for_steps_run"]
    assert ran["steps"] == 5 and ran["seconds"]["training"] == 32.8 and ran["total_seconds"] == 45.92   # half the cap
    m = out["measured"]
    assert m["seconds"] == {"training": 30, "agreement": 13, "other": 1} and m["total_seconds"] == 44
    assert m["cpu_seconds"] == {"training": 15, "agreement": 6.5, "other": 0.5}
    assert out["measured_over_predicted"] == round(44 / 45.92, 3)
    assert out["cpu_over_predicted"] == round(22 / (45.92 * 0.5), 3)


def test_stopwatch_adds_up_each_part():
    ticks = iter([0.0, 1.0, 3.0, 5.0, 9.0, 10.0])
    watch = Stopwatch(clock=lambda: next(ticks), cpu_clock=lambda: 0.0)
    with watch("generation"):
        pass
    with watch("training"):
        pass
    assert watch.parts() == {"generation": 2.0, "training": 4.0, "other": 4.0}


def test_distill_prints_one_estimate_at_the_measured_rate_and_reports_it(world, monkeypatch, capsys):
    """The probe's seconds set the rate of every part; one line says the time; the report holds the
    prediction, the measured seconds and their ratio."""
    from paw.io.adapter import read_adapter
    from paw.io.lm import load_lm
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import LM, cost, distill_lora
    from paw.transfer.distill.run import read_inputs

    w = world
    teacher, tok_s = load_lm(w["source"], adapter=w["lora"], device="cpu")
    student, tok_t = load_lm(w["target"], device="cpu")
    real = cost.measure_rate
    probed, wrapped = [], []
    names = {n for n, _ in student.named_parameters()}

    def probe(model, **kw):   # the real probe, its pass said to take 4 s: the rate every part is divided by
        ticks = itertools.count(0.0, 4.0)
        probed.append(real(model, **kw, clock=lambda: next(ticks)))
        wrapped.append({n for n, _ in model.named_parameters() if "lora_" in n})
        return probed[-1]

    monkeypatch.setattr(cost, "measure_rate", probe)
    monkeypatch.setenv("PAW_PROGRESS", "1")
    _, report = distill_lora(read_adapter(w["lora"]), LM(teacher, tok_s, "s", tokenizer_info=open_tokenizer(w["source"])),
                             LM(student, tok_t, "t", tokenizer_info=open_tokenizer(w["target"])),
                             prompts=read_inputs(w["root"] / "items.jsonl"), steps=3, batch_size=4, lr=1e-2,
                             max_new_tokens=2, progress=True)
    err = capsys.readouterr().err
    said = [x for x in err.splitlines() if "of work" in x or "FLOP" in x]
    assert len(said) == 1 and said[0].startswith("[paw] distill: about ") and "for 3 steps" in said[0], said
    (rate,) = probed
    # the first step's 4 continuations of 2 tokens and their inputs' choices
    assert rate["batches"]["text"][0] == 4 and rate["batches"]["text"][2] == 4 * 2 and rate["seconds"] == 4.0
    assert rate["batches"]["choices"][0] == 4 * 4   # 4 choices an input
    assert wrapped[0] and {n for n, _ in student.named_parameters()} == names   # timed with a LoRA, then unwrapped
    c = report["distill"]["cost"]
    p = c["predicted"]
    assert p["rate"]["flop_per_s"] == rate["flop"] / 4.0 and "CPU thread" in p["rate"]["on"]
    for part, f in p["flop"].items():    # every part at the probe's rate
        if part != "generation":
            assert p["seconds"][part] == round(f / p["rate"]["flop_per_s"], 2)
    assert p["seconds"]["training"] == round(p["flop"]["training"] * 4.0 / rate["flop"], 2)
    assert p["steps"] == 3 and c["predicted_for_steps_run"]["steps"] == 3
    measured = c["measured"]["seconds"]
    assert set(measured) == {"generation", "excess", "agreement", "training", "other"} and all(v >= 0 for v in measured.values())
    assert c["measured_over_predicted"] == round(c["measured"]["total_seconds"]
                                                 / c["predicted_for_steps_run"]["total_seconds"], 3)
