"""Every adapter folder PAW writes holds only keys PEFT 0.13 (the declared minimum) knows.

PEFT 0.13 refuses an ``adapter_config.json`` key it lacks (``LoraConfig(**config)``); PEFT 0.21's
``save_pretrained`` writes 17 of them. ``scripts/check_min_versions.sh`` loads real outputs in
PEFT 0.13; these tests pin the file content in the normal environment, offline.
"""

from __future__ import annotations

import json

import pytest

from paw.io.adapter_config import (
    MIN_PEFT_LORA_KEYS,
    lora_defaults,
    make_portable_adapter,
    portable_adapter_config,
)


def _config(folder) -> dict:
    return json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))


def test_newer_keys_at_their_default_go_others_stay():
    saved = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "alora_invocation_tokens": None, "lora_bias": False,
             "qalora_group_size": 16, "peft_version": "0.21.2"}
    defaults = {"alora_invocation_tokens": None, "lora_bias": False, "qalora_group_size": 16}
    assert portable_adapter_config(saved, defaults) == {"peft_type": "LORA", "r": 4, "lora_alpha": 8}
    # a feature in use is kept, so that PEFT 0.13 refuses the adapter instead of dropping the feature
    assert portable_adapter_config({**saved, "lora_bias": True}, defaults)["lora_bias"] is True
    # a key neither PEFT 0.13 nor the installed PEFT knows is kept: nothing says it is harmless
    assert portable_adapter_config({"peft_type": "LORA", "future_key": 1}, {})["future_key"] == 1
    assert portable_adapter_config({"peft_type": "IA3", "peft_version": "0.21.2"}, {}) == {
        "peft_type": "IA3", "peft_version": "0.21.2"}


def test_the_installed_peft_saves_nothing_peft_013_lacks_at_defaults():
    """A LoraConfig with every default, as the installed PEFT saves it: only PEFT 0.13's keys remain.
    Fails when a newer PEFT adds a field whose default is not its saved value (then extend the rule)."""
    from peft import LoraConfig

    saved = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], task_type="CAUSAL_LM").to_dict()
    saved = json.loads(json.dumps(saved, default=str))  # as the file holds it (sets as lists, enums as str)
    assert set(portable_adapter_config(saved)) <= MIN_PEFT_LORA_KEYS
    assert set(MIN_PEFT_LORA_KEYS) <= set(lora_defaults())  # no field of 0.13 was removed since


def test_make_portable_adapter_rewrites_or_leaves_alone(tmp_path):
    new, old, empty = (tmp_path / n for n in ("new", "old", "empty"))
    for folder in (new, old, empty):
        folder.mkdir()
    (new / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_bias": False}))
    old_text = '{"peft_type": "LORA",   "r": 2}'
    (old / "adapter_config.json").write_text(old_text)
    assert [make_portable_adapter(f) for f in (new, old, empty)] == [True, False, False]
    assert _config(new) == {"peft_type": "LORA", "r": 2}
    assert (old / "adapter_config.json").read_text() == old_text  # byte for byte
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("writer", ["zoo", "paw"])
def test_written_adapters_hold_only_013_keys_and_load(tmp_path, tiny_llama, tiny_lora, writer):
    """PEFT's own save (zoo.make_lora, as train-lora and the demo) and PAW's writer (transfer, extract,
    merge --adapters): keys PEFT 0.13 knows, and the installed PEFT loads the folder."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from paw.io.adapter import LoraAdapter, read_adapter, write_adapter

    if writer == "zoo":
        folder = tiny_lora
    else:  # a config PEFT 0.21 saved, copied by PAW's writer
        adapter = read_adapter(tiny_lora)
        config = {**adapter.config, "lora_bias": False, "peft_version": "0.21.2", "exclude_modules": None}
        folder = write_adapter(tmp_path / "copy", LoraAdapter(config=config, tensors=adapter.tensors))
    config = _config(folder)
    assert set(config) <= MIN_PEFT_LORA_KEYS
    assert config["peft_type"] == "LORA" and config["r"] == 4
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), folder)
    assert model.peft_config["default"].r == 4
