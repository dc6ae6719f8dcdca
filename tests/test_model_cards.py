"""Every model or adapter folder a command writes carries a ``README.md`` model card that the Hub's own
``ModelCard`` loads: ``base_model`` (Hub IDs only), ``library_name`` (transformers or peft) and tags in
the front matter, what made the folder in the body, and PAW's report files named last."""

from __future__ import annotations

import json

import pytest

from tests.io.fake_hub import FakeHub, card_of


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    path = tmp_path_factory.mktemp("card-data") / "items.jsonl"
    path.write_text("".join(json.dumps({"question": f"Fact {i}: the colour is", "choices": [" red", " blue"],
                                        "answer": i % 2}) + "\n" for i in range(6)))
    return path


@pytest.fixture(scope="module")
def fine_tune(tmp_path_factory, tiny_llama):
    from paw import zoo

    folder = tmp_path_factory.mktemp("card-ft") / "ft"
    zoo.fine_tune(tiny_llama, folder, seed=7, scale=0.02)
    return folder


def test_train_lora_card_is_filled_not_peft_template(cli, monkeypatch, tmp_path, tiny_llama, items):
    hub = FakeHub(monkeypatch, tmp_path / "cache")
    hub.publish("org/tiny", tiny_llama)
    out = tmp_path / "quiz-lora"
    r = cli("train-lora", "--model", "org/tiny", "--data", items, "--eval-data", items, "--output", out,
            "--steps", "3", "--rank", "2", "--alpha", "4", "--batch-size", "2", "--lr", "1e-3")
    assert r.exit_code == 0, r.stderr
    meta, body = card_of(out)
    assert meta == {"base_model": ["org/tiny"], "library_name": "peft", "tags": ["paw", "lora", "train-lora"]}
    assert "More Information Needed" not in body and "local path" not in body
    metrics = json.loads((out / "metrics.json").read_text())
    for row in ("| base model | `org/tiny` |", f"| data | `{items}` (6 items) |", "| steps | 3 |", "| rank | 2 |",
                "| alpha | 4.0 |", "| batch size | 2 |", "| learning rate | 0.001 |",
                f"| train loss | {metrics['train_loss_start']:.4f} -> {metrics['train_loss_end']:.4f} (mean of the "
                "first and of the last 3 steps) |",
                f"| accuracy | {metrics['base/accuracy']:.4f} ± {metrics['base/stderr']:.4f} | "
                f"{metrics['test/accuracy']:.4f} ± {metrics['test/stderr']:.4f} |"):
        assert row in body, row
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "org/tiny"
    assert body.endswith("`hf upload REPO FOLDER --exclude metrics.json --exclude paw_train_lora.json`.\n")


def test_train_full_card(cli, tmp_path, tiny_llama, items):
    out = tmp_path / "ft"
    r = cli("train-full", "--model", tiny_llama, "--data", items, "--output", out, "--steps", "2", "--batch-size", "2")
    assert r.exit_code == 0, r.stderr
    meta, body = card_of(out)
    assert meta == {"library_name": "transformers", "tags": ["paw", "full-fine-tune", "train-full"]}
    assert f"`{tiny_llama}` is a local path, not a Hub ID" in body and "| steps | 2 |" in body
    assert "| `paw_train_full.json` |" in body and "## Evaluation" not in body  # no --eval-data


def test_transfer_card_names_target_methods_and_report_files(cli, tmp_path, tiny_llama, tiny_lora, fine_tune):
    out = tmp_path / "moved"
    r = cli("transfer-lora", "--adapter", tiny_lora, "--source-base", tiny_llama, "--target-base", fine_tune,
            "--output", out, "--method", "copy")
    assert r.exit_code == 0, r.stderr
    meta, body = card_of(out)
    assert meta == {"library_name": "peft", "tags": ["paw", "lora", "transfer-lora", "copy"]}
    assert f"A LoRA adapter for `{fine_tune}`, moved by PAW's `paw transfer-lora` (method `copy`)" in body
    assert "- transferred 14/14 modules (copy: 14)" in body
    for name in ("transfer_report.json", "transfer_report.csv", "similarity_vs_depth.png"):
        assert f"| `{name}` |" in body
    assert "![similarity_vs_depth.png](similarity_vs_depth.png)" in body


def test_extract_card_and_its_plot_in_the_folder(cli, tmp_path, tiny_llama, fine_tune):
    out = tmp_path / "ft-lora"
    r = cli("extract-lora", "--base", tiny_llama, "--finetune", fine_tune, "--output", out, "--rank", "4")
    assert r.exit_code == 0, r.stderr
    meta, body = card_of(out)
    assert meta["library_name"] == "peft" and meta["tags"] == ["paw", "lora", "extract-lora"]
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors",
                                                      "energy_vs_rank.png", "extract_report.json"]
    assert "LoRA modules, rank 4: energy held" in body and "![energy_vs_rank.png](energy_vs_rank.png)" in body


def test_adapter_merge_card(cli, tmp_path, tiny_lora):
    out = tmp_path / "two"
    r = cli("merge", "--adapters", tiny_lora, tiny_lora, "--output", out)
    assert r.exit_code == 0, r.stderr
    meta, body = card_of(out)
    assert meta == {"library_name": "peft", "tags": ["paw", "lora", "merge", "cat"]}
    assert f"| `{tiny_lora}` | 4 | 8 | 1 |" in body and "- 14 modules, rank 8" in body
    assert "--exclude adapter_merge.json --exclude paw_merge.json`." in body


def test_tokenizer_commands_cards(cli, tmp_path, tiny_llama, tiny_qwen):
    out = tmp_path / "ext"
    assert cli("extend-tokenizer", "--model", tiny_llama, "--output", out, "--tokens", "photosynthesis",
               "--device", "cpu").exit_code == 0
    meta, body = card_of(out)
    assert meta == {"library_name": "transformers", "tags": ["paw", "extend-tokenizer"]}
    record = json.loads((out / "paw_extend.json").read_text())
    assert f"- embedding rows: {record['old_rows']} -> {record['rows']}" in body
    moved = tmp_path / "moved"
    assert cli("transplant-tokenizer", "--model", tiny_llama, "--tokenizer", tiny_qwen, "-o", moved).exit_code == 0
    meta, body = card_of(moved)
    assert meta["tags"] == ["paw", "tokenizer-transplant"] and f"with its tokenizer replaced by `{tiny_qwen}`" in body
    assert "| `paw_vocab_map.json` |" in body and "| `paw_transplant.json` |" in body
