"""Shared fixtures: tiny zoo models built once per session, and a CLI runner.

Area-specific fixtures live in tests/<area>/conftest.py.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA = Path(__file__).resolve().parent / "data"  # carried with the repo: nothing outside it is read


class Killed(BaseException):
    """Stands for SIGKILL in-process, past the CLI's error handling (the real signal: tests/test_torchrun.py)."""


@contextlib.contextmanager
def dies_after_saving(monkeypatch, where: str):
    """The block's run dies (:class:`Killed`) right after its first checkpoint is written: ``where`` names the
    ``save_train_state`` its pipeline calls (``"paw.evaluate.pipeline.save_train_state"``); put back afterwards."""
    from paw.io import train_state as io_state

    real = io_state.save_train_state

    def save_then_die(folder, state):
        real(folder, state)
        raise Killed

    monkeypatch.setattr(where, save_then_die)
    try:
        with pytest.raises(Killed):
            yield
    finally:
        monkeypatch.setattr(where, real)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def one_torch_thread():
    """Torch on one thread for the test, restored afterwards: tiny models run faster on one, above all on a
    loaded shared CPU (folders that want it for every test ask for it in an autouse fixture)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def cli(capsys):
    """Run ``paw ARGS`` in-process: ``cli('merge', '--help').exit_code``."""
    from paw.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        out = capsys.readouterr()
        return CliResult(code or 0, out.out, out.err)

    return run


@pytest.fixture(scope="session")
def zoo_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session")
def tiny_llama(zoo_root) -> Path:
    """A 2-layer Llama, hidden 32, with its own byte-level BPE tokenizer (untied lm_head)."""
    from paw import zoo

    return zoo.tiny_model(zoo_root / "llama", "llama", seed=0, hidden_size=32, num_layers=2)


@pytest.fixture(scope="session")
def tiny_qwen(zoo_root) -> Path:
    """A 2-layer Qwen2, hidden 32, tied embeddings."""
    from paw import zoo

    return zoo.tiny_model(zoo_root / "qwen2", "qwen2", seed=1, hidden_size=32, num_layers=2)


@pytest.fixture(scope="session")
def tiny_lora(zoo_root, tiny_llama) -> Path:
    """A rank-4 LoRA on all seven projections of ``tiny_llama`` with non-zero B."""
    from paw import zoo

    return zoo.make_lora(tiny_llama, zoo_root / "llama-lora", rank=4, alpha=8, seed=3)


@pytest.fixture(scope="session")
def commonsense() -> Path:
    """Slices of the public commonsense QA sets in both layouts (tests/data/README.md says which lines)."""
    return DATA / "commonsense"
