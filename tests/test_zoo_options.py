"""Options first for ``paw zoo``: each command reads ``--config FILE.yaml`` (keys: the flags without ``--``), a flag
typed beside the file wins, and a bad value is refused naming its key; the folders stay arguments."""

from __future__ import annotations

import json


def test_zoo_build_reads_a_config_file_and_typed_flags_win(cli, tmp_path):
    config = tmp_path / "zoo.yaml"
    config.write_text("arch: qwen2\nhidden-size: 16\nnum_layers: 1\nlora: true\nseed: 3\n")
    result = cli("zoo", "build", tmp_path / "tiny", "--config", config, "--no-lora")   # the typed --no-lora wins
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"base model:  {tmp_path / 'tiny' / 'base'}\n"
    made = json.loads((tmp_path / "tiny" / "base" / "config.json").read_text())
    assert (made["model_type"], made["hidden_size"], made["num_hidden_layers"]) == ("qwen2", 16, 1)
    config.write_text("hidden_size: 16.5\n")
    bad = cli("zoo", "build", tmp_path / "other", "--config", config)
    assert bad.exit_code == 2 and "hidden_size: expected a whole number, not 16.5" in bad.stderr, bad.stderr


def test_zoo_fine_tune_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tmp_path):
    from safetensors import safe_open

    config = tmp_path / "ft.yaml"
    config.write_text("seed: 5\nscale: 0.5\ninclude: mlp\n")
    by_file = cli("zoo", "fine-tune", tiny_llama, tmp_path / "a", "--config", config, "--scale", "0.02")
    by_flags = cli("zoo", "fine-tune", tiny_llama, tmp_path / "b", "--seed", "5", "--scale", "0.02", "--include", "mlp")
    assert by_file.exit_code == by_flags.exit_code == 0, by_file.stderr
    assert by_file.stdout.split("(")[1] == by_flags.stdout.split("(")[1] == "6 tensors changed)\n"
    with safe_open(tmp_path / "a" / "model.safetensors", "pt") as fa, \
            safe_open(tmp_path / "b" / "model.safetensors", "pt") as fb:
        assert all(fa.get_tensor(k).equal(fb.get_tensor(k)) for k in fa.keys())  # noqa: SIM118
    config.write_text("scale: .nan\n")
    bad = cli("zoo", "fine-tune", tiny_llama, tmp_path / "c", "--config", config)
    assert bad.exit_code == 2 and "scale: nan is not a finite number" in bad.stderr, bad.stderr
