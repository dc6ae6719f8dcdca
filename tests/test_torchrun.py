"""Launched processes: ``torchrun --nproc-per-node 2`` (gloo, CPU) trains the adapter of one process, and a
distillation killed with SIGKILL after its first checkpoint resumes to the bytes of an uninterrupted run.

Slow (each launch imports torch, transformers and PEFT anew: about 25 s per torchrun on a loaded
2-core machine); the same arithmetic is checked in-process by tests/test_distributed.py and
tests/transfer/test_distill_scale.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ADAPTER = "adapter_model.safetensors"
DISTILL = ("--prompts", "generic", "--max-steps", "4", "--batch-size", "5", "--max-new-tokens", "4", "--init", "none",
           "--lr", "1e-2", "--device", "cpu")
TRAIN = ("--steps", "4", "--batch-size", "5", "--lr", "1e-2", "--rank", "4", "--device", "cpu")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two zoo Llamas sharing a tokenizer (token KL + sequence NLL), a LoRA of the first, and a fact task."""
    from paw import zoo
    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    root = tmp_path_factory.mktemp("torchrun")
    dims = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    src = zoo.tiny_model(root / "src", "llama", seed=11, **dims)
    zoo.make_lora(src, root / "src-lora", rank=4, alpha=8, seed=12, scale=0.2)
    zoo.tiny_model(root / "tgt", "llama", seed=5, **dims)
    write_items(root / "train.jsonl", fact_task("colour", n=16, seed=0))
    return root


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PAW_PROGRESS": "1"}


def _torchrun(*args) -> subprocess.CompletedProcess:
    torchrun = Path(sys.executable).with_name("torchrun")
    return subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "paw", *map(str, args)],
                          capture_output=True, text=True, env=_env(), timeout=600)


def _max_diff(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(a / ADAPTER), load_file(b / ADAPTER)
    assert sorted(x) == sorted(y)
    return max(float((x[k] - y[k]).abs().max()) for k in x)


@pytest.mark.parametrize("command", ["distill", "train-lora"])
def test_two_processes_train_the_adapter_of_one(cli, pair, tmp_path, command):
    if command == "distill":
        args = ("transfer-lora", "--method", "distill", "--adapter", pair / "src-lora", "--source-base", pair / "src",
                "--target-base", pair / "tgt", *DISTILL)
        report, bar = "transfer_report.json", "[paw] distilling:"
    else:
        args = ("train-lora", "--model", pair / "tgt", "--data", pair / "train.jsonl", *TRAIN)
        report, bar = "metrics.json", "[paw] training LoRA:"
    one = cli(*args, "--output", tmp_path / "one")
    assert one.exit_code == 0, one.stderr
    two = _torchrun(*args, "--output", tmp_path / "two")
    assert two.returncode == 0, two.stderr[-3000:]
    assert _max_diff(tmp_path / "one", tmp_path / "two") < 1e-5
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("two")) in (["two"], ["two", "two-work"])
    assert len(list((tmp_path / "two").rglob(report))) == 1
    assert two.stderr.count(bar) == 1, two.stderr           # one progress line: rank 0's
    assert two.stdout.count(str(tmp_path / "two")) == 1, two.stdout   # one summary: rank 0's


KILL_AFTER_FIRST_CHECKPOINT = """
import os, signal, sys
from paw.io import train_state
real = train_state.save_train_state
def save_then_die(folder, state):
    real(folder, state)
    os.kill(os.getpid(), signal.SIGKILL)
import paw.transfer.distill.run as run
run.save_train_state = save_then_die
from paw.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigkill_after_the_first_checkpoint_then_resume_gives_the_same_bytes(cli, pair, tmp_path):
    from paw.io.train_state import load_train_state

    args = ("transfer-lora", "--method", "distill", "--adapter", pair / "src-lora", "--source-base", pair / "src",
            "--target-base", pair / "tgt", *DISTILL, "--max-steps", "6")
    whole = cli(*args, "--output", tmp_path / "whole")
    assert whole.exit_code == 0, whole.stderr
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST_CHECKPOINT, *map(str, args), "--output",
                             tmp_path / "cut", "--save-every", "2"], capture_output=True, text=True, env=_env(),
                            timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (tmp_path / "cut").exists() and load_train_state(tmp_path / "cut-work")["step"] == 2
    resumed = cli(*args, "--output", tmp_path / "cut", "--save-every", "2", "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    assert (tmp_path / "cut" / ADAPTER).read_bytes() == (tmp_path / "whole" / ADAPTER).read_bytes()
