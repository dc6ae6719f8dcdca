"""``config.json`` that transformers 4.45 reads as transformers 5 does.

transformers 5 saves a model's rotary settings in one ``rope_parameters`` mapping (``rope_theta``
inside it) and no longer writes ``rope_theta`` or ``rope_scaling`` beside it. transformers 4.45-4.57
(inside PAW's declared range) read only those two keys: on a file without them they build the model
with the default base 10,000 and no scaling, without a word, so a model with ``rope_theta`` 100,000
(SmolLM2) or 1,000,000 (Qwen2, Gemma-3) loads and gives other logits. Every model folder PAW writes
therefore carries the old keys too, copied from ``rope_parameters``; transformers 5 reads both and
finds them equal. Keys already present are never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paw.io.manifest import rewrite_json

CONFIG_NAME = "config.json"
_LAYER_TYPES = ("full_attention", "sliding_attention")  # Gemma-3: one rope entry per attention type


def portable_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with ``rope_theta`` (and ``rope_scaling``, ``rope_local_base_freq``,
    ``partial_rotary_factor`` where they apply) filled in from ``rope_parameters`` when absent.

    >>> portable_config({"model_type": "llama", "rope_parameters": {"rope_theta": 1e5, "rope_type": "default"}})
    {'model_type': 'llama', 'rope_parameters': {'rope_theta': 100000.0, 'rope_type': 'default'}, 'rope_theta': 100000.0}
    >>> portable_config({"rope_parameters": {"rope_theta": 5e5, "rope_type": "linear", "factor": 8.0}})["rope_scaling"]
    {'rope_type': 'linear', 'factor': 8.0}
    """
    out = dict(config)
    rope = config.get("rope_parameters")
    if not isinstance(rope, Mapping):
        return out
    full = rope.get("full_attention") if all(k in _LAYER_TYPES for k in rope) else rope
    if not isinstance(full, Mapping):
        return out
    legacy: dict[str, Any] = {}
    if "rope_theta" in full:
        legacy["rope_theta"] = full["rope_theta"]
    if full.get("rope_type", "default") != "default":
        legacy["rope_scaling"] = {k: v for k, v in full.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if "partial_rotary_factor" in full:
        legacy["partial_rotary_factor"] = full["partial_rotary_factor"]
    sliding = rope.get("sliding_attention") if full is not rope else None
    if isinstance(sliding, Mapping) and "rope_theta" in sliding:
        legacy["rope_local_base_freq"] = sliding["rope_theta"]
    for key, value in legacy.items():
        if out.get(key) is None:
            out[key] = value
    return out


def make_portable_config(folder: str | Path) -> bool:
    """Rewrite ``folder/config.json`` where :func:`portable_config` changes it; True when written.
    A file that needs nothing is left byte for byte."""
    path = Path(folder) / CONFIG_NAME
    if not path.is_file():
        return False
    return rewrite_json(path, portable_config)
