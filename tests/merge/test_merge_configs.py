"""The example configs in configs/merge/ are valid, commented on every field, and run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from paw.merge.options import options_from_mapping

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs" / "merge").glob("*.yaml"))


def test_there_are_examples():
    assert {p.stem for p in CONFIGS} >= {"ties", "task-arithmetic-l2", "dare-ties", "breadcrumbs", "soup"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_field_has_a_comment(path):
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "- ")):
            assert "#" in line, f"{path.name}: no comment on {line!r}"
    options_from_mapping(yaml.safe_load(path.read_text()), source=str(path))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_runs_on_zoo_models(cli, family, tmp_path, path):
    data = yaml.safe_load(path.read_text())
    n = len(data["models"])
    data["models"] = [str(m) for m in family.models[:n]]
    if "base" in data:
        data["base"] = str(family.base)
    data.pop("stats_dir", None)
    data["output"] = str(tmp_path / "out")
    cfg = tmp_path / path.name
    cfg.write_text(yaml.safe_dump(data))
    r = cli("merge", "--config", cfg, "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    record = json.loads((tmp_path / "out" / "paw_merge.json").read_text())
    assert record["method"] == data["method"] and len(record["weights"]) == n


@pytest.mark.parametrize(("key", "value", "named"), [
    ("mode", "exponential", "--mode 'exponential'"),
    ("method", "tie", "merge method 'tie'"),
    ("device", "gpu", "--device 'gpu'"),
    ("dtype", "fp8", "--dtype 'fp8'"),
    ("vocab_policy", "pad", "--vocab-policy 'pad'"),
    ("l2_norms", [1.0, -2.0, 3.0], "l2_norms[1] -2.0"),  # a value from the file names its key
    ("max_shard_size", "lots", "lots"),
])
def test_a_bad_key_is_refused_before_any_model_is_read(cli, family, tmp_path, monkeypatch, key, value, named):
    import paw.merge.pipeline

    def never(*args, **kwargs):
        raise AssertionError("a model was opened before the options were checked")

    monkeypatch.setattr(paw.merge.pipeline, "open_model", never)
    data = {"models": [str(m) for m in family.models], "base": str(family.base),
            "output": str(tmp_path / "out"), key: value}
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(data))
    r = cli("merge", "--config", cfg)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert named in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists()


MERGEKIT = sorted((Path(__file__).resolve().parents[2] / "configs" / "merge" / "mergekit").glob("*.yml"))
ZOO_NAMES = ("tiny/base", "tiny/ft-math", "tiny/ft-code", "tiny/ft-chat")


def test_there_are_mergekit_examples():
    assert {p.stem for p in MERGEKIT} >= {"gradient-slerp", "ties", "model-stock", "passthrough"}


@pytest.mark.parametrize("path", MERGEKIT, ids=lambda p: p.name)
def test_mergekit_example_is_commented_and_runs_on_zoo_models(cli, family, tmp_path, path):
    text = path.read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "- ")):
            assert "#" in line, f"{path.name}: no comment on {line!r}"
    for name, folder in zip(ZOO_NAMES, [family.base, *family.models], strict=True):
        text = text.replace(name, str(folder))
    cfg = tmp_path / path.name
    cfg.write_text(text)
    r = cli("merge", "--config", cfg, "--output", tmp_path / "out", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "out" / "paw_merge.json").read_text())["mergekit_config"] == yaml.safe_load(text)
