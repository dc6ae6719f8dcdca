"""Issue 53: values that slipped past the flags' checks, unbounded parsing, misleading messages.

Each case ends like the bad-input table's (``test_bad_inputs.py``): exit code 2, exactly one
``error:`` line naming the file, key or flag, no traceback and no ``unexpected``, the inputs
unchanged and nothing at the output path. The inputs are built here from the tiny zoo model, not
from the table's ``fx`` (which builds far more than these cases read).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.reliability.conftest import tree_hash


@pytest.fixture(scope="module")
def ix(tiny_llama, tmp_path_factory) -> Path:
    """A base and two fine-tunes under one folder; configs are written next to them by each test."""
    from paw import zoo

    root = tmp_path_factory.mktemp("issue53") / "ix"
    root.mkdir()
    shutil.copytree(tiny_llama, root / "base")
    zoo.fine_tune(root / "base", root / "ft", seed=11, scale=0.02)
    zoo.fine_tune(root / "base", root / "ft2", seed=12, scale=0.03)
    return root


@pytest.fixture
def refused(cli, ix, tmp_path):
    """``refused(*argv, expect=(...))``: the run's one error line, checked as the bad-input table does."""
    def run(*args, expect: tuple[str, ...] = ()) -> str:
        out = tmp_path / "out"
        before = tree_hash(ix)
        argv = [str(a).replace("{ix}", str(ix)).replace("{out}", str(out)).replace("{tmp}", str(tmp_path))
                for a in args]
        res = cli(*argv)
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2, (argv, res.exit_code, res.stdout[-1000:], res.stderr[-2000:])
        assert "Traceback" not in res.stdout + res.stderr, res.stderr
        assert lines and lines[-1].startswith("error: ") and "unexpected" not in lines[-1], res.stderr
        assert len([x for x in lines if x.startswith("error:")]) == 1, res.stderr
        for fragment in expect:
            fragment = fragment.replace("{ix}", str(ix)).replace("{tmp}", str(tmp_path))
            assert fragment in lines[-1], (fragment, lines[-1])
        assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())
        assert tree_hash(ix) == before, "an input changed"
        return lines[-1]

    return run


def _yaml(tmp_path: Path, ix: Path, text: str) -> Path:
    path = tmp_path / "merge.yml"
    path.write_text(text.replace("{ix}", str(ix)))
    return path


def _models(method: str, params: str, *, base: bool = True, two: bool = False, top: str = "") -> str:
    """A mergekit config: ``params`` for the first model (and ``weight: 1`` for a second)."""
    lines = [f"merge_method: {method}", *(["base_model: {ix}/base"] if base else []), "models:",
             f"  - model: {{ix}}/ft\n    parameters: {{{params}}}" if params else "  - model: {ix}/ft"]
    if two:
        lines.append("  - model: {ix}/ft2\n    parameters: {weight: 1}")
    if top:
        lines.append(f"parameters: {{{top}}}")
    return "\n".join(lines) + "\n"


# ---- 1. mergekit YAML values judged by the same table as the flags (paw.merge.knobs)

MERGEKIT = {
    "density-negative": (_models("ties", "weight: 1, density: -0.5"), ["models[0].parameters.density", "(0, 1]"]),
    "weight-huge": (_models("task_arithmetic", "weight: 1e308"), ["models[0].parameters.weight", "too large"]),
    "weight-heavy": (_models("task_arithmetic", "weight: heavy"), ["models[0].parameters.weight", "not a number"]),
    "weight-text-1e300": (_models("task_arithmetic", "weight: 1.0e300"),
                          ["models[0].parameters.weight", "'1.0e300'", "too large"]),
    "weight-true": (_models("task_arithmetic", "weight: true"), ["models[0].parameters.weight", "not a number"]),
    "weight-in-gradient": (_models("task_arithmetic", "weight: [1, .inf]"),
                           ["models[0].parameters.weight[1]", "not a finite"]),
    "weight-in-condition": (_models("task_arithmetic", "weight: [{filter: mlp, value: x}, {value: 1}]"),
                            ["models[0].parameters.weight[0].value", "not a number"]),
    "slerp-t-above-1": (_models("slerp", "", top="t: 1.5"), ["parameters.t", "[0, 1]", "slerp"]),
    "slerp-t-nan": (_models("slerp", "", top="t: .nan"), ["parameters.t", "not a finite"]),
    "lambda-nan": (_models("task_arithmetic", "weight: 1", top="lambda: .nan"), ["parameters.lambda", "finite"]),
    "nearswap-t-negative": (_models("nearswap", "", top="t: -1"), ["parameters.t", "nearswap"]),
    "normalize-not-bool": (_models("ties", "weight: 1", top="normalize: 1"), ["parameters.normalize", "true or false"]),
    "della-epsilon-above-density": (_models("della", "weight: 1, density: 0.3, epsilon: 0.5"),
                                    ["epsilon 0.5 with density 0.3", "model 1"]),
    "linear-weights-sum-zero": (_models("linear", "weight: -1", base=False, two=True), ["sum to zero", "linear"]),
    "multislerp-weights-sum-zero": (_models("multislerp", "weight: 0", base=False, two=True).replace(
        "{weight: 1}", "{weight: 0}"), ["sum to zero", "multislerp"]),
}


@pytest.mark.parametrize("case", MERGEKIT, ids=list(MERGEKIT))
def test_mergekit_values_are_judged_like_the_flags(refused, ix, tmp_path, case):
    text, expect = MERGEKIT[case]
    cfg = _yaml(tmp_path, ix, text)
    refused("merge", "--config", cfg, "--output", "{out}", "--device", "cpu", expect=(str(cfg), *expect))


FLAGS = {
    "slerp-t-above-1": ("--method slerp --t 1.5", ["--t 1.5", "[0, 1]"]),
    "slerp-t-negative": ("--method slerp --t -0.1", ["--t -0.1", "[0, 1]"]),
    "nearswap-t-negative": ("--method nearswap --t -1", ["--t -1", "nearswap"]),
    "multislerp-weights-zero": ("--method multislerp --weights 0 0", ["--weights", "sum to zero"]),
    "linear-weights-cancel": ("--method linear --weights 1 -1", ["--weights", "sum to zero"]),
    "della-epsilon": ("--method della --density 0.3 --epsilon 0.5", ["--epsilon 0.5 with --density 0.3"]),
    "max-iter-zero": ("--method karcher --max-iter 0", ["--max-iter 0"]),
}


@pytest.mark.parametrize("case", FLAGS, ids=list(FLAGS))
def test_flags_out_of_range_are_refused(refused, case):
    extra, expect = FLAGS[case]
    models = ["{ix}/ft", "{ix}/ft2"] if "--weights" in extra or "karcher" in extra else ["{ix}/ft"]
    refused("merge", "--base", "{ix}/base", "--models", *models, *extra.split(), "--output", "{out}",
            "--device", "cpu", expect=tuple(expect))


PAW_YAML = {
    "density-negative": ("method: ties\ndensity: -0.5\n", ["density -0.5", "(0, 1]"]),
    "weights-true": ("weights: [true]\n", ["weights[0]", "not a number"]),
    "weights-heavy": ("weights: [heavy]\n", ["weights[0]", "'heavy'"]),
    "t-above-1": ("method: slerp\nt: 2\n", ["t 2", "slerp"]),
    "scale-bool": ("scale: true\n", ["scale", "not a number"]),
    "seed-bool": ("seed: true\n", ["seed", "int"]),
}


@pytest.mark.parametrize("case", PAW_YAML, ids=list(PAW_YAML))
def test_paw_yaml_values_are_judged_like_the_flags(refused, ix, tmp_path, case):
    text, expect = PAW_YAML[case]
    cfg = _yaml(tmp_path, ix, text)
    refused("merge", "--base", "{ix}/base", "--models", "{ix}/ft", "--output", "{out}", "--device", "cpu",
            "--config", cfg, expect=(str(cfg), *expect))


def test_yaml_numbers_written_as_text_still_merge(cli, ix, tmp_path):
    """YAML 1.1 reads ``1e-1`` as text; mergekit users write it, so a string Python reads as a number is kept."""
    cfg = _yaml(tmp_path, ix, _models("task_arithmetic", "weight: 1e-1"))
    res = cli("merge", "--config", cfg, "--output", tmp_path / "out", "--device", "cpu")
    assert res.exit_code == 0, res.stderr


# ---- 2. bounded parsing: the size of a config is judged before it is read; deep nesting is one line

def test_a_huge_config_is_refused_by_its_size_at_once(refused, tmp_path):
    import time

    from paw.io.yaml_file import MAX_YAML_BYTES

    cfg = tmp_path / "huge.yml"
    with cfg.open("w") as f:  # 100 MB: PyYAML took minutes over it
        f.write("merge_method: ties\n# ")
        f.truncate(100 * 1024 * 1024)
    start = time.monotonic()
    refused("merge", "--config", cfg, "--output", "{out}", expect=(str(cfg), f"{MAX_YAML_BYTES:,} bytes"))
    assert time.monotonic() - start < 5


def test_deeply_nested_yaml_is_refused(refused, tmp_path):
    cfg = tmp_path / "deep.yml"
    cfg.write_text("merge_method: " + "[" * 5000 + "]" * 5000 + "\n")
    refused("merge", "--config", cfg, "--output", "{out}", expect=(str(cfg), "nested too deeply"))


def test_deeply_nested_json_in_eval_data_is_refused(refused, tmp_path):
    data = tmp_path / "deep.jsonl"
    data.write_text('{"question": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    refused("eval", "--model", "{ix}/base", "--data", data, expect=(str(data), "line 1", "nested too deeply"))


# ---- 3. a tokenizer source that holds no tokenizer (the merged model used to ship without one)

def test_a_tokenizer_source_without_a_tokenizer_is_refused(refused, ix, tmp_path):
    up = "../" * (len(tmp_path.parts) + 2) + "etc"  # exists, and is no model
    cfg = _yaml(tmp_path, ix, _models("task_arithmetic", "weight: 1") + f"tokenizer_source: {up}\n")
    refused("merge", "--config", cfg, "--output", "{out}", "--device", "cpu",
            expect=(str(cfg), "tokenizer_source", "holds no tokenizer"))
    refused("merge", "--base", "{ix}/base", "--models", "{ix}/ft", "--tokenizer-from", tmp_path, "--output",
            "{out}", "--device", "cpu", expect=(str(tmp_path), "--tokenizer-from", "holds no tokenizer"))


def test_a_model_path_that_is_no_model_is_refused(refused, ix, tmp_path):
    cfg = _yaml(tmp_path, ix, _models("task_arithmetic", "weight: 1").replace("{ix}/ft", "/etc", 1))
    refused("merge", "--config", cfg, "--output", "{out}", "--device", "cpu", expect=("/etc", "no model weights"))


# ---- 4. training flags refused before a model is read

@pytest.mark.parametrize("argv,expect", [
    ("train-lora --lr 1e39", ["--lr", "too large"]),
    ("train-full --lr 1e39", ["--lr", "too large"]),
    ("train-lora --dtype int8", ["--dtype 'int8'"]),
], ids=["train-lora-lr-overflows-float32", "train-full-lr-overflows-float32", "train-lora-dtype-int8"])
def test_training_flags_are_refused(refused, tmp_path, argv, expect):
    data = tmp_path / "mc.jsonl"
    data.write_text('{"question": "q?", "choices": ["a", "b"], "answer": 0}\n' * 3)
    refused(*argv.split(), "--model", "{ix}/base", "--data", data, "--output", "{out}", "--steps", "1",
            "--device", "cpu", expect=tuple(expect))


# ---- 5. messages that named the wrong problem

@pytest.mark.parametrize("name,text", [("items.jsonl", '{"question": "q"}\n'), ("merge.yaml", "a: 1\n")])
def test_a_data_or_config_file_given_as_a_model_is_said_to_be_no_model(refused, tmp_path, name, text):
    wrong = tmp_path / name
    wrong.write_text(text)
    line = refused("merge", "--base", "{ix}/base", "--models", wrong, "--output", "{out}", "--weights", "1",
                   expect=(str(wrong), "not a model"))
    assert "unpickle" not in line and "PyTorch checkpoint" not in line


def test_a_folder_given_as_check_data_is_said_to_be_a_folder(refused, tiny_lora, tmp_path):
    (tmp_path / "checks").mkdir()
    refused("transfer-lora", "--adapter", tiny_lora, "--source-base", "{ix}/base", "--target-base", "{ix}/ft",
            "-o", "{out}", "--check-data", tmp_path / "checks", expect=(str(tmp_path / "checks"), "is a folder"))


def test_a_work_folder_that_is_a_file_is_named_before_training(refused, tmp_path):
    data = tmp_path / "mc.jsonl"
    data.write_text('{"question": "q?", "choices": ["a", "b"], "answer": 0}\n' * 3)
    (tmp_path / "out-work").write_text("not a folder")
    refused("train-lora", "--model", "{ix}/base", "--data", data, "--output", "{out}", "--steps", "2",
            "--save-every", "1", "--device", "cpu", expect=(str(tmp_path / "out-work"), "is a file", "--save-every"))


# ---- 6. seeded reruns write the same bytes

def test_train_full_reruns_write_the_same_metrics(cli, ix, tmp_path):
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(f'{{"question": "q{i}?", "choices": ["a", "b"], "answer": {i % 2}}}\n' for i in range(4)))
    files = []
    for run in ("a", "b"):
        res = cli("train-full", "--model", ix / "base", "--data", data, "--output", tmp_path / run, "--steps", "2",
                  "--batch-size", "2", "--seed", "3", "--device", "cpu")
        assert res.exit_code == 0, res.stderr
        files.append([(tmp_path / run / name).read_bytes() for name in ("metrics.json", "model.safetensors")])
    assert files[0] == files[1]
    assert b"train_seconds" not in files[0][0]
