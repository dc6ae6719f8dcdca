"""Corpus files for the tokenizer commands: which JSON fields are text, and several files after one flag."""

from __future__ import annotations

import json

from paw.io.tokenizer import read_corpus, record_texts


def test_record_texts_reads_lists_and_skips_ids_and_labels():
    formatted = {"id": "arc-easy_Mercury_7", "dataset": "arc-easy", "task_type": "multiple_choice",
                 "input": "Which gas do plants take in?", "options": ["A: oxygen", "B: carbon dioxide"],
                 "target": "B", "target_idx": 1}
    assert record_texts(formatted) == ["Which gas do plants take in?", "A: oxygen", "B: carbon dioxide"]
    arc = {"id": "M_1", "question": "Q?", "choices": {"text": ["dry palms", "wet palms"], "label": ["A", "B"]},
           "answerKey": "A"}
    assert record_texts(arc) == ["Q?", "dry palms", "wet palms"]
    wino = {"subset": "debiased", "sentence": "The _ is small.", "option1": "garage", "option2": "yard", "answer": "1"}
    assert record_texts(wino) == ["The _ is small.", "garage", "yard"]
    assert record_texts({"id": 3, "text": "whole line", "title": "ignored when text is there"}) == ["whole line"]
    # without a list of choices, answer/target are texts (a translation pair, a summary)
    assert record_texts({"source": "Hello.", "target": "你好。"}) == ["Hello.", "你好。"]


def test_jsonl_corpus_counts_texts_not_labels(commonsense):
    path = commonsense / "formatted" / "arc-easy_test_formatted.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    texts = read_corpus([path])
    assert len(texts) == sum(1 + len(r["options"]) for r in records)
    assert not [t for t in texts if len(t) <= 2]  # no "A", "0", ids are long but skipped too
    assert not {r["id"] for r in records} & set(texts)


def test_corpus_takes_several_files_after_one_flag(cli, tiny_llama, tmp_path, commonsense):
    jsonl = commonsense / "formatted" / "piqa_validation_formatted.jsonl"
    txt = tmp_path / "more.txt"
    txt.write_text("one line of text\nand another\n", encoding="utf-8")
    res = cli("analyze-tokenizers", "--source", tiny_llama, "--target", tiny_llama, "--outdir", tmp_path / "a",
              "--corpus", jsonl, txt, "--no-plots")
    assert res.exit_code == 0, res.stderr
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["encoding"]["overall"]["texts"] == len(read_corpus([jsonl])) + 2 == 8 * 3 + 2  # goal, sol1, sol2 each


def test_length_ratio_axis_fits_the_mass_of_lines():
    from paw.vocab.plots import length_ratio_figure

    rows = [{"length_ratio": 1.0 + 0.01 * (i % 11 - 5)} for i in range(200)] + [{"length_ratio": 10.0}] * 2
    fig = length_ratio_figure(rows, {"overall": {"length_ratio": 1.02}}, source="a", target="b")
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    assert 0.9 < low < 1.0 and 1.0 < high < 1.2  # not 0..10: the two outliers are counted, not plotted out there
    labels = ax.get_legend_handles_labels()[1]
    assert "2 line(s) beyond the axis, in the end bins" in labels and "corpus: 1.020" in labels
