"""The checkpoint reader: every on-disk form gives bit-identical tensors; bad input gets one clear line."""

from __future__ import annotations

import json

import pytest
import torch

from paw.errors import PawError
from paw.io.checkpoint import open_checkpoint
from paw.io.writer import write_checkpoint


@pytest.fixture(scope="module")
def state_dict():
    gen = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(50, 16, generator=gen),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(16, 16, generator=gen).to(torch.bfloat16),
        "model.layers.0.mlp.down_proj.weight": torch.randn(16, 40, generator=gen).half(),
        "model.norm.weight": torch.ones(16),
        "position_ids": torch.arange(10),
    }


def _same(ckpt, sd):
    assert sorted(ckpt) == sorted(sd)
    for name, ref in sd.items():
        got = ckpt[name]
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert torch.equal(got, ref), name
        assert ckpt.shape(name) == tuple(ref.shape)
        assert ckpt.dtype(name) == str(ref.dtype).removeprefix("torch.")


def test_single_sharded_bin_and_pt_are_bit_identical(tmp_path, state_dict):
    single = write_checkpoint(tmp_path / "single", state_dict)
    sharded = write_checkpoint(tmp_path / "sharded", state_dict, max_shard_size=1000)
    assert (single / "model.safetensors").exists()
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 4  # 3200 | 512 | 1280 | 64+80 bytes
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in state_dict.values())
    binfolder = tmp_path / "bin"
    binfolder.mkdir()
    torch.save(state_dict, binfolder / "pytorch_model.bin")
    torch.save({"state_dict": state_dict}, tmp_path / "wrapped.pt")
    for spec in (single, sharded, binfolder, single / "model.safetensors", binfolder / "pytorch_model.bin",
                 tmp_path / "wrapped.pt"):
        _same(open_checkpoint(spec), state_dict)


def test_sharded_bin_with_index(tmp_path, state_dict):
    names = sorted(state_dict)
    folder = tmp_path / "binsharded"
    folder.mkdir()
    halves = {"pytorch_model-00001-of-00002.bin": names[:2], "pytorch_model-00002-of-00002.bin": names[2:]}
    for fname, keys in halves.items():
        torch.save({k: state_dict[k] for k in keys}, folder / fname)
    weight_map = {k: f for f, keys in halves.items() for k in keys}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    _same(open_checkpoint(folder), state_dict)


def test_config_and_name(tiny_qwen):
    ckpt = open_checkpoint(tiny_qwen)
    assert ckpt.config["model_type"] == "qwen2"
    assert ckpt.name == "qwen2"
    assert ckpt.tied_embeddings  # qwen2 zoo model ties lm_head to the embedding
    assert "lm_head.weight" not in ckpt


def test_missing_path():
    with pytest.raises(PawError, match="no such file or folder"):
        open_checkpoint("./definitely/not/here")


def test_folder_without_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(PawError, match="no model weights"):
        open_checkpoint(tmp_path)


def test_corrupt_header(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(PawError, match="bad.safetensors.*corrupt or truncated header"):
        open_checkpoint(bad)


def test_truncated_file(tmp_path, state_dict):
    folder = write_checkpoint(tmp_path / "m", state_dict)
    data = (folder / "model.safetensors").read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(PawError, match="cut.safetensors"):
        ckpt = open_checkpoint(cut)
        for name in ckpt:
            ckpt[name]


def test_unreadable_pickle(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"this is not a pickle")
    with pytest.raises(PawError, match="model.bin: not a readable PyTorch checkpoint"):
        open_checkpoint(bad)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_pickle_with_code_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(2), "x": _Evil()}, path)
    with pytest.raises(PawError, match="evil.pt: refusing to unpickle"):
        open_checkpoint(path)


def test_uncached_model_id(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PawError, match="not in the Hugging Face cache.*HF_HUB_OFFLINE=1 forbids downloading it: "
                                       "fetch it with `hf download someorg/some-model-7b`"):
        open_checkpoint("someorg/some-model-7b")


def test_cached_model_id(tmp_path, monkeypatch, state_dict):
    """A model laid out as in the HF cache (models--org--name/snapshots/<rev>) opens by its ID."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny"
    snap = repo / "snapshots" / "0123abcd"
    write_checkpoint(snap, state_dict)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    ckpt = open_checkpoint("org/tiny")
    assert ckpt.name == "tiny"
    _same(ckpt, state_dict)


def test_cli_reports_bad_input_with_exit_2(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    result = cli("zoo", "build", tmp_path / "empty")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "already exists" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
