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


def _shards(folder):
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir())}


@pytest.mark.parametrize("max_shard_size", [1, 40, 100, 10_000])
def test_an_announced_layout_writes_the_same_bytes(tmp_path, max_shard_size):
    """Headers first and each byte once: the files of the staged-and-copied path, shard for shard."""
    gen = torch.Generator().manual_seed(0)
    sd = {"w": torch.randn(5, 3, generator=gen), "n": torch.ones(7, dtype=torch.bfloat16),
          "ids": torch.arange(4), "empty": torch.zeros(0, 2), "s": torch.tensor(2.5)}
    layout = [(k, str(v.dtype).removeprefix("torch."), tuple(v.shape)) for k, v in sd.items()]
    plain = write_checkpoint(tmp_path / "plain", sd, max_shard_size=max_shard_size)
    planned = write_checkpoint(tmp_path / "planned", sd, max_shard_size=max_shard_size, layout=layout)
    behind = write_checkpoint(tmp_path / "behind", sd, max_shard_size=max_shard_size, layout=layout, overlap=True)
    assert _shards(plain) == _shards(planned) == _shards(behind)
    assert _shards(write_checkpoint(tmp_path / "none", {}, layout=[])) == _shards(write_checkpoint(tmp_path / "n2", {}))


@pytest.mark.parametrize("tensors, message", [
    ({"b": torch.zeros(2), "a": torch.zeros(2)}, "arrived where the announced layout has 'a'"),
    ({"a": torch.zeros(3)}, "not the announced F32 \\[2\\]"),
    ({"a": torch.zeros(2, dtype=torch.float16)}, "not the announced F32"),
    ({"a": torch.zeros(2)}, "has 2 tensors but 1 arrived"),
])
def test_a_tensor_off_the_layout_is_refused_and_nothing_is_left(tmp_path, tensors, message):
    from paw.errors import PawError

    layout = [("a", "float32", (2,)), ("b", "float32", (2,))]
    with pytest.raises(PawError, match=message):
        write_checkpoint(tmp_path / "out", tensors, layout=layout)
    assert list(tmp_path.iterdir()) == []


def test_writing_behind_raises_the_errors_of_both_sides(tmp_path):
    from paw.validate import NonFinite

    def failing_stream():
        yield "a", torch.zeros(3)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_checkpoint(tmp_path / "out", failing_stream(), overlap=True)
    produced = []

    def stream():  # the writer refuses the NaN; the stream stops soon after, not at its end
        for i in range(100):
            produced.append(i)
            yield f"t{i}", torch.full((2,), float("nan") if i == 1 else 0.0)

    with pytest.raises(NonFinite, match="t1"):
        write_checkpoint(tmp_path / "out", stream(), overlap=True)
    assert len(produced) < 10
    assert list(tmp_path.iterdir()) == []
