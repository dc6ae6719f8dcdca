"""Bad multiple-choice items through ``paw eval`` and ``paw train-lora``: one line, exit code 2, nothing touched.

Each data file has a good item on line 1, a blank line, and the bad item on line 3, so the message
must name the right line. Runs in-process through ``paw.cli.main`` like ``test_bad_inputs.py``;
the data folder is hashed before and after every case.
"""

from __future__ import annotations

import json

import pytest

from tests.reliability.conftest import tree_hash

GOOD = {
    "mc": {"question": "What colour is the sky?", "choices": ["red", "blue"], "answer": 1},
    "arc": {"question": "Which?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"},
    "formatted": {"input": "Which?", "options": ["A: a", "B: b"], "target": "A", "target_idx": 0, "dataset": "arc"},
    "piqa": {"goal": "Open a jar", "sol1": "twist the lid", "sol2": "shout at it", "label": 0},
    "boolq": {"question": "is the sky blue", "passage": "The sky is blue.", "answer": True},
}

CASES = [  # (case id, layout, fields replaced in the bad item, fragment of the message)
    ("choices-string", "mc", {"choices": "red blue"}, "choices is a string, not a list of choices"),
    ("choices-null", "mc", {"choices": None}, "choices is null"),
    ("choices-empty-list", "mc", {"choices": []}, "choices is an empty list"),
    ("choice-empty", "mc", {"choices": ["red", ""]}, "choices[1] is an empty string"),
    ("choice-number", "mc", {"choices": ["red", 7]}, "choices[1] is an integer, not a string"),
    ("choice-null", "mc", {"choices": [None, "blue"]}, "choices[0] is null"),
    ("one-choice", "mc", {"choices": ["red"], "answer": 0}, "need at least 2"),
    ("answer-bool", "mc", {"answer": True}, "answer is a boolean"),
    ("answer-float", "mc", {"answer": 1.0}, "answer is a number (1.0)"),
    ("answer-null", "mc", {"answer": None}, "answer is null"),
    ("answer-out-of-range", "mc", {"answer": 2}, "answer index 2 out of range for 2 choices"),
    ("answer-negative", "mc", {"answer": -1}, "answer index -1 out of range"),
    ("answer-bad-letter", "mc", {"answer": "Z"}, "answer 'Z' is not one of the labels"),
    ("arc-labels-short", "arc", {"choices": {"text": ["a", "b", "c"], "label": ["A", "B"]}},
     "3 choices but 2 labels"),
    ("arc-text-string", "arc", {"choices": {"text": "abc", "label": ["A", "B", "C"]}}, "choices.text is a string"),
    ("arc-labels-string", "arc", {"choices": {"text": ["a", "b"], "label": "AB"}}, "choices.label is a string"),
    ("arc-answer-unknown", "arc", {"answerKey": "E"}, "answer 'E' is not one of the labels"),
    ("formatted-options-string", "formatted", {"options": "A: a B: b"}, "options is a string, not a list"),
    ("formatted-target-idx-bool", "formatted", {"target": "?", "target_idx": False}, "target_idx is a boolean"),
    ("formatted-target-idx-range", "formatted", {"target": "?", "target_idx": 4}, "target_idx index 4 out of range"),
    ("piqa-label-bool", "piqa", {"label": True}, "label is a boolean"),
    ("piqa-label-range", "piqa", {"label": 2}, "label index 2 out of range"),
    ("piqa-solution-null", "piqa", {"sol2": None}, "sol2 is null"),
    ("boolq-answer-string", "boolq", {"answer": "yes"}, "answer 'yes' is not true/false"),
]


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    """One file per case (good line 1, blank line 2, bad line 3) and a good file, in one folder."""
    root = tmp_path_factory.mktemp("eval-inputs")
    for cid, layout, change, _ in CASES:
        lines = [json.dumps(GOOD[layout]), "", json.dumps({**GOOD[layout], **change})]
        (root / f"{cid}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "good.jsonl").write_text(json.dumps(GOOD["mc"]) + "\n" + json.dumps(GOOD["mc"]) + "\n")
    return root


def _check(res, out, data, before, fragment, path):
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2, (res.exit_code, res.stdout[-500:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    assert [x for x in lines if x.startswith("error:")] == [lines[-1]]
    assert lines[-1].startswith(f"error: {path}: line 3: "), lines[-1]
    assert fragment in lines[-1] and "unexpected" not in lines[-1], lines[-1]
    assert not out.exists()
    assert tree_hash(data) == before


@pytest.mark.parametrize("cid,layout,change,fragment", CASES, ids=[c[0] for c in CASES])
def test_eval_refuses(cli, tiny_llama, eval_data, tmp_path, cid, layout, change, fragment):
    before = tree_hash(eval_data)
    out = tmp_path / "results.json"
    path = eval_data / f"{cid}.jsonl"
    res = cli("eval", "--model", tiny_llama, "--data", path, "--output", out, "--device", "cpu")
    _check(res, out, eval_data, before, fragment, path)


@pytest.mark.parametrize("cid", ["choices-string", "answer-bool", "arc-labels-short", "piqa-label-bool"])
def test_train_lora_refuses(cli, tiny_llama, eval_data, tmp_path, cid):
    """The training set and the test set (``--eval-data``) are checked the same way, before any training."""
    fragment = next(c[3] for c in CASES if c[0] == cid)
    before = tree_hash(eval_data)
    out = tmp_path / "lora"
    path = eval_data / f"{cid}.jsonl"
    res = cli("train-lora", "--model", tiny_llama, "--data", path, "--output", out, "--steps", "1")
    _check(res, out, eval_data, before, fragment, path)
    res = cli("train-lora", "--model", tiny_llama, "--data", eval_data / "good.jsonl", "--eval-data", path,
              "--output", out, "--steps", "1")
    _check(res, out, eval_data, before, fragment, path)


def test_good_file_still_evaluates(cli, tiny_llama, eval_data):
    res = cli("eval", "--model", tiny_llama, "--data", eval_data / "good.jsonl", "--device", "cpu")
    assert res.exit_code == 0, res.stderr
    assert "(n=2)" in res.stdout
