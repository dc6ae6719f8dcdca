"""Exact match of a generated answer against reference answers, with lm-evaluation-harness's normalisations.

lm-eval's ``exact_match`` metric (ported there from Hugging Face ``evaluate``) compares a generation with
a reference after, in this order: every regex of ``regexes_to_ignore`` removed (``re.sub(r, "", text)``,
one after the other), ``ignore_case`` (lower case), ``ignore_punctuation`` (the ASCII punctuation of
``string.punctuation`` deleted) and ``ignore_numbers`` (the digits 0-9 deleted); the same to both sides.
An item with several references matches when any of them does. Before that, lm-eval's generation tasks
(TriviaQA, NQ-Open) strip the generation's surrounding whitespace with their ``remove_whitespace``
filter; PAW strips it always, and the references too (lm-eval leaves a reference as written, so a
reference with surrounding whitespace never matches there).

>>> rules = Rules(ignore_case=True, ignore_punctuation=True, regexes_to_ignore=(r"\\b(?:The |the |A |a )",))
>>> normalise(" The Eiffel Tower.", rules), matches(" the eiffel tower", ("Eiffel Tower",), rules)
('eiffel tower', True)
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

from paw.errors import PawError

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_DIGITS = str.maketrans("", "", string.digits)


@dataclass(frozen=True)
class Rules:
    """What an exact match ignores (lm-eval's ``exact_match`` arguments; all off: equal after stripping)."""

    regexes_to_ignore: tuple[str, ...] = ()
    ignore_case: bool = False
    ignore_punctuation: bool = False
    ignore_numbers: bool = False

    def check(self, flag: str = "--regexes-to-ignore") -> Rules:
        """Refuse a regex that does not compile, naming it and ``flag``."""
        for pattern in self.regexes_to_ignore:
            try:
                re.compile(pattern)
            except re.error as err:
                raise PawError(f"{flag} {pattern!r}: not a regular expression ({err})") from None
        return self

    def changes(self) -> dict:
        """The rules set away from their defaults, for the results file."""
        return {k: v for k, v in vars(self).items() if v}


def normalise(text: str, rules: Rules = Rules()) -> str:
    """``text`` stripped, then lm-eval's normalisations in lm-eval's order.

    >>> normalise("  Answer: 42!  ", Rules(ignore_punctuation=True, ignore_numbers=True))
    'Answer '
    """
    text = text.strip()
    for pattern in rules.regexes_to_ignore:
        text = re.sub(pattern, "", text)
    if rules.ignore_case:
        text = text.lower()
    if rules.ignore_punctuation:
        text = text.translate(_PUNCTUATION)
    if rules.ignore_numbers:
        text = text.translate(_DIGITS)
    return text


def matches(generated: str, references: Sequence[str], rules: Rules = Rules()) -> bool:
    """Whether ``generated`` equals any of ``references`` once both are normalised.

    >>> matches("Paris\\n", ("paris", "Paris")), matches("Paris.", ("Paris",))
    (True, False)
    """
    mine = normalise(generated, rules)
    return any(mine == normalise(reference, rules) for reference in references)
