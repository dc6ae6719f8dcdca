"""Issue 53, the remaining cases: silent outcomes turned into one-line refusals, and byte-identical reruns.

Each refusal is checked as in ``test_issue53.py`` (its ``refused`` fixture, over this module's ``ix``):
exit code 2, exactly one ``error:`` line naming the file, key or flag, no traceback and no
``unexpected``, the inputs unchanged and nothing at the output path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.reliability.test_issue53 import refused  # noqa: F401  (a fixture; it reads this module's ``ix``)


@pytest.fixture(scope="module")
def ix(tiny_llama, tmp_path_factory) -> Path:
    """A base, a fine-tune, and a copy of the base whose tokenizer gives ids 100 and 101 the other's token."""
    from paw import zoo

    root = tmp_path_factory.mktemp("issue53b") / "ix"
    root.mkdir()
    shutil.copytree(tiny_llama, root / "base")
    zoo.fine_tune(root / "base", root / "ft", seed=11, scale=0.02)
    zoo.make_lora(root / "base", root / "lora", rank=4, alpha=8, seed=3)
    shutil.copytree(root / "base", root / "swapped")
    data = json.loads((root / "swapped" / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    first, second = (token for token, i in vocab.items() if i in (100, 101))
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (root / "swapped" / "tokenizer.json").write_text(json.dumps(data))
    return root


# ---- 1. auto across another tokenizer of the same size refuses, as across one of another size

TRANSFER = ("transfer-lora", "--adapter", "{ix}/lora", "--source-base", "{ix}/base", "-o", "{out}", "--device", "cpu")


def test_auto_refuses_another_tokenizer_of_the_same_size(refused):  # noqa: F811
    line = refused(*TRANSFER, "--target-base", "{ix}/swapped",
                   expect=("the vocabularies differ (300 rows each, but id 100 is", "--method distill --prompts"))
    assert "--method auto moves no adapter across a tokenizer change" in line


def test_auto_refuses_with_the_same_message_when_the_sizes_differ(refused, tmp_path):  # noqa: F811
    from paw import zoo

    wider = zoo.tiny_model(tmp_path / "wider", "llama", seed=0, hidden_size=32, num_layers=2, vocab_size=301)
    same = refused(*TRANSFER, "--target-base", "{ix}/swapped").split("): ", 1)[1]
    other = refused(*TRANSFER, "--target-base", wider,
                    expect=("the vocabularies differ (300 source rows, 301 target rows)",)).split("): ", 1)[1]
    assert same == other


def test_auto_refuses_a_vocab_map_that_moves_ids(refused, ix, tmp_path):  # noqa: F811
    from paw.io.vocab_map import VocabMapping, write_vocab_map

    entries = {t: ("exact", [{100: 101, 101: 100}.get(t, t)], [1.0]) for t in range(300)}
    write_vocab_map(tmp_path / "map.json", VocabMapping(300, 300, entries))
    refused(*TRANSFER, "--target-base", "{ix}/ft", "--vocab-map", tmp_path / "map.json",
            expect=("--vocab-map sends target ids to other source ids", "--method distill"))


def test_a_named_method_still_moves_it_and_warns(cli, ix, tmp_path):
    res = cli(*[a.replace("{ix}", str(ix)).replace("{out}", str(tmp_path / "out")) for a in TRANSFER],
              "--target-base", ix / "swapped", "--method", "copy")
    assert res.exit_code == 0, res.stderr
    assert "warning: source and target tokenizers differ (300 rows each, but id 100" in res.stderr


def test_the_same_tokenizer_in_another_folder_is_no_change(cli, ix, tmp_path):
    res = cli(*[a.replace("{ix}", str(ix)).replace("{out}", str(tmp_path / "out")) for a in TRANSFER],
              "--target-base", ix / "ft")
    assert res.exit_code == 0 and "warning" not in res.stderr, res.stderr
