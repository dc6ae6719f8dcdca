"""Options first for ``paw extend-tokenizer``: it reads ``--config FILE.yaml`` (keys: the
flags without ``--``), a flag typed beside the file wins, and a bad value is refused naming its key."""

from __future__ import annotations

import json


def _same_tensors(a, b) -> bool:
    from safetensors import safe_open

    with safe_open(a / "model.safetensors", "pt") as fa, safe_open(b / "model.safetensors", "pt") as fb:
        return set(fa.keys()) == set(fb.keys()) and all(fa.get_tensor(k).equal(fb.get_tensor(k)) for k in fa.keys())  # noqa: SIM118


def test_extend_tokenizer_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tmp_path):
    config = tmp_path / "extend.yaml"   # tokens as written: the leading space stays, the comma splits nothing
    config.write_text(f"model: {tiny_llama}\noutput: {tmp_path / 'a'}\ntokens: [' zebra', 'a,b']\ninit: mean\n"
                      "pad-to-multiple: 64\n")
    by_file = cli("extend-tokenizer", "--config", config, "--init", "interpolate")   # the typed --init wins
    assert by_file.exit_code == 0, by_file.stderr
    by_flags = cli("extend-tokenizer", "--model", tiny_llama, "--output", tmp_path / "b", "--tokens", " zebra", "a,b",
                   "--pad-to-multiple", "64")
    assert by_flags.exit_code == 0, by_flags.stderr
    assert _same_tensors(tmp_path / "a", tmp_path / "b")
    manifest = json.loads((tmp_path / "a" / "paw_extend.json").read_text())
    assert manifest["init"] == "interpolate" and manifest["rows"] % 64 == 0
    assert {" zebra", "a,b"} <= {t for route in manifest["new_tokens"].values() for t in route}
    config.write_text(f"model: {tiny_llama}\noutput: {tmp_path / 'c'}\ntokens: [PAW]\npad-to-multiple: 70000\n")
    bad = cli("extend-tokenizer", "--config", config)
    assert bad.exit_code == 2 and "pad-to-multiple: 70000 is above its maximum 65536" in bad.stderr, bad.stderr
