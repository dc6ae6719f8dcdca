"""The report of a distillation: what it learned from, how its budget ended, what it cost, what to watch.

Pure functions of what :func:`paw.transfer.distill.lora.distill_lora` measured; :mod:`paw.io.transfer_report`
writes the result.
"""

from __future__ import annotations

import math

from paw.transfer.distill import loss as distill_loss
from paw.transfer.distill import train as distill_train
from paw.transfer.distill.options import DISTILL

STILL_FALLING = 0.05        # relative loss fall over the last fifth of the steps above which the report warns ...
STILL_FALLING_ABS = 0.02    # ... when it is also this many nats (a loss of 0.006 -> 0.005 has levelled off)


def budget(auto: bool, steps: int, curve: dict, stop, excess: bool) -> dict:
    """The report's ``budget``: how many steps ran and why training ended."""
    ran = len(curve.get("loss", []))
    if not auto:
        why = "--max-steps"
    elif stop is not None and stop.done(curve.get("probe", [])):
        why = "levelled off"
    else:
        why = "reached the cap"
    return {"auto": auto, "max_steps": steps, "steps_run": ran, "stopped": why,
            "probe_every": stop.every if stop is not None else None,
            "probe_inputs": len(stop.probe) if stop is not None else None,
            "probe_agreement": [round(x, 6) for x in curve.get("probe", [])],
            "excess_known": excess}


def measured_on(n: int, pool: int, held_out: bool) -> str:
    which = "held-out prompts" if held_out else "training prompts (none held out)"
    return which if n == pool else f"{n} of the {pool} {which}, drawn by the seed"


def target_note(shift: distill_train.Shift | None, vocab: distill_train.Vocab, train: list) -> dict:
    """The report's ``target``: what the student learned, and where the shift was carried."""
    if shift is None:
        return {"kind": "teacher"}
    rows = [e for e in train if e.choices]
    moved = sum(any(a != b for a, b in zip(e.teacher_choice_ll, e.teacher_base_choice_ll, strict=True))
                for e in rows)
    text = ("next-token shift over the shared vocabulary" if vocab.shared else
            "next-token shift at the cuts both tokenizations share, over the tokens both hold" if vocab.aligned else
            "not carried: the tokenizers differ and no cuts are compared (--byte-kl)")
    return {"kind": "shift", "scale": shift.scale, "choice_inputs": len(rows), "choice_inputs_moved": moved,
            "text": text}


def losses_used(vocab: distill_train.Vocab, train: list, shift: distill_train.Shift | None = None) -> list[str]:
    used = [distill_train.TOKEN_KL] if vocab.shared else []
    if vocab.aligned and any(e.aligned for e in train):
        used.append(distill_train.ALIGNED_KL)
    if shift is None:
        used.append(distill_train.SEQUENCE)
    if any(e.choices for e in train):
        used.append(distill_train.CHOICE)
    return used


def vocabulary_note(vocab: distill_train.Vocab, train: list) -> str:
    if vocab.shared:
        return "shared: every target token is a source token (token KL + sequence NLL)"
    if vocab.aligned:
        with_cuts = [e for e in train if e.aligned]
        cuts = sum(len(e.aligned) for e in with_cuts)
        return (f"different tokenizers: the teacher's continuations are re-tokenised (sequence-level), plus the KL "
                f"over the {int((vocab.columns >= 0).sum())} tokens both vocabularies hold at the {cuts} cuts both "
                f"tokenizations share ({len(with_cuts)} of {len(train)} inputs; byte-aligned)")
    why = vocab.why or "no input's continuation is cut at the same byte by both tokenizers"
    return f"different tokenizers: the teacher's continuations are re-tokenised (sequence-level only: {why})"


def report(adapter, teacher, student, moved, info, losses_used, vocabulary, init_note, curve, cost, agreement,
            **settings) -> dict:
    cfg = moved.config
    finite = [x for x in curve["loss"] if math.isfinite(x)]
    window = max(1, min(10, len(finite)))
    fall = distill_loss.tail_fall(curve["loss"], 0.2)   # still falling at the end: the student wanted more steps
    drop = None if fall is None else fall[0]
    budget = settings.get("budget") or {}
    falling = still_falling(fall, budget)
    if budget:
        settings["budget"] = {**budget, "loss_levelled_off": drop is not None and not falling}
    return {
        "format": "paw-transfer-report", "version": 1, "method": DISTILL,
        "source": teacher.name, "target": student.name,
        "adapter": {"r": adapter.r, "alpha": adapter.alpha, "modules": len(adapter.modules())},
        "summary": {"transferred": len(moved.modules()), "not_transferred": 0,
                    "methods": {DISTILL: len(moved.modules())}},
        "distill": {
            "inputs": info, "losses": losses_used,
            "vocabulary": vocabulary,
            "init": init_note, "student": {"r": cfg["r"], "alpha": cfg["lora_alpha"],
                                           "target_modules": cfg["target_modules"], "modules": len(moved.modules())},
            **settings, "cost": cost,
            "loss_start": round(sum(finite[:window]) / window, 6) if finite else None,
            "loss_end": round(sum(finite[-window:]) / window, 6) if finite else None,
            "curve": {k: [round(x, 6) if math.isfinite(x) else None for x in v] for k, v in curve.items()},
            "agreement": agreement,
            "loss_tail_drop": None if drop is None else round(drop, 6),
        },
        "warnings": warnings(drop if falling else None, info),
    }


def still_falling(fall: tuple[float, float] | None, budget: dict) -> bool:
    """Whether the loss was still falling at the end: over the last fifth of the steps it fell by more
    than ``STILL_FALLING`` of its level *and* by more than ``STILL_FALLING_ABS`` nats (``fall`` is
    :func:`loss.tail_fall`'s ``(relative, absolute)``), and the automatic budget did not stop training
    for the agreement having levelled off.

    >>> still_falling((0.2, 0.4), {}), still_falling((0.2, 0.0012), {}), still_falling((0.2, 0.4), {"stopped": "levelled off"})
    (True, False, False)
    """
    if fall is None or budget.get("stopped") == "levelled off":
        return False
    return fall[0] > STILL_FALLING and fall[1] > STILL_FALLING_ABS


def warnings(drop: float | None, info: dict) -> list[str]:
    """What the user should know about the run: a loss still falling (``drop``, None when not), inputs
    never reached."""
    out = []
    if drop is not None:
        out.append(f"the distillation loss fell {drop:.0%} over the last fifth of the steps: it had not levelled "
                   "off, and more --max-steps would likely keep more of the adapter (docs/distill.md#steps)")
    if info["train_used"] < info["train"]:
        out.append(f"--max-steps x --batch-size reached {info['train_used']} of the {info['train']} training inputs; "
                   "the teacher worked on those only, and more steps would use the rest")
    return out
