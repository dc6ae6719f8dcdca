"""Options first for ``paw extend-tokenizer`` and ``paw adapter``: each reads ``--config FILE.yaml`` (keys: the
flags without ``--``), a flag typed beside the file wins, and a bad value is refused naming its key."""

from __future__ import annotations

import json

import pytest


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


@pytest.fixture(scope="module")
def grown(tiny_llama, tmp_path_factory):
    """An adapter trained on ``tiny_llama`` extended by two tokens (modules_to_save): it expects more rows."""
    from paw.vocab.extend_pipeline import extend_tokenizer
    from paw.vocab.options import ExtendOptions
    from tests.extend.conftest import make_adapter

    root = tmp_path_factory.mktemp("adapter-options")
    ext = extend_tokenizer(ExtendOptions(model=tiny_llama, output=root / "ext", tokens=(" zebra", "PAW")))
    new_ids = sorted(i for route in ext.manifest["new_tokens"].values() for i in route.values())
    return make_adapter(ext.output, root / "adapter", kind="save", new_ids=new_ids, tokenizer=True)


def test_adapter_check_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tiny_lora, grown, tmp_path):
    config = tmp_path / "check.yaml"
    config.write_text(f"adapter: {grown}\nbase: {tiny_llama}\n")
    assert cli("adapter", "check", "--config", config).exit_code == 2   # the grown adapter does not fit
    fits = cli("adapter", "check", "--config", config, "--adapter", tiny_lora)   # the typed adapter wins
    assert fits.exit_code == 0 and fits.stdout.splitlines()[-1].startswith(f"fits: {tiny_lora} loads on"), fits.stdout
    config.write_text(f"adapter: {grown}\nbase: {tiny_llama}\noverwrite: true\n")
    bad = cli("adapter", "check", "--config", config)
    assert bad.exit_code == 2 and "unknown key 'overwrite'" in bad.stderr, bad.stderr


def test_adapter_resize_base_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, grown, tmp_path):
    config = tmp_path / "resize.yaml"
    config.write_text(f"adapter: {grown}\nbase: {tiny_llama}\noutput: {tmp_path / 'a'}\nvocab-size: 500\n"
                      "device: cpu\n")
    by_file = cli("adapter", "resize-base", "--config", config, "--vocab-size", "0")   # 0 typed: the adapter's size
    assert by_file.exit_code == 0, by_file.stderr
    by_flags = cli("adapter", "resize-base", "--adapter", grown, "--base", tiny_llama, "--output", tmp_path / "b")
    assert by_flags.exit_code == 0, by_flags.stderr
    assert _same_tensors(tmp_path / "a", tmp_path / "b")
    assert cli("adapter", "check", "--adapter", grown, "--base", tmp_path / "a").exit_code == 0
    config.write_text(f"adapter: {grown}\nbase: {tiny_llama}\noutput: {tmp_path / 'c'}\nvocab_size: -1\n")
    bad = cli("adapter", "resize-base", "--config", config)
    assert bad.exit_code == 2 and "vocab_size: -1 is below its minimum 0" in bad.stderr, bad.stderr
