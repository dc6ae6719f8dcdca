"""Byte-aligned positions of two tokenizations of one continuation (``paw.transfer.distill.byte_align``)."""

from __future__ import annotations

from paw.transfer.distill.byte_align import aligned_positions, continuation_cuts

# student vocabulary: 0 BOS, 1 "Fact:", 2 " is", 3 " red", 4 ".", 5 " r", 6 "ed", 7 " is red"
STUDENT = [None, b"Fact:", b" is", b" red", b".", b" r", b"ed", b" is red"]
# teacher vocabulary: 0 BOS, 1 "Fact", 2 ":", 3 " is", 4 " re", 5 "d.", 6 " red"
TEACHER = [None, b"Fact", b":", b" is", b" re", b"d.", b" red"]


def test_cuts_count_bytes_read_of_the_continuation_and_name_the_predicting_position():
    # "Fact: is" + " red." : ids BOS, "Fact:", " is" | " red", "."
    assert continuation_cuts([0, 1, 2, 3, 4], 2, STUDENT) == (b" red.", {0: 2, 4: 3})
    # a special token inside reads nothing: the later position is kept for its cut
    assert continuation_cuts([0, 1, 2, 0, 3], 2, STUDENT) == (b" red", {0: 3})


def test_positions_pair_up_only_where_both_have_read_the_same_bytes():
    student = continuation_cuts([0, 1, 2, 5, 6, 4], 3, STUDENT)   # " r" "ed" "."   cuts at 0, 2, 4
    teacher = continuation_cuts([0, 1, 2, 3, 4, 5], 2, TEACHER)   # " re" "d."      cuts at 0, 3
    assert student == (b" red.", {0: 2, 2: 3, 4: 4}) and teacher == (b" red.", {0: 3, 3: 4})
    assert aligned_positions(student, teacher) == [(2, 3)]           # only the start of the continuation
    other = continuation_cuts([0, 1, 2, 6, 5], 2, TEACHER)            # " red" "d." is another text
    assert aligned_positions(student, other) == []
