"""``--fsdp``: under ``torchrun --nproc-per-node 2`` (gloo, CPU) the student is sharded with FSDP2 and the adapter
equals the one-process run's; bad use is one line, exit 2.

The launched tests are slow (each torchrun imports torch, transformers and PEFT anew); the refusals
and the helpers of :mod:`paw.fsdp` run in-process.
"""

from __future__ import annotations

import json

import pytest

from paw.distributed import Ranks
from paw.errors import PawError
from tests.launched import make_pair, max_diff, torchrun

DISTILL = ("--max-new-tokens", "4", "--init", "none", "--lr", "1e-2", "--device", "cpu")
TRAIN = ("--steps", "4", "--batch-size", "5", "--lr", "1e-2", "--rank", "4", "--device", "cpu")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("fsdp"))


def _distill(pair, *extra):
    return ("transfer-lora", "--method", "distill", "--adapter", pair / "src-lora", "--source-base", pair / "src",
            "--target-base", pair / "tgt", *DISTILL, *extra)


CASES = {
    # a real split of every batch (3 + 2), the test set scored on both ranks
    "train-lora": lambda pair: ("train-lora", "--model", pair / "tgt", "--data", pair / "train.jsonl", *TRAIN,
                                "--eval-data", pair / "train.jsonl", "--eval-limit", "8"),
    "distill": lambda pair: _distill(pair, "--prompts", "generic", "--max-steps", "4", "--batch-size", "5"),
    # one input per step: rank 1's share is always empty and runs a stand-in (sequences and choices) at weight 0
    "distill-stand-in": lambda pair: _distill(pair, "--prompts", pair / "train.jsonl", "--max-steps", "3",
                                              "--batch-size", "1"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_sharded_two_processes_train_the_adapter_of_one(cli, pair, tmp_path, case):
    args = CASES[case](pair)
    report = "metrics.json" if case == "train-lora" else "transfer_report.json"
    one = cli(*args, "--output", tmp_path / "one")
    assert one.exit_code == 0, one.stderr
    two = torchrun(*args, "--output", tmp_path / "two", "--fsdp")
    assert two.returncode == 0, two.stderr[-3000:]
    assert max_diff(tmp_path / "one", tmp_path / "two") < 1e-5
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("two")) in (["two"], ["two", "two-work"])
    reports = list((tmp_path / "two").rglob(report))
    assert len(reports) == 1
    data = json.loads(reports[0].read_text())
    fsdp = data["fsdp"] if case == "train-lora" else data["distill"]["fsdp"]
    assert fsdp["processes"] == 2 and fsdp["units"] == 3            # two decoder layers and the root
    assert fsdp["parameters_on_rank"] <= fsdp["parameters"] // 2 + 64  # rank 0 holds half (rows rounded up)
    assert two.stdout.count(str(tmp_path / "two")) == 1, two.stdout   # one summary: rank 0's
    if case == "train-lora":
        ref = json.loads((tmp_path / "one" / report).read_text())
        for key in ("base/accuracy", "test/accuracy", "test/loss"):
            assert data[key] == pytest.approx(ref[key], abs=1e-5)


@pytest.mark.parametrize("command", ["train-lora", "distill"])
def test_fsdp_in_one_process_is_one_line_exit_2(cli, pair, tmp_path, command):
    args = CASES[command](pair)
    res = cli(*args, "--output", tmp_path / "out", "--fsdp")
    assert res.exit_code == 2
    assert "--fsdp" in res.stderr and "torchrun" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_check_refuses_checkpoints_and_a_single_process():
    from paw.fsdp import check

    check(True, ranks=Ranks(1, 2))
    check(False, save_every=2, resume=True, ranks=Ranks(0, 1))
    for kwargs, flag in ((dict(save_every=2), "--save-every"), (dict(resume=True), "--resume")):
        with pytest.raises(PawError, match=f"--fsdp with {flag}"):
            check(True, ranks=Ranks(0, 2), **kwargs)
    with pytest.raises(PawError, match="one process"):
        check(True, ranks=Ranks(0, 1))


def test_decoder_layers_are_the_units(pair):
    from transformers import AutoModelForCausalLM

    from paw.fsdp import decoder_layers

    model = AutoModelForCausalLM.from_pretrained(pair / "tgt")
    assert decoder_layers(model) == list(model.model.layers)


def test_stand_in_borrows_only_what_another_rank_has():
    from paw.fsdp import stand_in

    batch = [{"seq": 1, "choices": 0}, {"seq": 0, "choices": 1}, {"seq": 1, "choices": 0}]
    # rank 1 of 2 holds the last item only: it has a sequence, and borrows the choices item of rank 0
    assert stand_in(batch[2:], batch, Ranks(1, 2), lambda e: e["seq"]) == [batch[2]]
    assert stand_in(batch[2:], batch, Ranks(1, 2), lambda e: e["choices"]) == [batch[1]]
    assert stand_in([], batch[:1], Ranks(1, 2), lambda e: e["choices"]) == []   # nobody has one: no forward


def test_load_dtype_follows_load_lm():
    from types import SimpleNamespace

    from paw.fsdp import load_dtype

    cuda, cpu = SimpleNamespace(type="cuda"), SimpleNamespace(type="cpu")
    assert load_dtype("auto", cuda, {"torch_dtype": "bfloat16"}) == "bfloat16"
    assert load_dtype("auto", cuda, {"text_config": {"dtype": "float16"}}) == "float16"
    assert load_dtype("auto", cuda, None) == "float32"
    assert load_dtype("auto", cpu, {"torch_dtype": "bfloat16"}) == "auto"    # float32 on the CPU, as load_lm
    assert load_dtype("float16", cpu, {}) == "float16"
