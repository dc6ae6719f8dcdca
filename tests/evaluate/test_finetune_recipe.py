"""Full fine-tuning on the shared loop: rate schedules, accumulation, clipping and the non-finite stop."""

from __future__ import annotations

import pytest

from paw.errors import PawError
from paw.evaluate.finetune import FinetuneOptions, finetune
from tests.train.spy import cosine_lrs, optimiser_steps, warmup_lrs


def tuned(fact_model, items, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = AutoModelForCausalLM.from_pretrained(fact_model), AutoTokenizer.from_pretrained(fact_model)
    with optimiser_steps() as seen:
        metrics = finetune(model, tok, items, FinetuneOptions(**{"lr": 1e-3, "seed": 3, **kw}), progress=False)
    return model.state_dict(), metrics, seen


@pytest.mark.parametrize("schedule,expected", [("warmup", warmup_lrs(1e-3, 3, 5)), ("cosine", cosine_lrs(1e-3, 2, 5))])
def test_each_step_runs_at_the_schedules_rate(fact_model, colour_task, schedule, expected):
    _, metrics, seen = tuned(fact_model, colour_task, steps=5, batch_size=2, schedule=schedule,
                             warmup=3 if schedule == "warmup" else 2)
    assert [lr for lr, _ in seen] == pytest.approx(expected, rel=1e-12) and metrics["schedule"] == schedule


def test_two_micro_batches_of_two_train_as_one_batch_of_four(fact_model, colour_task):
    import torch

    whole, a, _ = tuned(fact_model, colour_task, steps=3, batch_size=4, max_grad_norm=0.0, lr=1e-4)
    split, b, _ = tuned(fact_model, colour_task, steps=3, batch_size=2, accumulation=2, max_grad_norm=0.0, lr=1e-4)
    assert all(torch.allclose(whole[n], split[n], atol=1e-6) for n in whole)
    assert b["train_losses"] == pytest.approx(a["train_losses"], rel=1e-5)


def test_the_default_clip_bounds_the_gradient_norm(fact_model, colour_task):
    _, _, free = tuned(fact_model, colour_task, steps=2, batch_size=4, max_grad_norm=0.0)
    _, _, clipped = tuned(fact_model, colour_task, steps=2, batch_size=4, max_grad_norm=0.05)
    assert max(norm for _, norm in free) > 0.5
    assert all(norm <= 0.05 * (1 + 1e-4) for _, norm in clipped)


def test_a_nan_loss_at_step_3_stops_naming_step_3(fact_model, colour_task, monkeypatch):
    from paw.evaluate import finetune as finetune_module
    from tests.train.spy import poisoned_call

    calls = poisoned_call(monkeypatch, finetune_module, "batch_answer_loss", 3)
    with pytest.raises(PawError, match="became nan at step 3; lower --lr"):
        tuned(fact_model, colour_task, steps=5, batch_size=2)
    assert len(calls) == 3


@pytest.mark.parametrize("options, flag", [(FinetuneOptions(accumulation=0), "--accumulation"),
                                           (FinetuneOptions(warmup=-1), "--warmup"),
                                           (FinetuneOptions(schedule="step"), "--schedule")])
def test_bad_recipe_options_are_refused_naming_the_flag(options, flag):
    with pytest.raises(PawError, match=flag):
        options.check()


def test_cli_train_full_takes_the_recipe_flags(cli, tmp_path, fact_model, colour_task):
    import json

    from paw.io.mcdata import write_items

    data = write_items(tmp_path / "facts.jsonl", colour_task)
    out = tmp_path / "ft"
    result = cli("train-full", "--model", fact_model, "--data", data, "--output", out, "--steps", "3",
                 "--batch-size", "2", "--lr", "1e-3", "--schedule", "warmup", "--warmup", "2", "--accumulation", "2",
                 "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    options = json.loads((out / "paw_train_full.json").read_text())["options"]
    assert (options["schedule"], options["warmup"], options["accumulation"]) == ("warmup", 2, 2)
