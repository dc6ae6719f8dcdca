"""The merge's three threads (read ahead, merge, write behind) change no byte, and the read plan is exact."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from paw.io.checkpoint import open_checkpoint
from paw.io.writer import write_checkpoint

METHODS = ["task-arithmetic", "linear", "ties", "dare-ties", "breadcrumbs", "della", "slerp", "model-stock",
           "sce", "karcher"]


def _options(family, out: Path, method: str, **extra):
    from paw.merge import MergeOptions

    models = family.models[:1] if method == "slerp" else family.models
    knobs = {"density": 0.3, "gamma": 0.05, "drop_rate": 0.5, "scale": 0.7}
    if method == "della":
        knobs["density"] = 0.5
    return MergeOptions(base=str(family.base), models=[str(m) for m in models], output=str(out), method=method,
                        weights=[0.5, 0.3, 0.2][:len(models)], **{**knobs, **extra})


@pytest.fixture
def streamed(monkeypatch):
    """Blocks of 100 entries and the two-pass thresholds on every tensor; records each ReadAhead made."""
    import paw.merge.blocks as blocks
    import paw.merge.pipeline as pipeline
    from paw.io.stream import ReadAhead

    made = []

    class Recorded(ReadAhead):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(pipeline, "BLOCK_ELEMENTS", 100)
    monkeypatch.setattr(blocks, "SMALL", 0)
    monkeypatch.setattr(pipeline, "ReadAhead", Recorded)
    return made


@pytest.mark.parametrize("method", METHODS)
def test_every_read_of_the_merge_was_planned(family, tmp_path, streamed, method):
    """The reader thread reads exactly what the merge asks for, in order: no read is made twice."""
    from paw.merge import merge

    merge(_options(family, tmp_path / "m", method))
    assert len(streamed) == 1 and streamed[0].misses == 0


@pytest.mark.parametrize("method", ["task-arithmetic", "ties", "della", "slerp"])
def test_read_ahead_and_write_behind_give_the_bytes_of_the_plain_loop(family, tmp_path, streamed, method):
    from paw.merge import merge
    from paw.merge.pipeline import merged_tensors, prepare

    merge(_options(family, tmp_path / "threads", method))
    job = prepare(_options(family, tmp_path / "plain", method))
    write_checkpoint(tmp_path / "plain", merged_tensors(job), copy_from=job.reference.path)  # one thread, staged shards
    assert (tmp_path / "threads" / "model.safetensors").read_bytes() == \
        (tmp_path / "plain" / "model.safetensors").read_bytes()


def test_shared_vocabulary_rows_and_copied_tensors_are_planned(tmp_path, streamed):
    """--vocab-policy base reads the base's whole tensor after its rows; an integer tensor is copied."""
    from paw.merge import MergeOptions, merge

    gen = torch.Generator().manual_seed(0)
    embed = torch.randn(300, 8, generator=gen)
    write_checkpoint(tmp_path / "b", {"model.embed_tokens.weight": embed, "position_ids": torch.arange(6)})
    write_checkpoint(tmp_path / "f", {"model.embed_tokens.weight": embed[:250] + 1, "position_ids": torch.arange(6)})
    merge(MergeOptions(base=str(tmp_path / "b"), models=[str(tmp_path / "f")], output=str(tmp_path / "m"),
                       method="ties", weights=[1.0], density=0.5, vocab_policy="base"))
    assert streamed[0].misses == 0
    out = open_checkpoint(tmp_path / "m")
    assert torch.equal(out["model.embed_tokens.weight"][250:], embed[250:])
    assert torch.equal(out["position_ids"], torch.arange(6))


def test_a_merge_that_fails_leaves_no_thread_behind(family, tmp_path, streamed, monkeypatch):
    import threading

    import paw.merge.pipeline as pipeline
    from paw.merge import merge

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(pipeline, "_merge_tensor", boom)
    with pytest.raises(RuntimeError, match="boom"):
        merge(_options(family, tmp_path / "m", "ties"))
    assert not (tmp_path / "m").exists()
    assert not [t for t in threading.enumerate() if t.name in ("paw-read-ahead", "paw-writer")]


@pytest.mark.parametrize("alpha", [1.0, 0.7, -1.3])
def test_adding_in_float32_then_rounding_once_is_adding_into_bfloat16(alpha):
    """The merge adds base + scale x merged into float32 and rounds once; torch.add(out=bf16) rounds the same."""
    gen = torch.Generator().manual_seed(3)
    base, merged = torch.randn(1 << 16, generator=gen), torch.randn(1 << 16, generator=gen) * 1e-3
    direct = torch.empty(1 << 16, dtype=torch.bfloat16)
    torch.add(base, merged, alpha=alpha, out=direct)
    staged = torch.add(base, merged.clone(), alpha=alpha).to(torch.bfloat16)
    assert torch.equal(direct.view(torch.int16), staged.view(torch.int16))
