"""Resumable training (paw.train_state, paw.io.train_state): checkpoints round-trip, refusals, the continuation cache,
and ``paw train-lora --save-every K --resume`` ending with the bytes of an uninterrupted run."""

from __future__ import annotations

import pytest

from paw.errors import PawError
from paw.io.train_state import (
    STATE_NAME,
    append_continuations,
    load_train_state,
    read_continuations,
    read_synthesis,
    read_synthesized,
    save_train_state,
    work_dir,
    write_synthesis,
)
from paw.train_state import Checkpoints, capture
from tests.conftest import dies_after_saving


def _setup(seed=0):
    import torch

    torch.manual_seed(seed)
    layer = torch.nn.Linear(4, 3)
    return layer, torch.optim.AdamW(layer.parameters(), lr=0.1)


def _steps(layer, opt, todo):
    import torch

    for step in todo:
        gen = torch.Generator().manual_seed(step)
        x = torch.randn(5, 4, generator=gen)
        opt.zero_grad(set_to_none=True)
        layer(x).pow(2).mean().backward()
        opt.step()


def test_a_checkpoint_resumes_to_the_exact_same_weights(tmp_path):
    import torch

    whole, opt = _setup()
    _steps(whole, opt, range(5))

    first, opt1 = _setup()
    ckpt = Checkpoints(2, save=lambda s: save_train_state(tmp_path, s), settings={"lr": 0.1})
    _steps(first, opt1, range(2))
    assert ckpt.after(2, 5, list(first.parameters()), opt1, curve=[1.0, 2.0])
    assert not ckpt.after(3, 5, list(first.parameters()), opt1)  # not due
    torch.rand(3)  # the RNG moves on after the checkpoint; resuming puts it back

    again, opt2 = _setup(seed=1)  # other initial weights: all of them come from the checkpoint
    resumed = Checkpoints(2, state=load_train_state(tmp_path), settings={"lr": 0.1})
    assert resumed.resume(list(again.parameters()), opt2) == 2 and resumed.extra("curve") == [1.0, 2.0]
    _steps(again, opt2, range(2, 5))
    for a, b in zip(whole.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)


def test_resume_refuses_other_settings_and_damaged_files(tmp_path):
    layer, opt = _setup()
    save_train_state(tmp_path, capture(3, list(layer.parameters()), opt, settings={"lr": 0.1, "seed": 0}))
    with pytest.raises(PawError, match="lr=0.1.*lr=0.2"):
        Checkpoints(state=load_train_state(tmp_path), settings={"lr": 0.2, "seed": 0}).resume(list(layer.parameters()), opt)
    (tmp_path / STATE_NAME).write_bytes(b"not a checkpoint")
    with pytest.raises(PawError, match=STATE_NAME):
        load_train_state(tmp_path)
    assert load_train_state(tmp_path / "none") is None


def test_continuation_cache_survives_a_line_cut_by_a_kill(tmp_path):
    append_continuations(tmp_path, 0, "k1", [("a", " one"), ("b", " two")])
    with open(tmp_path / "continuations-rank0.jsonl", "a") as f:
        f.write('{"key": "k1", "text": "c", "conti')  # killed mid-line
    append_continuations(tmp_path, 1, "k1", [("d", " four")])
    append_continuations(tmp_path, 0, "k1", [("e", " five")])
    append_continuations(tmp_path, 0, "other teacher", [("a", " else")])
    assert read_continuations(tmp_path, "k1") == {"a": " one", "b": " two", "d": " four", "e": " five"}
    assert work_dir(tmp_path / "out").name == "out-work"


def test_a_synthesis_state_is_read_back_only_under_its_own_key(tmp_path):
    """Another teacher, seed or seed set is another key: its state is not resumed; a damaged file is ignored."""
    state = {"kept": ["Question: Why?\nAnswer:"], "known": ["question: why? answer:"], "stats": {"rounds": 1},
             "rng": [3, [1, 2], None]}
    assert read_synthesis(tmp_path, "k") is None and read_synthesized(tmp_path) == []
    write_synthesis(tmp_path, "k", state)
    assert read_synthesis(tmp_path, "k") == state and read_synthesis(tmp_path, "other") is None
    assert read_synthesized(tmp_path) == ["Question: Why?\nAnswer:"]   # whatever the key: the bench's measurement
    write_synthesis(tmp_path, "k", {**state, "kept": state["kept"] * 2})   # the next round replaces it whole
    assert len(read_synthesis(tmp_path, "k")["kept"]) == 2 and [p.name for p in tmp_path.iterdir()] == ["synthesis.json"]
    (tmp_path / "synthesis.json").write_text('{"key": "k", "state": {"kept": ["a"')   # cut short
    assert read_synthesis(tmp_path, "k") is None and read_synthesized(tmp_path) == []


def test_train_lora_resumed_after_a_kill_equals_an_uninterrupted_run(cli, tmp_path, tiny_llama, monkeypatch):
    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    write_items(tmp_path / "train.jsonl", fact_task("colour", n=16, seed=0))
    args = ("train-lora", "--model", tiny_llama, "--data", tmp_path / "train.jsonl", "--steps", "6", "--batch-size",
            "4", "--lr", "1e-2", "--rank", "4", "--device", "cpu")
    assert cli(*args, "--output", tmp_path / "whole").exit_code == 0

    with dies_after_saving(monkeypatch, "paw.evaluate.pipeline.save_train_state"):
        cli(*args, "--output", tmp_path / "cut", "--save-every", "2")
    assert not (tmp_path / "cut").exists() and load_train_state(tmp_path / "cut-work")["step"] == 2
    from paw.evaluate import train

    steps, step_loss = [], train._step_loss
    monkeypatch.setattr(train, "_step_loss", lambda *a: steps.append(1) or step_loss(*a))
    monkeypatch.setenv("PAW_PROGRESS", "1")  # the progress line even for work this short
    result = cli(*args, "--output", tmp_path / "cut", "--save-every", "2", "--resume")
    assert result.exit_code == 0, result.stderr
    assert len(steps) == 4  # steps 3 to 6: the first two came from the checkpoint
    assert "[paw] training LoRA: 6/6 steps (100%)" in result.stderr  # counted from the checkpoint (not 4/4)
    name = "adapter_model.safetensors"
    assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert load_train_state(tmp_path / "cut-work") is None  # done: nothing left to resume
