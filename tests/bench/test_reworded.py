"""The ``facts`` task asked in other words (``facts:reworded``): phrasings never trained or distilled on,
split from the same scoring pass, and kept / recovered fractions computed like the taught ones."""

from __future__ import annotations

import pytest

from paw.bench.distill import inputs_for
from paw.bench.quality import _views
from paw.bench.report import markdown
from paw.bench.results import summarize
from paw.bench.tasks import (
    FACTS_TRAIN,
    HELDOUT_ASK,
    HELDOUT_TRAIN,
    REWORDED,
    TASKS,
    facts_task,
    reworded_name,
)


def _stem(template: str) -> str:
    """A template's words without the name: ``'{name} likes the colour'`` -> ``'likes the colour'``."""
    return " ".join(template.replace("{name}", " ").split())


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_reworded_questions_are_never_a_training_or_distillation_prompt(seed):
    task = facts_task(300, seed=seed, words=[])
    reworded = {item.question for item in task.reworded}
    taught = {item.question for item in task.train}
    distilled = {p.text for kind in ("inputs", "synth") for p in
                 (inputs_for(kind, task, seed).get("prompts") or inputs_for(kind, task, seed)["seed_examples"])}
    assert reworded.isdisjoint(taught) and reworded.isdisjoint(distilled)
    # no reworded question contains a taught prompt, nor a taught phrasing's words around the name
    assert not any(t in r for t in taught | distilled for r in reworded)
    trained_templates = {FACTS_TRAIN, *HELDOUT_TRAIN, HELDOUT_ASK}
    assert not any(_stem(t) in _stem(r) or _stem(r) in _stem(t) for t in trained_templates for r in REWORDED)
    # and no task of the benchmark trains on one
    for name, make in TASKS.items():
        other = make(60, seed=seed, words=[f"w{i}" for i in range(60)])
        stems = {_stem(r) for r in REWORDED}
        assert not any(stem in item.question for stem in stems for item in other.train), name


def test_reworded_items_ask_the_same_facts_in_several_phrasings():
    task = facts_task(300, seed=3, words=[])
    assert len(task.reworded) == 300 and task.reworded_clusters == task.clusters
    used = set()
    for item, fact in zip(task.reworded, task.reworded_clusters, strict=True):
        statement = task.train[fact]
        name = statement.question.removesuffix(" likes the colour")
        phrasings = [t for t in REWORDED if t.format(name=name) == item.question]
        assert len(phrasings) == 1 and item.choices[item.answer] == statement.choices[0]  # the same fact
        assert len(set(item.choices)) == 4
        used.add(phrasings[0])
    assert used == set(REWORDED)  # every phrasing drawn
    assert task.reworded == facts_task(300, seed=3, words=[]).reworded  # seeded
    assert task.reworded != facts_task(300, seed=4, words=[]).reworded
    assert task.scored == task.test + task.reworded


def test_views_split_every_condition_and_its_clusters():
    task = facts_task(4, seed=0, words=[])  # 2 facts, 4 taught questions, 4 reworded ones
    result = {"outcomes": {"base": [0, 0, 0, 1, 1, 0, 0, 0], "copy": [1, 1, 1, 1, 0, 1, 0, 1]},
              "status": {"copy": "ok"}, "reasons": {}, "summaries": {"copy": {"methods": {"copy": 1}}}}
    views = _views(task, result)
    assert list(views) == ["facts", reworded_name("facts")]
    assert views["facts"]["outcomes"] == {"base": [0, 0, 0, 1], "copy": [1, 1, 1, 1]}
    assert views["facts:reworded"]["outcomes"] == {"base": [1, 0, 0, 0], "copy": [0, 1, 0, 1]}
    assert views["facts"]["clusters"] == views["facts:reworded"]["clusters"] == [0, 1, 0, 1]
    assert views["facts:reworded"]["summaries"] == result["summaries"]
    with pytest.raises(ValueError, match="3 outcomes for 8 items"):
        task.views([0, 1, 0])


def test_reworded_kept_and_recovered_by_hand():
    """8 items, every item its own cluster, one seed; no bootstrap: the fractions are plain ratios.

    Taught phrasing: source 0/8 -> 8/8 with its LoRA (gain 1); target base 2/8, direct 8/8, copy 8/8:
    kept (1 - .25) / 1 = 0.75, recovered (1 - .25) / (1 - .25) = 1.
    Reworded: source 0/8 -> 4/8 (gain .5); target base 2/8, direct 6/8, copy 4/8:
    kept (.5 - .25) / .5 = 0.5, recovered (.5 - .25) / (.75 - .25) = 0.5.
    """
    def entry(**outcomes):
        return {0: {"outcomes": {k: v * 2 for k, v in outcomes.items()}, "status": {"copy": "ok"}, "reasons": {},
                    "summaries": {"copy": {}}, "clusters": None}}

    raw = {"facts:reworded": {"source": entry(base=[0, 0, 0, 0], direct=[1, 1, 0, 0], random=[0, 0, 0, 0],
                                              copy=[1, 1, 0, 0]),
                              "upgrade": entry(base=[1, 0, 0, 0], direct=[1, 1, 1, 0], random=[1, 0, 0, 0],
                                               copy=[1, 1, 0, 0])},
           "facts": {"source": entry(base=[0, 0, 0, 0], direct=[1, 1, 1, 1], random=[0, 0, 0, 0], copy=[1, 1, 1, 1]),
                     "upgrade": entry(base=[1, 0, 0, 0], direct=[1, 1, 1, 1], random=[1, 0, 0, 0],
                                      copy=[1, 1, 1, 1])}}
    results = summarize(raw, {"methods": ["copy"], "n_boot": 0}, {}, {})
    rows = {(r["task"], r["target"], r["condition"]): r for r in results["rows"]}
    assert [r["task"] for r in results["rows"]][0] == "facts"  # the taught phrasing first, its rewording after
    taught, reworded = rows[("facts", "upgrade", "copy")], rows[("facts:reworded", "upgrade", "copy")]
    assert taught["kept"]["value"] == pytest.approx(0.75) and taught["recovered"]["value"] == pytest.approx(1.0)
    assert reworded["kept"]["value"] == pytest.approx(0.5) and reworded["recovered"]["value"] == pytest.approx(0.5)
    assert reworded["accuracy"]["mean"] == pytest.approx(0.5)
    assert reworded["accuracy"]["stderr"] == pytest.approx((0.5 * 0.5 / 8) ** 0.5)
    text = markdown(results)
    assert "Task `facts:reworded` (the same facts asked in phrasings never used as a training" in text
    assert "| upgrade | 0.50 |" in text  # kept and recovered of the reworded questions, copy column
    assert "### Task `facts`: kept fraction ± stderr, taught phrasing → asked in other words" in text
    assert "| upgrade | 0.75 → 0.50 | 0.00 → 0.00 |" in text  # copy, random
