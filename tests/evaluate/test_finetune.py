"""paw.evaluate.finetune and ``paw train-full``: every weight learns the fact table; what is written."""

from __future__ import annotations

import json
import math

import pytest

from paw.errors import PawError
from paw.evaluate.finetune import FinetuneOptions, finetune_model


@pytest.fixture(scope="module")
def colour_items(tmp_path_factory, colour_task):
    from paw.io.mcdata import write_items

    return write_items(tmp_path_factory.mktemp("ft-data") / "colour.jsonl", colour_task)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, fact_model, colour_items):
    import torch

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("ft") / "ft"
    return finetune_model(fact_model, colour_items, out, FinetuneOptions(steps=40, lr=1e-3),
                          eval_data=colour_items)


def test_full_finetune_learns_the_facts(trained):
    m = trained.metrics
    assert m["base/accuracy"] <= 0.25 and m["test/accuracy"] == 1.0  # 16 facts, chance 1/4
    assert m["train_loss_end"] < 0.5 * m["train_loss_start"]
    assert len(m["train_losses"]) == 40 and m["n_train"] == 16


def test_every_tensor_moves_and_the_folder_keeps_the_base_layout(trained, fact_model):
    from paw.io.checkpoint import open_checkpoint

    base, ft = open_checkpoint(fact_model), open_checkpoint(trained.output)
    assert sorted(base) == sorted(ft)
    assert all(ft[n].dtype == base[n].float().dtype for n in ft)  # float32, whatever the base
    assert trained.metrics["trainable_parameters"] == sum(math.prod(base.shape(n)) for n in base)
    moved = [n for n in base if not bool((base[n].float() == ft[n]).all())]
    assert len(moved) == len(list(base))  # AdamW moves every weight with a gradient, norms included
    written = json.loads((trained.output / "paw_train_full.json").read_text())
    assert written["options"]["steps"] == 40 and written["inputs"]["model"]["path"].endswith("base")
    assert (trained.output / "tokenizer.json").is_file()


def test_the_written_model_loads_in_transformers_and_scores_as_trained(trained, colour_task):
    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm

    lm, tokenizer = load_lm(trained.output)
    assert evaluate(lm, tokenizer, colour_task, progress=False)["accuracy"] == trained.metrics["test/accuracy"]


def test_same_seed_same_weights_and_frozen_embeddings_stay(tmp_path, fact_model, colour_items):
    import torch

    from paw.io.checkpoint import open_checkpoint

    opts = FinetuneOptions(steps=3, lr=1e-3, freeze_embeddings=True)
    a = finetune_model(fact_model, colour_items, tmp_path / "a", opts)
    b = finetune_model(fact_model, colour_items, tmp_path / "b", opts)
    ca, cb, base = open_checkpoint(a.output), open_checkpoint(b.output), open_checkpoint(fact_model)
    assert all(torch.equal(ca[n], cb[n]) for n in ca)
    embed = "model.embed_tokens.weight"
    assert torch.equal(ca[embed], base[embed].float())
    assert a.metrics["trainable_parameters"] == sum(math.prod(base.shape(n)) for n in base) \
        - math.prod(base.shape(embed))


@pytest.mark.parametrize("options, flag", [
    (FinetuneOptions(steps=0), "--steps"), (FinetuneOptions(batch_size=-1), "--batch-size"),
    (FinetuneOptions(lr=0.0), "--lr"), (FinetuneOptions(lr=float("nan")), "--lr"),
    (FinetuneOptions(weight_decay=-1.0), "--weight-decay"), (FinetuneOptions(max_grad_norm=float("inf")), "--max-grad-norm"),
])
def test_bad_options_are_refused_before_anything_is_read(tmp_path, options, flag):
    with pytest.raises(PawError, match=flag):
        finetune_model(tmp_path / "no-model", tmp_path / "no-data.jsonl", tmp_path / "out", options)
    assert not (tmp_path / "out").exists()


def test_cli_trains_and_refuses_in_one_line(cli, tmp_path, fact_model, colour_items):
    res = cli("train-full", "--model", str(fact_model), "--data", str(colour_items), "--output", str(tmp_path / "ft"),
              "--steps", "2", "--lr", "1e-3")
    assert res.exit_code == 0 and "over 2 steps" in res.stdout and (tmp_path / "ft" / "model.safetensors").is_file()
    bad = cli("train-full", "--model", str(fact_model), "--data", str(colour_items), "--output", str(tmp_path / "x"),
              "--steps", "0")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "--steps" in bad.stderr and not (tmp_path / "x").exists()
    again = cli("train-full", "--model", str(fact_model), "--data", str(colour_items), "--output", str(tmp_path / "ft"))
    assert again.exit_code == 2 and "exists" in again.stderr
