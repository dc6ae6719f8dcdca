"""``paw eval --text FILE``: rolling log-likelihood in disjoint windows (lm-eval's ``loglikelihood_rolling``)."""

from __future__ import annotations

import json
import math

import pytest

from paw.evaluate.perplexity import count_words, rolling_windows, score_documents, summarize

TEXT = ("The quick brown fox jumps over the lazy dog. A stitch in time saves nine.\n"
        "Colourless green ideas sleep furiously, and the river runs on to the sea.\n")


@pytest.fixture(scope="module")
def lm(tiny_llama):
    from paw.io.lm import load_lm

    return load_lm(tiny_llama, device="cpu", dtype="float32")


def _logprobs(model, ids: list[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t >= 1, from one plain forward pass of the whole sequence."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    return [float(logp[t - 1, ids[t]]) for t in range(1, len(ids))]


def test_windows_are_lm_evals():
    # lm-eval's get_rolling_token_windows(context_len=1) + make_disjoint_window, N = 7, L = 3:
    # [P] -> t1 t2 t3,  [t3] -> t4 t5 t6,  [t4 t5 t6] -> t7 (the short last window keeps a full context)
    windows = rolling_windows([1, 2, 3, 4, 5, 6, 7], prefix=0, max_length=3)
    assert [(w.ids, w.n_cont) for w in windows] == [((0, 1, 2, 3), 3), ((3, 4, 5, 6), 3), ((4, 5, 6, 7), 1)]
    assert [(w.ids, w.n_cont) for w in rolling_windows([5, 6], prefix=9, max_length=8)] == [((9, 5, 6), 2)]
    assert rolling_windows([], prefix=0, max_length=4) == []
    for n in range(1, 30):   # every token predicted exactly once, every window at most L inputs
        ws = rolling_windows(list(range(1, n + 1)), prefix=0, max_length=4)
        assert sum(w.n_cont for w in ws) == n and all(len(w.ids) <= 5 for w in ws)
        assert [t for w in ws for t in w.ids[len(w.ids) - w.n_cont:]] == list(range(1, n + 1))


def test_one_window_is_the_sum_of_the_documents_token_log_probs(lm):
    model, tok = lm
    ids = tok.encode(TEXT)
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    by_hand = math.fsum(_logprobs(model, [prefix] + ids))
    row, = score_documents(model, tok, [TEXT], max_length=len(ids) + 5, progress=False)
    assert row["loglikelihood"] == pytest.approx(by_hand, rel=1e-5, abs=1e-4)
    assert row["tokens"] == len(ids) and row["windows"] == 1
    assert row["words"] == len(TEXT.split()) + 1 and row["bytes"] == len(TEXT.encode())   # trailing "\n": one more


def test_windows_smaller_than_the_document(lm):
    """L = 7: the model sees [P] t1..t7, then t7 t8..t14, ..., the last window L tokens back; summed by hand."""
    model, tok = lm
    ids = tok.encode(TEXT)
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    length = 7
    assert len(ids) > 3 * length and len(ids) % length, len(ids)   # several windows and a short last one
    by_hand = math.fsum(_logprobs(model, [prefix] + ids[:length]))
    start = length
    while start < len(ids):
        n = min(length, len(ids) - start)
        context = ids[start + n - length - 1:start]          # one token, or L + 1 - n for the short last window
        by_hand += math.fsum(_logprobs(model, context + ids[start:start + n])[len(context) - 1:])
        start += n
    row, = score_documents(model, tok, [TEXT], max_length=length, batch_size=3, progress=False)
    assert row["windows"] == -(-len(ids) // length)
    assert row["loglikelihood"] == pytest.approx(by_hand, rel=1e-5, abs=1e-4)
    whole, = score_documents(model, tok, [TEXT], max_length=4096, progress=False)
    assert whole["loglikelihood"] != pytest.approx(row["loglikelihood"], abs=1e-3)   # less context: other numbers


def test_metrics_by_hand():
    rows = [{"loglikelihood": -30.0, "tokens": 12, "words": 5, "bytes": 20, "windows": 2},
            {"loglikelihood": -10.0, "tokens": 8, "words": 5, "bytes": 20, "windows": 1}]
    m = summarize(rows)
    assert m["word_perplexity"] == pytest.approx(math.exp(40 / 10))
    assert m["byte_perplexity"] == pytest.approx(math.exp(40 / 40))
    assert m["bits_per_byte"] == pytest.approx(1 / math.log(2))
    assert m["token_perplexity"] == pytest.approx(math.exp(2.0))
    assert (m["n_documents"], m["n_words"], m["n_bytes"], m["n_tokens"], m["n_windows"]) == (2, 10, 40, 20, 3)
    assert count_words("a  b\tc") == 3 and count_words(" a") == 2   # re.split(r"\s+"), as lm-eval counts


def test_cli_text_and_jsonl_documents(cli, lm, tiny_llama, tmp_path):
    from paw.cli.evaluate import figure

    model, tok = lm
    docs = [TEXT, "Second document.\nIt is short."]
    txt = tmp_path / "notes.txt"
    txt.write_text(TEXT)
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(json.dumps({"text": docs[0]}) + "\n\n" + json.dumps(docs[1]) + "\n")
    result = cli("eval", "--model", tiny_llama, "--text", txt, "--max-length", "16", "--output", tmp_path / "a.json")
    assert result.exit_code == 0, result.stderr
    direct = summarize(score_documents(model, tok, [TEXT], max_length=16, progress=False))
    saved = json.loads((tmp_path / "a.json").read_text())
    assert saved["metrics"]["word_perplexity"] == pytest.approx(direct["word_perplexity"], rel=1e-5)
    assert saved["max_length"] == 16 and "text" in saved["inputs"]
    assert f"word_perplexity   {figure(direct['word_perplexity'])}   (29 words in 1 document)" in result.stdout
    assert f"bits_per_byte     {figure(direct['bits_per_byte'])}" in result.stdout

    per_item = tmp_path / "docs-items.jsonl"
    result = cli("eval", "--model", tiny_llama, "--text", jsonl, "--per-item", per_item, "--output", tmp_path / "b.json")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in per_item.read_text().splitlines()]
    expected = score_documents(model, tok, docs, progress=False)
    assert [r["index"] for r in rows] == [0, 1] and [r["words"] for r in rows] == [e["words"] for e in expected]
    assert [r["loglikelihood"] for r in rows] == pytest.approx([e["loglikelihood"] for e in expected], abs=1e-4)
    metrics = json.loads((tmp_path / "b.json").read_text())["metrics"]
    assert metrics["n_documents"] == 2 and metrics["bits_per_byte"] == pytest.approx(summarize(expected)["bits_per_byte"])
    config = tmp_path / "ppl.yaml"
    config.write_text(f"model: {tiny_llama}\ntext: {txt}\nmax-length: 16\n")
    by_file = cli("eval", "--config", config)
    assert by_file.exit_code == 0 and figure(direct["word_perplexity"]) in by_file.stdout, by_file.stderr
