"""What became of one transfer in a benchmark, as its results file keeps it: a :class:`TransferStatus` and a reason.

``paw bench transfer`` (:mod:`paw.bench.results`, per seed and condition) and ``paw bench real``
(:mod:`paw.bench.real.run`, per row of its transfer part) store the same values; their reports read them
back. Standard library only: reading a results file loads no model code.
"""

from __future__ import annotations

import enum


class TransferStatus(str, enum.Enum):
    """What became of one transfer (method or distillation) on one base, in both benchmarks.

    The value is what ``results.json`` stores: ``paw bench transfer`` per seed and condition,
    ``paw bench real`` per row of its transfer part.
    """

    OK = "ok"                          # transferred and scored
    REFUSED = "refused"                # ``auto`` judged the target unrelated: scored as the base
    NOT_APPLICABLE = "n/a"             # the method cannot map this adapter (e.g. copy across shapes)


def first_line(err: Exception, limit: int = 160) -> str:
    """The reason a results file keeps for an outcome: the message's first line, at most ``limit`` characters."""
    return str(err).splitlines()[0][:limit]
