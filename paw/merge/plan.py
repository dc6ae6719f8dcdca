"""Decide, from checkpoint headers only, what happens to every tensor of the base before any is read.

Each base tensor is either merged (every model has it, same shape, float), copied from the base
(non-float: position ids, quantisation tables...), or, under ``--vocab-policy base``, merged on the
vocabulary rows all models share with the base rows kept for the rest. Anything else (a name one side
lacks, a shape that differs, a vocabulary mismatch without the policy) refuses the merge, naming
how many tensors differ and the first one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from paw import arch
from paw.errors import PawError
from paw.io.checkpoint import Checkpoint
from paw.taskvec.align import FLOAT_DTYPES, align


@dataclass
class MergePlan:
    """``merge``: names merged in full; ``vocab_rows``: name -> rows merged (the rest kept from base);
    ``copy``: names copied from the base unchanged; ``order``: the base's order, for writing;
    ``union``: vocabulary tensors laid out on a union vocabulary first (``vocab_policy='union'``)."""

    order: list[str]
    merge: list[str]
    copy: list[str] = field(default_factory=list)
    vocab_rows: dict[str, int] = field(default_factory=dict)
    union: list[str] = field(default_factory=list)


def plan_merge(base: Checkpoint, models: Sequence[Checkpoint], *, vocab_policy: str = "refuse") -> MergePlan:
    """Classify every tensor; raise :class:`PawError` on names or shapes that do not match."""
    alignment = align(base, models)
    copy, vocab_rows, problems, vocab_problems, union = [], {}, [], [], []
    if vocab_policy == "union":  # every vocabulary tensor goes through the union, even at equal sizes
        union = [n for n in alignment.names if arch.is_vocab_tensor(n)]
    for name, reason in alignment.skipped.items():
        if name in base and base.dtype(name) not in FLOAT_DTYPES:
            copy.append(name)
            continue
        rows = _vocab_rows(name, base, models)
        if rows is not None:
            if vocab_policy == "union":
                union.append(name)
            elif vocab_policy == "base":
                vocab_rows[name] = rows
            else:
                vocab_problems.append(name)
            continue
        problems.append(f"{name}: {reason}")
    if problems:
        raise PawError(f"the models do not match the base ({base.name}): {len(problems)} tensor(s) differ "
                       f"in name or shape; first: {problems[0]}")
    if vocab_problems:
        name = vocab_problems[0]
        sizes = ", ".join(f"{m.name} {m.shape(name)[0]}" for m in models)
        raise PawError(f"vocabulary sizes differ in {', '.join(vocab_problems)} (base {base.name} "
                       f"{base.shape(name)[0]} rows; {sizes}); put the models on one tokenizer first (paw align-vocab, "
                       "paw transplant-tokenizer), or pass --vocab-policy base to merge the shared rows and keep the base's "
                       "rows for the others")
    if not alignment.names and not vocab_rows:
        raise PawError(f"no float tensor in common between the base {base.name} and the models")
    merged = [n for n in alignment.names if n not in union]
    return MergePlan(order=list(base), merge=merged, copy=copy, vocab_rows=vocab_rows, union=union)


def _vocab_rows(name: str, base: Checkpoint, models: Sequence[Checkpoint]) -> int | None:
    """Rows shared by all when ``name`` is a vocabulary tensor that differs only in dim 0, else None."""
    if not (name.endswith(".weight") and arch.is_vocab_tensor(name)) or name not in base:
        return None
    shape = base.shape(name)
    rows = [shape[0]]
    for model in models:
        if name not in model or model.dtype(name) not in FLOAT_DTYPES:
            return None
        other = model.shape(name)
        if len(other) != len(shape) or other[1:] != shape[1:]:
            return None
        rows.append(other[0])
    return min(rows)
