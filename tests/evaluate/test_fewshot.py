"""``paw eval --num-fewshot K --fewshot-data FILE``: lm-eval's few-shot contexts, drawn as lm-eval's sampler draws."""

from __future__ import annotations

import json
import random

import pytest

from paw.errors import PawError
from paw.evaluate.fewshot import draw, with_examples
from paw.evaluate.items import MCItem


def _arc(i: int) -> MCItem:
    return MCItem(f"Question: q{i}?\nAnswer:", (f" a{i}", f" b{i}", f" c{i}"), i % 3, id=f"id{i}")


def test_draw_is_lm_evals_sampler_call_for_call():
    """One Random(seed) for the run; per item rnd.sample(pool, K), or K + 1 with the item removed when the
    pool holds it (lm-eval's ContextSampler.sample with eval_doc)."""
    pool = [_arc(i) for i in range(20)]
    others = [_arc(100 + i) for i in range(4)]
    rnd = random.Random(1234)
    expected = [rnd.sample(range(20), 3) for _ in others]
    assert draw(others, pool, 3, seed=1234) == expected
    rnd = random.Random(7)
    own = []
    for i in range(5):   # the pool is the evaluated set: K + 1 drawn, the item removed, the first K kept
        own.append([j for j in rnd.sample(range(20), 4) if j != i][:3])
    assert draw(pool[:5], pool, 3, seed=7) == own
    assert all(i not in picks for i, picks in enumerate(own))
    assert draw(others, pool, 3, seed=1234) != draw(others, pool, 3, seed=1235)


def test_an_item_is_never_its_own_example_even_as_a_duplicate():
    pool = [_arc(i) for i in range(6)] + [_arc(2)]   # item 2 twice
    for seed in range(200):
        picks = draw([_arc(2)], pool, 5, seed=seed)[0]
        assert sorted(picks) == [0, 1, 3, 4, 5]
    with pytest.raises(PawError, match="holds only 5"):
        draw([_arc(2)], pool, 6, seed=0)


def test_context_is_lm_evals_arc_easy_format():
    pool = [_arc(i) for i in range(3)]
    item = _arc(9)
    shot, drawn = with_examples([item], pool, 2, seed=1234)
    a, b = drawn[0]
    prefix = (f"Question: q{a}?\nAnswer: {'abc'[a % 3]}{a}\n\n"
              f"Question: q{b}?\nAnswer: {'abc'[b % 3]}{b}\n\n")
    assert shot[0].pairs() == [(prefix + "Question: q9?\nAnswer:", f" {c}9") for c in "abc"]
    assert shot[0].norm_lengths() == item.norm_lengths() and shot[0].question == item.question


def test_winogrande_examples_are_the_filled_in_sentences():
    pool = [MCItem("Tom gave Bob a gift because _ was kind.", ("Tom", "Bob"), 0)]
    item = MCItem("Ann called Sue since _ was lonely.", ("Ann", "Sue"), 1, fill_blank=True)
    shot, _ = with_examples([item], [MCItem(p.question, p.choices, p.answer, fill_blank=True) for p in pool], 1,
                            seed=0)
    example = "Tom gave Bob a gift because Tom was kind.\n\n"
    assert shot[0].pairs() == [(example + "Ann called Sue since Ann", " was lonely."),
                               (example + "Ann called Sue since Sue", " was lonely.")]
    assert shot[0].norm_lengths() == item.norm_lengths()   # lm-eval: the choices' own lengths


def test_cli_few_shot_scores_are_those_of_the_built_contexts(cli, fact_model, colour_task, tmp_path):
    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm
    from paw.io.mcdata import write_items

    test, train = colour_task[:5], colour_task[5:]
    data, shots = write_items(tmp_path / "test.jsonl", test), write_items(tmp_path / "train.jsonl", train)
    per_item = tmp_path / "items.jsonl"
    result = cli("eval", "--model", fact_model, "--data", data, "--num-fewshot", "3", "--fewshot-data", shots,
                 "--seed", "5", "--per-item", per_item, "--output", tmp_path / "m.json")
    assert result.exit_code == 0, result.stderr
    records = [json.loads(line) for line in per_item.read_text().splitlines()]
    rnd = random.Random(5)
    assert [r["fewshot"] for r in records] == [rnd.sample(range(len(train)), 3) for _ in test]
    prefixed = [MCItem("".join(train[i].solved() + "\n\n" for i in r["fewshot"]) + item.question, item.choices,
                       item.answer) for r, item in zip(records, test, strict=True)]
    model, tok = load_lm(fact_model, device="cpu")
    direct = evaluate(model, tok, prefixed, progress=False, per_item=True)
    for r, lls, item in zip(records, direct["choice_logprobs"], prefixed, strict=True):
        assert r["choice_logprobs"] == pytest.approx(lls, abs=1e-4)
        assert r["prefix"] + r["question"] == item.question
    zero_shot = evaluate(model, tok, test, progress=False, per_item=True)["choice_logprobs"]
    shift = max(abs(a - b) for r, z in zip(records, zero_shot, strict=True) for a, b in zip(r["choice_logprobs"], z, strict=True))
    assert shift > 1e-3   # the examples are read
    saved = json.loads((tmp_path / "m.json").read_text())
    assert saved["num_fewshot"] == 3 and saved["seed"] == 5 and "fewshot_data" in saved["inputs"]


def test_few_shot_from_config(cli, fact_model, colour_task, tmp_path):
    from paw.io.mcdata import write_items

    data, shots = write_items(tmp_path / "t.jsonl", colour_task[:4]), write_items(tmp_path / "s.jsonl", colour_task[4:])
    config = tmp_path / "eval.yaml"
    config.write_text(f"model: {fact_model}\ndata: {data}\nnum-fewshot: 2\nfewshot_data: {shots}\nseed: 3\n")
    by_file = cli("eval", "--config", config, "--per-item", tmp_path / "a.jsonl")
    by_flags = cli("eval", "--model", fact_model, "--data", data, "--num-fewshot", "2", "--fewshot-data", shots,
                   "--seed", "3", "--per-item", tmp_path / "b.jsonl")
    assert by_file.exit_code == by_flags.exit_code == 0, by_file.stderr + by_flags.stderr
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    config.write_text(f"model: {fact_model}\ndata: {data}\nnum_fewshot: -2\n")
    bad = cli("eval", "--config", config)
    assert bad.exit_code == 2 and "num_fewshot" in bad.stderr, bad.stderr
