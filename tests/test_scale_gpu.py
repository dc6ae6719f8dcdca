"""On CUDA in bf16: one distillation step and one train-lora step; with two GPUs, torchrun (NCCL) equals one process.

Marked ``gpu`` (deselected by default); run with ``pytest -m gpu tests/test_scale_gpu.py`` on a machine with CUDA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

ADAPTER = "adapter_model.safetensors"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from paw import zoo
    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    root = tmp_path_factory.mktemp("gpu")
    dims = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)
    src = zoo.tiny_model(root / "src", "llama", seed=11, **dims)
    zoo.make_lora(src, root / "src-lora", rank=4, alpha=8, seed=12, scale=0.2)
    zoo.tiny_model(root / "tgt", "qwen2", seed=5, vocab_size=280, **dims)
    write_items(root / "train.jsonl", fact_task("colour", n=16, seed=0))
    return root


def _factors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / ADAPTER)


def test_one_distill_step_on_cuda_in_bf16(cli, pair, tmp_path):
    result = cli("transfer-lora", "--method", "distill", "--adapter", pair / "src-lora", "--source-base", pair / "src",
                 "--target-base", pair / "tgt", "--output", tmp_path / "out", "--prompts", "generic",
                 "--max-steps", "1", "--batch-size", "4", "--max-new-tokens", "4", "--init", "none",
                 "--device", "cuda", "--dtype", "bfloat16", "--gradient-checkpointing")
    assert result.exit_code == 0, result.stderr
    factors = _factors(tmp_path / "out")
    assert all(t.dtype == torch.float32 and bool(torch.isfinite(t).all()) for t in factors.values())
    memory = json.loads((tmp_path / "out" / "transfer_report.json").read_text())["memory"]
    assert memory["measured"]["cuda_max_allocated_bytes"] > 0
    assert memory["predicted"]["assumptions"]["device"] == "cuda"


def test_one_train_lora_step_on_cuda_in_bf16(cli, pair, tmp_path):
    result = cli("train-lora", "--model", pair / "tgt", "--data", pair / "train.jsonl", "--output", tmp_path / "out",
                 "--steps", "1", "--batch-size", "4", "--rank", "4", "--lr", "1e-2", "--device", "cuda",
                 "--dtype", "bfloat16")
    assert result.exit_code == 0, result.stderr
    factors = _factors(tmp_path / "out")
    assert any(float(t.abs().max()) > 0 for k, t in factors.items() if "lora_B" in k)  # one step moved B off zero


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_with_nccl_train_the_adapter_of_one(cli, pair, tmp_path):
    args = ["train-lora", "--model", str(pair / "tgt"), "--data", str(pair / "train.jsonl"), "--steps", "4",
            "--batch-size", "6", "--rank", "4", "--lr", "1e-2", "--device", "cuda", "--dtype", "float32"]
    one = cli(*args, "--output", tmp_path / "one")
    assert one.exit_code == 0, one.stderr
    torchrun = Path(sys.executable).with_name("torchrun")
    two = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "paw", *args,
                          "--output", str(tmp_path / "two")], capture_output=True, text=True,
                         env={**os.environ, "PAW_PROGRESS": "1"}, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = _factors(tmp_path / "one"), _factors(tmp_path / "two")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-4  # float32 on GPU: reduction order differs
    assert two.stderr.count("[paw] training LoRA:") == 1
