"""``--batch-size auto``: the largest batch that fits, found by halving on out of memory."""

from __future__ import annotations

import pytest

from paw.errors import PawError
from paw.evaluate.encode import encode_pair, pad_id_of
from paw.evaluate.mc import AUTO_BATCH, score_encoded


@pytest.fixture(scope="module")
def lm(tiny_llama):
    from paw.io.lm import load_lm

    return load_lm(tiny_llama, device="cpu", dtype="float32")


def _encoded(tok, n: int = 11):
    return [encode_pair(tok, f"Question {i}: which colour is item {i}?", " red" if i % 2 else " a green one",
                        start="tokenizer") for i in range(n)]


def test_auto_halves_on_out_of_memory_and_gives_the_same_scores(lm, monkeypatch):
    import torch

    model, tok = lm
    encoded = _encoded(tok)
    one_by_one = score_encoded(model, encoded, pad_id=pad_id_of(tok), batch_size=1, progress=False)
    forward, seen = model.forward, []

    def small_memory(*args, **kwargs):   # a device where more than 3 rows do not fit
        rows = kwargs["input_ids"].shape[0]
        seen.append(rows)
        if rows > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", small_memory)
    auto = score_encoded(model, encoded, pad_id=pad_id_of(tok), batch_size="auto", progress=False)
    assert [s for s, _ in auto] == pytest.approx([s for s, _ in one_by_one], abs=1e-5)
    assert [c for _, c in auto] == [c for _, c in one_by_one]
    assert seen[0] == AUTO_BATCH["cpu"] and max(seen) == AUTO_BATCH["cpu"]   # tried, refused once, then halved
    assert seen[1:3] == [4, 2] and max(seen[3:]) <= 2 and sum(r for r in seen if r <= 3) == len(encoded)
    with pytest.raises(PawError, match="out of memory on cpu with 8 sequences.*--batch-size auto"):
        score_encoded(model, encoded, pad_id=pad_id_of(tok), batch_size=8, progress=False)


def test_cli_auto_equals_a_fixed_batch(cli, tiny_llama, tmp_path):
    import json

    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    data = write_items(tmp_path / "quiz.jsonl", fact_task("colour", n=10, seed=0))
    fixed = cli("eval", "--model", tiny_llama, "--data", data, "--batch-size", "3", "--per-item", tmp_path / "a.jsonl")
    auto = cli("eval", "--model", tiny_llama, "--data", data, "--batch-size", "auto", "--per-item", tmp_path / "b.jsonl")
    assert fixed.exit_code == auto.exit_code == 0, fixed.stderr + auto.stderr
    a, b = ([json.loads(x)["choice_logprobs"] for x in (tmp_path / f).read_text().splitlines()] for f in ("a.jsonl", "b.jsonl"))
    assert [x for row in a for x in row] == pytest.approx([x for row in b for x in row], abs=1e-5)
    config = tmp_path / "eval.yaml"
    config.write_text(f"model: {tiny_llama}\ndata: {data}\nbatch-size: auto\n")
    assert cli("eval", "--config", config).exit_code == 0
    for bad in ("0", "many", "-3"):
        config.write_text(f"model: {tiny_llama}\ndata: {data}\nbatch_size: {bad}\n")
        result = cli("eval", "--config", config)
        assert result.exit_code == 2 and "batch_size" in result.stderr, result.stderr
