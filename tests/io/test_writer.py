"""Sharded writer: loads in transformers, atomic on failure, copies side files, deterministic bytes."""

from __future__ import annotations

import pytest
import torch

from paw.io.checkpoint import open_checkpoint
from paw.io.writer import parse_size, write_checkpoint


def test_parse_size():
    assert parse_size("2GB") == 2 * 1024**3
    assert parse_size("500MB") == 500 * 1024**2
    assert parse_size("1.5KB") == 1536
    assert parse_size(123) == 123


def test_stream_written_sharded_loads_in_transformers(tmp_path, tiny_llama):
    from transformers import AutoModelForCausalLM

    src = open_checkpoint(tiny_llama)
    out = write_checkpoint(tmp_path / "copy", ((k, src[k]) for k in src), copy_from=tiny_llama,
                           max_shard_size="20KB", extra_files={"paw_test.json": {"a": 1}})
    files = sorted(p.name for p in out.iterdir())
    assert "model.safetensors.index.json" in files and "config.json" in files
    assert "tokenizer.json" in files and "paw_test.json" in files
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left
    ids = torch.tensor([[3, 4, 5, 6]])
    ref = AutoModelForCausalLM.from_pretrained(tiny_llama)
    got = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        assert torch.equal(ref(ids).logits, got(ids).logits)


def test_failure_leaves_nothing(tmp_path):
    def tensors():
        yield "a", torch.zeros(3)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_checkpoint(tmp_path / "out", tensors())
    assert list(tmp_path.iterdir()) == []


def test_existing_output_refused_then_overwritten(tmp_path):
    from paw.errors import PawError

    write_checkpoint(tmp_path / "out", {"a": torch.zeros(2)})
    with pytest.raises(PawError, match="already exists"):
        write_checkpoint(tmp_path / "out", {"a": torch.ones(2)})
    write_checkpoint(tmp_path / "out", {"a": torch.ones(2)}, overwrite=True)
    assert torch.equal(open_checkpoint(tmp_path / "out")["a"], torch.ones(2))


def test_deterministic_bytes(tmp_path):
    sd = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(4, dtype=torch.bfloat16)}
    one = write_checkpoint(tmp_path / "one", sd, max_shard_size=20)
    two = write_checkpoint(tmp_path / "two", sd, max_shard_size=20)
    for f in sorted(one.iterdir()):
        assert f.read_bytes() == (two / f.name).read_bytes()


def test_shared_storage_is_written_as_two_tensors(tmp_path):
    w = torch.randn(4, 3)
    out = write_checkpoint(tmp_path / "tied", {"embed.weight": w, "lm_head.weight": w, "view": w[1]})
    ckpt = open_checkpoint(out)
    assert torch.equal(ckpt["lm_head.weight"], w) and torch.equal(ckpt["view"], w[1])
