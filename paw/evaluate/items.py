"""The one in-memory form of a multiple-choice item, shared by readers, eval, training and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

BLANK = "_"


@dataclass(frozen=True)
class MCItem:
    """A question, its answer choices (continuations of the question) and the index of the right one.

    ``MCItem("2 + 2 =", (" 3", " 4"), 1)``: the model scores ``question + choice`` for each choice.

    ``fill_blank=True`` (Winogrande) means each choice fills the ``_`` in ``question`` instead, and
    the item is scored the standard *partial* way (Sakaguchi et al. 2020, lm-evaluation-harness):
    the context is the text up to the blank with the choice filled in, and the scored continuation
    is the rest of the sentence, identical for every choice. :meth:`pairs` gives those pairs.
    ``group``: a record's ``group`` field, in any layout (the gain gate's clustered stderr).
    ``prefix``: text before every context, the few-shot examples (:mod:`paw.evaluate.fewshot`); it is
    scored as context and counts in no choice's length.
    """

    question: str
    choices: tuple[str, ...]
    answer: int
    id: str = ""
    fill_blank: bool = False
    group: str = ""   # items sharing a group (two questions about one fact) are not independent: paw.evaluate.stats
    prefix: str = ""  # the few-shot examples, then the question
    shots: tuple[tuple[str, str], ...] = ()  # the examples in ``prefix``, each its own (context, answer) pair

    def pairs(self) -> list[tuple[str, str]]:
        """``[(context, continuation), ...]``, one per choice, as the model scores them.

        >>> MCItem("Sam hugged Ann because _ was sad.", ("Sam", "Ann"), 1, fill_blank=True).pairs()
        [('Sam hugged Ann because Sam', ' was sad.'), ('Sam hugged Ann because Ann', ' was sad.')]
        >>> MCItem("2 + 2 =", (" 3", " 4"), 1).pairs()
        [('2 + 2 =', ' 3'), ('2 + 2 =', ' 4')]
        """
        return [(self.prefix + context, continuation) for context, continuation in self.own_pairs()]

    def own_pairs(self) -> list[tuple[str, str]]:
        """:meth:`pairs` without the few-shot ``prefix``: the question's own (context, continuation) pairs."""
        if not self.fill_blank:
            return [(self.question, choice) for choice in self.choices]
        head, _, tail = self.question.partition(BLANK)
        tail = " " + tail.strip()
        return [(head + choice, tail) for choice in self.choices]

    def shot(self) -> tuple[str, str]:
        """The item as one few-shot example, ``(context, " " + right answer)``: what :meth:`solved` joins, and the
        user and assistant turns of a multi-turn chat (:mod:`paw.evaluate.chat`)."""
        return self.own_pairs()[self.answer]

    def solved(self) -> str:
        """The item with its right answer, as one few-shot example: lm-eval's ``doc_to_text + target_delimiter
        + answer`` (for Winogrande the sentence with the right option filled in).

        >>> MCItem("Question: 2 + 2 =\\nAnswer:", (" 3", " 4"), 1).solved()
        'Question: 2 + 2 =\\nAnswer: 4'
        >>> MCItem("Sam hugged Ann because _ was sad.", ("Sam", "Ann"), 1, fill_blank=True).solved()
        'Sam hugged Ann because Ann was sad.'
        """
        return "".join(self.shot())

    def norm_lengths(self) -> list[int]:
        """The divisor of each choice's log-likelihood for ``accuracy_norm``: lm-eval's ``acc_norm``.

        lm-eval divides by ``len(choice)`` in characters, where ``choice`` is the ``doc_to_choice``
        string, *without* the target delimiter ``" "`` that starts the scored continuation; for
        partial scoring (Winogrande) the choices are the filled-in contexts. Never below 1.

        >>> MCItem("2 + 2 =", (" 3", " 40"), 1).norm_lengths()
        [1, 2]
        >>> MCItem("Sam hugged Ann because _ was sad.", ("Sam", "Ann"), 1, fill_blank=True).norm_lengths()
        [26, 26]
        """
        if self.fill_blank:
            return [max(len(context), 1) for context, _ in self.own_pairs()]
        return [max(len(choice.removeprefix(" ")), 1) for choice in self.choices]


@dataclass(frozen=True)
class GenItem:
    """A prompt the model continues by greedy generation, and the reference answers an exact match is sought
    among (``paw eval --generate``).

    ``GenItem("Question: the capital of France?\\nAnswer:", ("Paris",))``: the model generates after the
    question, as written; the generation is stripped and compared with each reference
    (:mod:`paw.evaluate.exact`). ``prefix`` and ``shots``: the few-shot examples, as for :class:`MCItem`.
    """

    question: str
    references: tuple[str, ...]
    id: str = ""
    prefix: str = ""
    shots: tuple[tuple[str, str], ...] = ()

    def shot(self) -> tuple[str, str]:
        """The item as one few-shot example: lm-eval's ``doc_to_text``, target delimiter and first target.

        >>> GenItem("Q: 2 + 2 =", ("4", "four")).shot()
        ('Q: 2 + 2 =', ' 4')
        """
        return self.question, " " + self.references[0]

    def solved(self) -> str:
        return "".join(self.shot())

    def context(self) -> str:
        """What the model continues: the few-shot examples, then the question."""
        return self.prefix + self.question
