"""Multiple-choice files without answers: the normal shape of unlabeled task inputs for distillation."""

import json

import pytest

from paw.errors import PawError
from paw.evaluate.formats import detect_format, items_from_records

RECORDS = {  # one labeled record per layout, and the answer field(s) to take away
    "mc": ({"question": "Sky?", "choices": ["red", "blue"], "answer": 1}, ["answer"]),
    "formatted": ({"input": "Which is a fruit?", "options": ["A: apple", "B: rock"], "target": "A",
                   "target_idx": 0, "dataset": "arc-easy"}, ["target", "target_idx"]),
    "arc": ({"question": "Which is a fruit?", "choices": {"text": ["rock", "apple"], "label": ["A", "B"]},
             "answerKey": "B"}, ["answerKey"]),
    "piqa": ({"goal": "Open a jar", "sol1": "twist the lid", "sol2": "eat the lid", "label": 0}, ["label"]),
    "winogrande": ({"sentence": "Sam hugged Ann because _ was sad.", "option1": "Sam", "option2": "Ann",
                    "answer": "2"}, ["answer"]),
    "boolq": ({"question": "is water wet", "passage": "Water is wet.", "answer": True}, ["answer"]),
}


@pytest.mark.parametrize("layout", sorted(RECORDS))
def test_unlabeled_items_keep_question_and_choices(layout):
    labeled, answer_keys = RECORDS[layout]
    bare = {k: v for k, v in labeled.items() if k not in answer_keys}
    [want] = items_from_records([(1, labeled)], "f.jsonl")
    [got] = items_from_records([(1, bare)], "f.jsonl", labels=False)
    assert (got.question, got.choices, got.fill_blank) == (want.question, want.choices, want.fill_blank)
    assert got.pairs() == want.pairs()
    assert detect_format(bare, labels=False) == layout


@pytest.mark.parametrize("layout", ["mc", "arc", "boolq", "winogrande"])
def test_labels_are_still_required_by_default(layout):
    labeled, answer_keys = RECORDS[layout]
    bare = {k: v for k, v in labeled.items() if k not in answer_keys}
    with pytest.raises(PawError, match="line 1"):
        items_from_records([(1, bare)], "f.jsonl")


def test_labeled_records_keep_their_answers_with_labels_false():
    for layout, (labeled, _) in RECORDS.items():
        [item] = items_from_records([(1, labeled)], "f.jsonl", labels=False)
        [want] = items_from_records([(1, labeled)], "f.jsonl")
        assert item.answer == want.answer, layout


def test_distill_reads_an_unlabeled_multiple_choice_file(tmp_path):
    from paw.transfer.distill.prompts import Prompt
    from paw.transfer.distill.run import read_inputs

    path = tmp_path / "inputs.jsonl"
    path.write_text("\n".join(json.dumps({"question": q, "choices": ["red", "blue"]})
                              for q in ("Sky?", "Sea?")) + "\n")
    prompts = [Prompt.of(x) for x in read_inputs(path)]
    assert prompts == [Prompt("Sky?", (("Sky?", " red"), ("Sky?", " blue"))),
                       Prompt("Sea?", (("Sea?", " red"), ("Sea?", " blue")))]
