"""Timing a distillation (paw.transfer.distill.timing): a rate measured by the probe on a training step and used
for every part, one line said before the work, and the prediction beside the measured seconds in the report."""

from __future__ import annotations

import itertools

from paw.transfer.distill.cost import Size, Work
from paw.transfer.distill.timing import Stopwatch, with_measured

STUDENT = Size(body=100, head=10, weight_bytes=440)


def test_measure_rate_times_one_training_steps_passes_with_the_clock(tiny_llama, monkeypatch):
    import torch

    from paw.io.lm import load_lm
    from paw.transfer.distill import timing

    model, _ = load_lm(tiny_llama, device="cpu")
    wanted = {n: p.requires_grad for n, p in model.named_parameters()}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ticks, cpu = itertools.count(0.0, 2.5), itertools.count(0.0, 1.5)   # the timed passes: 2.5 s, 1.5 CPU s
    monkeypatch.setattr(timing, "_clock", lambda: next(ticks))
    monkeypatch.setattr(timing, "_cpu_clock", lambda: next(cpu))
    batches = {"text": [(7, 2)] * 3, "choices": [(5, 1), (6, 2)]}
    rate = timing.measure_rate(model, batches=batches, device=torch.device("cpu"))
    size = Size.of(model)
    assert rate["seconds"] == 2.5 and rate["cpu_seconds"] == 1.5
    # forward and backward: 3 rows x 6 tokens (the last one is only a target), 2 kept each; then the
    # choices padded to 5 tokens, 2 kept each (the longer continuation)
    assert rate["batches"] == {"text": [3, 18, 6], "choices": [2, 10, 4]}
    assert rate["flop"] == 2 * (2 * size.body * 18 + 2 * size.head * 6) + 2 * (2 * size.body * 10 + 2 * size.head * 4)
    assert rate["flop_per_s"] == rate["flop"] / 2.5
    assert rate["repeats"] == 1   # 2.5 s: long enough to time once
    quick = itertools.count(0.0, 0.1)   # 0.1 s a step: timed until 0.25 s have passed, three times, and averaged
    monkeypatch.setattr(timing, "_clock", lambda: next(quick))
    again = timing.measure_rate(model, batches=batches, device=torch.device("cpu"))
    assert again["repeats"] == 3 and again["seconds"] == 0.1 and again["cpu_seconds"] == 1.5 / 3
    half = Size(body=size.body // 2, head=size.head)
    assert timing.measure_rate(model, batches=batches, device=torch.device("cpu"), size=half)["flop"] < rate["flop"]
    assert {n: p.requires_grad for n, p in model.named_parameters()} == wanted   # frozen only while it ran
    assert all(p.grad is None and torch.equal(p, before[n]) for n, p in model.named_parameters())


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
    from paw.transfer.distill import LM, distill_lora, timing
    from paw.transfer.distill.run import read_inputs

    w = world
    teacher, tok_s = load_lm(w["source"], adapter=w["lora"], device="cpu")
    student, tok_t = load_lm(w["target"], device="cpu")
    real = timing.measure_rate
    probed, wrapped = [], []
    names = {n for n, _ in student.named_parameters()}

    def probe(model, **kw):   # the real probe, its pass said to take 4 s: the rate every part is divided by
        ticks = itertools.count(0.0, 4.0)
        probed.append(real(model, **kw, clock=lambda: next(ticks)))
        wrapped.append({n for n, _ in model.named_parameters() if "lora_" in n})
        return probed[-1]

    monkeypatch.setattr(timing, "measure_rate", probe)
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
