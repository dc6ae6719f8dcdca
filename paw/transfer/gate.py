"""The gain gate of ``paw transfer-lora --check-data FILE``: did the move make the target better?

A transfer can succeed by every internal measure (modules related, loss levelled off, agreement
with the teacher high) and still leave the target worse than it was: when the teacher (source +
adapter) knows the task less well than the target's base already does, imitating it drags the
target down. The gate measures what the user cares about on a small labeled multiple-choice set
that was never trained on, for every method (weight maps, ``auto``, ``distill``):

1. the transfer is written into a staging folder beside the output (:mod:`paw.io.gate_files`);
2. four models are scored item by item with :func:`paw.evaluate.mc.evaluate` (raw accuracy, the
   highest-log-likelihood choice): the target base, the target with the moved adapter (applied by
   PEFT from the staged folder, as a user loads it), the source base and the source with its adapter;
3. the gate's figure is the paired difference (target + moved adapter − target base) with its
   paired standard error (:func:`paw.evaluate.stats.paired_difference`; clustered by group,
   :func:`paw.evaluate.stats.clustered_difference`, when items name a ``group``: two questions about
   one fact are one draw, not two). It **passes** when the difference exceeds ``gain_z`` standard
   errors (``--gain-z``, default 2: a seeded simulation of moves with no gain,
   :func:`paw.evaluate.stats.false_pass_rate`, passes about 2% of them on 96 items; the old bar of
   one stderr passed about 15%). The report keeps every item's outcome under the four conditions
   (``outcomes``) and the groups, so a reader can redo the statistics;
4. passed or not, the output is published with the gate's block in ``transfer_report.json`` and a
   ``gate.md``, and the command's last line says which; with ``require_gain`` a failed gate raises
   :class:`~paw.errors.NoGain` (exit code 3) and nothing is written.

The check set is refused (exit 2) when an item has no answer, an answer outside its choices, or a
question that is also a distillation input (``--prompts``, ``--seed-examples``): a set the student
was trained on measures memorisation, not the gain.

    >>> verdict({"target_base": [0, 0, 1, 0, 0], "target_adapted": [1, 1, 1, 1, 1],
    ...          "source_base": [0, 0, 0, 1, 0], "source_adapted": [1, 1, 1, 1, 1]})["passed"]
    True
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paw.device import resolve_device
from paw.errors import NoGain, PawError
from paw.evaluate.formats import detect_format, items_from_records
from paw.evaluate.items import MCItem
from paw.evaluate.mc import evaluate
from paw.evaluate.stats import accuracy, clears, clustered_difference, paired_difference
from paw.io.atomic import check_output
from paw.io.gate_files import add_gate, publish, staging
from paw.io.manifest import describe_input
from paw.io.mcdata import read_records
from paw.progress import status
from paw.transfer.distill.options import DISTILL, GENERIC
from paw.transfer.distill.prompts import Prompt
from paw.transfer.distill.run import read_inputs

MIN_ITEMS = 2   # a paired standard error needs two items; a useful check set has dozens
# condition -> how the report names it
CONDITIONS = {"target_base": "target base", "target_adapted": "target + moved adapter",
              "source_base": "source base", "source_adapted": "source + adapter (the teacher)"}


# ------------------------------------------------------------------------------------ the check set

def read_check_items(path: str | Path, *, prompts: dict[str, str | Path] | None = None) -> list[MCItem]:
    """The labeled items of ``path``; refuses an item without its answer or with one outside its choices,
    and (``prompts``: ``{flag: file}`` of the distillation's inputs) a question that is also an input."""
    path = Path(path)
    if path.is_dir():
        raise PawError("--check-data: is a folder; give the JSON-lines file of labeled items", path=path)
    if not path.is_file():
        raise PawError("--check-data: no such file", path=path)
    try:
        records = list(read_records(path))
        for number, record in records:
            if detect_format(record) is None and detect_format(record, labels=False) is not None:
                raise PawError(f"line {number}: the item has no answer; the gate scores labeled items (the answer "
                               "field of its layout, e.g. 'answer')", path=path)
        items = items_from_records(records, path)
    except PawError as err:  # the file and line are in the message: say which flag gave it
        raise PawError(f"--check-data {err}") from None
    if len(items) < MIN_ITEMS:
        raise PawError(f"--check-data {path}: {len(items)} item; the paired standard error needs at least {MIN_ITEMS}")
    for flag, source in (prompts or {}).items():
        _refuse_overlap(path, items, flag, source)
    return items


def _norm(text: str) -> str:
    return " ".join(text.split())


def _refuse_overlap(path: Path, items: list[MCItem], flag: str, source: str | Path) -> None:
    """A check item whose question is also a distillation input (whitespace aside) is refused."""
    taught = {_norm(Prompt.of(value).text) for value in read_inputs(source, what=f"{flag} file")}
    shared = [item for item in items if _norm(Prompt.of(item).text) in taught]
    if shared:
        raise PawError(f"--check-data {path}: {len(shared)} of its {len(items)} questions are also inputs of "
                       f"{flag} {source} (first: {shared[0].question[:60]!r}); the check set must never be "
                       "trained on")


def distill_inputs(method: str, distill: Any) -> dict[str, str | Path]:
    """``{flag: file}`` of the files a distillation trains on (none for the weight-space methods)."""
    if method != DISTILL or distill is None:
        return {}
    out = {}
    if distill.prompts is not None and str(distill.prompts) != GENERIC:
        out["--prompts"] = distill.prompts
    if distill.seed_examples is not None:
        out["--seed-examples"] = distill.seed_examples
    return out


# ------------------------------------------------------------------------------------ scoring

def score(items: list[MCItem], *, adapter: str | Path, moved: str | Path, source_base: str | Path,
          target_base: str | Path, device: str = "cpu", progress: bool = True) -> dict[str, list[int]]:
    """0/1 per item of the four conditions of :data:`CONDITIONS` (PEFT applies each adapter)."""
    from paw.io.lm import load_lm

    dev = resolve_device(device)
    outcomes: dict[str, list[int]] = {}
    for side, base, lora in (("target", target_base, moved), ("source", source_base, adapter)):
        status(f"gain gate: scoring the {side} base and the {side} with its adapter on {len(items)} check items")
        model, tokenizer = load_lm(base, adapter=lora, device=dev)
        with model.disable_adapter():
            outcomes[f"{side}_base"] = _correct(model, tokenizer, items, progress)
        outcomes[f"{side}_adapted"] = _correct(model, tokenizer, items, progress)
        del model
    return outcomes


def _correct(model, tokenizer, items: list[MCItem], progress: bool) -> list[int]:
    return evaluate(model, tokenizer, items, progress=progress, per_item=True)["correct"]


def verdict(outcomes: dict[str, list[int]], *, groups: list[str] | None = None, z: float = 2.0) -> dict[str, Any]:
    """The gate's block: accuracies, paired differences and whether the moved adapter beat the base.

    ``gain`` is target + moved − target base; ``teacher_vs_target`` is source + adapter − target base
    (negative: the teacher knows the task less well than the target already does); ``source_gain``
    is the adapter's gain on its own base and ``kept`` the share of it the move kept (None when the
    source gained nothing to keep). ``groups`` (one key per item, ``""`` for none): the stderrs are
    clustered by group. Passed when the gain exceeds ``z`` stderrs.
    """
    grouped = groups is not None and any(groups)

    def diff(a: str, b: str) -> dict:
        if grouped:
            return clustered_difference(outcomes[a], outcomes[b], groups)
        return paired_difference(outcomes[a], outcomes[b])

    gain, source_gain = diff("target_adapted", "target_base"), diff("source_adapted", "source_base")
    kept = gain["difference"] / source_gain["difference"] if source_gain["difference"] > 0 else None
    stderr = "clustered stderr over its groups" if grouped else "paired stderr"
    return {"items": gain["n"], "z": z,
            "rule": f"passed when (target + moved − target base) > {z:g} x its {stderr}",
            "passed": clears(gain, z),
            "accuracy": {name: accuracy([outcomes[name]]) for name in CONDITIONS},
            "gain": gain, "teacher_vs_target": diff("source_adapted", "target_base"),
            "source_gain": source_gain, "kept": kept,
            "outcomes": {name: list(outcomes[name]) for name in CONDITIONS},
            **({"groups": list(groups)} if grouped else {})}


# ------------------------------------------------------------------------------------ what people read

def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _diff(d: dict) -> str:
    return f"{100 * d['difference']:+.1f} ± {100 * d['stderr']:.1f} points"


def line(gate: dict, check_data: str | Path) -> str:
    """The command's last line: the paired gain and whether the gate passed."""
    acc = gate["accuracy"]
    head = (f"gain gate ({check_data}, {gate['items']} items): target + moved adapter {_pct(acc['target_adapted']['mean'])}% "
            f"vs target base {_pct(acc['target_base']['mean'])}%, {_diff(gate['gain'])} (paired); teacher "
            f"{_pct(acc['source_adapted']['mean'])}%")
    if gate["passed"]:
        return f"{head}: passed"
    return f"{head}: NO GAIN, the moved adapter is not better than the target base by {_bar(gate)}"


def _bar(gate: dict) -> str:
    """``2 stderrs`` (``2 clustered stderrs`` when the items name groups)."""
    z = gate.get("z", 1.0)
    return f"{z:g} {'clustered ' if 'groups' in gate else ''}stderr{'' if z == 1 else 's'}"


def markdown(gate: dict, check_data: str | Path) -> str:
    """``gate.md``: the four accuracies, the paired differences and the verdict."""
    acc = gate["accuracy"]
    rows = [f"| {label} | {_pct(acc[name]['mean'])} ± {_pct(acc[name]['stderr'])} |" for name, label in CONDITIONS.items()]
    kept = "–" if gate["kept"] is None else f"{gate['kept']:.2f}"
    verdict_text = (f"**Passed**: the moved adapter is better than the target base by more than {_bar(gate)}."
                    if gate["passed"] else
                    f"**No gain**: the moved adapter is not better than the target base by {_bar(gate)}.")
    return "\n".join([
        f"# Gain gate: `{check_data}` ({gate['items']} labeled items)", "",
        "| model | accuracy % ± stderr |", "|---|---|", *rows, "",
        f"- target + moved adapter − target base: {_diff(gate['gain'])} (paired stderr)",
        f"- teacher (source + adapter) − target base: {_diff(gate['teacher_vs_target'])}",
        f"- the adapter's gain on its own base: {_diff(gate['source_gain'])}; kept by the move: {kept}", "",
        verdict_text, ""])


# ------------------------------------------------------------------------------------ the gated pipeline

def gain_gated(transfer: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``transfer_adapter``: with ``check_data`` its output is staged, scored, then published or refused.

    Without ``check_data`` the call is passed through unchanged. The wrapped function's result is
    returned with ``output`` the real folder and the gate's block in ``report['gate']``.
    """
    signature = inspect.signature(transfer)

    @functools.wraps(transfer)
    def wrapper(*args, **kwargs):
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        if call.arguments.get("check_data") is None:
            return transfer(*args, **kwargs)
        return _gated(transfer, dict(call.arguments))

    return wrapper


def _gated(transfer: Callable[..., Any], a: dict[str, Any]):
    output, check_data = Path(a["output"]), a["check_data"]
    items = read_check_items(check_data, prompts=distill_inputs(a["method"], a.get("distill")))
    check_output(output, overwrite=a["overwrite"],
                 inputs=[a["adapter"], a["source_base"], a["target_base"], check_data])
    with staging(output) as folder:
        staged = folder / output.name
        result = transfer(**{**a, "output": staged, "overwrite": False})
        gate = verdict(score(items, adapter=a["adapter"], moved=staged, source_base=a["source_base"],
                             target_base=a["target_base"], device=a["device"], progress=a["progress"]),
                       groups=[item.group for item in items], z=a["gain_z"])
        if not gate["passed"] and a["require_gain"]:
            raise NoGain(f"{line(gate, check_data)}; nothing was written (--require-gain)")
        warning = None if gate["passed"] else (
            f"on --check-data the moved adapter is not better than the target base ({_diff(gate['gain'])})")
        check_input = describe_input(check_data)
        add_gate(staged, gate=gate, markdown=markdown(gate, check_data), check_input=check_input, warning=warning)
        publish(staged, output, overwrite=a["overwrite"], allow_nonfinite=a["allow_nonfinite"])
    report = {**result.report, "gate": gate, "warnings": [*result.report.get("warnings", []), *([warning] if warning else [])]}
    return dataclasses.replace(result, output=output, report=report, inputs={**result.inputs, "check_data": check_input})
