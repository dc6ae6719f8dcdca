"""Exact match with lm-eval's normalisations: hand-checked cases, and lm-eval's own function as the reference."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paw.errors import PawError
from paw.evaluate.exact import Rules, matches, normalise


def lm_eval_exact_match(predictions, references, regexes_to_ignore=None, ignore_case=False,
                        ignore_punctuation=False, ignore_numbers=False):
    """lm-eval 0.4.13's ``exact_match_hf_evaluate`` (lm_eval/api/metrics.py), as written there."""
    np = pytest.importorskip("numpy")
    if regexes_to_ignore is not None:
        for s in regexes_to_ignore:
            predictions = np.array([re.sub(s, "", x) for x in predictions])
            references = np.array([re.sub(s, "", x) for x in references])
    else:
        predictions = np.asarray(predictions)
        references = np.asarray(references)
    if ignore_case:
        predictions = np.char.lower(predictions)
        references = np.char.lower(references)
    if ignore_punctuation:
        repl_table = string.punctuation.maketrans("", "", string.punctuation)
        predictions = np.char.translate(predictions, table=repl_table)
        references = np.char.translate(references, table=repl_table)
    if ignore_numbers:
        repl_table = string.digits.maketrans("", "", string.digits)
        predictions = np.char.translate(predictions, table=repl_table)
        references = np.char.translate(references, table=repl_table)
    return {"exact_match": np.mean(predictions == references)}


NQ = (r"\b(?:The |the |An |A |The |a |an )",)   # lm-eval's nq_open regexes_to_ignore


@pytest.mark.parametrize("generated, references, rules, expected", [
    (" Paris\n", ("Paris",), Rules(), True),                               # stripped (remove_whitespace)
    ("paris", ("Paris",), Rules(), False),
    ("paris", ("Paris",), Rules(ignore_case=True), True),
    ("Paris.", ("Paris",), Rules(), False),
    ("Paris.", ("Paris",), Rules(ignore_punctuation=True), True),
    ("U.S.A.", ("USA",), Rules(ignore_punctuation=True), True),
    ("Apollo 11", ("Apollo",), Rules(ignore_numbers=True), False),        # "Apollo " after the digits go
    ("B2", ("B",), Rules(ignore_numbers=True), True),
    ("the Moon", ("Moon",), Rules(regexes_to_ignore=NQ), True),
    ("The Beatles", ("beatles",), Rules(regexes_to_ignore=NQ, ignore_case=True), True),
    ("Theatre", ("atre",), Rules(regexes_to_ignore=NQ), False),         # \b and the space keep words whole
    ("William Shakespeare", ("Shakespeare", "William Shakespeare"), Rules(), True),   # any reference
    ("Bill", ("Shakespeare", "William Shakespeare"), Rules(), False),
    ("café", ("CAFÉ",), Rules(ignore_case=True), True),                  # str.lower, as numpy's char.lower
    ("«Paris»", ("Paris",), Rules(ignore_punctuation=True), False),      # only ASCII punctuation
])
def test_hand_checked_cases(generated, references, rules, expected):
    assert matches(generated, references, rules) is expected


def test_order_is_regex_case_punctuation_numbers_after_stripping():
    """The regex sees the text before lower-casing: 'The ' is removed, 'THE ' is not."""
    rules = Rules(regexes_to_ignore=(r"^The ",), ignore_case=True, ignore_punctuation=True, ignore_numbers=True)
    assert normalise("  The End, 2!  ", rules) == "end "
    assert normalise("THE End", rules) == "the end"


texts = st.text(alphabet=st.sampled_from("aAbB1 2.,!?-Thé "), max_size=12)


@settings(max_examples=300, deadline=None)
@given(texts, st.lists(texts, min_size=1, max_size=3), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_equal_to_lm_evals_metric_after_its_whitespace_filter(generated, references, case, punctuation, numbers,
                                                              regex):
    """lm-eval strips the generation only (its remove_whitespace filter); with references that carry no
    surrounding whitespace the two agree on every combination of the rules."""
    references = [r.strip() for r in references]
    regexes = NQ if regex else None
    rules = Rules(regexes_to_ignore=regexes or (), ignore_case=case, ignore_punctuation=punctuation,
                  ignore_numbers=numbers)
    theirs = lm_eval_exact_match([generated.strip()] * len(references), references, regexes_to_ignore=regexes,
                                 ignore_case=case, ignore_punctuation=punctuation, ignore_numbers=numbers)
    assert matches(generated, references, rules) is bool(theirs["exact_match"] > 0)


def test_a_bad_regex_is_refused_naming_it():
    with pytest.raises(PawError, match=r"--regexes-to-ignore '\(': not a regular expression"):
        Rules(regexes_to_ignore=("(",)).check()
    assert Rules(ignore_case=True).changes() == {"ignore_case": True}
