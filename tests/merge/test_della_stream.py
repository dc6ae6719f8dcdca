"""DELLA walked in row blocks gives the bytes of DELLA on the whole tensor, for the same seed.

The reference below is DELLA on the whole tensor (ranks per row by the argsort of the argsort, one
``torch.bernoulli`` over the tensor, the L1 rescale from two float64 sums over the whole tensor),
written apart from :mod:`paw.merge.sparse` so that the streamed code is checked against it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from paw.io.writer import write_checkpoint
from paw.merge import sparse
from paw.merge.blocks import row_blocks


def reference_della(delta, *, density, epsilon, seed, rescale=True):
    """The whole-tensor DELLA, written independently of paw.merge.sparse."""
    if density >= 1.0:
        return delta.clone()
    rows = delta.reshape(1, -1) if delta.dim() < 2 else delta.reshape(delta.shape[0], -1)
    ranks = torch.argsort(torch.argsort(rows.abs(), dim=1), dim=1).float()
    norm = ranks / (rows.shape[1] - 1) if rows.shape[1] > 1 else torch.zeros_like(ranks)
    p = ((density - epsilon) + norm * (2 * epsilon)).reshape(delta.shape)
    masked = delta * torch.bernoulli(p, generator=torch.Generator().manual_seed(seed))
    if not rescale:
        return masked
    before = float(delta.abs().sum(dtype=torch.float64))
    after = float(masked.abs().sum(dtype=torch.float64))
    if before < 1e-7 or after < 1e-7:
        return masked
    return masked.mul_(before / after)


def streamed_della(deltas, *, densities, epsilons, seeds, rows_per_block, rescale=True):
    """The pipeline's scheme on plain tensors: with the rescale, a pass over row blocks draws the masks
    and finds the factors, then they are applied; without, each block's mask is drawn in turn."""
    shape = deltas[0].shape
    blocks = row_blocks(shape, block_elements=rows_per_block * max(1, deltas[0][0].numel())) \
        if len(shape) > 1 else [None]

    def pick(d, b):
        return d if b is None else d[b[0]:b[1]]

    def gens():
        return [torch.Generator().manual_seed(s) for s in seeds]

    out = [d.clone() for d in deltas]
    if rescale:
        sizes = [pick(deltas[0], b).numel() for b in blocks]
        factors, masks = sparse.della_rescale_pass(([pick(d, b) for d in deltas] for b in blocks), sizes=sizes,
                                                   densities=densities, epsilons=epsilons, generators=gens())
        for i, d in enumerate(out):
            if densities[i] < 1.0:
                for b, packed in zip(blocks, masks[i], strict=True):
                    part = pick(d, b)
                    part.mul_(sparse.unpack_mask(packed, part.shape, part.dtype))
                    if factors[i] is not None:
                        part.mul_(factors[i])
        return out
    merge_gens = gens()
    for b in blocks:
        for i, d in enumerate(out):
            if densities[i] < 1.0:
                part = pick(d, b)
                part.mul_(sparse.della_keep(part, density=densities[i], epsilon=epsilons[i], generator=merge_gens[i]))
    return out


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 1001])
def test_packed_masks_unpack_to_themselves(n):
    keep = torch.bernoulli(torch.full((n,), 0.4), generator=torch.Generator().manual_seed(n))
    packed = sparse.pack_mask(keep)
    assert packed.dtype == torch.uint8 and packed.numel() == (n + 7) // 8
    assert torch.equal(sparse.unpack_mask(packed, (n,), torch.float32), keep)
    assert torch.equal(sparse.pack_mask(torch.tensor([1.0, 0.0, 1.0])), torch.tensor([5], dtype=torch.uint8))


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.int32), b.reshape(-1).view(torch.int32))


@pytest.mark.parametrize("shape", [(7, 5), (13, 1), (1, 33), (3, 4, 5), (257, 3), (9,), (1,), (64, 129)])
def test_bernoulli_drawn_in_consecutive_row_chunks_is_the_whole_draw(shape):
    """The CPU generator's Bernoulli draws, chunk after chunk in row-major order, are the whole tensor's."""
    p = torch.rand(shape, generator=torch.Generator().manual_seed(5))
    whole = torch.bernoulli(p, generator=torch.Generator().manual_seed(11))
    for rows in (1, 2, 3, 50):
        gen = torch.Generator().manual_seed(11)
        chunks = [torch.bernoulli(p[a:b], generator=gen) for a, b in row_blocks(shape, block_elements=rows)]
        assert torch.equal(torch.cat(chunks), whole)


def _deltas(shape, kind: str, count: int = 3):
    gen = torch.Generator().manual_seed(10 * ["normal", "ties", "zeros", "tiny"].index(kind) + len(shape))
    ds = [torch.randn(shape, generator=gen) for _ in range(count)]
    if kind == "ties":      # many equal magnitudes in every row
        ds = [d.bfloat16().float().round(decimals=1) for d in ds]
    elif kind == "zeros":   # zero rows, a zero model, sparse entries
        ds[0] = torch.zeros(shape)
        ds[1] = ds[1] * (torch.rand(shape, generator=gen) < 0.3)
        if len(shape) > 1:
            ds[2][::2] = 0.0
    elif kind == "tiny":    # norms below the rescale epsilon: left as they are
        ds = [d * 1e-12 for d in ds]
    return ds


@pytest.mark.parametrize("rescale", [True, False])
@pytest.mark.parametrize("kind", ["normal", "ties", "zeros", "tiny"])
@pytest.mark.parametrize("shape", [(7, 5), (13, 1), (1, 33), (3, 4, 5), (257, 3), (11,), (64, 129)])
def test_row_blocks_give_the_bytes_of_the_whole_tensor(shape, kind, rescale):
    deltas = _deltas(shape, kind)
    densities, epsilons, seeds = [0.5, 0.3, 1.0], [0.1, 0.2, 0.1], [7, 8, 9]
    want = [reference_della(d, density=a, epsilon=e, seed=s, rescale=rescale)
            for d, a, e, s in zip(deltas, densities, epsilons, seeds, strict=True)]
    for rows in (1, 2, 3, 5, shape[0]):
        got = streamed_della(deltas, densities=densities, epsilons=epsilons, seeds=seeds,
                             rows_per_block=rows, rescale=rescale)
        for g, w in zip(got, want, strict=True):
            assert _same_bits(g, w), (rows, kind)


def test_sparsify_della_is_the_reference():
    delta = torch.randn(40, 17, generator=torch.Generator().manual_seed(2))
    for rescale in (True, False):
        got = sparse.sparsify_della(delta.clone(), density=0.4, epsilon=0.15,
                                    generator=torch.Generator().manual_seed(3), rescale=rescale)
        assert _same_bits(got, reference_della(delta, density=0.4, epsilon=0.15, seed=3, rescale=rescale))


# ---------------------------------------------------------------- the pipeline, end to end

def _write_models(root: Path) -> tuple[Path, list[Path]]:
    """A base and two fine-tunes: odd shapes, a 1-D tensor, a 3-D one, tied magnitudes, a zero task vector."""
    gen = torch.Generator().manual_seed(0)
    base = {"model.embed_tokens.weight": torch.randn(37, 6, generator=gen),
            "w.odd": torch.randn(13, 7, generator=gen),
            "conv.weight": torch.randn(5, 3, 4, generator=gen),
            "norm.weight": torch.randn(23, generator=gen)}
    write_checkpoint(root / "base", base)
    models = []
    for i in range(2):
        ft = {k: v + (torch.randn(v.shape, generator=gen) * 0.1).bfloat16().float() for k, v in base.items()}
        if i == 1:
            ft["w.odd"] = base["w.odd"].clone()
        write_checkpoint(root / f"ft{i}", ft)
        models.append(root / f"ft{i}")
    return root / "base", models


@pytest.mark.parametrize("method,rescale", [("della", True), ("della-linear", True), ("della", False)])
def test_the_streamed_merge_writes_the_whole_tensor_bytes(tmp_path, monkeypatch, method, rescale):
    import paw.merge.pipeline as pipeline
    from paw.merge import MergeOptions, merge
    from paw.merge.methods import MergeMethod

    base, models = _write_models(tmp_path)

    def run(out: str):
        merge(MergeOptions(base=str(base), models=[str(m) for m in models], output=str(tmp_path / out),
                           method=method, weights=[0.6, 0.4], density=0.5, epsilon=0.2, rescale=rescale, seed=3))
        return (tmp_path / out / "model.safetensors").read_bytes()

    outputs = []
    for block in (7, 20, 100, 1 << 20):
        monkeypatch.setattr(pipeline, "BLOCK_ELEMENTS", block)
        outputs.append(run(f"b{block}"))
    monkeypatch.setattr(MergeMethod, "streamed", property(lambda self: False))  # the whole-tensor path
    whole = run("whole")
    assert all(o == whole for o in outputs)


def test_shared_vocabulary_rows_stream_as_the_whole_rows(tmp_path, monkeypatch):
    import paw.merge.pipeline as pipeline
    from paw.merge import MergeOptions, merge
    from paw.merge.methods import MergeMethod

    gen = torch.Generator().manual_seed(1)
    embed = torch.randn(300, 8, generator=gen)
    write_checkpoint(tmp_path / "b", {"model.embed_tokens.weight": embed})
    write_checkpoint(tmp_path / "f", {"model.embed_tokens.weight": embed[:250] + torch.randn(250, 8, generator=gen)})

    def run(out: str):
        merge(MergeOptions(base=str(tmp_path / "b"), models=[str(tmp_path / "f")], output=str(tmp_path / out),
                           method="della", weights=[1.0], density=0.4, epsilon=0.1, vocab_policy="base"))
        return (tmp_path / out / "model.safetensors").read_bytes()

    monkeypatch.setattr(pipeline, "BLOCK_ELEMENTS", 24)
    streamed = run("s")
    monkeypatch.setattr(MergeMethod, "streamed", property(lambda self: False))
    assert streamed == run("w")


@pytest.mark.parametrize("method", ["della", "della-linear"])
def test_a_rescaled_della_merge_drops_entries(tmp_path, method):
    """The drop reaches the merge with the rescale on (the default): once it only reached the return
    value of the sparsifier, which the merge did not read, and DELLA wrote task arithmetic."""
    from paw.io.checkpoint import open_checkpoint
    from paw.merge import MergeOptions, merge

    base, models = _write_models(tmp_path)
    merge(MergeOptions(base=str(base), models=[str(models[0])], output=str(tmp_path / "m"), method=method,
                       weights=[1.0], density=0.3, epsilon=0.1, seed=1))
    out, b, ft = (open_checkpoint(p)["w.odd"] for p in (tmp_path / "m", base, models[0]))
    kept = (out != b).float().mean().item()
    assert 0.1 < kept < 0.5                                   # about density 0.3 of 91 entries
    torch.testing.assert_close((out - b).abs().sum(), (ft - b).abs().sum(), rtol=1e-4, atol=1e-5)  # L1 kept
