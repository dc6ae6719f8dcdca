"""Pretraining corpora and the benchmark's multiple-choice tasks, all built offline and deterministically.

Corpora: the question + right-answer text of the commonsense sets in the ``--data`` folder when
they are present (ARC and OpenBookQA for the source, PIQA and Winogrande for the *shifted* corpus a
version upgrade is trained on), else the embedded ``paw/data`` samples plus template sentences
(:func:`synthetic_sentences`). Either way the model learns real structure (syntax, frequent words).

Tasks (registry :data:`TASKS`), each near chance for any base and learned well by a LoRA:

- ``facts`` (**memorisation**): recall of invented facts. ``N / 2`` made-up people, each with a
  favourite colour out of twelve: ``"Kavo Milret likes the colour"`` -> ``" teal"``. The LoRA is
  trained on the fact statements; the ``N`` evaluation items ask every fact twice *with the training
  prompt*, each time against three random other colours in a random order. No base can know them
  (chance 1/4). The two questions of a fact form a cluster for the bootstrap. Beside them, ``N``
  more items ask the same facts in phrasings never used as a training or distillation prompt
  (:data:`REWORDED`, one drawn per item with a seed), scored as the task ``facts:reworded``
  (:attr:`TaskData.views`): users ask their facts in their own words.
- ``facts-heldout``: the same kind of facts, stated in training text in two phrasings
  (``"Kavo Milret likes the colour teal."``, ``"The favourite colour of Kavo Milret is teal."``) and
  asked in a third one never trained on (``"Ask Kavo Milret about colours and the answer is"``).
- ``facts-known`` (asked for by name, not in the default run): the case of an adapter moved onto a
  stronger base. The LoRA learns a third of the facts; every target learned the other two thirds in
  its own training, so it starts above the teacher; distillation sees every fact's prompt.
- ``rule``: apply a rule to unseen inputs. ``"Word: road. Again:"`` -> ``" road"`` against three other
  words. Training and evaluation use disjoint words, so only the rule (repeat the word shown)
  carries over. The small bases have no such habit (chance 1/4); the rule needs attention to
  copy, which is what a transfer must carry.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from paw.evaluate.formats import read_items
from paw.evaluate.items import MCItem
from paw.registry import Registry

COLOURS = ["red", "blue", "green", "yellow", "black", "white", "brown", "pink", "grey", "orange", "purple", "teal"]
_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "kr", "st", "tr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "m", "th"]

# source corpus / shifted corpus (the "next version" is trained on other sources)
SOURCE_SETS = ("arc-easy_train", "arc-challenge_train", "openbookqa_train", "arc-easy_test")
SHIFTED_SETS = ("piqa_validation", "winogrande_train", "boolq_validation")


@dataclass(frozen=True)
class TaskData:
    """A task instance: texts the LoRA trains on (as MC items, answer = the text to learn) and held-out items.

    ``clusters``: per test item, the id of the group of items that are not independent (the questions
    about one fact); None when every item stands alone. ``reworded``: more held-out items asking the
    same thing in other words, scored with every condition and reported as a task of its own
    (:meth:`views`); ``reworded_clusters`` theirs. ``known``: what every target (not the source) learns
    in its own training before anything is moved onto it, so it starts stronger than the teacher;
    ``inputs``: the label-free distillation inputs when they are not the training prompts.
    """

    name: str
    train: list[MCItem]
    test: list[MCItem]
    clusters: list[int] | None = None
    reworded: list[MCItem] = field(default_factory=list)
    reworded_clusters: list[int] | None = None
    known: list[MCItem] = field(default_factory=list)
    inputs: list[str] | None = None

    @property
    def scored(self) -> list[MCItem]:
        """Every item a condition is scored on, in one pass: ``test`` then ``reworded``."""
        return [*self.test, *self.reworded]

    def views(self, outcomes: list) -> dict[str, tuple[list, list[int] | None]]:
        """Per-item outcomes over :attr:`scored` split into ``{task name: (outcomes, clusters)}``.

        >>> t = TaskData("facts", [], [MCItem("a", (" x", " y"), 0)], [0], [MCItem("b", (" x", " y"), 1)], [0])
        >>> t.views([1, 0])
        {'facts': ([1], [0]), 'facts:reworded': ([0], [0])}
        """
        if len(outcomes) != len(self.scored):
            raise ValueError(f"{len(outcomes)} outcomes for {len(self.scored)} items")
        out = {self.name: (list(outcomes[:len(self.test)]), self.clusters)}
        if self.reworded:
            out[reworded_name(self.name)] = (list(outcomes[len(self.test):]), self.reworded_clusters)
        return out


# ------------------------------------------------------------------------------------------- corpora

def _sentence(item: MCItem) -> str:
    answer = re.sub(r"^[A-E]: ", "", item.choices[item.answer]).strip()
    if item.fill_blank or "_" in item.question:
        return item.question.replace("_", answer)
    question = re.sub(r"^Question: |\nAnswer:\s*$", "", item.question.strip())
    return re.sub(r"\s+", " ", f"{question.strip()} {answer}")


def missing_sets(folder: Path | str | None) -> list[str]:
    """The ``<name>_formatted.jsonl`` files the corpora need that ``folder`` lacks (all when ``folder`` is None)."""
    names = [f"{name}_formatted.jsonl" for name in SOURCE_SETS + SHIFTED_SETS]
    return names if folder is None else [n for n in names if not (Path(folder) / n).is_file()]


FALLBACK_WARNING = ("warning: no --data folder: the corpus is the embedded fallback (paw/data samples + template "
                    "sentences), not commonsense QA text; figures differ from docs/benchmarks/transfer-quality.md")


def commonsense_corpus(folder: Path | None, names: tuple[str, ...]) -> list[str] | None:
    """Sentences (question + right answer) from ``folder/<name>_formatted.jsonl``; ``None`` if absent."""
    if folder is None:
        return None
    paths = [Path(folder) / f"{name}_formatted.jsonl" for name in names]
    if not all(p.exists() for p in paths):
        return None
    return [_sentence(item) for path in paths for item in read_items(path)]


def synthetic_sentences(n: int, *, seed: int) -> list[str]:
    """Template sentences with a small grammar, e.g. ``'The old farmer carried the blue box to the river.'``."""
    rng = random.Random(seed)
    adj = "old young big small quiet busy red blue green happy tired clever".split()
    noun = "farmer teacher child dog cat bird doctor river box garden house ship city tree".split()
    verb = "carried found painted watched opened followed cleaned built moved saw".split()
    place = "to the river|into the house|near the garden|across the city|under the tree|on the ship".split("|")
    out = []
    for _ in range(n):
        a, b = rng.sample(noun, 2)
        out.append(f"The {rng.choice(adj)} {a} {rng.choice(verb)} the {rng.choice(adj)} {b} {rng.choice(place)}.")
    return out


def build_corpora(commonsense: Path | None, *, seed: int, embedded: list[str]) -> tuple[list[str], list[str], str]:
    """``(source_texts, shifted_texts, description)``; falls back to embedded + synthetic text."""
    source = commonsense_corpus(commonsense, SOURCE_SETS)
    shifted = commonsense_corpus(commonsense, SHIFTED_SETS)
    if source and shifted:
        return source, shifted, f"commonsense text ({', '.join(SOURCE_SETS)}; shifted: {', '.join(SHIFTED_SETS)})"
    synth = synthetic_sentences(6000, seed=seed)
    half = len(synth) // 2
    # the shifted corpus: the other half of the grammar plus the embedded text reversed in sentence order
    return (embedded * 20 + synth[:half], synth[half:] + [" ".join(reversed(t.split())) for t in embedded] * 20,
            "fallback: embedded paw/data samples + synthetic template sentences")


# --------------------------------------------------------------------------------------------- tasks

def _name(rng: random.Random) -> str:
    def word() -> str:
        return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                       for _ in range(rng.choice((1, 2)))).capitalize()
    return f"{word()} {word()}"


def _choices(rng: random.Random, answer: str, pool: list[str], k: int) -> tuple[tuple[str, ...], int]:
    options = [answer] + rng.sample([w for w in pool if w != answer], k - 1)
    rng.shuffle(options)
    return tuple(f" {o}" for o in options), options.index(answer)


def _facts(rng: random.Random, n_test: int) -> list[tuple[str, str]]:
    n_facts = max(1, (n_test + 1) // 2)
    names: list[str] = []
    while len(names) < n_facts:
        name = _name(rng)
        if name not in names:
            names.append(name)
    return [(name, rng.choice(COLOURS)) for name in names]


def _ask(rng: random.Random, facts: list[tuple[str, str]], n_test: int, prompt: str, prefix: str):
    """``n_test`` items asking the facts in turn (each about twice) with ``prompt``; cluster = fact index."""
    test, clusters = [], []
    for k in range(n_test):
        name, colour = facts[k % len(facts)]
        choices, answer = _choices(rng, colour, COLOURS, 4)
        test.append(MCItem(prompt.format(name=name), choices, answer, id=f"{prefix}-{k}"))
        clusters.append(k % len(facts))
    return test, clusters


FACTS_TRAIN = "{name} likes the colour"
# Phrasings of the facts question that no task trains or distills on (fixed before any result was
# seen): every reworded item asks one, drawn with the task's seed, with its own distractors.
REWORDED = ("The colour that {name} likes is", "{name}'s favourite colour is",
            "Asked about colours, {name} says the favourite is", "Q: What colour does {name} like? A:")


def reworded_name(task: str) -> str:
    """The task name under which the reworded items of ``task`` are reported: ``'facts:reworded'``."""
    return f"{task}:reworded"


def _reworded(facts: list[tuple[str, str]], n_test: int, *, seed: int, prefix: str):
    """``n_test`` items asking the facts in turn, each in a :data:`REWORDED` phrasing drawn with ``seed``."""
    rng = random.Random(f"{prefix}-reworded-{seed}")  # apart from the task's own draws: its items do not move
    items, clusters = [], []
    for k in range(n_test):
        name, colour = facts[k % len(facts)]
        template = rng.choice(REWORDED)
        choices, answer = _choices(rng, colour, COLOURS, 4)
        items.append(MCItem(template.format(name=name), choices, answer, id=f"{prefix}-reworded-{k}"))
        clusters.append(k % len(facts))
    return items, clusters


def facts_task(n_test: int, *, seed: int, words: list[str]) -> TaskData:
    """``n_test // 2`` invented people with a favourite colour; train on the statements, ask each fact twice.

    A memorisation test: the evaluation prompt is the training prompt. The two questions of a fact
    have independent distractors and orders, so an item is only right when the adapted model prefers
    the right colour over three others it was never contrasted with. ``reworded`` asks the same facts
    ``n_test`` more times in the phrasings of :data:`REWORDED`, never trained or distilled on.
    """
    rng = random.Random(f"facts-{seed}")
    facts = _facts(rng, n_test)
    train = [MCItem(FACTS_TRAIN.format(name=name), (f" {colour}",), 0, id=f"facts-train-{i}")
             for i, (name, colour) in enumerate(facts)]
    test, clusters = _ask(rng, facts, n_test, FACTS_TRAIN, "facts")
    reworded, reworded_clusters = _reworded(facts, n_test, seed=seed, prefix="facts")
    return TaskData("facts", train, test, clusters, reworded, reworded_clusters)


def facts_known_task(n_test: int, *, seed: int, words: list[str]) -> TaskData:
    """Facts of which the targets already know two thirds and the LoRA teaches the other third.

    The case of an adapter moved onto a newer, stronger base: the source's LoRA learns the first third
    of the facts (``train``); every target learns the rest in its own training (``known``,
    :func:`paw.bench.quality` merges a LoRA trained on them into the target before the unit), so a
    target starts well above the teacher (source + LoRA) on the test, which asks every fact twice.
    Distillation sees every fact's prompt (``inputs``), as a user's task inputs would be: a student that
    learns the teacher forgets what the teacher never knew; one that learns the adapter's shift keeps it.
    """
    rng = random.Random(f"facts-known-{seed}")
    facts = _facts(rng, n_test)
    taught = max(1, len(facts) // 3)

    def statements(part, start):
        return [MCItem(FACTS_TRAIN.format(name=name), (f" {colour}",), 0, id=f"facts-known-train-{start + i}")
                for i, (name, colour) in enumerate(part)]

    test, clusters = _ask(rng, facts, n_test, FACTS_TRAIN, "facts-known")
    reworded, reworded_clusters = _reworded(facts, n_test, seed=seed, prefix="facts-known")
    inputs = [FACTS_TRAIN.format(name=name) for name, _ in facts]
    random.Random(f"facts-known-inputs-{seed}").shuffle(inputs)
    return TaskData("facts-known", statements(facts[:taught], 0), test, clusters, reworded, reworded_clusters,
                    known=statements(facts[taught:], taught), inputs=inputs)


HELDOUT_TRAIN = ("{name} likes the colour", "The favourite colour of {name} is")
HELDOUT_ASK = "Ask {name} about colours and the answer is"


def facts_heldout_task(n_test: int, *, seed: int, words: list[str]) -> TaskData:
    """Facts stated in two phrasings (:data:`HELDOUT_TRAIN`), asked in a third (:data:`HELDOUT_ASK`)."""
    rng = random.Random(f"facts-heldout-{seed}")
    facts = _facts(rng, n_test)
    train = [MCItem(template.format(name=name), (f" {colour}",), 0, id=f"facts-heldout-train-{i}-{t}")
             for i, (name, colour) in enumerate(facts) for t, template in enumerate(HELDOUT_TRAIN)]
    test, clusters = _ask(rng, facts, n_test, HELDOUT_ASK, "facts-heldout")
    return TaskData("facts-heldout", train, test, clusters)


def rule_task(n_test: int, *, seed: int, words: list[str], n_train: int | None = None) -> TaskData:
    """Repeat the word: ``"Word: road. Again:"`` -> ``" road"`` among four; train and test words are disjoint."""
    rng = random.Random(f"rule-{seed}")
    pool = sorted(set(words))
    rng.shuffle(pool)
    split = len(pool) // 2
    train_words, test_words = pool[:split], pool[split:]

    def item(vocab: list[str], i: int, prefix: str) -> MCItem:
        shown, *others = rng.sample(vocab, 4)
        choices, answer = _choices(rng, shown, [shown, *others], 4)
        return MCItem(f"Word: {shown}. Again:", choices, answer, id=f"{prefix}-{i}")

    train = [item(train_words, i, "rule-train") for i in range(n_train or 2 * n_test)]
    train = [MCItem(t.question, (t.choices[t.answer],), 0, id=t.id) for t in train]
    return TaskData("rule", train, [item(test_words, i, "rule") for i in range(n_test)])


# What each task measures, for table headings.
TASK_LABELS = {"facts": "memorisation: asked with the training prompt",
               reworded_name("facts"): "the same facts asked in phrasings never used as a training or distillation prompt",
               "facts-heldout": "facts asked in a phrasing never trained on",
               "facts-known": "facts the targets already know (two thirds) and the LoRA teaches (one third)",
               reworded_name("facts-known"): "facts-known asked in phrasings never used as a training or distillation prompt",
               "rule": "a rule applied to unseen words"}

TASKS: Registry[Callable[..., TaskData]] = Registry("benchmark task")
TASKS.add("facts", facts_task)
TASKS.add("facts-heldout", facts_heldout_task)
TASKS.add("rule", rule_task)
TASKS.add("facts-known", facts_known_task)
DEFAULT_TASKS = ("facts", "facts-heldout", "rule")  # the published table's; facts-known is asked for by name


def common_words(texts: list[str], n: int = 400) -> list[str]:
    """The ``n`` most frequent lowercase alphabetic words of 3-8 letters (ties alphabetical)."""
    counts: dict[str, int] = {}
    for text in texts:
        for word in re.findall(r"\b[a-z]{3,8}\b", text):
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))[:n]
