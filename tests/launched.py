"""What the tests of launched processes share (tests/test_torchrun.py, tests/test_fsdp.py): the zoo pair,
``torchrun --nproc-per-node 2 -m paw ...`` on CPU, and the largest difference of two adapters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ADAPTER = "adapter_model.safetensors"


def make_pair(root: Path) -> Path:
    """Two zoo Llamas sharing a tokenizer (token KL + sequence NLL), a LoRA of the first, and a fact task."""
    from paw import zoo
    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    dims = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    src = zoo.tiny_model(root / "src", "llama", seed=11, **dims)
    zoo.make_lora(src, root / "src-lora", rank=4, alpha=8, seed=12, scale=0.2)
    zoo.tiny_model(root / "tgt", "llama", seed=5, **dims)
    write_items(root / "train.jsonl", fact_task("colour", n=16, seed=0))
    return root


def env() -> dict:
    """One thread per process (two processes on two cores) and progress lines on."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PAW_PROGRESS": "1"}


def torchrun(*args) -> subprocess.CompletedProcess:
    """``paw`` with ``args`` in two processes under torchrun."""
    launcher = Path(sys.executable).with_name("torchrun")
    return subprocess.run([str(launcher), "--standalone", "--nproc-per-node", "2", "-m", "paw", *map(str, args)],
                          capture_output=True, text=True, env=env(), timeout=600)


def max_diff(a: Path, b: Path) -> float:
    """Largest |difference| between the adapters in folders ``a`` and ``b`` (the same tensor names)."""
    from safetensors.torch import load_file

    x, y = load_file(a / ADAPTER), load_file(b / ADAPTER)
    assert sorted(x) == sorted(y)
    return max(float((x[k] - y[k]).abs().max()) for k in x)
