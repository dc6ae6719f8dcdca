"""One test per defect of issue 17 (each failed before the fix): inputs read-only, one writer per
output, validated headers, NaN/Inf policy, adapter cross-checks, atomic sets, deterministic
adapter configs, streamed merge memory, outputs readable under umask 022."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.reliability.conftest import tree_hash


def _merge_args(fx, out, *extra):
    return ["merge", "--base", str(fx / "base"), "--models", str(fx / "ft"), str(fx / "ft2"), "--output", str(out),
            "--weights", "0.5", "0.5", *extra]


# ---------------------------------------------------------------- inputs are read-only

def test_library_merge_refuses_an_output_holding_its_inputs(fx, tmp_path):
    """Without the CLI's scope too: ``merge()`` with overwrite=True once deleted every model in the folder."""
    from paw.errors import PawError
    from paw.merge import MergeOptions, merge

    victim = tmp_path / "victim"
    shutil.copytree(fx / "victim", victim)
    before = tree_hash(victim)
    with pytest.raises(PawError, match="never modifies its inputs"):
        merge(MergeOptions(base=str(victim / "base"), models=[str(victim / "finetune")], output=str(victim),
                           overwrite=True, weights=[1.0]))
    assert tree_hash(victim) == before


def test_copied_side_files_source_is_an_input(fx, tmp_path):
    from paw.errors import PawError
    from paw.io.writer import write_checkpoint

    model = tmp_path / "m"
    shutil.copytree(fx / "base", model)
    with pytest.raises(PawError, match="never modifies"):
        write_checkpoint(model, {"a": torch.zeros(2)}, copy_from=model, overwrite=True)
    assert (model / "model.safetensors").exists()


# ---------------------------------------------------------------- one writer per output

def test_a_second_writer_gets_a_clean_error_while_the_first_writes(cli, fx, tmp_path):
    from paw.io.atomic import atomic_dir

    out = tmp_path / "merged"
    with atomic_dir(out) as first:  # a run in progress holds the output
        (first / "marker").write_text("first")
        res = cli(*_merge_args(fx, out))
        assert res.exit_code == 2 and "another run" in res.stderr and "is writing this output" in res.stderr
    assert (out / "marker").read_text() == "first"  # the first run's output, untouched
    res = cli(*_merge_args(fx, out))
    assert res.exit_code == 2 and "already exists" in res.stderr


def test_an_output_that_appears_mid_run_is_never_replaced(tmp_path):
    from paw.errors import PawError
    from paw.io.atomic import atomic_dir

    out = tmp_path / "o"
    with pytest.raises(PawError, match="already exists|appeared"):
        with atomic_dir(out) as tmp:
            (tmp / "mine").write_text("x")
            out.mkdir()  # another program wins the race
            (out / "theirs").write_text("y")
    assert sorted(p.name for p in out.iterdir()) == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no staging folder or lock left


def test_no_replace_rename_refuses_an_existing_destination(tmp_path):
    from paw.io.atomic import _rename_noreplace

    for kind in ("file", "dir"):
        src, dst = tmp_path / f"src-{kind}", tmp_path / f"dst-{kind}"
        for p in (src, dst):
            p.mkdir() if kind == "dir" else p.write_text(p.name)
        with pytest.raises(FileExistsError):
            _rename_noreplace(src, dst)
        assert src.exists() and dst.exists()


@pytest.mark.slow
def test_two_merges_started_together_one_wins_cleanly(fx, tmp_path):
    out = tmp_path / "merged"
    cmd = [sys.executable, "-m", "paw", *_merge_args(fx, out)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    results = [(p.wait(), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert loser.startswith("error:") and len(loser.strip().splitlines()) == 1
    from paw.io.checkpoint import open_checkpoint

    assert len(open_checkpoint(out)) > 0


# ---------------------------------------------------------------- stale staging folders

def test_staging_folders_of_dead_runs_are_removed(cli, fx, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".merged.tmp-{dead.pid}-abcd"
    (stale / "new" / "merged").mkdir(parents=True)
    (stale / "new" / "merged" / "model.safetensors").write_bytes(b"\0" * 1000)
    other = tmp_path / f".other.tmp-{dead.pid}-efgh"
    other.mkdir()
    alive = tmp_path / f".busy.tmp-{os.getpid()}-ijkl"  # a live run's folder stays
    alive.mkdir()
    res = cli(*_merge_args(fx, tmp_path / "merged"))
    assert res.exit_code == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["merged", alive.name])


def test_a_cut_short_replacement_puts_the_previous_output_back(tmp_path):
    """A dead run that had moved the old output aside but not yet moved the new one in."""
    from paw.io.atomic import check_output

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    staging = tmp_path / f".out.tmp-{dead.pid}-zz"
    (staging / "new" / "out").mkdir(parents=True)
    (staging / "new" / "out" / "new.txt").write_text("new")
    (staging / "old" / "out").mkdir(parents=True)
    (staging / "old" / "out" / "old.txt").write_text("old")
    (staging / "COMMIT").write_text(json.dumps(["out"]))
    with pytest.raises(Exception, match="already exists"):
        check_output(tmp_path / "out", overwrite=False)
    assert (tmp_path / "out" / "old.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


# ---------------------------------------------------------------- kill -9 at any moment

_KILLER = """
import os, sys
import paw.io.atomic as atomic
n = int(os.environ["PAW_KILL_AT"])
seen = [0]
for name in ("_rename_noreplace", "_fix_mode"):
    orig = getattr(atomic, name)
    def wrapped(*a, _orig=orig):
        seen[0] += 1
        if seen[0] == n:
            os.kill(os.getpid(), 9)
        return _orig(*a)
    setattr(atomic, name, wrapped)
real_rename = os.rename
def rename(a, b):
    seen[0] += 1
    if seen[0] == n:
        os.kill(os.getpid(), 9)
    return real_rename(a, b)
atomic.os.rename = rename
from paw.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run_killed(args, kill_at, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PAW_KILL_AT": str(kill_at)}
    return subprocess.run([sys.executable, "-c", _KILLER, *args], env=env, capture_output=True, text=True,
                          cwd=tmp_path).returncode


def _commands(fx, out):
    corpus = fx / "data" / "corpus.txt"
    return {
        "merge": (_merge_args(fx, out / "merged"), [out / "merged"]),
        "task-vectors": (["task-vectors", "--base", str(fx / "base"), "--models", str(fx / "ft"), str(fx / "ft2"),
                          "--outdir", str(out / "tv"), "--device", "cpu"], [out / "tv"]),
        "transfer-lora": (["transfer-lora", "--adapter", str(fx / "lora"), "--source-base", str(fx / "base"),
                           "--target-base", str(fx / "ft"), "-o", str(out / "moved"), "--device", "cpu"],
                          [out / "moved"]),
        "bpe train": (["bpe", "train", str(corpus), "--vocab-size", "280", "--output", str(out / "tok"),
                       "--export-hf", str(out / "tok-hf")],
                      [out / "tok.model", out / "tok.vocab", out / "tok-hf"]),
        "train-lora": (["train-lora", "--model", str(fx / "base"), "--data", str(fx / "data" / "mc.jsonl"),
                        "--output", str(out / "lora"), "--steps", "2", "--rank", "2", "--device", "cpu"],
                       [out / "lora"]),
    }


def _state(paths):
    return [tree_hash(p) if p.is_dir() else (p.read_bytes() if p.exists() else None) for p in paths]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["merge", "task-vectors", "transfer-lora", "bpe train", "train-lora"])
def test_kill_9_leaves_nothing_or_the_previous_output_and_the_rerun_succeeds(fx, tmp_path, command):
    """Killed at each file-system step of the final moves: the output set is absent (primary missing)
    or complete; a killed replacement is rolled back to the previous output by the next run; the
    same command then succeeds and leaves nothing hidden behind."""
    from paw.io.atomic import check_output

    out = tmp_path / "out"
    out.mkdir()
    args, finals = _commands(fx, out)[command]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for kill_at in (1, 2, 3, 4, 5, 6):
        for p in finals:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        code = _run_killed(args, kill_at, tmp_path)
        assert code in (-9, 0), code
        present = [p.exists() for p in finals]
        assert not present[0] or all(present), (kill_at, present)  # primary present => whole set present
        if not present[0]:  # nothing was written: the same command succeeds
            rerun = subprocess.run([sys.executable, "-m", "paw", *args], capture_output=True, text=True, env=env)
            assert rerun.returncode == 0, (kill_at, rerun.stderr)
        previous = _state(finals)
        code = _run_killed([*args, "--overwrite"], kill_at, tmp_path)  # now replacing a complete output
        assert code in (-9, 0), code
        check_output(finals[0], overwrite=True)  # what the next run does first: recover a cut-short commit
        now = _state(finals)
        if code == -9 and finals[0].exists():
            fresh = [x is not None for x in now]
            assert now == previous or all(fresh), (kill_at, "mixed old and new output")
        rerun = subprocess.run([sys.executable, "-m", "paw", *args, "--overwrite"], capture_output=True, text=True,
                               env=env)
        assert rerun.returncode == 0, (kill_at, rerun.stderr)
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")], (kill_at, list(out.iterdir()))


# ---------------------------------------------------------------- headers and index files

def _st_file(tmp_path, header, data=b""):
    import struct

    raw = json.dumps(header).encode()
    path = tmp_path / f"f{len(list(tmp_path.iterdir()))}.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


@pytest.mark.parametrize("offsets", [[[-8, 8], [8, 16]], [[0, 8], [0, 8]], [["0", "8"], [8, 16]],
                                     [[0.0, 8.0], [8, 16]], [[0, 8], [16, 24]], [[0, 8], [8, 40]]],
                         ids=["negative", "overlap", "string", "float", "gap", "past-end"])
def test_the_header_reader_refuses_what_safetensors_refuses(tmp_path, offsets):
    from safetensors import SafetensorError, safe_open

    from paw.errors import PawError
    from paw.io.safetensors_header import read_header

    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": offsets[0]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": offsets[1]}}
    path = _st_file(tmp_path, header, b"\0" * 16)
    with pytest.raises((SafetensorError, TypeError, ValueError)):  # the library refuses it ...
        with safe_open(str(path), framework="pt") as f:
            [f.get_tensor(k) for k in f.keys()]
    with pytest.raises(PawError, match="not a readable safetensors file"):  # ... and so does PAW's
        read_header(path)


def test_a_negative_offset_no_longer_reads_the_header_as_weights(cli, fx, tmp_path):
    """It once merged into an lm_head of 2e37 with exit code 0."""
    res = cli("merge", "--base", fx / "base", "--models", fx / "bad" / "neg_offset", "--output", tmp_path / "m",
              "--weights", "1")
    assert res.exit_code == 2 and "data_offsets [-64" in res.stderr and not (tmp_path / "m").exists()


def test_the_header_reader_agrees_with_safetensors_on_good_files(fx):
    from safetensors import safe_open

    from paw.io.checkpoint import open_checkpoint

    ckpt = open_checkpoint(fx / "base")
    with safe_open(str(fx / "base" / "model.safetensors"), framework="pt") as f:
        for name in f.keys():
            assert torch.equal(ckpt[name], f.get_tensor(name))
            assert torch.equal(ckpt.rows(name, 1, 3), f.get_tensor(name)[1:3])


def test_shard_paths_outside_the_folder_are_refused(fx):
    from paw.errors import PawError
    from paw.io.checkpoint import open_checkpoint

    for name in ("idx_escape", "idx_abs", "idx_int"):
        with pytest.raises(PawError, match="inside the model folder"):
            open_checkpoint(fx / "bad" / name)


# ---------------------------------------------------------------- NaN and Inf

def test_nonfinite_output_is_written_only_when_allowed_and_recorded(cli, fx, tmp_path):
    res = cli("merge", "--base", fx / "base", "--models", fx / "nan_ft", "--output", tmp_path / "m",
              "--weights", "1")
    assert res.exit_code == 2 and "nan_ft" in res.stderr and "down_proj" in res.stderr
    res = cli("merge", "--base", fx / "base", "--models", fx / "nan_ft", "--output", tmp_path / "m",
              "--weights", "1", "--allow-nonfinite")
    assert res.exit_code == 0, res.stderr
    record = json.loads((tmp_path / "m" / "paw_merge.json").read_text())
    assert record["nonfinite_written"] == {"model.layers.0.mlp.down_proj.weight": 3}


def test_scale_overflow_is_refused_with_no_input_to_blame(cli, fx, tmp_path):
    res = cli("merge", "--base", fx / "base", "--models", fx / "ft", "--output", tmp_path / "m", "--weights", "3e38",
              "--scale", "3e38")
    assert res.exit_code == 2 and "no input holds any" in res.stderr and not (tmp_path / "m").exists()


def test_cosine_of_an_undefined_task_vector_is_nan_not_one():
    from paw.taskvec.compute import TaskVectorResults

    nan = math.nan
    results = TaskVectorResults("b", ["ok", "nan", "zero"], [], [], [[], [], []],
                                [[4.0, nan, 0.0], [nan, nan, nan], [0.0, nan, 0.0]], {})
    cos = results.cosines()
    assert cos[0][0] == 1.0
    assert all(math.isnan(cos[i][k]) for i in range(3) for k in range(3) if (i, k) != (0, 0))


def test_task_vectors_on_a_nan_fine_tune_reports_nan_cosines(cli, fx, tmp_path):
    res = cli("task-vectors", "--base", fx / "base", "--models", fx / "nan_ft", fx / "ft", "--outdir", tmp_path / "tv",
              "--device", "cpu", "--allow-nonfinite")  # without it the NaN model is refused (test_writers.py)
    assert res.exit_code == 0, res.stderr
    rows = (tmp_path / "tv" / "pairwise_cosines.csv").read_text().splitlines()
    assert rows[1].split(",")[1:] == ["nan", "nan"] and rows[2].split(",")[2] == "1.0"


def test_transfer_onto_a_nan_target_is_one_line_not_a_linalg_traceback(cli, fx, tmp_path):
    res = cli("transfer-lora", "--adapter", fx / "lora", "--source-base", fx / "base", "--target-base",
              fx / "nan_ft", "-o", tmp_path / "moved", "--method", "lora-x", "--device", "cpu")
    assert res.exit_code == 2 and "nan_ft" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- adapter config against tensors

def test_an_adapter_peft_refuses_is_refused_by_adapter_check_too(cli, fx):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    with pytest.raises(RuntimeError, match="size mismatch"):
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(fx / "base"), fx / "adapters" / "r_changed")
    res = cli("adapter", "check", "--adapter", fx / "adapters" / "r_changed", "--base", fx / "base")
    assert res.exit_code == 2 and "rank 4 but adapter_config.json says r=8" in res.stderr
    res = cli("adapter", "check", "--adapter", fx / "lora", "--base", fx / "base")
    assert res.exit_code == 0, res.stderr


def test_r_four_as_a_word_is_one_line(cli, fx, tmp_path):
    res = cli("transfer-lora", "--adapter", fx / "adapters" / "r_string", "--source-base", fx / "base",
              "--target-base", fx / "ft", "-o", tmp_path / "x")
    assert res.exit_code == 2 and res.stderr.strip() .endswith("'r' must be a positive integer, got 'four'")


def test_an_inconsistent_adapter_is_never_written(tmp_path):
    from paw.errors import PawError
    from paw.io.adapter import LoraAdapter, lora_config_dict, write_adapter

    config = lora_config_dict(r=8, alpha=8, target_modules=["q_proj"], base_model=None)
    tensors = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 6),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.zeros(6, 4)}
    with pytest.raises(PawError, match="r=8"):
        write_adapter(tmp_path / "a", LoraAdapter(config, tensors))
    assert not (tmp_path / "a").exists()


# ---------------------------------------------------------------- sets of files

def test_task_vectors_report_appears_as_one_folder(cli, fx, tmp_path, monkeypatch):
    """A failure while writing the second model's files leaves no complete-looking first one."""
    import paw.taskvec.report as report

    calls = []

    def failing_figure(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*a, **k)

    real = report.save_figure
    monkeypatch.setattr(report, "save_figure", failing_figure)
    res = cli("task-vectors", "--base", fx / "base", "--models", fx / "ft", fx / "ft2", "--outdir", tmp_path / "tv",
              "--device", "cpu")
    assert res.exit_code == 2 and "No space left" in res.stderr
    assert list(tmp_path.iterdir()) == []  # no tv/ft folder, no hidden staging folder
    monkeypatch.setattr(report, "save_figure", real)
    res = cli("task-vectors", "--base", fx / "base", "--models", fx / "ft", fx / "ft2", "--outdir", tmp_path / "tv",
              "--device", "cpu")
    assert res.exit_code == 0 and sorted(p.name for p in (tmp_path / "tv").iterdir()) == \
        ["ft", "ft2", "pairwise_cosines.csv"]


def test_bpe_with_the_vocab_name_blocked_writes_neither_file(cli, fx, tmp_path):
    (tmp_path / "tok.vocab").mkdir()
    res = cli("bpe", "train", fx / "data" / "corpus.txt", "--vocab-size", "270", "--output", tmp_path / "tok")
    assert res.exit_code == 2 and "tok.vocab" in res.stderr and "already exists" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok.vocab"]


def test_eval_results_and_tracking_appear_together(cli, fx, tmp_path, monkeypatch):
    import paw.evaluate.pipeline as pipeline

    def broken(*a, **k):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(pipeline, "write_results", broken)  # where the pipeline looks it up
    res = cli("eval", "--model", fx / "base", "--data", fx / "data" / "mc.jsonl", "--output", tmp_path / "r.json",
              "--track", "csv", "--device", "cpu")
    assert res.exit_code == 2 and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- same seed, same bytes

def test_adapter_config_lists_target_modules_sorted(tmp_path, fx):
    """PEFT saves target_modules in set order, which changes with Python's hash seed."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from paw.io.lm import write_adapter_into

    targets = {"v_proj", "q_proj", "up_proj", "o_proj", "k_proj", "gate_proj", "down_proj"}
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(fx / "base"),
                           LoraConfig(r=2, target_modules=targets, task_type="CAUSAL_LM"))
    write_adapter_into(model, tmp_path)
    saved = json.loads((tmp_path / "adapter_config.json").read_text())["target_modules"]
    assert saved == sorted(targets)


@pytest.mark.slow
def test_train_lora_twice_with_one_seed_gives_identical_config_bytes(fx, tmp_path):
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"lora{hash_seed}"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        done = subprocess.run([sys.executable, "-m", "paw", "train-lora", "--model", str(fx / "base"), "--data",
                               str(fx / "data" / "mc.jsonl"), "--output", str(out), "--steps", "2", "--rank", "2",
                               "--device", "cpu"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        outs.append(out)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


# ---------------------------------------------------------------- merge memory

@pytest.mark.parametrize("method", ["task-arithmetic", "ties", "breadcrumbs", "dare-ties"])
def test_merge_reads_merged_tensors_only_in_row_blocks(fx, tmp_path, monkeypatch, method):
    """The norm pass and the merge pass hold blocks, never a whole tensor of any input."""
    import paw.merge.pipeline as pipeline
    from paw.io.checkpoint import Checkpoint
    from paw.merge import MergeOptions, merge

    monkeypatch.setattr(pipeline, "BLOCK_ELEMENTS", 256)
    whole, blocks = [], []
    real_get, real_rows = Checkpoint.__getitem__, Checkpoint.rows

    def get(self, name):
        whole.append(name)
        return real_get(self, name)

    def rows(self, name, start, stop):
        t = real_rows(self, name, start, stop)
        blocks.append(t.numel())
        return t

    monkeypatch.setattr(Checkpoint, "__getitem__", get)
    monkeypatch.setattr(Checkpoint, "rows", rows)
    merge(MergeOptions(base=str(fx / "base"), models=[str(fx / "ft"), str(fx / "ft2")], output=str(tmp_path / "m"),
                       method=method, density=0.5, gamma=0.05))
    assert blocks and max(blocks) <= 256
    assert whole == [], f"whole tensors read: {whole[:3]}"


def test_max_shard_size_is_checked_before_the_norm_pass(fx, tmp_path, monkeypatch):
    import paw.merge.pipeline as pipeline
    from paw.errors import PawError
    from paw.merge import MergeOptions, merge

    monkeypatch.setattr(pipeline, "task_vector_norms", lambda *a, **k: pytest.fail("norm pass ran"))
    with pytest.raises(PawError, match="max-shard-size"):
        merge(MergeOptions(base=str(fx / "base"), models=[str(fx / "ft")], output=str(tmp_path / "m"),
                           max_shard_size="abc"))


# ---------------------------------------------------------------- outputs others can read

def test_a_merged_model_is_readable_by_another_user_under_umask_022(cli, fx, tmp_path):
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="paw-umask-", dir="/tmp"))  # pytest's own folder is 0700
    os.chmod(tmp_path, 0o755)
    old = os.umask(0o022)
    try:
        res = cli(*_merge_args(fx, tmp_path / "merged"))
        assert res.exit_code == 0, res.stderr
        res = cli("task-vectors", "--base", fx / "base", "--models", fx / "ft", "--outdir", tmp_path / "tv",
                  "--device", "cpu")
        assert res.exit_code == 0, res.stderr
    finally:
        os.umask(old)
    for root in (tmp_path / "merged", tmp_path / "tv"):
        for path in [root, *root.rglob("*")]:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))
    if os.geteuid() == 0:  # really read it as nobody
        files = [str(p) for p in (tmp_path / "merged").iterdir()]
        done = subprocess.run(["cat", *files], capture_output=True, user=65534, group=65534)
        assert done.returncode == 0, done.stderr
    shutil.rmtree(tmp_path)


def test_a_nested_command_keeps_its_inputs_to_itself(tmp_path):
    """The benchmark runs commands inside a command: a step's inputs guard that step only."""
    from paw.errors import PawError
    from paw.io.atomic import check_output
    from paw.io.input_guard import input_scope, note_input

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with input_scope():
        with input_scope():
            note_input(scratch)
            with pytest.raises(PawError, match="never modifies"):
                check_output(scratch, overwrite=True)
        check_output(scratch, overwrite=True)  # the outer step may rewrite its own scratch folder
