"""The rows of the transfer benchmark beyond base, direct, random and the transfer methods (registry :data:`CONDITIONS`).

Each entry is one row kind ("condition") with a one-line summary, the :class:`paw.bench.options.BenchOptions`
field that selects it and its value there, and the family of functions that runs, sums up and
tabulates its rows. Options, results and report ask this registry; none of them names a row kind.
``paw --help`` reads it for its choices, so it imports only what is light: a family's ``run`` is
reached through a deferred import (:func:`_run_distill`).

>>> [(c.family.option, c.choice) for c in CONDITIONS.values()][:4]
[('distill', 'inputs'), ('distill', 'synth'), ('distill', 'generic'), ('distill', 'inputs-shift')]
>>> chosen({"distill": ("generic", "inputs")}) == [CONDITIONS.names()[2], CONDITIONS.names()[0]]
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from paw.bench import SHIFT, distill_tables
from paw.errors import PawError
from paw.registry import Registry


@dataclass(frozen=True)
class Family:
    """What runs, sums up and tabulates the rows of one option (every ``names`` maps condition <-> choice).

    - ``run(out, base, source, adapter, task, opts, seed, score, device, names={choice: condition})``
      fills one base's outcomes, statuses and summaries for the chosen rows;
    - ``columns(rows, raw, names={condition: choice})`` adds figures to the summarized rows;
    - ``markdown(results, names={condition: choice})`` is the rows' section of ``results.md``.
    """

    option: str                 # the BenchOptions field whose values pick the rows: "distill"
    what: str                   # what a value of it is, for messages: "distill input budget"
    run: Callable[..., None]
    columns: Callable[..., list[dict]]
    markdown: Callable[..., str]


@dataclass(frozen=True)
class Condition:
    """One row kind: its one-line summary, its family and its value in the family's option."""

    summary: str
    family: Family
    choice: str


CONDITIONS: Registry[Condition] = Registry("benchmark condition")



def _run_distill(*args: Any, **kwargs: Any) -> None:
    """:func:`paw.bench.distill.run`, imported when a row runs: it loads torch-side code ``paw --help`` must not."""
    from paw.bench import distill

    distill.run(*args, **kwargs)


DISTILL = Family(option="distill", what="distill input budget", run=_run_distill,
                 columns=distill_tables.add_cpu_seconds, markdown=distill_tables.markdown)
DISTILL_BUDGETS = {  # input budget -> one-line summary (paw/bench/distill.py runs them)
    "inputs": "distill on the source LoRA's training prompts, answers dropped",
    "synth": "distill on as many inputs written by the teacher from 5 of those prompts, kept by a likelihood-ratio filter",
    "generic": "distill on the embedded sample text, no task data",
}
for _budget, _summary in DISTILL_BUDGETS.items():
    CONDITIONS.add(f"distill[{_budget}]", Condition(_summary, DISTILL, _budget))
for _budget, _summary in DISTILL_BUDGETS.items():
    CONDITIONS.add(f"distill[{_budget}{SHIFT}]", Condition(f"{_summary}; target: the student's base + the adapter's "
                                                           "shift (--target shift)", DISTILL, _budget + SHIFT))


def families() -> list[Family]:
    """Every family of the registry, in registration order."""
    return list(dict.fromkeys(c.family for c in CONDITIONS.values()))


def _names(family: Family) -> dict[str, str]:
    """``{condition name: choice}`` of every registered row of ``family``."""
    return {name: c.choice for name, c in CONDITIONS.items() if c.family == family}


def selected(opts: Any, family: Family) -> dict[str, str]:
    """``{choice: condition name}`` of the rows ``opts`` asks of ``family``, in the order asked.

    ``opts`` is a BenchOptions or a mapping of its fields; an unknown choice is a PawError.
    """
    asked = opts[family.option] if isinstance(opts, Mapping) else getattr(opts, family.option)
    by_choice = {choice: name for name, choice in _names(family).items()}
    unknown = [c for c in asked if c not in by_choice]
    if unknown:
        raise PawError(f"unknown {family.what} {unknown[0]!r}; choose from {', '.join(by_choice)}")
    return {c: by_choice[c] for c in asked}


def chosen(opts: Any) -> list[str]:
    """The condition names ``opts`` asks for (family by family, each in the order asked); checks the choices."""
    return [name for family in families() for name in selected(opts, family).values()]


def run(out: dict, base, source, adapter, task, opts, seed: int, score, device) -> None:
    """Fill ``out`` (one base's results) with every row ``opts`` asks for."""
    for family in families():
        names = selected(opts, family)
        if names:
            family.run(out, base, source, adapter, task, opts, seed, score, device, names=names)


def add_columns(rows: list[dict], raw: dict, conditions: list[str]) -> list[dict]:
    """Each family's extra figures on the summarized rows, for the families with a row in ``conditions``."""
    for family in families():
        names = _names(family)
        if any(c in names for c in conditions):
            rows = family.columns(rows, raw, names=names)
    return rows


def markdown(results: dict) -> str:
    """The sections of ``results.md`` of every family, one after the other."""
    return "".join(family.markdown(results, names=_names(family)) for family in families())


def summaries() -> dict[str, str]:
    """``{condition name: one-line summary}``, for ``--help`` and the docs."""
    return {name: c.summary for name, c in CONDITIONS.items()}
