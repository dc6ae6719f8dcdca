"""Every file PAW writes keeps its promises (issue 24), checked through the CLI as users run it.

- No NaN/Inf on disk without ``--allow-nonfinite``, whichever command writes it: a diverged
  distillation, a diverged ``train-lora``, a NaN model passed through ``extend-tokenizer``; a NaN
  source adapter or model is named by file and tensor before any work.
- Every file and folder of every output has the mode the umask gives (0666/0777 minus it), the
  adapter weights that ``safetensors`` writes 0600 included.
- A hard link of an input (same ``st_dev``/``st_ino``) is the input: an output that is one, or a
  folder that holds one, is refused.

Refusals are checked like the bad-input table: exit code 2, one ``error:`` line and no traceback,
the inputs (``fx``) byte-identical, nothing at the output path and no staging folder left.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.reliability.conftest import tree_hash

CPU = ("--device", "cpu")
DOWN = "model.layers.0.mlp.down_proj.weight"  # the tensor conftest._poison fills with NaN/Inf


def _distill(fx: Path, out: Path, *extra) -> list:
    return ["transfer-lora", "--method", "distill", "--adapter", fx / "lora", "--source-base", fx / "base",
            "--target-base", fx / "ft", "--output", out, "--prompts", fx / "data" / "mc.jsonl", "--max-steps", "2",
            "--batch-size", "3", "--max-new-tokens", "3", "--holdout", "0", *CPU, *extra]


def _refused(cli, fx: Path, out: Path, args, *fragments: str) -> str:
    """Run ``args``; assert a clean refusal that left nothing behind; return the error line."""
    before = tree_hash(fx)
    res = cli(*map(str, args))
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2, (res.exit_code, res.stdout[-500:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    assert [x for x in lines if x.startswith("error:")] == [lines[-1]] and "unexpected" not in lines[-1], res.stderr
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])
    assert tree_hash(fx) == before, "an input changed"
    leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(".")]
    assert not leftovers, leftovers
    return lines[-1]


# ---------------------------------------------------------------- NaN/Inf never reaches disk unasked

def test_a_diverged_distillation_is_refused_with_advice(cli, fx, tmp_path):
    out = tmp_path / "moved"
    line = _refused(cli, fx, out, _distill(fx, out, "--lr", "1e30"), "adapter_model.safetensors",
                    "the distillation diverged at step 2 ", "lower --lr", "NaN/Inf", "lora_", "--allow-nonfinite")
    assert line.startswith(f"error: {out / 'adapter_model.safetensors'}: ")
    assert not out.exists()


def test_allow_nonfinite_writes_a_diverged_distillation_and_records_it(cli, fx, tmp_path):
    out = tmp_path / "moved"
    res = cli(*map(str, _distill(fx, out, "--lr", "1e30", "--allow-nonfinite")))
    assert res.exit_code == 0, res.stderr
    report = json.loads((out / "transfer_report.json").read_text())
    written = report["nonfinite_written"]
    assert written and all(count > 0 for count in written.values())
    assert report["distill"]["diverged_at_step"] == 2   # step 1's loss is finite; its update is not


def test_a_nan_source_adapter_is_named_not_blamed_on_the_teacher(cli, fx, tmp_path):
    out = tmp_path / "moved"
    args = _distill(fx, out)
    args[args.index("--adapter") + 1] = fx / "adapters" / "nan_tensor"
    line = _refused(cli, fx, out, args, f"{fx / 'adapters' / 'nan_tensor' / 'adapter_model.safetensors'}: ",
                    "lora_B.weight' holds 1 NaN/Inf", "the source adapter cannot teach")
    assert "teacher continued" not in line and not out.exists()


def test_a_diverged_train_lora_is_refused(cli, fx, tmp_path):
    """The shared loop (paw.train) stops at the first NaN loss, naming the step, before any writer runs: the
    step-1 loss is the base's, the lr-1e30 update makes the step-2 loss NaN."""
    out = tmp_path / "lora"
    _refused(cli, fx, out, ["train-lora", "--model", fx / "base", "--data", fx / "data" / "mc.jsonl", "--steps", "3",
                            "--lr", "1e30", "--output", out, *CPU],
             "the training loss became nan at step 2", "lower --lr")
    assert not out.exists()


def test_a_writer_without_its_own_check_refuses_a_nan_model_and_honours_the_flag(cli, fx, tmp_path):
    out = tmp_path / "ext"
    args = ["extend-tokenizer", "--model", fx / "nan_ft", "--tokens", "alpha", "beta", "--output", out]
    _refused(cli, fx, out, args, f"{out}: ", f"tensor '{DOWN}' holds 3 NaN/Inf", "--allow-nonfinite")
    assert not out.exists()
    res = cli(*map(str, args), "--allow-nonfinite")
    assert res.exit_code == 0, res.stderr


@pytest.mark.parametrize("model,role", [("nan_ft", "model"), ("inf_ft", "base")])
def test_task_vectors_refuses_nan_and_inf_by_model_and_tensor(cli, fx, tmp_path, model, role):
    out = tmp_path / "tv"
    models = [fx / model, fx / "ft"] if role == "model" else [fx / "ft"]
    base = fx / "base" if role == "model" else fx / model
    line = _refused(cli, fx, out, ["task-vectors", "--base", base, "--models", *models, "--outdir", out, *CPU],
                    f"{fx / model}: {role} {model}", f"tensor '{DOWN}' holds 3 NaN/Inf", "--allow-nonfinite")
    assert "nan," not in line and not out.exists()


def test_transfer_copy_of_a_nan_adapter_writes_with_the_flag(cli, fx, tmp_path):
    out = tmp_path / "moved"
    args = ["transfer-lora", "--adapter", fx / "adapters" / "nan_tensor", "--source-base", fx / "base",
            "--target-base", fx / "ft", "--method", "copy", "-o", out, *CPU]
    _refused(cli, fx, out, args, "NaN/Inf", "--allow-nonfinite")
    res = cli(*map(str, args), "--allow-nonfinite")
    assert res.exit_code == 0, res.stderr
    assert json.loads((out / "transfer_report.json").read_text())["nonfinite_written"]


# ---------------------------------------------------------------- modes follow the umask

def _writing_commands(fx: Path, d: Path) -> dict[str, list]:
    return {
        "zoo": ["zoo", "build", d / "zoo", "--hidden-size", "32"],
        "train": ["train-lora", "--model", fx / "base", "--data", fx / "data" / "mc.jsonl", "--steps", "1",
                  "--output", d / "trained", *CPU],
        "copy": ["transfer-lora", "--adapter", fx / "lora", "--source-base", fx / "base", "--target-base", fx / "ft",
                 "--method", "copy", "-o", d / "copied", *CPU],
        "distill": _distill(fx, d / "distilled", "--max-steps", "1"),
        "merge": ["merge", "--base", fx / "base", "--models", fx / "ft", "--weights", "1", "--output", d / "merged",
                  *CPU],
        "bpe": ["bpe", "train", fx / "data" / "corpus.txt", "--vocab-size", "280", "--output", d / "tok"],
        "extend": ["extend-tokenizer", "--model", fx / "base", "--tokens", "alpha", "beta", "--output", d / "ext"],
        "tv": ["task-vectors", "--base", fx / "base", "--models", fx / "ft", "--outdir", d / "tv", *CPU],
    }


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_every_file_of_every_output_follows_the_umask(cli, fx, tmp_path, umask):
    d = tmp_path / "outs"
    old = os.umask(umask)
    try:
        d.mkdir()
        for name, args in _writing_commands(fx, d).items():
            res = cli(*map(str, args))
            assert res.exit_code == 0, (name, res.stderr[-2000:])
    finally:
        os.umask(old)
    paths = list(d.rglob("*"))
    assert {"adapter_model.safetensors", "model.safetensors", "tok.model", "pairwise_cosines.csv"} <= \
        {p.name for p in paths}
    wrong = {str(p.relative_to(d)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in paths
             if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) != (0o777 if p.is_dir() else 0o666) & ~umask}
    assert not wrong, wrong


# ---------------------------------------------------------------- a hard link of an input is the input

def test_an_output_file_hard_linked_to_a_file_inside_an_input_model_is_refused(cli, fx, tmp_path):
    out = tmp_path / "r.json"
    os.link(fx / "base" / "config.json", out)
    _refused(cli, fx, out, ["eval", "--model", fx / "base", "--data", fx / "data" / "mc.jsonl", "--output", out,
                            "--overwrite", *CPU],
             f"{out}: the output is a hard link of the input {fx / 'base' / 'config.json'}", "never modifies")
    assert os.path.samefile(out, fx / "base" / "config.json")  # left as it was


def test_an_output_folder_holding_a_hard_link_of_an_input_is_refused(cli, fx, tmp_path):
    out = tmp_path / "merged"
    out.mkdir()
    os.link(fx / "ft" / "model.safetensors", out / "model.safetensors")
    _refused(cli, fx, out, ["merge", "--base", fx / "base", "--models", fx / "ft", "--weights", "1", "--output", out,
                            "--overwrite", *CPU],
             f"contains {out / 'model.safetensors'}, which is a hard link of the input "
             f"{fx / 'ft' / 'model.safetensors'}")
    assert os.path.samefile(out / "model.safetensors", fx / "ft" / "model.safetensors")


def test_an_adapter_output_hard_linked_to_the_input_adapter_is_refused(cli, fx, tmp_path):
    out = tmp_path / "moved"
    out.mkdir()
    os.link(fx / "lora" / "adapter_model.safetensors", out / "adapter_model.safetensors")
    _refused(cli, fx, out, ["transfer-lora", "--adapter", fx / "lora", "--source-base", fx / "base", "--target-base",
                            fx / "ft", "--method", "copy", "-o", out, "--overwrite", *CPU], "hard link of the input")


def test_a_companion_output_hard_linked_to_the_corpus_is_refused(cli, fx, tmp_path):
    out = tmp_path / "tok"
    os.link(fx / "data" / "corpus.txt", tmp_path / "tok.vocab")
    _refused(cli, fx, out, ["bpe", "train", fx / "data" / "corpus.txt", "--vocab-size", "280", "--output", out,
                            "--overwrite"], "tok.vocab: the output is the input", "corpus.txt")
    assert not (tmp_path / "tok.model").exists()
