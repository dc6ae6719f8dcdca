"""The one in-memory form of a multiple-choice item, shared by readers, eval, training and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MCItem:
    """A question, its answer choices (continuations of the question) and the index of the right one.

    ``MCItem("2 + 2 =", (" 3", " 4"), 1)``: the model scores ``question + choice`` for each choice.
    """

    question: str
    choices: tuple[str, ...]
    answer: int
    id: str = ""
