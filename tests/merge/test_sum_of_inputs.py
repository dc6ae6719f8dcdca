"""Task arithmetic and linear merge as one weighted sum of the inputs, each added once, no Δ formed.

``base + s × method(Δ)`` is rewritten ``c_base·base + Σ c_i·M_i``: the coefficients must be the
method's (float64, hand-built tensors), the merge must round the exact sum once (against a float64
reference), and the base must not be read when its coefficient is 0 (linear at scale 1).
"""

from __future__ import annotations

import pytest
import torch

from paw.io.checkpoint import open_checkpoint
from paw.io.writer import write_checkpoint


@pytest.mark.parametrize("method,normalize", [("task-arithmetic", None), ("task-arithmetic", True),
                                              ("task-arithmetic", False), ("linear", True), ("linear", False)])
@pytest.mark.parametrize("scale", [0.7, 1.0, 2.0])
def test_the_coefficients_are_the_method(method, normalize, scale):
    from paw.merge.methods import get_method

    gen = torch.Generator().manual_seed(0)
    base = torch.randn(50, dtype=torch.float64, generator=gen)
    models = [base + torch.randn(50, dtype=torch.float64, generator=gen) * 0.1 for _ in range(3)]
    weights = [0.5, 1.25, -0.25]
    m = get_method(method)
    c_base, cs = m.combination(weights, scale, {"normalize": normalize})
    summed = c_base * base + sum(c * x for c, x in zip(cs, models, strict=True))
    direct = base + scale * m(base, [x - base for x in models], weights, normalize=normalize)
    torch.testing.assert_close(summed, direct, rtol=0, atol=1e-12)


def test_the_sparse_and_consensus_methods_have_no_sum():
    from paw.merge.methods import get_method

    for name in ("ties", "dare-linear", "dare-ties", "breadcrumbs", "della", "slerp", "model-stock"):
        assert get_method(name).combination([0.5, 0.5], 1.0, {}) is None, name


def _models(root, dtype=torch.bfloat16, count=3):
    gen = torch.Generator().manual_seed(3)
    shapes = {"model.embed_tokens.weight": (37, 16), "w.odd": (13, 7), "norm.weight": (23,)}
    base = {k: torch.randn(s, generator=gen).to(dtype) for k, s in shapes.items()}
    write_checkpoint(root / "base", base)
    paths = []
    for i in range(count):
        ft = {k: (v.double() + torch.randn(v.shape, generator=gen, dtype=torch.float64) * 0.05).to(dtype)
              for k, v in base.items()}
        if i == 0:
            ft["norm.weight"] = base["norm.weight"].clone()  # an unchanged tensor
        write_checkpoint(root / f"ft{i}", ft)
        paths.append(root / f"ft{i}")
    return root / "base", paths


@pytest.mark.parametrize("method,scale", [("task-arithmetic", 1.0), ("task-arithmetic", 0.6), ("linear", 1.0),
                                          ("linear", 1.5)])
def test_the_merge_rounds_the_exact_sum_once(tmp_path, monkeypatch, method, scale):
    import paw.merge.pipeline as pipeline
    from paw.merge import MergeOptions, merge

    monkeypatch.setattr(pipeline, "BLOCK_ELEMENTS", 40)  # several blocks a tensor
    base, models = _models(tmp_path)
    weights = [0.5, 0.3, 0.2]
    merge(MergeOptions(base=str(base), models=[str(m) for m in models], output=str(tmp_path / "m"),
                       method=method, weights=weights, scale=scale))
    out, b = open_checkpoint(tmp_path / "m"), open_checkpoint(base)
    fts = [open_checkpoint(m) for m in models]
    for name in out:
        bb, ms = b[name].double(), [f[name].double() for f in fts]
        total = sum(weights) if method == "linear" else 1.0
        exact = bb + scale * sum(w / total * (m - bb) for w, m in zip(weights, ms, strict=True))
        got = out[name]
        assert got.dtype == torch.bfloat16
        rounded = exact.to(torch.bfloat16)
        assert (got == rounded).double().mean() > 0.99, name  # a float32 sum may round a tie the other way
        step = (rounded.double().abs() * 2.0 ** -7).clamp_min(1e-30)  # one bf16 step at that value
        assert ((got.double() - exact).abs() <= step).all(), name


def test_the_sum_equals_the_delta_path_to_one_step(tmp_path, monkeypatch):
    """The Δ path (kept for the other methods and for inputs the compute dtype cannot hold) gives the
    same bytes but at rounding ties."""
    from paw.merge import MergeOptions, merge, schedule

    base, models = _models(tmp_path)

    def run(out):
        merge(MergeOptions(base=str(base), models=[str(m) for m in models], output=str(tmp_path / out),
                           method="task-arithmetic", weights=[0.5, 0.3, 0.2], scale=0.8))
        return open_checkpoint(tmp_path / out)

    summed = run("sum")
    monkeypatch.setattr(schedule, "combination", lambda job, name: None)
    delta = run("delta")
    for name in summed:
        a, d = summed[name].double(), delta[name].double()
        assert (a == d).double().mean() > 0.99
        assert ((a - d).abs() <= d.abs() * 2.0 ** -7 + 1e-30).all()


def test_linear_at_scale_one_does_not_read_the_base(tmp_path):
    from paw.merge import MergeOptions
    from paw.merge.pipeline import prepare
    from paw.merge.schedule import read_plan

    base, models = _models(tmp_path)
    opts = dict(base=str(base), models=[str(m) for m in models], output=str(tmp_path / "m"), method="linear",
                weights=[1.0, 2.0, 1.0])
    job = prepare(MergeOptions(**opts))
    reads = list(read_plan(job, 40))
    assert reads and not [r for r in reads if r[0] is job.reference]
    job = prepare(MergeOptions(**opts, scale=0.5))   # (1 - s) of the base: read
    assert [r for r in read_plan(job, 40) if r[0] is job.reference]


def test_a_nonfinite_input_is_refused_even_at_weight_zero(tmp_path):
    from paw.errors import PawError
    from paw.merge import MergeOptions, merge

    base, models = _models(tmp_path, count=2)
    bad = {k: v.clone() for k, v in open_checkpoint(models[1]).items()}
    bad["w.odd"][3, 2] = float("nan")
    write_checkpoint(tmp_path / "bad", bad, allow_nonfinite=True)
    with pytest.raises(PawError, match="NaN/Inf") as err:
        merge(MergeOptions(base=str(base), models=[str(models[0]), str(tmp_path / "bad")],
                           output=str(tmp_path / "m"), method="task-arithmetic", weights=[1.0, 0.0]))
    assert "bad" in str(err.value)
    assert not (tmp_path / "m").exists()


def test_float64_inputs_into_float32_take_the_delta_path(tmp_path):
    """A model in float64 beside a float32 base is not held exactly by float32: no sum of inputs."""
    from paw.merge import MergeOptions
    from paw.merge.pipeline import prepare
    from paw.merge.schedule import combination

    base, models = _models(tmp_path, dtype=torch.float32, count=1)
    write_checkpoint(tmp_path / "f64", {k: v.double() for k, v in open_checkpoint(models[0]).items()})
    job = prepare(MergeOptions(base=str(base), models=[str(tmp_path / "f64")], output=str(tmp_path / "m"),
                               method="task-arithmetic", weights=[1.0]))
    assert combination(job, "w.odd") is None
    job = prepare(MergeOptions(base=str(base), models=[str(models[0])], output=str(tmp_path / "m2"),
                               method="task-arithmetic", weights=[1.0]))
    assert combination(job, "w.odd") == (0.0, [1.0])
