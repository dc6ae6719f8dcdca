"""``--method distill --device cuda`` (bf16 autocast) moves the facts as the CPU run does."""

from __future__ import annotations

import pytest
import torch

from tests.transfer.test_distill import FAST, _accuracy, _distill


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_distill_on_cuda_raises_the_target_accuracy(cli, world, tmp_path):  # noqa: F811
    # the later --device wins over the helper's --device cpu
    result = _distill(cli, world, tmp_path / "gpu", "--prompts", world["root"] / "questions.txt", *FAST,
                      "--device", "cuda")
    assert result.exit_code == 0, result.stderr
    base, moved = _accuracy(world["target"], world["task"]), _accuracy(world["target"], world["task"], tmp_path / "gpu")
    assert moved >= base + 0.375, (base, moved)
