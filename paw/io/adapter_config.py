"""``adapter_config.json`` that the oldest PEFT PAW declares (0.13) and the newest both read.

PEFT 0.13 builds ``LoraConfig(**adapter_config)`` and so refuses any key it does not know
(``TypeError: ... unexpected keyword argument 'alora_invocation_tokens'``); later versions drop
unknown keys with a warning. PEFT 0.21's ``save_pretrained`` writes 17 keys 0.13 lacks
(``lora_bias``, ``eva_config``, ``peft_version``, ...), each at a default that means "feature off".
So every adapter PAW writes keeps the keys PEFT 0.13 knows and drops a newer key while it holds the
installed PEFT's default; a newer key set to anything else is kept, so that an old PEFT refuses the
adapter rather than load it without the feature. ``peft_version`` (which PEFT wrote it) is dropped
too: PEFT fills it in again on loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paw.io.manifest import rewrite_json

CONFIG_NAME = "adapter_config.json"
# every field of LoraConfig in PEFT 0.13.2 (the declared minimum), its base class's included
MIN_PEFT_LORA_KEYS = frozenset({
    "alpha_pattern", "auto_mapping", "base_model_name_or_path", "bias", "fan_in_fan_out", "inference_mode",
    "init_lora_weights", "layer_replication", "layers_pattern", "layers_to_transform", "loftq_config",
    "lora_alpha", "lora_dropout", "megatron_config", "megatron_core", "modules_to_save", "peft_type", "r",
    "rank_pattern", "revision", "runtime_config", "target_modules", "task_type", "use_dora", "use_rslora",
})
METADATA_KEYS = frozenset({"peft_version"})  # what wrote the file, not how to load it


def portable_adapter_config(config: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``config`` without the keys PEFT 0.13 does not know that hold their default (``defaults``: the
    installed PEFT's ``LoraConfig`` defaults, read only when such a key is present). Not a LoRA: unchanged.

    >>> portable_adapter_config({"peft_type": "LORA", "r": 4, "lora_bias": False, "peft_version": "0.21.2"},
    ...                         defaults={"lora_bias": False})
    {'peft_type': 'LORA', 'r': 4}
    >>> portable_adapter_config({"peft_type": "LORA", "r": 4, "lora_bias": True}, defaults={"lora_bias": False})
    {'peft_type': 'LORA', 'r': 4, 'lora_bias': True}
    """
    newer = [k for k in config if k not in MIN_PEFT_LORA_KEYS]
    if config.get("peft_type") != "LORA" or not newer:
        return dict(config)
    defaults = lora_defaults() if defaults is None else defaults
    drop = {k for k in newer if k in METADATA_KEYS or (k in defaults and config[k] == defaults[k])}
    return {k: v for k, v in config.items() if k not in drop}


def lora_defaults() -> dict[str, Any]:
    """``{field: default}`` of the installed PEFT's ``LoraConfig``, as ``to_dict`` would save them."""
    import dataclasses

    from peft import LoraConfig

    out: dict[str, Any] = {}
    for f in dataclasses.fields(LoraConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def make_portable_adapter(folder: str | Path) -> bool:
    """Rewrite ``folder/adapter_config.json`` where :func:`portable_adapter_config` changes it (after
    PEFT's own ``save_pretrained``); True when the file was written. One that needs nothing is left
    byte for byte."""
    path = Path(folder) / CONFIG_NAME
    if not path.is_file():
        return False
    return rewrite_json(path, portable_adapter_config)
