"""What a distillation takes on this machine: the rate its work runs at, measured before it starts on a
training step of the student (:func:`measure_rate`), and the seconds each part took (:class:`Stopwatch`),
set beside the prediction of :mod:`paw.transfer.distill.cost` in the report (:func:`with_measured`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence

from paw.transfer.distill.cost import Size, Work, padded, seconds

PROBE_SECONDS, PROBE_REPEATS = 0.25, 5  # the probe's step is repeated until it has run this long, or this often
_clock = time.perf_counter       # tests put a fake clock here
_cpu_clock = time.process_time   # ... and a fake CPU clock (seconds of CPU this process had, every thread)


def measure_rate(model, *, batches: dict[str, Sequence[tuple[int, int]]], device, size: Size | None = None,
                 clock=None) -> dict:
    """The effective FLOP/s of ``model`` on this machine now: the train passes of one training step, timed
    after a one-row pass warms them up (thread pools, the allocator, weights paged in from a memory-mapped file).

    ``batches``: ``{"text": rows, "choices": rows}`` (either may be missing), rows ``(length, continuation)``
    as :class:`Rows` holds them: the first step's continuations, through
    :func:`paw.evaluate.forward.forward_logits`, and its answer choices, through
    :func:`paw.transfer.distill.head.choice_sums` (the LM head in row chunks where its logits are large), each
    under the training's autocast and padded as :func:`paw.evaluate.encode.make_batch` pads them. Every
    weight is frozen while the passes run and the embeddings' output is made to want a gradient, so the backward
    pass runs through the base as it does to the LoRA factors; no weight or gradient is left changed. ``model``
    may carry a LoRA (its layers' own overhead is then in the time); ``size`` counts the FLOPs (default:
    ``model``'s).

    The passes are repeated until they have taken :data:`PROBE_SECONDS` (at most :data:`PROBE_REPEATS` times)
    and the time of one round is their mean. Costs that FLOPs do not see (Python, small kernels, a LoRA's extra
    layers) are in the time, so on a model as small as the demo's the rate is mostly theirs; the optimiser's
    step is not timed (a throwaway optimiser would fire every hook a user registered for all optimisers).
    Returns ``{"flop_per_s", "seconds", "cpu_seconds", "flop", "repeats", "batches", "load"}``: ``batches``
    the ``[rows, tokens, kept]`` of each pass (padded), ``cpu_seconds`` the CPU time the process had in the
    timed passes (its share of a loaded machine: ``seconds`` x threads when it had every core it asked
    for), ``load`` the system's one-minute load average.
    """
    from paw.transfer.distill.train import PAD_ID, _autocast

    clock = clock or _clock
    size = size or Size.of(model)
    kinds = {k: list(v) for k, v in batches.items() if v}
    if not kinds:
        raise ValueError("measure_rate: no rows to time")
    wanted = [(p, p.requires_grad) for p in model.parameters()]
    hook = model.get_input_embeddings().register_forward_hook(lambda _m, _a, out: out.detach().requires_grad_())
    was_training = model.training
    vocab = model.get_input_embeddings().weight.shape[0]

    def once(kind: str, rows) -> None:
        _train_pass(model, kind, _encoded(rows, vocab), device, PAD_ID, _autocast)

    try:
        for p, _ in wanted:
            p.requires_grad_(False)
        model.train()
        kind, rows = next(iter(kinds.items()))
        once(kind, rows[:1])
        start, cpu, repeats = clock(), _cpu_clock(), 0
        while True:   # a pass of a few milliseconds is timed again, and the mean taken: one is mostly noise
            for kind, rows in kinds.items():
                once(kind, rows)
            repeats += 1
            took = clock() - start
            if took >= PROBE_SECONDS or repeats == PROBE_REPEATS:
                break
        took, cpu = max(took, 1e-9) / repeats, (_cpu_clock() - cpu) / repeats
    finally:
        hook.remove()
        model.train(was_training)
        for p, flag in wanted:
            p.requires_grad_(flag)
    shapes = {k: padded([rows]) for k, rows in kinds.items()}
    flop = sum(2 * size.forward(*shape) for shape in shapes.values())
    return {"flop_per_s": flop / took, "seconds": round(took, 4), "cpu_seconds": round(cpu, 4), "flop": flop,
            "repeats": repeats, "batches": {k: [len(kinds[k]), *shape] for k, shape in shapes.items()}, "load": load()}


def _encoded(rows: Sequence[tuple[int, int]], vocab: int) -> list:
    """Made-up ids of the rows' lengths (the content does not change the time)."""
    from paw.evaluate.encode import Encoded

    return [Encoded(tuple((7 * i + r) % vocab for i in range(max(2, n))), max(1, min(k, max(2, n) - 1)))
            for r, (n, k) in enumerate(rows)]


def _train_pass(model, kind: str, encoded: list, device, pad_id: int, autocast) -> None:
    """One forward and backward pass as a training step makes it: continuations through ``forward_logits``,
    answer choices through ``choice_sums``."""
    import torch

    from paw.evaluate.encode import make_batch, sliding_window_of
    from paw.evaluate.forward import forward_logits
    from paw.transfer.distill.head import choice_sums

    batch = make_batch(encoded, pad_id=pad_id, padding_side="left", window=sliding_window_of(model))
    with autocast(device):
        if kind == "choices":
            loss = choice_sums(model, batch, device).sum()
        else:
            loss = forward_logits(model, batch, device)[0].float().logsumexp(-1).mean()
    loss.backward()
    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def load() -> float | None:
    """The system's one-minute load average (None where the system does not say)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def where(device) -> str:
    """``'1 CPU thread'``, ``'2 CPU threads'`` or the GPU's name: what the rate was measured on."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        return torch.cuda.get_device_name(device)
    n = torch.get_num_threads()
    return f"{n} CPU thread{'s' if n != 1 else ''}"


def with_measured(predicted: dict, watch: Stopwatch, *, steps_run: int) -> dict:
    """The report's ``cost``: the prediction beside the seconds each part took (``other``: what lies between
    the parts), and the measured total over the predicted one for the steps that ran (an automatic budget
    that stopped early is judged on the steps it took; the prediction at the cap stays as it was said).

    ``cpu_over_predicted`` compares CPU time instead, the prediction taken at the share of the CPU the probe
    had: on a machine whose load changed during the run it tells the model's error from the load's.
    """
    student, teacher = Size(**predicted["student"]), Size(**predicted["teacher"])
    rate = predicted["rate"]
    ran = seconds(student, teacher, Work(**predicted["work"]), rate["flop_per_s"],
                  device_type=predicted["device_type"], steps=steps_run)
    wall, cpu = watch.parts(), watch.parts(cpu=True)
    total, expected = sum(wall.values()), sum(ran.values())
    out = {"predicted": predicted,
           "predicted_for_steps_run": {"steps": steps_run, "seconds": {k: round(v, 2) for k, v in ran.items()},
                                       "total_seconds": round(expected, 2)},
           "measured": {"seconds": {k: round(v, 2) for k, v in wall.items()}, "total_seconds": round(total, 2),
                        "cpu_seconds": {k: round(v, 2) for k, v in cpu.items()},
                        "total_cpu_seconds": round(sum(cpu.values()), 2), "load": load()},
           "measured_over_predicted": round(total / expected, 3) if expected > 0 else None}
    if rate.get("cpu_seconds") and expected > 0:
        out["cpu_over_predicted"] = round(sum(cpu.values()) / (expected * rate["cpu_seconds"] / rate["seconds"]), 3)
    return out


class Stopwatch:
    """Seconds spent in each named part since it was made: ``with watch("training"): ...``; a part entered
    twice adds up. :meth:`parts` gives them with ``other``, the time between them; ``parts(cpu=True)`` the
    CPU time the process had in them.

    >>> ticks = iter([0.0, 1.0, 3.0, 4.0, 4.5, 6.0])
    >>> watch = Stopwatch(clock=lambda: next(ticks), cpu_clock=lambda: 0.0)   # made at 0 s
    >>> with watch("agreement"): pass                           # 1 s to 3 s
    >>> with watch("agreement"): pass                           # 4 s to 4.5 s
    >>> watch.parts()                                           # read at 6 s
    {'agreement': 2.5, 'other': 3.5}
    """

    def __init__(self, clock=None, cpu_clock=None):
        self.clocks = (clock or _clock, cpu_clock or _cpu_clock)
        self.start = tuple(c() for c in self.clocks)
        self.spent: tuple[dict[str, float], dict[str, float]] = ({}, {})

    @contextlib.contextmanager
    def __call__(self, part: str):
        begun = tuple(c() for c in self.clocks)
        try:
            yield
        finally:
            for clock, b, spent in zip(self.clocks, begun, self.spent, strict=True):
                spent[part] = spent.get(part, 0.0) + clock() - b

    def parts(self, *, cpu: bool = False) -> dict[str, float]:
        total = self.clocks[cpu]() - self.start[cpu]
        spent = self.spent[cpu]
        return {**spent, "other": total - sum(spent.values())}
