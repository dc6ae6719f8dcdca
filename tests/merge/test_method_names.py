"""Method names read with ``-`` and ``_`` alike: ``dare_ties`` (mergekit's and YAML's habit) is ``dare-ties``,
on the command line, in PAW's YAML, in mergekit's YAML and from Python; the record keeps one spelling."""

from __future__ import annotations

import json

import pytest
import yaml

from paw.errors import PawError
from paw.merge.adapter_pipeline import AdapterMergeOptions
from paw.merge.methods import METHODS
from paw.merge.options import MergeOptions


def test_registry_reads_underscores_as_dashes():
    assert METHODS.canonical("dare_ties") == "dare-ties" and METHODS.canonical("model_stock") == "model-stock"
    assert METHODS.canonical("Dare-Ties") is None  # case still counts
    assert METHODS.lookup("breadcrumbs_ties").name == "breadcrumbs-ties"
    with pytest.raises(PawError, match="unknown merge method 'dare_tie'; choose one of: task-arithmetic, ties"):
        METHODS.lookup("dare_tie")


def test_options_keep_the_registered_spelling():
    opts = MergeOptions(base="b", models=["m"], method="task_arithmetic", output="o")
    opts.check()
    assert opts.method == "task-arithmetic"
    adapters = AdapterMergeOptions(adapters=["a", "b"], output="o", method="dare_ties_svd")
    adapters.check()
    assert adapters.method == "dare-ties-svd"
    with pytest.raises(PawError, match="--method dare_ties merges full models; PEFT's add_weighted_adapter "
                                       "combination_type 'dare_ties' is --method peft-dare-ties here; with --adapters "
                                       "choose one of: cat"):
        AdapterMergeOptions(adapters=["a", "b"], output="o", method="dare_ties").check()


def _merge(cli, out, *args):
    r = cli("merge", *args, "--output", out, "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    return (out / "model.safetensors").read_bytes(), json.loads((out / "paw_merge.json").read_text())


def test_command_line_and_yaml_spellings_give_one_merge(cli, family, tmp_path):
    common = ["--base", str(family.base), "--models", *map(str, family.models[:2]), "--drop-rate", "0.5"]
    dash, record = _merge(cli, tmp_path / "dash", *common, "--method", "dare-ties")
    under, record_u = _merge(cli, tmp_path / "under", *common, "--method", "dare_ties")
    assert under == dash and record["method"] == record_u["method"] == record_u["options"]["method"] == "dare-ties"
    cfg = tmp_path / "paw.yaml"
    cfg.write_text(yaml.safe_dump({"base": str(family.base), "models": list(map(str, family.models[:2])),
                                   "method": "dare_ties", "drop_rate": 0.5}))
    from_yaml, record_y = _merge(cli, tmp_path / "yaml", "--config", cfg)
    assert from_yaml == dash and record_y["method"] == "dare-ties"


@pytest.mark.parametrize("spelling", ["task_arithmetic", "task-arithmetic"])
def test_mergekit_yaml_reads_both_spellings(cli, family, tmp_path, spelling):
    config = {"merge_method": spelling, "base_model": str(family.base),
              "models": [{"model": str(m), "parameters": {"weight": w}} for m, w in zip(family.models[:2], (0.6, 0.4), strict=True)]}
    cfg = tmp_path / "mk.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    weights, record = _merge(cli, tmp_path / "out", "--config", cfg)
    assert record["method"] == "task-arithmetic"
    plain, _ = _merge(cli, tmp_path / "plain", "--base", str(family.base), "--models", *map(str, family.models[:2]),
                      "--method", "task-arithmetic", "--weights", "0.6", "0.4")
    assert weights == plain
