"""train_lora on the shared loop gains a rate schedule, accumulation, clipping and the non-finite stop."""

from __future__ import annotations

import json

import pytest

from paw.errors import PawError
from paw.evaluate.train import train_lora
from tests.train.spy import cosine_lrs, optimiser_steps, warmup_lrs


def load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def lora(peft_model) -> dict:
    return {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" in n}


def trained(fact_model, items, **kw):
    model, tok = load(fact_model)
    with optimiser_steps() as seen:
        peft_model, metrics = train_lora(model, tok, items, **{"rank": 4, "alpha": 8, "lr": 3e-3, "seed": 1,
                                                               "progress": False, **kw})
    return lora(peft_model), metrics, seen


@pytest.mark.parametrize("schedule,expected", [("warmup", warmup_lrs(3e-3, 3, 6)), ("cosine", cosine_lrs(3e-3, 2, 6))])
def test_each_step_runs_at_the_schedules_rate(fact_model, colour_task, schedule, expected):
    _, metrics, seen = trained(fact_model, colour_task, steps=6, batch_size=2, schedule=schedule,
                               warmup=3 if schedule == "warmup" else 2)
    assert [lr for lr, _ in seen] == pytest.approx(expected, rel=1e-12)
    assert metrics["schedule"] == schedule


def test_two_micro_batches_of_two_train_as_one_batch_of_four(fact_model, colour_task):
    import torch

    whole, a, _ = trained(fact_model, colour_task, steps=4, batch_size=4)
    split, b, _ = trained(fact_model, colour_task, steps=4, batch_size=2, accumulation=2)
    assert all(torch.allclose(whole[n], split[n], atol=1e-6) for n in whole)
    assert any(not torch.equal(whole[n], torch.zeros_like(whole[n])) for n in whole if "lora_B" in n)
    assert b["train_losses"] == pytest.approx(a["train_losses"], rel=1e-5) and b["accumulation"] == 2


def test_clipping_bounds_the_gradient_norm(fact_model, colour_task):
    _, _, free = trained(fact_model, colour_task, steps=3, batch_size=4)
    _, metrics, clipped = trained(fact_model, colour_task, steps=3, batch_size=4, clip=1e-3)
    assert max(norm for _, norm in free) > 1e-2
    assert all(norm <= 1e-3 * (1 + 1e-4) for _, norm in clipped) and metrics["clip"] == 1e-3


def test_a_nan_loss_at_step_3_stops_naming_step_3(fact_model, colour_task, monkeypatch):
    from paw.evaluate import train as lora_train
    from tests.train.spy import poisoned_call

    calls = poisoned_call(monkeypatch, lora_train, "batch_answer_loss", 3)
    with pytest.raises(PawError, match="at step 3;"):
        trained(fact_model, colour_task, steps=6, batch_size=2)
    assert len(calls) == 3


def test_cli_train_lora_takes_the_recipe_flags(cli, tmp_path, fact_model, colour_task):
    data = tmp_path / "facts.jsonl"
    data.write_text("".join(json.dumps({"question": i.question, "choices": [c.strip() for c in i.choices],
                                        "answer": i.answer}) + "\n" for i in colour_task))
    out = tmp_path / "lora"
    result = cli("train-lora", "--model", fact_model, "--data", data, "--output", out, "--rank", "4", "--steps", "4",
                 "--batch-size", "2", "--lr", "3e-3", "--schedule", "cosine", "--warmup", "2", "--accumulation", "2",
                 "--clip", "1.0", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["schedule"], metrics["warmup"], metrics["accumulation"], metrics["clip"]) == ("cosine", 2, 2, 1.0)
    settings = json.loads((out / "paw_train_lora.json").read_text())["settings"]
    assert settings["schedule"] == "cosine" and "clip" in settings
    plain = cli("train-lora", "--model", fact_model, "--data", data, "--output", tmp_path / "plain", "--rank", "4",
                "--steps", "2", "--device", "cpu")
    assert plain.exit_code == 0, plain.stderr
    assert "schedule" not in json.loads((tmp_path / "plain" / "metrics.json").read_text())   # the old keys only
