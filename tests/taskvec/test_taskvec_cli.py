"""``paw task-vectors`` end to end: file names, columns, determinism, exit codes."""

from __future__ import annotations

import csv
import json

import pytest

from paw.taskvec.report import PER_PARAM_COLUMNS

FILES = ["group_l2_bar.png", "per_param_stats.csv", "summary.json", "top3_by_l2.csv", "top3_by_maxabs.csv"]


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def report(tmp_path_factory, tv_models):
    """One CLI run over two fine-tunes (``--models A B`` form), top-k 3."""
    from paw.cli import main

    out = tmp_path_factory.mktemp("tvcli") / "stats"
    args = ["task-vectors", "--base", str(tv_models["base"]), "--models", str(tv_models["ft1"]),
            str(tv_models["ft2"]), "--outdir", str(out), "--top-k", "3", "--device", "cpu"]
    assert main(args) == 0
    return out


def test_layout_and_columns(report, tv_models):
    assert sorted(p.name for p in report.iterdir()) == ["ft1", "ft2", "pairwise_cosines.csv"]
    for model in ("ft1", "ft2"):
        assert sorted(p.name for p in (report / model).iterdir()) == FILES
        rows = _read_csv(report / model / "per_param_stats.csv")
        assert rows[0] == PER_PARAM_COLUMNS
        assert rows[0][:3] == ["param", "shape", "numel"] and rows[0][-1] == "q100"
        assert len(rows) - 1 == len(list(tv_models["deltas1"]))
        top = _read_csv(report / model / "top3_by_l2.csv")
        assert top[0] == PER_PARAM_COLUMNS and len(top) == 4
        l2 = [float(r[3]) for r in top[1:]]
        assert l2 == sorted((float(r[3]) for r in rows[1:]), reverse=True)[:3]
    png = (report / "ft1" / "group_l2_bar.png").read_bytes()
    assert png.startswith(b"\x89PNG") and b"Software" not in png


def test_summary_fields(report, tv_models):
    info = json.loads((report / "ft2" / "summary.json").read_text())
    for key in ("global_l2", "global_l1", "n_params_considered", "skipped_params", "groups",
                "paw_version", "inputs", "command", "tied_lm_head"):
        assert key in info, key
    assert info["model"] == "ft2" and info["command"].startswith("paw task-vectors --base")
    assert info["inputs"]["base"]["path"] == str(tv_models["base"])
    assert set(info["groups"]["attn"]) == {"l2", "l1", "param_count"}


def test_pairwise_cosines_table(report):
    rows = _read_csv(report / "pairwise_cosines.csv")
    assert rows[0] == ["model", "ft1", "ft2"]
    assert [r[0] for r in rows[1:]] == ["ft1", "ft2"]
    assert rows[1][1] == "1.0" and rows[2][2] == "1.0" and rows[1][2] == rows[2][1]


def test_identical_inputs_give_identical_bytes(cli, report, tv_models, monkeypatch):
    before = {p.relative_to(report): p.read_bytes() for p in report.rglob("*") if p.is_file()}
    args = ["task-vectors", "--base", tv_models["base"], "--models", tv_models["ft1"], tv_models["ft2"],
            "--outdir", report, "--top-k", "3", "--device", "cpu", "--overwrite"]
    monkeypatch.setattr("sys.argv", ["paw", *map(str, args)])
    result = cli(*args)
    assert result.exit_code == 0, result.stderr
    after = {p.relative_to(report): p.read_bytes() for p in report.rglob("*") if p.is_file()}
    assert sorted(before) == sorted(after)
    for path in before:
        if path.name != "summary.json":
            assert before[path] == after[path], path
        else:  # the recorded command line differs by --overwrite, nothing else
            old, new = json.loads(before[path]), json.loads(after[path])
            assert new.pop("command") == old.pop("command") + " --overwrite"
            assert old == new


def test_library_writer_is_byte_identical(tmp_path, tv_models):
    from paw.io.checkpoint import open_checkpoint
    from paw.taskvec import compute_task_vectors, write_report

    r = compute_task_vectors(open_checkpoint(tv_models["base"]), [open_checkpoint(tv_models["ft1"])])
    for name in ("a", "b"):
        write_report(tmp_path / name, r, top_k=5, command="paw task-vectors ...")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)


def test_multi_gpu_without_gpus_says_so(cli, tmp_path, tv_models):
    result = cli("task-vectors", "--base", tv_models["base"], "--models", tv_models["ft1"],
                 "--outdir", tmp_path / "o", "--device", "cpu", "--multi-gpu", "--include", "norm")
    assert result.exit_code == 0, result.stderr
    assert "fewer than two GPUs" in result.stderr
    assert "ft1: global L2" in result.stdout


@pytest.mark.parametrize("case", ["missing", "arch", "none_in_common", "exists", "bad_regex", "unknown_option",
                                  "outdir_is_file"])
def test_bad_input_exits_2_with_one_line(cli, tmp_path, tv_models, tiny_qwen, case):
    base, ft = tv_models["base"], tv_models["ft1"]
    out = tmp_path / "out"
    args = {"missing": ["--base", base, "--models", tmp_path / "nope"],
            "arch": ["--base", base, "--models", tiny_qwen],
            "none_in_common": ["--base", base, "--models", ft, "--include", "^nothing$"],
            "exists": ["--base", base, "--models", ft],
            "bad_regex": ["--base", base, "--models", ft, "--exclude", "(("],
            "unknown_option": ["--base", base, "--models", ft, "--bogus"],
            "outdir_is_file": ["--base", base, "--models", ft, "--include", "norm"]}[case]
    if case == "exists":
        (out / "ft1").mkdir(parents=True)
    if case == "outdir_is_file":
        out.write_text("not a folder")
    result = cli("task-vectors", *args, "--outdir", out)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    if case != "unknown_option":  # click's own usage message
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert not out.is_dir() or not (out / "pairwise_cosines.csv").exists()


def test_help_has_example(cli):
    result = cli("task-vectors", "--help")
    assert result.exit_code == 0 and "Example: paw task-vectors" in result.stdout
