"""Options first (paw.knobs): flags made from dataclass fields, the same values from a --config YAML, typed
flags winning, every value from a file checked and named by its key."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from paw.errors import PawError
from paw.knobs import flag, from_mapping, knob, knobs, merged


@dataclass(frozen=True)
class Demo:
    steps: int = knob(300, "Optimiser steps.", min=1)
    lr: float = knob(1e-3, "Learning rate.")
    name: str | None = knob(None, "A name.")
    kind: str = knob("a", "A kind.", choices=("a", "b"))
    fast: bool = knob(False, "Go fast.", flag="--fast/--slow")
    modules: tuple[str, ...] | None = knob(None, "Modules.", cli=str)


def test_flags_and_values_from_a_mapping():
    assert [f.name for f in knobs(Demo)] == ["steps", "lr", "name", "kind", "fast", "modules"]
    assert flag(Demo, "steps") == "--steps" and flag(Demo, "fast") == "--fast"
    d = from_mapping({"steps": 40, "lr": 2e-4, "name": "x", "kind": "b", "fast": True, "modules": ["q", "v"]}, Demo)
    assert d == Demo(40, 2e-4, "x", "b", True, ("q", "v"))
    assert from_mapping({"modules": "q_proj, v_proj"}, Demo).modules == ("q_proj", "v_proj")
    flags = Demo(steps=5)
    assert merged(Demo(steps=40, lr=0.5), flags, typed={"steps"}) == Demo(steps=5, lr=0.5)


@pytest.mark.parametrize("data, says", [
    ({"stepz": 3}, "--config: unknown key 'stepz'; the keys are"),
    ({"steps": "40"}, "steps: expected a number, not '40' (YAML reads it as text"),
    ({"lr": "1.0e300"}, "lr: expected a number, not '1.0e300'"),
    ({"steps": True}, "steps: expected a number, not True"),
    ({"steps": 0}, "steps: 0 is below its minimum 1"),
    ({"steps": 2.5}, "steps: expected a whole number"),
    ({"lr": float("nan")}, "lr: nan is not a finite number"),
    ({"fast": 1}, "fast: expected true or false, not 1"),
    ({"kind": "c"}, "kind: 'c' is not one of a, b"),
    ({"name": ["x"]}, "name: expected text"),
    ({"modules": [1, 2]}, "modules: expected a list of names"),
    ({"name": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": {"j": 1}}}}}}}}}}}, "nested deeper than 8"),
])
def test_every_value_from_a_file_is_checked_and_named(data, says):
    with pytest.raises(PawError) as err:
        from_mapping(data, Demo)
    assert says in str(err.value), str(err.value)


def _positive(label, value, data):
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise PawError(f"{label} {value!r} is not positive (mode {data.get('mode')})")
    return float(value)


@dataclass(frozen=True)
class Several:
    names: tuple[str, ...] = knob((), "Names: --names a b c.")
    xs: tuple[float, ...] | None = knob(None, "Numbers, one per name.", min=0)
    ws: tuple[float, ...] | None = knob(None, "Judged numbers.", judge=_positive)
    ranks: tuple[int, ...] = knob((8, 16), "A comma list.", cli=str, parse=lambda t: tuple(int(x) for x in t.split(",")))
    mode: str = knob("a", "A mode.")


def test_list_knobs_from_a_mapping():
    """A YAML list, or one value as a list of one; each item checked and named by its index; cli=str: a comma list."""
    got = from_mapping({"names": ["a", "b"], "xs": [1, 2.5], "ws": [3], "ranks": "4, 8"}, Several)
    assert got == Several(("a", "b"), (1.0, 2.5), (3.0,), (4, 8))
    assert from_mapping({"names": "a", "xs": 2, "ranks": [2, 3]}, Several) == Several(("a",), (2.0,), None, (2, 3))
    for data, says in [({"xs": [1, "2"]}, "xs[1]: expected a number, not '2'"), ({"xs": [1, -1]}, "xs[1]: -1 is below"),
                       ({"names": ["a", 3]}, "names: expected a list of names"),
                       ({"ws": [1, 0], "mode": "b"}, "--config: ws[1] 0 is not positive (mode b)"),
                       ({"ranks": "4,x"}, "ranks: expected numbers separated by commas, not '4,x'"),
                       ({"names": [["a"]]}, "names: expected a list of names")]:
        with pytest.raises(PawError) as err:
            from_mapping(data, Several)
        assert says in str(err.value), (data, str(err.value))


def test_a_config_key_may_be_spelled_as_the_flag():
    """A knob whose flag is not its field's name (``--input`` for ``input_file``) takes either as a key."""
    from paw.bpe.options import EncodeOptions
    from paw.knobs import config_keys

    assert config_keys(EncodeOptions, "input_file") == {"input_file", "input-file", "input"}
    assert from_mapping({"input": "a.txt"}, EncodeOptions) == from_mapping({"input-file": "a.txt"}, EncodeOptions)
    assert from_mapping({"input": "a.txt"}, EncodeOptions).input_file == "a.txt"


def test_list_knobs_on_the_command_line_with_a_config_file(tmp_path):
    """``--names a b`` and ``--names a --names b`` alike; a list typed beside --config wins whole; the body is told
    what the user set (Given) and may take another tool's schema (foreign) untranslated."""
    import typer
    from typer.testing import CliRunner

    from paw.cli._options import options_command
    from paw.knobs import Given, list_flags

    assert list_flags(Several) == ["--names", "--xs", "--ws"]
    seen = []
    app = typer.Typer()
    options_command(app, "go", [(Several, "")], lambda s, **kw: seen.append((s, kw)), doc="Go.", given=True,
                    foreign=lambda data: "tool" in data)
    app.command("other")(lambda: None)
    config = tmp_path / "c.yaml"
    config.write_text("names: [x, y, z]\nxs: [1, 2, 3]\nmode: b\n")
    run = CliRunner().invoke
    assert run(app, ["go", "--names", "a", "b", "--ranks", "2,4", "--xs", "0.5", "1.5"]).exit_code == 0
    assert run(app, ["go", "--names", "a", "--names", "b", "--config", str(config)]).exit_code == 0
    config.write_text("tool: 1\n")
    assert run(app, ["go", "--config", str(config), "--xs", "1"]).exit_code == 0
    (first, kw1), (second, kw2), (third, kw3) = seen
    assert first == Several(("a", "b"), (0.5, 1.5), None, (2, 4)) and kw1["foreign"] is None
    assert kw1["given"] == Given(frozenset({"names", "xs", "ranks"}))
    assert second == Several(("a", "b"), (1.0, 2.0, 3.0), None, (8, 16), "b")   # typed names win, the rest is the file's
    assert kw2["given"].typed == {"names"} and kw2["given"].in_file == {"xs", "mode"} and "mode" in kw2["given"]
    assert third == Several(xs=(1.0,)) and kw3["foreign"] == (config, {"tool": 1})


def test_transfer_lora_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tiny_lora, tmp_path):
    """The same transfer from flags and from --config writes the same adapter; a flag typed beside the file wins."""
    from paw import zoo

    base, lora = tiny_llama, tiny_lora
    finetune = tmp_path / "ft"
    zoo.fine_tune(base, finetune, seed=1, scale=0.01)
    by_flags = cli("transfer-lora", "--adapter", lora, "--source-base", base, "--target-base", finetune,
                   "--output", tmp_path / "a", "--method", "copy")
    assert by_flags.exit_code == 0, by_flags.stderr
    config = tmp_path / "move.yaml"
    config.write_text(f"adapter: {lora}\nsource_base: {base}\ntarget-base: {finetune}\noutput: {tmp_path / 'b'}\n"
                      "method: lora-x\n")
    by_file = cli("transfer-lora", "--config", config, "--method", "copy")   # the typed --method wins
    assert by_file.exit_code == 0, by_file.stderr
    a, b = (json.loads((tmp_path / x / "transfer_report.json").read_text()) for x in ("a", "b"))
    assert a["summary"]["methods"] == b["summary"]["methods"] == {"copy": a["summary"]["transferred"]}
    assert (tmp_path / "a" / "adapter_model.safetensors").read_bytes() == \
        (tmp_path / "b" / "adapter_model.safetensors").read_bytes()
    config.write_text(f"adapter: {lora}\nsource_base: {base}\ntarget_base: {finetune}\noutput: {tmp_path / 'c'}\n"
                      "method: copy\nmax_steps: '300'\n")
    bad = cli("transfer-lora", "--config", config)
    assert bad.exit_code == 2 and f"--config {config}: max_steps: expected a number" in bad.stderr, bad.stderr
    assert bad.stderr.count("\n") == 1 and not (tmp_path / "c").exists()
    config.write_text("method: copy\n")
    missing = cli("transfer-lora", "--config", config)
    assert missing.exit_code == 2 and "missing option '--source-base'" in missing.stderr


def test_eval_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tmp_path):
    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    data = write_items(tmp_path / "quiz.jsonl", fact_task("colour", n=6, seed=0))
    flags = cli("eval", "--model", tiny_llama, "--data", data, "--limit", "4", "--output", tmp_path / "a.json")
    assert flags.exit_code == 0, flags.stderr
    config = tmp_path / "eval.yaml"
    config.write_text(f"model: {tiny_llama}\ndata: {data}\nlimit: 2\nbatch-size: 3\noutput: {tmp_path / 'b.json'}\n")
    by_file = cli("eval", "--config", config, "--limit", "4")
    assert by_file.exit_code == 0, by_file.stderr
    a, b = (json.loads((tmp_path / f"{x}.json").read_text())["metrics"] for x in ("a", "b"))
    assert a["n"] == b["n"] == 4 and a["accuracy"] == b["accuracy"]
    config.write_text(f"model: {tiny_llama}\ndata: {data}\nformat: csv\n")
    bad = cli("eval", "--config", config)
    assert bad.exit_code == 2 and "format: 'csv' is not one of auto" in bad.stderr, bad.stderr


def test_train_lora_reads_a_config_file(cli, tiny_llama, tmp_path):
    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    data = write_items(tmp_path / "quiz.jsonl", fact_task("colour", n=6, seed=0))
    flags = cli("train-lora", "--model", tiny_llama, "--data", data, "--output", tmp_path / "a", "--steps", "2",
                "--rank", "2", "--lr", "1e-3")
    assert flags.exit_code == 0, flags.stderr
    config = tmp_path / "train.yaml"
    config.write_text(f"model: {tiny_llama}\ndata: {data}\noutput: {tmp_path / 'b'}\nsteps: 2\nrank: 2\nlr: 0.5\n")
    by_file = cli("train-lora", "--config", config, "--lr", "1e-3")
    assert by_file.exit_code == 0, by_file.stderr
    assert (tmp_path / "a" / "adapter_model.safetensors").read_bytes() == \
        (tmp_path / "b" / "adapter_model.safetensors").read_bytes()
    config.write_text(f"model: {tiny_llama}\ndata: {data}\noutput: {tmp_path / 'c'}\nrank: 0\n")
    bad = cli("train-lora", "--config", config)
    assert bad.exit_code == 2 and "rank: 0 is below its minimum 1" in bad.stderr and not (tmp_path / "c").exists()


def test_train_full_reads_a_config_file_and_tracks_its_run(cli, tiny_llama, tmp_path):
    import csv

    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    data = write_items(tmp_path / "quiz.jsonl", fact_task("colour", n=6, seed=0))
    config = tmp_path / "full.yaml"
    config.write_text(f"model: {tiny_llama}\ndata: {data}\noutput: {tmp_path / 'ft'}\nsteps: 3\nlr: 0.001\n"
                      "track: csv\n")
    result = cli("train-full", "--config", config, "--steps", "2")
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["lr"] == 0.001
    rows = list(csv.DictReader((tmp_path / "ft-tracking" / "metrics.csv").open()))
    losses = [(r["step"], float(r["value"])) for r in rows if r["metric"] == "train/loss"]
    assert [step for step, _ in losses] == ["1", "2"] and [loss for _, loss in losses] == pytest.approx(
        metrics["train_losses"]), rows


def test_extract_lora_reads_a_config_file_and_refuses_a_key_it_has_no_flag_for(cli, tiny_llama, tmp_path):
    from paw import zoo

    ft = tmp_path / "ft"
    zoo.fine_tune(tiny_llama, ft, seed=1, scale=0.05)
    config = tmp_path / "extract.yaml"
    config.write_text(f"base: {tiny_llama}\nfinetune: {ft}\noutput: {tmp_path / 'lora'}\nrank: 2\n")
    result = cli("extract-lora", "--config", config, "--rank", "3")
    assert result.exit_code == 0, result.stderr
    assert json.loads((tmp_path / "lora" / "adapter_config.json").read_text())["r"] == 3
    config.write_text(f"base: {tiny_llama}\nfinetune: {ft}\noutput: {tmp_path / 'x'}\ntrack: csv\n")
    bad = cli("extract-lora", "--config", config)
    assert bad.exit_code == 2 and "unknown key 'track' for paw extract-lora" in bad.stderr, bad.stderr
    assert not (tmp_path / "x").exists()


MERGE_FLAGS = ("--base --models --adapters --rank --output -o --method --mode --l2-norms --stats-dir --weights --beta "
               "--alpha --scale --density --drop-rate --gamma --seed --dtype --device --vocab-policy --max-shard-size "
               "--overwrite --allow-nonfinite --t --epsilon --select-topk --normalize --no-normalize --rescale "
               "--no-rescale --filter-wise --max-iter --tol --tokenizer-from --config --track").split()


def _help_flags(cli, command: str) -> set[str]:
    """Every flag ``paw COMMAND --help`` lists (``-o, --output``, ``--rescale / --no-rescale``)."""
    import re

    text = cli(command, "--help").stdout
    return {f for found in re.findall(r"(?m)^  (?:(-\w), )?(--[\w-]+)(?: / (--[\w-]+))?", text) for f in found if f}


def test_merge_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tmp_path):
    """What to merge and how to run, from --config; a flag of either kind typed beside the file wins. A mergekit
    config is one translation: only the flags that say how to run combine with it (and win: --dtype)."""
    from paw import zoo

    fts = [tmp_path / "ft1", tmp_path / "ft2"]
    for i, ft in enumerate(fts, start=1):
        zoo.fine_tune(tiny_llama, ft, seed=i, scale=0.01)
    by_flags = cli("merge", "--base", tiny_llama, "--models", *fts, "--method", "ties", "--density", "0.3",
                   "--weights", "0.6", "0.4", "--dtype", "bfloat16", "--output", tmp_path / "a", "--device", "cpu")
    assert by_flags.exit_code == 0, by_flags.stderr
    config = tmp_path / "merge.yaml"
    config.write_text(f"base: {tiny_llama}\nmodels: [{fts[0]}, {fts[1]}]\nmethod: ties\ndensity: 0.7\n"
                      f"weights: [0.6, 0.4]\ndtype: float32\ndevice: cpu\noutput: {tmp_path / 'b'}\n")
    by_file = cli("merge", "--config", config, "--density", "0.3", "--dtype", "bfloat16")
    assert by_file.exit_code == 0, by_file.stderr
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    record = json.loads((tmp_path / "b" / "paw_merge.json").read_text())
    assert record["parameters"] == {"density": 0.3} and record["dtype"] == "bfloat16"
    mergekit = tmp_path / "mk.yml"
    mergekit.write_text(f"merge_method: task_arithmetic\nbase_model: {tiny_llama}\nmodels:\n"
                        f"  - model: {fts[0]}\n    parameters: {{weight: 0.5}}\ndtype: float32\n")
    result = cli("merge", "--config", mergekit, "--output", tmp_path / "c", "--dtype", "bfloat16", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    assert json.loads((tmp_path / "c" / "paw_merge.json").read_text())["dtype"] == "bfloat16"
    refused = cli("merge", "--config", mergekit, "--output", tmp_path / "d", "--density", "0.3")
    assert refused.exit_code == 2 and "--density does not combine with a mergekit config" in refused.stderr
    assert set(MERGE_FLAGS) <= _help_flags(cli, "merge")


TASK_VECTOR_FLAGS = ("--base --models --outdir --device --multi-gpu --top-k --include --exclude --workers --overwrite "
                     "--allow-nonfinite --spectra --spectra-ranks --spectra-exact --mask-density --config").split()


def test_task_vectors_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tmp_path):
    from paw import zoo

    ft = tmp_path / "ft"
    zoo.fine_tune(tiny_llama, ft, seed=1, scale=0.01)
    config = tmp_path / "tv.yaml"
    config.write_text(f"base: {tiny_llama}\nmodels: [{ft}]\noutdir: {tmp_path / 'tv'}\ntop-k: 3\ninclude: mlp\n"
                      "spectra: true\nspectra_ranks: [2, 4]\ndevice: cpu\n")
    result = cli("task-vectors", "--config", config, "--top-k", "5", "--spectra-ranks", "2,8")
    assert result.exit_code == 0, result.stderr
    assert "at rank 2, " in result.stdout and "at rank 8 " in result.stdout   # the typed ranks, not the file's
    rows = (tmp_path / "tv" / "ft" / "top5_by_l2.csv").read_text().splitlines()
    assert len(rows) == 1 + 5 and all("mlp" in row for row in rows[1:])       # --top-k 5 typed, include: from the file
    config.write_text(f"base: {tiny_llama}\nmodels: [{ft}]\noutdir: {tmp_path / 'x'}\nmask_density: 0.3\n")
    refused = cli("task-vectors", "--config", config)
    assert refused.exit_code == 2 and "--mask-density is a --spectra option" in refused.stderr
    assert set(TASK_VECTOR_FLAGS) <= _help_flags(cli, "task-vectors")
