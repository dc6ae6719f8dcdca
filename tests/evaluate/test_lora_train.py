"""train_lora learns a synthetic fact task; runs are reproducible; the CLI writes a loadable PEFT folder."""

from __future__ import annotations

import json

import pytest

from paw.evaluate.train import batches_in_order, train_lora


def load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def test_train_lora_learns_the_task(fact_model, colour_task):
    model, tok = load(fact_model)
    peft_model, metrics = train_lora(model, tok, colour_task, rank=8, alpha=16, steps=120, batch_size=8, lr=3e-3,
                                     eval_items=colour_task, progress=False)
    assert metrics["train_loss_end"] < 0.8 * metrics["train_loss_start"]
    assert metrics["base/accuracy"] <= 0.5           # chance is 0.25
    assert metrics["test/accuracy"] >= 0.9
    assert metrics["test/loss"] < metrics["base/loss"]
    assert len(metrics["train_losses"]) == 120
    assert metrics["trainable_parameters"] == sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)


def test_train_lora_is_reproducible(fact_model, colour_task):
    runs = []
    for _ in range(2):
        model, tok = load(fact_model)
        peft_model, metrics = train_lora(model, tok, colour_task, rank=4, alpha=8, steps=6, batch_size=4, lr=1e-3,
                                         seed=7, progress=False)
        runs.append((metrics["train_losses"], {n: p.detach().clone() for n, p in peft_model.named_parameters()
                                               if "lora_" in n}))
    assert runs[0][0] == runs[1][0]
    assert all((runs[0][1][n] == runs[1][1][n]).all() for n in runs[0][1])


def test_data_order_is_seeded_epochs():
    order = batches_in_order(5, 2, 5, seed=3)
    flat = [i for batch in order for i in batch]
    assert sorted(flat[:5]) == [0, 1, 2, 3, 4] and sorted(flat[5:10]) == [0, 1, 2, 3, 4]
    assert order == batches_in_order(5, 2, 5, seed=3) != batches_in_order(5, 2, 5, seed=4)


def test_target_modules_list(fact_model, colour_task):
    model, tok = load(fact_model)
    peft_model, _ = train_lora(model, tok, colour_task[:4], rank=2, target_modules="q_proj,v_proj", steps=1,
                               batch_size=2, progress=False)
    # names look like ...layers.0.self_attn.q_proj.lora_A.default.weight
    wrapped = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in peft_model.named_parameters() if "lora_A" in n}
    assert wrapped == {"q_proj", "v_proj"}


def test_cli_train_lora_writes_peft_folder(cli, tmp_path, fact_model, colour_task):
    from peft import PeftModel

    data = tmp_path / "facts.jsonl"
    data.write_text("".join(json.dumps({"question": i.question, "choices": [c.strip() for c in i.choices],
                                        "answer": i.answer}) + "\n" for i in colour_task))
    out = tmp_path / "lora"
    result = cli("train-lora", "--model", fact_model, "--data", data, "--eval-data", data, "--output", out,
                 "--rank", "4", "--alpha", "8", "--steps", "40", "--batch-size", "8", "--lr", "3e-3",
                 "--track", "csv", "--device", "cpu", "--save-every", "15")
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 40 and metrics["test/accuracy"] > metrics["base/accuracy"]
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8 and config["base_model_name_or_path"] == str(fact_model)
    assert (tmp_path / "lora-tracking" / "metrics.csv").read_text().startswith("step,metric,value\n10,train/loss,")
    assert json.loads((out / "paw_train_lora.json").read_text())["settings"]["rank"] == 4
    model, tok = load(fact_model)
    PeftModel.from_pretrained(model, out)  # loads unchanged in peft
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-15", "checkpoint-30"]
    PeftModel.from_pretrained(load(fact_model)[0], out / "checkpoint-30")
    # the trained adapter evaluates as trained
    again = cli("eval", "--model", fact_model, "--adapter", out, "--data", data, "--output", tmp_path / "r.json")
    assert again.exit_code == 0, again.stderr
    evaluated = json.loads((tmp_path / "r.json").read_text())["metrics"]
    assert evaluated["accuracy"] == pytest.approx(metrics["test/accuracy"])
    assert evaluated["loss"] == pytest.approx(metrics["test/loss"], rel=1e-4)


@pytest.mark.parametrize("args, fragment", [
    (["--rank", "0"], "--rank"),
    (["--track", "mlflow"], "--track 'mlflow'"),
    (["--target-modules", "nope_proj"], "cannot attach LoRA"),
])
def test_cli_train_lora_bad_input(cli, tmp_path, fact_model, args, fragment):
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "q", "choices": ["a", "b"], "answer": 0}\n')
    out = tmp_path / "out"
    result = cli("train-lora", "--model", fact_model, "--data", data, "--output", out, "--steps", "1", *args)
    assert result.exit_code == 2 and fragment in result.stderr
    assert not out.exists()


def test_cli_existing_output_refused(cli, tmp_path, fact_model):
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "q", "choices": ["a", "b"], "answer": 0}\n')
    (tmp_path / "out").mkdir()
    result = cli("train-lora", "--model", fact_model, "--data", data, "--output", tmp_path / "out")
    assert result.exit_code == 2 and "already exists" in result.stderr
    missing = cli("eval", "--model", tmp_path / "no-model", "--data", data)
    assert missing.exit_code == 2 and "no such file or folder" in missing.stderr


def test_load_lm_errors(tmp_path, fact_model):
    import shutil

    from paw.errors import PawError
    from paw.io.lm import load_lm

    no_tok = tmp_path / "no-tokenizer"
    shutil.copytree(fact_model, no_tok)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (no_tok / name).unlink()
    with pytest.raises(PawError, match="cannot load a tokenizer"):
        load_lm(no_tok)
    with pytest.raises(PawError, match="not a PEFT adapter folder"):
        load_lm(fact_model, adapter=tmp_path)
    with pytest.raises(PawError, match="--dtype 'int8'"):
        load_lm(fact_model, dtype="int8")


def test_cli_eval_with_csv_tracking(cli, tmp_path, fact_model, colour_task):
    data = tmp_path / "facts.jsonl"
    data.write_text("".join(json.dumps({"question": i.question, "choices": [c.strip() for c in i.choices],
                                        "answer": i.answer}) + "\n" for i in colour_task[:4]))
    result = cli("eval", "--model", fact_model, "--data", data, "--output", tmp_path / "res.json", "--track", "csv")
    assert result.exit_code == 0, result.stderr
    assert "accuracy " in result.stdout and (tmp_path / "res-tracking" / "metrics.csv").is_file()
    said = [line for line in (result.stdout + result.stderr).splitlines() if "metrics CSV" in line]
    assert said and all(line.endswith(str(tmp_path / "res-tracking" / "metrics.csv")) for line in said), said
    bad = cli("eval", "--model", fact_model, "--data", data, "--track", "tensorboard")
    assert bad.exit_code == 2 and "--track 'tensorboard'" in bad.stderr


def test_the_answer_loss_of_the_kept_window_is_the_full_logits_loss(fact_model, colour_task):
    """Left padding and the LM head on the answers only: the loss and its gradient of a right-padded
    batch through full logits (what the loop did before), on items whose lengths differ."""
    import torch

    from paw.evaluate.encode import make_batch, pad_id_of
    from paw.evaluate.train import answer_loss, batch_answer_loss, encode_answer

    model, tok = load(fact_model)
    MC = type(colour_task[0])
    items = [colour_task[0], MC(colour_task[1].question, (" red", " a dark sea green"), 1),
             MC(colour_task[2].question + " Think of a well known colour", (" blue green", " red"), 0)]
    encoded = [encode_answer(tok, item, None) for item in items]
    assert len({len(e.ids) for e in encoded}) > 1 and len({e.n_cont for e in encoded}) > 1
    pad = pad_id_of(tok)
    batch = make_batch(encoded, pad_id=pad, padding_side="right")
    full = answer_loss(model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                             position_ids=batch.position_ids).logits, batch.targets, batch.target_mask)
    full.backward()
    grad_full = model.get_input_embeddings().weight.grad.clone()
    model.zero_grad()
    kept = batch_answer_loss(model, encoded, pad, torch.device("cpu"))
    kept.backward()
    assert float(kept) == pytest.approx(float(full), abs=1e-5)
    assert float((model.get_input_embeddings().weight.grad - grad_full).abs().max()) < 1e-5
