"""``paw bench transfer`` and ``paw bench real`` are made from their options classes (paw.knobs): the flags of
before, comma lists typed as before, and ``--config FILE.yaml`` with typed flags winning."""

from __future__ import annotations

import re

import pytest

from paw.errors import PawError

TRANSFER_FLAGS = ("-o --output --seeds --tasks --targets --methods --distill --distill-steps --distill-token-focus "
                  "--distill-lr --jobs --items --hidden-size --num-layers --pretrain-steps --lora-steps --lora-rank "
                  "--data --model-seed --threads --merge --workdir --quick --device --overwrite --config").split()
REAL_FLAGS = ("-o --output --models --data --parts --real-tasks --eval-items --task-items --lora-steps "
              "--distill-steps --methods --seed --workdir --device --overwrite --config").split()


def _help(cli, *command: str) -> tuple[str, set[str]]:
    """``paw bench COMMAND --help``: its text and every flag it lists."""
    text = cli("bench", *command, "--help").stdout
    return text, {f for found in re.findall(r"(?m)^  (?:(-\w), )?(--[\w-]+)", text) for f in found if f}


@pytest.fixture
def recorded(monkeypatch):
    """What the commands hand their pipelines, instead of running them."""
    from paw.bench import quality
    from paw.bench.real import report as real_report

    seen = {}

    def record(name):
        def stop(*args, **kwargs):
            seen[name] = (*args, kwargs)
            raise PawError(f"recorded {name}")
        return stop

    for module, name in ((quality, "benchmark_to_folder"), (quality, "pool_to_folder"),
                         (real_report, "real_to_folder")):
        monkeypatch.setattr(module, name, record(name))
    return seen


def test_bench_transfer_help_lists_every_flag_and_states_no_default_twice(cli):
    text, flags = _help(cli, "transfer")
    assert set(TRANSFER_FLAGS) <= flags
    assert "[default: (all)]" in text and "300" in text and "3e-3" not in text


def test_bench_transfer_reads_a_config_file_and_typed_flags_win(cli, recorded, tmp_path):
    """The same options from flags and from --config (comma lists or YAML lists, ``data:`` for --data); a flag typed
    beside the file wins; --quick keeps the lists, the device and the jobs and takes its own sizes."""
    from dataclasses import replace

    from paw.bench.options import BenchOptions, for_run

    assert cli("bench", "transfer", "-o", tmp_path / "a", "--seeds", "0,1", "--tasks", "facts, rule", "--targets",
               "pruned", "--distill", "none", "--jobs", "2", "--items", "40", "--quick").exit_code == 2
    by_flags, out_a, kw_a = recorded.pop("benchmark_to_folder")
    config = tmp_path / "bench.yaml"
    config.write_text(f"output: {tmp_path / 'b'}\nseeds: [0, 1]\ntasks: facts,rule\ntargets: [pruned]\n"
                      "distill: none\njobs: 3\nitems: 40\nquick: true\nworkdir: keep\ndevice: cuda\n")
    assert cli("bench", "transfer", "--config", config, "--jobs", "2").exit_code == 2
    by_file, out_b, kw_b = recorded.pop("benchmark_to_folder")
    assert by_file.device == "cuda"   # the benchmark's own --device, not the one it leaves out of RunOptions
    by_file = replace(by_file, device="cpu")
    assert by_file == by_flags == for_run(BenchOptions(seeds=(0, 1), tasks=("facts", "rule"), targets=("pruned",),
                                                       distill=(), jobs=2), quick=True)
    assert by_file.hidden_size == 32 and by_file.items == 20 and by_file.distill == ()   # --quick's sizes
    assert (out_a.name, out_b.name, kw_a["workdir"], kw_b["workdir"]) == ("a", "b", None, "keep")
    config.write_text(f"output: {tmp_path / 'c'}\nhidden_size: 128\ndistill-lr: 0.01\n")
    assert cli("bench", "transfer", "--config", config, "--hidden-size", "32").exit_code == 2
    (typed, _, _) = recorded.pop("benchmark_to_folder")
    assert (typed.hidden_size, typed.intermediate_size, typed.distill_lr) == (32, 88, 0.01)
    assert typed.distill == ("inputs", "synth", "generic") and typed.seeds == (0, 1)   # the defaults, stated once
    config.write_text(f"output: {tmp_path / 'd'}\nmerge: [{tmp_path / 'a'}, {tmp_path / 'b'}]\n")
    assert cli("bench", "transfer", "--config", config).exit_code == 2
    assert [p.name for p in recorded.pop("pool_to_folder")[0]] == ["a", "b"]
    for text, says in [("hidden-size: 2\n", "hidden-size: 2 is below its minimum 4"),
                       ("seeds: [0, x]\n", "seeds[1]: expected a number, not 'x'"),
                       (f"data: {tmp_path / 'none'}\n", "--data: not a folder"),
                       ("tasks: [facts, dance]\n", "unknown task/target 'dance'")]:
        config.write_text(f"output: {tmp_path / 'e'}\n{text}")
        bad = cli("bench", "transfer", "--config", config)
        assert bad.exit_code == 2 and says in bad.stderr and not recorded, (text, bad.stderr)
    bad = cli("bench", "transfer", "--seeds", "x,y", "-o", tmp_path / "f")
    assert "--seeds 'x,y': expected comma-separated integers such as 0,1" in bad.stderr
    assert "missing option '--output'" in cli("bench", "transfer", "--quick").stderr


def test_bench_real_reads_a_config_file_and_typed_flags_win(cli, recorded, tmp_path):
    from paw.bench.real.options import RealOptions

    _, flags = _help(cli, "real")
    assert set(REAL_FLAGS) <= flags
    config = tmp_path / "real.yaml"
    config.write_text(f"models: {tmp_path / 'm'}\ndata: {tmp_path / 'd'}\noutput: {tmp_path / 'out'}\n"
                      "parts: transfer,merge\nlora-steps: 5\nseed: 3\nmethods: [copy]\ndevice: cuda\n")
    assert cli("bench", "real", "--config", config, "--seed", "4", "--device", "cpu").exit_code == 2
    opts, output, kwargs = recorded.pop("real_to_folder")
    assert opts == RealOptions(models=str(tmp_path / "m"), data=str(tmp_path / "d"), parts=("transfer", "merge"),
                               lora_steps=5, seed=4, methods=("copy",), device="cpu")
    assert output == tmp_path / "out" and kwargs["workdir"] is None and not kwargs["overwrite"]
    assert cli("bench", "real", "-o", tmp_path / "out", "--models", tmp_path / "m", "--data", tmp_path / "d",
               "--parts", "transfer,merge", "--lora-steps", "5", "--seed", "4", "--methods", "copy",
               "--device", "cpu").exit_code == 2
    assert recorded.pop("real_to_folder")[0] == opts
    config.write_text(f"models: {tmp_path / 'm'}\noutput: {tmp_path / 'out'}\n")
    missing = cli("bench", "real", "--config", config)
    assert missing.exit_code == 2 and "missing option '--data'" in missing.stderr and not recorded


def test_real_task_names_in_the_help_are_the_registry():
    """--help spells the tasks of part 'tasks' (their module imports torch); they must be the registry's."""
    from paw.bench.real.options import REAL_TASK_NAMES
    from paw.bench.real.task_sets import TASKS

    assert REAL_TASK_NAMES == tuple(TASKS)
