"""A tiny Llama base with three fine-tunes whose task vectors are known (``zoo.fine_tune``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest


@dataclass
class Family:
    base: Path
    models: list[Path]
    known: list[dict]  # the task vectors fine_tune added, name -> torch tensor


@pytest.fixture(scope="session")
def family(tmp_path_factory, tiny_llama) -> Family:
    from paw import zoo

    root = tmp_path_factory.mktemp("merge")
    models, known = [], []
    for i, scale in enumerate((0.01, 0.02, 0.04)):
        folder = root / f"ft{i}"
        known.append(zoo.fine_tune(tiny_llama, folder, seed=100 + i, scale=scale))
        models.append(folder)
    return Family(tiny_llama, models, known)


def load_numpy(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of a model folder as a float32 numpy array.

    References subtract in float32 (as PAW does, and IEEE makes the two identical) so that magnitude
    ranks match exactly, then compute the formulas in float64.
    """
    from paw.io.checkpoint import open_checkpoint

    ckpt = open_checkpoint(folder)
    return {name: ckpt[name].float().numpy() for name in ckpt}
