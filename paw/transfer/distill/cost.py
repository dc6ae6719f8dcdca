"""What a distillation costs: its work in FLOPs, part by part, and the seconds that work takes at a rate
measured on this machine before it starts.

One model gives the line printed before the work and the report's ``distill.cost``::

    forward pass   2 x body x tokens + 2 x head x kept: ``body`` is every weight a token goes through
                   (all but the embeddings and the LM head), ``head`` the LM head, applied only to the
                   positions whose logits are read (the continuation, the choice; ``logits_to_keep``)
    train pass     forward, and backward through the frozen base to the LoRA factors: 2 forward passes
                   (3 with gradient checkpointing); the factors' own gradients are negligible
    generation     the prompt once (prefill), then one decoding step per new token, each at least a read
                   of every teacher weight per batch of 16 inputs (decoding is bound by memory bandwidth)

The parts, in the order they run: ``generation`` (the teacher's continuations and choice scores),
``excess`` (the teacher with and without its adapter over every continuation), ``student_base``
(``--target shift``: the student base's choice scores), ``targets`` (with a shared vocabulary, the token
KL's target once per input, :mod:`paw.transfer.distill.targets`: the teacher, and under shift both bases,
over every continuation; the steps and the agreement then read it and run no teacher), ``agreement``
(before and after training) and ``training`` (every step, and with the automatic budget its stop checks).

The rate is measured, not assumed (:func:`paw.transfer.distill.timing.measure_rate`): the train passes of the first training step (its
continuations and its answer choices) on the student wrapped in a LoRA as it will train, timed after a
one-row pass has warmed them up, so it holds this machine's speed, its thread count and its load at the
start, and on a small model the per-pass costs FLOPs do not see. Continuations are counted at
``--max-new-tokens`` (the teacher stops earlier at a line break), and with the automatic budget the steps
at its cap: both bounds from above. The line printed before the work says the time at the cap and, with
the automatic budget, at the first step it can stop (:meth:`paw.transfer.distill.fit.Stop.earliest`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from paw.memory import BANDWIDTH, GENERATION_BATCH, RATES
from paw.progress import format_duration

PARTS = ("generation", "excess", "student_base", "targets", "agreement", "training")


@dataclass(frozen=True)
class Size:
    """What one model's passes cost: ``body`` weights per token, ``head`` weights per kept position,
    ``weight_bytes`` read per decoding step."""

    body: int
    head: int
    weight_bytes: int = 0

    @classmethod
    def of(cls, model) -> Size:
        """From a loaded model (a PEFT model counts its base and adapter; a tied head counts once, as the head)."""
        params = list(model.parameters())
        total = sum(p.numel() for p in params)
        embed = model.get_input_embeddings().weight
        out = model.get_output_embeddings()
        head = out.weight if out is not None else embed
        body = total - head.numel() - (embed.numel() if embed is not head else 0)
        return cls(body=int(body), head=int(head.numel()),
                   weight_bytes=int(sum(p.numel() * p.element_size() for p in params)))

    def forward(self, tokens: float, kept: float) -> float:
        """FLOPs of one forward pass over ``tokens`` tokens, ``kept`` of them through the LM head.

        >>> Size(body=100, head=10).forward(tokens=8, kept=2)   # 2 x 100 x 8 + 2 x 10 x 2
        1640
        """
        return 2 * self.body * tokens + 2 * self.head * kept


# the passes of a distillation, each as (tokens, positions through the head) summed over its batches,
# padding included (every batch is as wide as its longest row; left padding keeps the longest continuation)
PASSES = {
    "text": "the student's continuations of one optimiser step (a mean over the steps)",
    "teacher_text": "... as the teacher reads them (the same ids with a shared vocabulary)",
    "choices": "the student's answer choices of one optimiser step",
    "look_text": "one agreement measurement: the student's continuations",
    "look_teacher_text": "... the teacher's",
    "look_choices": "... the student's choices",
    "check_text": "one stop check of the automatic budget: the student's continuations",
    "check_teacher_text": "... the teacher's",
    "check_choices": "... the student's choices",
    "prefill": "the teacher reading every prompt before it writes (logits at every position)",
    "decode": "the teacher writing, one token per row and step",
    "teacher_choices": "the teacher scoring every answer choice (a shared context once, :func:`scored`)",
    "excess_text": "the teacher over every continuation (twice: with and without its adapter)",
    "base_choices": "--target shift: the student base scoring every answer choice",
}


@dataclass(frozen=True)
class Work:
    """The shape of one distillation: its passes (:data:`PASSES`, ``[tokens, kept]`` each) and what decides
    which of them run."""

    steps: int                      # optimiser steps (the cap of an automatic budget)
    passes: dict                    # name -> [tokens, kept], padding included
    decode_steps: int = 0           # the teacher's forward calls while writing (each reads every weight)
    check_every: int = 0            # steps between two stop checks (0: a fixed budget, none)
    teacher_per_step: bool = False  # the teacher's distributions are read at every step (token or aligned KL)
    targets_cached: bool = False    # ... and made once per input before training (a shared vocabulary)
    text: bool = True               # the continuations carry a loss (not so for --target shift across tokenizers)
    shift: bool = False             # --target shift
    excess: bool = True             # the teacher's adapter can be switched off (what it changed, per token)
    checkpointing: bool = False     # gradient checkpointing: one more forward pass per train pass
    world: int = 1                  # devices that share the steps and the continuations


def flops(student: Size, teacher: Size, w: Work, steps: int | None = None) -> dict[str, float]:
    """FLOPs by part (:data:`PARTS`) of ``w`` run for ``steps`` (default ``w.steps``), summed over devices."""
    steps = w.steps if steps is None else steps

    def s(name: str) -> float:
        return student.forward(*w.passes.get(name, (0, 0)))

    def t(name: str) -> float:
        return teacher.forward(*w.passes.get(name, (0, 0)))

    def beside(prefix: str) -> float:   # the teacher's distributions, and under shift both bases, per read
        if not w.teacher_per_step or w.targets_cached:
            return 0.0
        return t(f"{prefix}teacher_text") + (t(f"{prefix}teacher_text") + s(f"{prefix}text") if w.shift else 0.0)

    def look(prefix: str) -> float:     # the agreement's forward passes over one set of inputs
        return s(f"{prefix}text") + beside(prefix) + s(f"{prefix}choices")

    train = 2 + w.checkpointing
    step = (train * s("text") if w.text else 0.0) + beside("") + train * s("choices")
    checks = steps // w.check_every if w.check_every else 0
    return {"generation": t("prefill") + t("decode") + t("teacher_choices") * (1 + w.shift),
            "excess": 2 * t("excess_text") if w.excess else 0.0,
            "student_base": s("base_choices") if w.shift else 0.0,
            # every continuation once: the teacher, under shift also its base and the student's (the same ids)
            "targets": t("excess_text") * (1 + w.shift) + (s("excess_text") if w.shift else 0.0)
            if w.targets_cached else 0.0,
            "agreement": 2 * look("look_"),
            "training": steps * step + checks * look("check_")}


def seconds(student: Size, teacher: Size, w: Work, rate: float, *, device_type: str = "cpu",
            steps: int | None = None) -> dict[str, float]:
    """Seconds by part at ``rate`` FLOP/s per device; the steps and the continuations are shared over
    ``w.world`` devices, and writing the continuations takes at least its weight reads.

    >>> w = Work(steps=10, passes={"text": [16, 4], "look_text": [32, 8]})
    >>> s = seconds(Size(100, 10), Size(100, 10), w, rate=1e3)
    >>> s["training"], s["agreement"]   # 10 x 2 x (2 x 100 x 16 + 2 x 10 x 4); 2 x (2 x 100 x 32 + 2 x 10 x 8), at 1e3 FLOP/s
    (65.6, 13.12)
    """
    parts = flops(student, teacher, w, steps)
    kind = "cuda" if device_type == "cuda" else "cpu"
    out = {k: v / rate for k, v in parts.items()}
    out["generation"] = max(out["generation"], w.decode_steps * teacher.weight_bytes / BANDWIDTH[kind])
    for part in ("generation", "training"):
        out[part] /= w.world
    return out


def padded(batches: Iterable[Sequence[tuple[int, int]]]) -> list[int]:
    """``[tokens, kept]`` of ``batches`` of rows ``(length, continuation)`` as :func:`paw.evaluate.encode.make_batch`
    pads them (its last token is only a target) and :func:`paw.evaluate.forward.forward_logits` keeps them.

    >>> padded([[(5, 2), (9, 1)], [(4, 3)]])   # 2 rows x 8 tokens, 2 x 2 kept; then 3 tokens, 3 kept
    [19, 7]
    """
    tokens = kept = 0
    for rows in batches:
        if rows:
            tokens += len(rows) * (max(n for n, _ in rows) - 1)
            kept += len(rows) * max(k for _, k in rows)
    return [tokens, kept]


def _chunks(items: Sequence, size: int) -> list:
    return [items[i:i + size] for i in range(0, len(items), size)]


@dataclass(frozen=True)
class Scoring:
    """How :func:`paw.evaluate.mc.score_encoded` runs one input's choices: ``grouped``, ``[tokens, kept]`` of
    those that run their shared context once (:mod:`paw.evaluate.shared`: the common prefix once, then each
    choice's rest; unpadded), and ``whole``, the ``(length, continuation)`` rows that run whole.

    >>> from paw.evaluate.encode import Encoded
    >>> Scoring.of([Encoded((1, 5, 6, 7, 8), 2), Encoded((1, 5, 6, 9), 1)], share=True)  # (1, 5), then (6, 7), (6,)
    Scoring(grouped=(5, 3), whole=())
    >>> Scoring.of([Encoded((1, 5, 6, 7, 8), 2), Encoded((1, 5, 6, 9), 1)], share=False)
    Scoring(grouped=(0, 0), whole=((5, 2), (4, 1)))
    """

    grouped: tuple[int, int] = (0, 0)
    whole: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, encoded: Sequence, *, share: bool) -> Scoring:
        from paw.evaluate.shared import plan

        groups, alone = plan(encoded) if share else ([], range(len(encoded)))
        tokens = kept = 0
        for g in groups:
            rests = [len(encoded[i].ids) - 1 - g.length for i in g.rows]
            tokens, kept = tokens + g.length + sum(rests), kept + g.prefix.n_cont + sum(rests)
        return cls(grouped=(tokens, kept), whole=tuple((len(encoded[i].ids), encoded[i].n_cont) for i in alone))


@dataclass(frozen=True)
class Rows:
    """One input as each pass sees it: ``(length, continuation)`` rows, the continuation at ``new`` tokens;
    ``scoring`` and ``teacher_scoring`` its choices as the student base and the teacher score them."""

    text: tuple[int, int]
    teacher_text: tuple[int, int]
    choices: tuple[tuple[int, int], ...]
    teacher_scoring: Scoring
    teacher_prompt: int
    scoring: Scoring = Scoring()

    @classmethod
    def of(cls, prompt, student_tokenizer, teacher_tokenizer, new: int, *, shared: bool,
           share: tuple[bool, bool] = (False, False)) -> Rows:
        """``shared``: one vocabulary; ``share``: whether the teacher and the student run a context their
        choices share once (:func:`paw.evaluate.shared.refusal` says None)."""
        from paw.evaluate.encode import encode_pair, own_start
        from paw.transfer.distill.prompts import START

        def length(tok) -> int:
            return len(own_start(tok)) + len(tok.encode(prompt.text, add_special_tokens=False))

        def pairs(tok) -> list:
            return [encode_pair(tok, c, x, start=START) for c, x in prompt.pairs]

        s, t = length(student_tokenizer), length(teacher_tokenizer)
        mine, theirs = pairs(student_tokenizer), pairs(teacher_tokenizer)
        return cls(text=(s + new, new), teacher_text=(s + new, new) if shared else (t + new, new),
                   choices=tuple((len(e.ids), e.n_cont) for e in mine), teacher_prompt=t,
                   teacher_scoring=Scoring.of(theirs, share=share[0]), scoring=Scoring.of(mine, share=share[1]))


def scored(rows: Iterable[Scoring]) -> list[int]:
    """``[tokens, kept]`` of :func:`paw.evaluate.mc.score_encoded` over every input's choices: the grouped ones as
    they are, the whole rows longest first, 8 a batch, padded.

    >>> scored([Scoring((4, 2), ((5, 1),)), Scoring((0, 0), ((3, 2),))])   # 4 + 2 x 4 tokens; 2 + 2 x 2 kept
    [12, 6]
    """
    rows = list(rows)
    whole = padded(_chunks(sorted((c for r in rows for c in r.whole), reverse=True), 8))
    return [sum(r.grouped[0] for r in rows) + whole[0], sum(r.grouped[1] for r in rows) + whole[1]]


def work_of(train: list[Rows], held: list[Rows], *, order: list[list[int]], accumulation: int, measured: list[int],
            checked: int, new: int, **flags) -> Work:
    """:class:`Work` of the batches the run makes: the training steps' ``order`` (indices into ``train``, each
    cut into ``accumulation`` micro-batches), the agreement on ``measured`` (indices into ``held``, or into
    ``train`` where nothing is held out) and the stop checks on the first ``checked`` training inputs, 16 a
    batch; the teacher writes in batches of 16 (:data:`paw.memory.GENERATION_BATCH`) and scores the choices as
    :func:`scored` counts them."""
    from paw.train.loop import micro_batches

    def reading(batches: list[list[Rows]], prefix: str) -> dict[str, list[int]]:
        return {f"{prefix}text": padded([[r.text for r in b] for b in batches]),
                f"{prefix}teacher_text": padded([[r.teacher_text for r in b] for b in batches]),
                f"{prefix}choices": padded([[c for r in b for c in r.choices] for b in batches])}

    steps = [[[train[i] for i in micro] for micro in micro_batches(batch, accumulation)] for batch in order]
    per_step = reading([m for step in steps for m in step], "")
    per_step = {k: [v / max(1, len(order)) for v in x] for k, x in per_step.items()}
    pool = held or train
    everyone = train + held
    written = [c for part in (train, held) for c in _chunks(part, GENERATION_BATCH)]
    passes = {**per_step,
              **reading(_chunks([pool[i] for i in measured], GENERATION_BATCH), "look_"),
              **reading(_chunks(train[:checked], GENERATION_BATCH), "check_"),
              "prefill": padded([[(r.teacher_prompt + 1, r.teacher_prompt) for r in c] for c in written]),
              "decode": [len(everyone) * (new - 1)] * 2,
              "teacher_choices": scored(r.teacher_scoring for r in everyone),
              "excess_text": padded([[r.teacher_text for r in c] for c in _chunks(everyone, GENERATION_BATCH)]),
              "base_choices": scored(r.scoring for r in everyone)}
    return Work(steps=len(order), passes=passes, decode_steps=len(written) * new, **flags)


def estimate(student: Size, teacher: Size, w: Work, rate: dict, *, device_type: str = "cpu", on: str = "",
             earliest: int | None = None) -> dict:
    """The report's prediction: FLOPs and seconds by part at the step cap, the total, and with an
    automatic budget (``earliest``: the first step at which it can stop) the total had it stopped there.

    ``rate``: :func:`paw.transfer.distill.timing.measure_rate`'s result, or ``{"flop_per_s": x, "assumed": True}``.
    """
    parts = flops(student, teacher, w)
    secs = seconds(student, teacher, w, rate["flop_per_s"], device_type=device_type)
    out = {"steps": w.steps, "flop": {k: float(v) for k, v in parts.items()}, "total_flop": float(sum(parts.values())),
           "seconds": {k: round(v, 2) for k, v in secs.items()}, "total_seconds": round(sum(secs.values()), 2),
           "rate": {**rate, "on": on}, "work": {k: v for k, v in vars(w).items()},
           "student": vars(student), "teacher": vars(teacher), "device_type": device_type}
    if earliest is not None and earliest < w.steps:
        out["earliest"] = {"steps": earliest, "total_seconds": round(sum(
            seconds(student, teacher, w, rate["flop_per_s"], device_type=device_type, steps=earliest).values()), 2)}
    return out


def assumed_rate(device_type: str) -> dict:
    """The rate to use where no probe can run (a student sharded over devices): :data:`paw.memory.RATES`."""
    return {"flop_per_s": RATES["cuda" if device_type == "cuda" else "cpu"], "assumed": True}


def line(e: dict) -> str:
    """The one line printed before the work.

    >>> e = {"total_flop": 3.4e12, "total_seconds": 250.0, "steps": 200, "earliest": {"steps": 100, "total_seconds": 130.0},
    ...      "rate": {"flop_per_s": 1.4e10, "on": "2 CPU threads"}}
    >>> line(e)
    'about 3.4 TFLOP of work: at most 4 min 10 s (the 200-step cap), 2 min 10 s if the agreement levels off at the first check it can (step 100), at 14 GFLOP/s measured on 2 CPU threads'
    >>> line({**e, "earliest": None, "rate": {"flop_per_s": 5e10, "assumed": True}})
    'about 3.4 TFLOP of work: about 4 min 10 s for 200 steps, at an assumed 50 GFLOP/s'
    """
    rate = e["rate"]
    speed = f"{_flop(rate['flop_per_s'])}/s"
    at = f"an assumed {speed}" if rate.get("assumed") else f"{speed} measured on {rate['on']}"
    head = f"about {_flop(e['total_flop'], 'T')} of work"
    first = e.get("earliest")
    if first:
        return (f"{head}: at most {format_duration(e['total_seconds'])} (the {e['steps']}-step cap), "
                f"{format_duration(first['total_seconds'])} if the agreement levels off at the first check it can "
                f"(step {first['steps']}), at {at}")
    return f"{head}: about {format_duration(e['total_seconds'])} for {e['steps']} steps, at {at}"


def _flop(x: float, unit: str | None = None) -> str:
    """``_flop(1.4e10)`` -> ``'14 GFLOP'``; ``unit`` fixes the prefix (``'T'``)."""
    prefixes = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
    if unit is None:
        unit = next((p for p in ("P", "T", "G", "M", "k") if x >= prefixes[p]), "")
    v = x / prefixes[unit]
    return f"{v:.2g} {unit}FLOP" if v < 100 else f"{v:.0f} {unit}FLOP"
