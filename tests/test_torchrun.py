"""Launched processes: ``torchrun --nproc-per-node 2`` (gloo, CPU) trains the adapter of one process, and a
distillation killed with SIGKILL after its first checkpoint resumes to the bytes of an uninterrupted run.

Slow (each launch imports torch, transformers and PEFT anew: about 25 s per torchrun on a loaded
2-core machine); the same arithmetic is checked in-process by tests/test_distributed.py and
tests/transfer/test_distill_scale.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.launched import ADAPTER, env, make_pair, max_diff, torchrun

pytestmark = pytest.mark.slow

DISTILL = ("--prompts", "generic", "--max-steps", "4", "--batch-size", "5", "--max-new-tokens", "4", "--init", "none",
           "--lr", "1e-2", "--device", "cpu")
TRAIN = ("--steps", "4", "--batch-size", "5", "--lr", "1e-2", "--rank", "4", "--device", "cpu")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("torchrun"))


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
    two = torchrun(*args, "--output", tmp_path / "two")
    assert two.returncode == 0, two.stderr[-3000:]
    assert max_diff(tmp_path / "one", tmp_path / "two") < 1e-5
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
                             tmp_path / "cut", "--save-every", "2"], capture_output=True, text=True, env=env(),
                            timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (tmp_path / "cut").exists() and load_train_state(tmp_path / "cut-work")["step"] == 2
    resumed = cli(*args, "--output", tmp_path / "cut", "--save-every", "2", "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    assert (tmp_path / "cut" / ADAPTER).read_bytes() == (tmp_path / "whole" / ADAPTER).read_bytes()
