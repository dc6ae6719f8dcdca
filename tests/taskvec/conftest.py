"""Task-vector fixtures: a base with two fine-tunes of known Δ, and a pair with every skip reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tv_models(zoo_root, tiny_llama) -> dict:
    """``{'base', 'ft1', 'ft2'}`` folders plus ``'deltas1'``, ``'deltas2'`` (the known task vectors)."""
    from paw import zoo

    root = zoo_root / "taskvec"
    deltas1 = zoo.fine_tune(tiny_llama, root / "ft1", seed=11, scale=0.01)
    deltas2 = zoo.fine_tune(tiny_llama, root / "ft2", seed=12, scale=0.03)
    return {"base": tiny_llama, "ft1": root / "ft1", "ft2": root / "ft2",
            "deltas1": deltas1, "deltas2": deltas2}


@pytest.fixture(scope="session")
def odd_pair(zoo_root, tv_models) -> dict:
    """A base and a fine-tune whose tensors hit every skip reason.

    - ``model.layers.1.mlp.up_proj.weight``: missing in the fine-tune
    - ``model.norm.weight``: shape mismatch (the fine-tune's is shorter)
    - ``step_counter``: int64 in both (non-float)
    - ``extra.only_in_ft``: only in the fine-tune (missing in base)
    - ``empty.bias``: no elements
    """
    from paw.io.checkpoint import open_checkpoint
    from paw.io.writer import write_checkpoint

    root = zoo_root / "taskvec-odd"
    base = dict(open_checkpoint(tv_models["base"]).items())
    ft = dict(open_checkpoint(tv_models["ft1"]).items())
    base["step_counter"] = torch.arange(4, dtype=torch.int64)
    ft["step_counter"] = torch.arange(4, dtype=torch.int64) + 1
    del ft["model.layers.1.mlp.up_proj.weight"]
    ft["model.norm.weight"] = ft["model.norm.weight"][:-2].clone()
    ft["extra.only_in_ft"] = torch.ones(3)
    base["empty.bias"], ft["empty.bias"] = torch.zeros(0), torch.zeros(0)
    write_checkpoint(root / "base", base, copy_from=tv_models["base"])
    write_checkpoint(root / "oddft", ft, copy_from=tv_models["ft1"])
    return {"base": root / "base", "ft": root / "oddft"}


@pytest.fixture(scope="session")
def numpy_deltas():
    """``numpy_deltas(base, model) -> {name: Δ}`` in float32, read with safetensors.numpy, not PAW."""
    from safetensors.numpy import load_file

    def load(base: Path, model: Path) -> dict:
        b = load_file(str(Path(base) / "model.safetensors"))
        m = load_file(str(Path(model) / "model.safetensors"))
        return {k: m[k].astype("float32") - b[k].astype("float32") for k in b if k in m}

    return load


@pytest.fixture(scope="session")
def np_reference():
    """``np_reference(delta) -> {column: value}``: every per_param_stats column by numpy/scipy (float64)."""
    import math

    import numpy as np
    import scipy.stats

    from paw.taskvec.quantiles import QUANTILES

    def ref(d) -> dict:
        x = np.asarray(d, dtype=np.float64).ravel()
        out = {"numel": x.size, "l2": math.sqrt(float(np.dot(x, x))), "l1": float(np.abs(x).sum()),
               "maxabs": float(np.abs(x).max()), "mean": float(x.mean()), "std": float(x.std()),
               "skew": float(scipy.stats.skew(x)), "kurtosis_excess": float(scipy.stats.kurtosis(x))}
        out.update({f"q{q}": float(v) for q, v in zip(QUANTILES, np.quantile(x, np.array(QUANTILES) / 100),
                                                       strict=True)})
        return out

    return ref
