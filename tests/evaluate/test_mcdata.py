"""Format readers: every layout on slices of the real files (tests/data/commonsense), and bad input."""

from __future__ import annotations

import json

import pytest

from paw.errors import PawError
from paw.evaluate.formats import READERS, detect_format, read_items, strip_labels
from paw.evaluate.items import MCItem


def write_lines(path, lines: list[str]):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# items per slice in tests/data/commonsense: the first 8 lines, plus for ARC the first item whose
# formatted file has a digit label (target_idx -15)
COUNTS = {
    "arc-challenge_test": 9, "arc-challenge_train": 9, "arc-challenge_validation": 9,
    "arc-easy_test": 9, "arc-easy_train": 9, "arc-easy_validation": 9,
    "openbookqa_test": 8, "openbookqa_train": 8, "openbookqa_validation": 8,
    "piqa_validation": 8, "winogrande_train": 8, "winogrande_validation": 8,
    "boolq_validation": 8,
}
RAW_FORMAT = {"arc": "arc", "openbookqa": "openbookqa", "piqa": "piqa", "winogrande": "winogrande",
              "boolq": "boolq"}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_raw_and_formatted_agree(commonsense, name):
    raw = read_items(commonsense / "raw" / f"{name}.jsonl")
    formatted = read_items(commonsense / "formatted" / f"{name}_formatted.jsonl")
    assert len(raw) == len(formatted) == COUNTS[name]
    layout = RAW_FORMAT[name.split("-")[0].split("_")[0]]
    first = (commonsense / "raw" / f"{name}.jsonl").read_text().splitlines()[0]
    assert detect_format(json.loads(first) if first.startswith("{\"") else eval_free(first)) == layout
    # same answers and the same choices from both layouts (formatted ARC digit labels repaired)
    assert [i.answer for i in raw] == [i.answer for i in formatted]
    assert [i.choices for i in raw] == [i.choices for i in formatted]
    assert all(0 <= i.answer < len(i.choices) for i in raw)


def eval_free(line: str) -> dict:
    import ast

    return ast.literal_eval(line)


def test_mixed_file_and_known_items(commonsense):
    items = read_items(commonsense / "formatted" / "cs_mixed_formatted_test.jsonl")
    assert len(items) == 9
    first = items[0]
    assert first.question.endswith("increase in rotation?\nAnswer:")
    assert first.choices[first.answer] == " Planetary days will become shorter."
    # an ARC item with digit labels: target "2", target_idx -15 in the file (line 45 of the full set)
    line = (commonsense / "formatted" / "arc-challenge_test_formatted.jsonl").read_text().splitlines()[8]
    assert json.loads(line)["target_idx"] == -15 and json.loads(line)["target"] == "2"
    arc = read_items(commonsense / "formatted" / "arc-challenge_test_formatted.jsonl")
    assert arc[8].answer == 1 and arc[8].choices[1].startswith(" Kinetic energy increases")
    assert items[8] == arc[8]


def test_winogrande_partial_scoring(commonsense):
    item = read_items(commonsense / "raw" / "winogrande_validation.jsonl", limit=1)[0]
    assert item.fill_blank and item.choices == ("Sarah", "Maria") and item.answer == 1
    assert item.pairs() == [("Sarah was a much better surgeon than Maria so Sarah", " always got the easier cases."),
                            ("Sarah was a much better surgeon than Maria so Maria", " always got the easier cases.")]


def test_boolq_yes_no(commonsense):
    raw = read_items(commonsense / "raw" / "boolq_validation.jsonl", limit=3)
    formatted = read_items(commonsense / "formatted" / "boolq_validation_formatted.jsonl", limit=3)
    assert all(i.choices == (" no", " yes") for i in raw + formatted)
    assert raw[0].answer == 0 and raw[0].question.endswith("Question: does ethanol take more energy make that produces?\nAnswer:")


def test_limit(commonsense):
    assert len(read_items(commonsense / "raw" / "piqa_validation.jsonl", limit=7)) == 7


def test_strip_labels():
    assert strip_labels(["A: dry", "B: wet"]) == ["dry", "wet"]
    assert strip_labels(["1: one", "2: two", "3: x"]) == ["one", "two", "x"]
    assert strip_labels(["B: x", "A: y"]) == ["B: x", "A: y"]  # out of order: text, not labels
    assert strip_labels(["Ratio 3:1", "Ratio 1:3"]) == ["Ratio 3:1", "Ratio 1:3"]


def test_flat_and_hellaswag(tmp_path):
    flat = write_lines(tmp_path / "flat.jsonl", [
        json.dumps({"question": "2 + 2 =", "choices": ["3", "4"], "answer": 1}),
        json.dumps({"question": "Sky?", "choices": ["blue", "red"], "answer": "blue"}),
        json.dumps({"question": "Third?", "choices": ["x", "y", "z"], "answer": "C"}),
    ])
    items = read_items(flat)
    assert items[0] == MCItem("2 + 2 =", (" 3", " 4"), 1)
    assert [i.answer for i in items] == [1, 0, 2]
    hs = write_lines(tmp_path / "hs.jsonl", [json.dumps({
        "activity_label": "Baking", "ctx_a": "A man mixes flour.", "ctx_b": "he", "label": "2",
        "endings": ["sleeps [title] now.", "runs.", "bakes bread.", "sings."]})])
    item = read_items(hs)[0]
    assert item.question == "Baking: A man mixes flour. He"
    assert item.choices == (" sleeps. now.", " runs.", " bakes bread.", " sings.") and item.answer == 2
    assert set(READERS) >= {"formatted", "arc", "openbookqa", "piqa", "winogrande", "boolq", "hellaswag", "mc"}


@pytest.mark.parametrize("lines, fragment", [
    (['{"question": "q", "choices": ["a", "b"], "answer": 0}', '{"question": "q", "choices": ["a"', "{}"],
     "line 2: not a JSON object"),
    (['{"question": "q", "choices": ["a", "b"], "answer": 0}', "", '{"question": "q", "choices": ["a", "b"]}'],
     "line 3: mc item lacks field(s) answer"),
    (['{"question": "q", "choices": ["a", "b"], "answer": 5}'], "line 1: bad mc item (answer index 5 out of range"),
    (['{"foo": 1}'], "line 1: cannot tell the layout"),
    (['[1, 2]'], "line 1: expected a JSON object"),
    (["{'question': __import__('os').getcwd(), 'choices': {'text': ['a'], 'label': ['A']}, 'answerKey': 'A'}"],
     "line 1: not a JSON object"),
    (['{"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"}'], "sentence has no '_'"),
    (['{"sentence": "a _ b", "option1": "a", "option2": "b", "answer": ""}'], "bad winogrande item"),
])
def test_malformed(tmp_path, lines, fragment):
    path = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(PawError) as err:
        read_items(path)
    assert fragment in str(err.value) and "bad.jsonl" in str(err.value)


def test_python_repr_lines_are_read_safely(tmp_path):
    path = write_lines(tmp_path / "arc.jsonl", [
        "{'id': 'x1', 'question': 'Which?', 'choices': {'text': ['a', 'b'], 'label': ['A', 'B']}, 'answerKey': 'B'}"])
    assert read_items(path) == [MCItem("Question: Which?\nAnswer:", (" a", " b"), 1, "x1")]


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(PawError, match="no such data file"):
        read_items(tmp_path / "nope.jsonl")
    with pytest.raises(PawError, match="no items"):
        read_items(write_lines(tmp_path / "empty.jsonl", [""]))
    arc = write_lines(tmp_path / "arc.jsonl", ['{"question": "q", "choices": {"text": ["a", "b"]}, "answerKey": "A"}'])
    with pytest.raises(PawError, match="line 1: piqa item lacks field.s. goal, sol1, sol2 .it looks like arc."):
        read_items(arc, format="piqa")
    with pytest.raises(PawError, match="unknown data format 'csv'"):
        read_items(write_lines(tmp_path / "x.jsonl", ["{}"]), format="csv")


def test_cli_malformed_data_is_one_line(cli, tmp_path, tiny_llama):
    path = write_lines(tmp_path / "bad.jsonl", ['{"question": "q", "choices": ["a", "b"], "answer": 0}', "{oops"])
    result = cli("eval", "--model", tiny_llama, "--data", path)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"error: {path}: line 2: not a JSON object (Expecting property "
                                                  "name enclosed in double quotes at column 2)"]
