"""Every model folder PAW writes names its rotary settings in the keys transformers 4.45 reads.

transformers 5 saves ``rope_parameters`` only; transformers 4.45-4.57 read ``rope_theta`` /
``rope_scaling`` and, without them, silently build the model with base 10,000.
``scripts/check_min_versions.sh`` loads real outputs in transformers 4.45; these tests pin the file
content in the normal environment, offline.
"""

from __future__ import annotations

import json

from paw.io.model_config import make_portable_config, portable_config


def _config(folder) -> dict:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def test_rope_keys_follow_rope_parameters():
    flat = {"rope_parameters": {"rope_theta": 1e5, "rope_type": "default"}}
    assert portable_config(flat) == {**flat, "rope_theta": 1e5}
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    scaled = {"rope_parameters": {"rope_theta": 5e5, **llama3}}
    assert portable_config(scaled) == {**scaled, "rope_theta": 5e5, "rope_scaling": llama3}
    gemma3 = {"rope_parameters": {"full_attention": {"rope_theta": 1e6, "rope_type": "linear", "factor": 8.0},
                                  "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}}
    assert portable_config(gemma3) == {**gemma3, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
                                       "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    partial = {"rope_parameters": {"rope_theta": 1e4, "rope_type": "default", "partial_rotary_factor": 0.5}}
    assert portable_config(partial) == {**partial, "rope_theta": 1e4, "partial_rotary_factor": 0.5}
    # a key already there is kept, even when it disagrees: PAW does not second-guess an input's file
    assert portable_config({**flat, "rope_theta": 7.0})["rope_theta"] == 7.0
    assert portable_config({**flat, "rope_theta": None})["rope_theta"] == 1e5
    for untouched in ({"model_type": "llama", "rope_theta": 1e4}, {"rope_parameters": None}, {}):
        assert portable_config(untouched) == untouched


def test_make_portable_config_rewrites_or_leaves_alone(tmp_path):
    new, old, empty = (tmp_path / n for n in ("new", "old", "empty"))
    for folder in (new, old, empty):
        folder.mkdir()
    (new / "config.json").write_text(json.dumps({"rope_parameters": {"rope_theta": 1e5, "rope_type": "default"}}))
    old_text = '{"rope_theta":   100000.0}'
    (old / "config.json").write_text(old_text)
    assert [make_portable_config(f) for f in (new, old, empty)] == [True, False, False]
    assert _config(new)["rope_theta"] == 1e5
    assert (old / "config.json").read_text() == old_text  # byte for byte
    assert list(empty.iterdir()) == []


def test_zoo_and_written_checkpoints_carry_rope_theta_and_load_the_same(tmp_path, tiny_llama):
    """The zoo's folder (transformers' save_pretrained) and a written checkpoint whose config has only
    ``rope_parameters`` (base 100,000): both carry ``rope_theta``, and transformers reads the same base."""
    from transformers import AutoConfig

    from paw.io.checkpoint import open_checkpoint
    from paw.io.writer import write_checkpoint

    zoo_config = _config(tiny_llama)
    assert zoo_config["rope_theta"] == zoo_config["rope_parameters"]["rope_theta"]
    v5 = {**zoo_config, "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}}
    del v5["rope_theta"]
    ckpt = open_checkpoint(tiny_llama)
    out = write_checkpoint(tmp_path / "out", ((name, ckpt[name]) for name in ckpt), config=v5)
    assert _config(out)["rope_theta"] == 100000.0
    loaded = AutoConfig.from_pretrained(out)
    assert (getattr(loaded, "rope_parameters", None) or {"rope_theta": loaded.rope_theta})["rope_theta"] == 100000.0
