"""``paw merge --config`` with mergekit's YAML: its examples as written, against numpy references; bad YAML refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from paw import arch
from paw.merge.mergekit import evaluate_setting
from tests.merge import merge_reference as ref
from tests.merge.conftest import load_numpy

# mergekit's examples/gradient-slerp.yml and examples/ties.yml as written (docs/examples/mergekit, which
# the parity script reads too), but for the layer range: its 13B models have 40 layers, the zoo model 4
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "mergekit"
GRADIENT_SLERP = (EXAMPLES / "gradient-slerp.yml").read_text().replace("layer_range: [0, 40]", "layer_range: [0, 4]")
TIES = (EXAMPLES / "ties.yml").read_text()
MODEL_STOCK = """\
models:
  - model: psmathur/orca_mini_v3_13b
  - model: garage-bAInd/Platypus2-13B
  - model: WizardLM/WizardMath-13B-V1.0
merge_method: model_stock
base_model: TheBloke/Llama-2-13B-fp16
dtype: float32
"""
PASSTHROUGH = """\
slices:
  - sources:
    - model: psmathur/orca_mini_v3_13b
      layer_range: [0, 3]
  - sources:
    - model: garage-bAInd/Platypus2-13B
      layer_range: [1, 4]
merge_method: passthrough
dtype: float32
"""
NAMES = ("TheBloke/Llama-2-13B-fp16", "psmathur/orca_mini_v3_13b", "garage-bAInd/Platypus2-13B",
         "WizardLM/WizardMath-13B-V1.0")


@pytest.fixture(scope="module")
def deep(tmp_path_factory, zoo_root):
    """A 4-layer Llama base and three fine-tunes (so gradients have interior layers)."""
    from paw import zoo

    root = tmp_path_factory.mktemp("mergekit")
    base = zoo.tiny_model(root / "base", "llama", seed=0, hidden_size=32, num_layers=4)
    models = [root / f"ft{i}" for i in range(3)]
    for i, (folder, scale) in enumerate(zip(models, (0.01, 0.02, 0.04), strict=True)):
        zoo.fine_tune(base, folder, seed=100 + i, scale=scale)
    return [base, *models]


def _write(tmp_path: Path, text: str, folders: list[Path], name: str = "merge.yml") -> Path:
    for label, folder in zip(NAMES, folders, strict=True):
        text = text.replace(label, str(folder))
    path = tmp_path / name
    path.write_text(text)
    return path


def _depth(name: str, layers: int = 4) -> float:
    i = arch.layer_index(name)
    return 0.0 if i is None else i / (layers - 1)


def test_gradients_interpolate_and_filters_pick_the_first_match():
    assert evaluate_setting([0, 0.5, 0.3, 0.7, 1], "x", 0.0) == 0
    assert evaluate_setting([0, 0.5, 0.3, 0.7, 1], "x", 1.0) == 1
    # t = 1/3: position 4/3 between 0.5 and 0.3
    assert evaluate_setting([0, 0.5, 0.3, 0.7, 1], "x", 1 / 3) == pytest.approx(0.5 - 0.2 / 3)
    conds = [{"filter": "mlp", "value": 0.5}, {"value": 0}]
    assert evaluate_setting(conds, "model.layers.0.mlp.up_proj.weight", 0) == 0.5
    assert evaluate_setting(conds, "model.norm.weight", 0) == 0
    assert evaluate_setting([{"filter": "mlp", "value": 1}], "model.norm.weight", 0) is None
    assert evaluate_setting([True, False], "x", 0.9) is True     # non-numbers are picked, not interpolated


def _slerp(t: float, v0: np.ndarray, v1: np.ndarray) -> np.ndarray:
    """SLERP from the definition (float64), with the collinear fallback."""
    a, b = v0.astype(np.float64), v1.astype(np.float64)
    cos = float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b)))
    if abs(cos) > 0.9995:
        return (1 - t) * a + t * b
    theta = math.acos(cos)
    return (math.sin((1 - t) * theta) * a + math.sin(t * theta) * b) / math.sin(theta)


def test_mergekit_gradient_slerp_example_runs_as_written(cli, deep, tmp_path):
    base, orca, platypus = deep[1], deep[1], deep[2]   # the example's base is one of the two models
    cfg = _write(tmp_path, GRADIENT_SLERP, [deep[0], orca, platypus, deep[3]])
    r = cli("merge", "--config", cfg, "--output", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    out, a, b = load_numpy(tmp_path / "out"), load_numpy(base), load_numpy(platypus)
    gradients = {"self_attn": [0, 0.5, 0.3, 0.7, 1], "mlp": [1, 0.5, 0.7, 0.3, 0]}
    checked = 0
    for name, got in out.items():
        grad = next((g for key, g in gradients.items() if key in name), None)
        t = 0.5 if grad is None else float(np.interp(_depth(name) * 4, range(5), grad))
        want = _slerp(t, a[name], b[name])
        np.testing.assert_allclose(got, want, atol=2e-3 * np.abs(want).max() + 1e-6, err_msg=name)  # float16 output
        checked += 1
    assert checked == len(a) and next(iter(load_numpy(tmp_path / "out").values())).dtype == np.float32
    manifest = json.loads((tmp_path / "out" / "paw_merge.json").read_text())
    assert manifest["method"] == "slerp" and manifest["mergekit_config"]["merge_method"] == "slerp"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "float16"


def test_mergekit_ties_example_with_per_model_density_and_weight_gradients(cli, deep, tmp_path):
    cfg = _write(tmp_path, TIES.replace("dtype: float16", "dtype: float32"), deep)
    r = cli("merge", "--config", cfg, "--output", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    out, base = load_numpy(tmp_path / "out"), load_numpy(deep[0])
    models = [load_numpy(m) for m in deep[1:]]
    for name, got in out.items():
        t = _depth(name)
        densities = [float(np.interp(t * 2, range(3), [1, 0.7, 0.1])), 0.5, 0.33]
        weights = [1.0, float(np.interp(t * 3, range(4), [0, 0.3, 0.7, 1])), 0.5 if "mlp" in name else 0.0]
        deltas = [m[name] - base[name] for m in models]
        trimmed = [ref.trim(d, p) for d, p in zip(deltas, densities, strict=True)]
        want = base[name] + ref.ties_merge(trimmed, weights)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_mergekit_model_stock_moves_each_tensor_by_its_own_ratio(cli, deep, tmp_path):
    cfg = _write(tmp_path, MODEL_STOCK, deep)
    r = cli("merge", "--config", cfg, "--output", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    out, base = load_numpy(tmp_path / "out"), load_numpy(deep[0])
    models = [load_numpy(m) for m in deep[1:]]
    for name, got in out.items():
        deltas = [(m[name] - base[name]).astype(np.float64).reshape(-1) for m in models]
        cos = np.mean([d1 @ d2 / max(np.linalg.norm(d1) * np.linalg.norm(d2), 1e-6)
                       for i, d1 in enumerate(deltas) for d2 in deltas[i + 1:]])
        t = 3 * cos / (1 + 2 * cos)
        want = base[name] + t * np.mean(deltas, axis=0).reshape(base[name].shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_passthrough_slices_stack_layers_and_the_result_loads(cli, deep, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = _write(tmp_path, PASSTHROUGH, deep)
    r = cli("merge", "--config", cfg, "--output", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    out, orca, platypus = load_numpy(tmp_path / "out"), load_numpy(deep[1]), load_numpy(deep[2])
    assert json.loads((tmp_path / "out" / "config.json").read_text())["num_hidden_layers"] == 6
    q = "model.layers.{}.self_attn.q_proj.weight"
    for i, (src, j) in enumerate([(orca, 0), (orca, 1), (orca, 2), (platypus, 1), (platypus, 2), (platypus, 3)]):
        np.testing.assert_array_equal(out[q.format(i)], src[q.format(j)])
    np.testing.assert_array_equal(out["model.embed_tokens.weight"], orca["model.embed_tokens.weight"])
    np.testing.assert_array_equal(out["model.norm.weight"], platypus["model.norm.weight"])
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert len(model.model.layers) == 6


def test_chat_template_and_tokenizer_source_reach_the_output(cli, deep, tmp_path):
    text = MODEL_STOCK + "tokenizer_source: WizardLM/WizardMath-13B-V1.0\nchat_template: \"{{ messages }}\"\n"
    r = cli("merge", "--config", _write(tmp_path, text, deep), "--output", tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["chat_template"] == "{{ messages }}"
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == (deep[3] / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("method,extra", [("dare_ties", "density: 0.5"), ("della", "density: 0.5"),
                                          ("della_linear", "density: 0.5"), ("breadcrumbs_ties", "density: 0.8"),
                                          ("sce", None), ("karcher", None), ("nuslerp", None)])
def test_other_methods_run_from_mergekit_yaml_and_are_seeded(cli, deep, tmp_path, method, extra):
    models = deep[1:3] if method == "nuslerp" else deep[1:]
    lines = [f"merge_method: {method}", *([] if method == "karcher" else [f"base_model: {deep[0]}"]), "models:"]
    for m in models:
        lines.append(f"  - model: {m}")
        if method not in ("sce", "karcher"):
            lines.append(f"    parameters: {{weight: 0.5{', ' + extra if extra else ''}}}")
    cfg = tmp_path / "m.yml"
    cfg.write_text("\n".join(lines) + "\n")
    outs = []
    for run in ("a", "b"):
        r = cli("merge", "--config", cfg, "--output", tmp_path / run, "--seed", "3")
        assert r.exit_code == 0, r.stderr
        outs.append((tmp_path / run / "model.safetensors").read_bytes())
    assert outs[0] == outs[1]  # random methods are seeded per tensor and model


BAD = {
    "unknown method": ("merge_method: frankenmerge\nbase_model: B\nmodels: [{model: M1}]\n", "merge_method"),
    "method PAW lacks": ("merge_method: arcee_fusion\nbase_model: B\nmodels: [{model: M1}]\n", "arcee_fusion"),
    "missing base": ("merge_method: ties\nmodels:\n  - model: M1\n    parameters: {weight: 1}\n", "base_model"),
    "overlapping slices": ("merge_method: slerp\nbase_model: B\nparameters: {t: 0.5}\nslices:\n"
                           "  - sources: [{model: B, layer_range: [0, 3]}, {model: M1, layer_range: [0, 3]}]\n"
                           "  - sources: [{model: B, layer_range: [2, 4]}, {model: M1, layer_range: [2, 4]}]\n",
                           "overlaps"),
    "slice leaves a layer out": ("merge_method: slerp\nbase_model: B\nparameters: {t: 0.5}\nslices:\n"
                                 "  - sources: [{model: B, layer_range: [0, 3]}, {model: M1, layer_range: [0, 3]}]\n",
                                 "left out"),
    "gradient on a method without it": ("merge_method: ties\nbase_model: B\nparameters: {t: [0, 1]}\n"
                                        "models:\n  - model: M1\n    parameters: {weight: 1}\n", "parameters.t"),
    "unknown top key": ("merge_method: ties\nbase_model: B\nmodules: {}\nmodels: [{model: M1}]\n", "modules"),
    "missing weight": ("merge_method: ties\nbase_model: B\nmodels:\n  - model: M1\n", "weight"),
    "chat template name": ("merge_method: linear\nmodels: [{model: M1, parameters: {weight: 1}}]\n"
                           "chat_template: chatml\n", "chat_template"),
    "not yaml": ("merge_method: [ties\n", "not valid YAML"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_mergekit_yaml_exits_2_with_one_line_and_writes_nothing(cli, deep, tmp_path, case):
    text, needle = BAD[case]
    text = text.replace("M1", str(deep[1])).replace("B", str(deep[0])).replace("{" + str(deep[0]), "{B")
    cfg = tmp_path / "bad.yml"
    cfg.write_text(text)
    r = cli("merge", "--config", cfg, "--output", tmp_path / "out")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_flags_that_change_the_merge_do_not_combine_with_a_mergekit_config(cli, deep, tmp_path):
    cfg = _write(tmp_path, MODEL_STOCK, deep)
    r = cli("merge", "--config", cfg, "--output", tmp_path / "out", "--method", "ties")
    assert r.exit_code == 2 and "--method does not combine with a mergekit config" in r.stderr


def test_paw_config_with_adapters_runs_the_adapter_merge(cli, tiny_llama, tmp_path):
    """Issue 28: `paw merge --config` reaches the adapter-space merge when the config lists adapters."""
    import torch

    from paw import zoo
    from paw.io.adapter import read_adapter

    one = zoo.make_lora(tiny_llama, tmp_path / "one", rank=4, alpha=8, seed=3)
    two = zoo.make_lora(tiny_llama, tmp_path / "two", rank=2, alpha=5, seed=4)
    cfg = tmp_path / "adapters.yaml"
    cfg.write_text(f"adapters: [{one}, {two}]\nmethod: cat\nweights: [0.7, -1.3]\noutput: {tmp_path / 'out'}\n")
    r = cli("merge", "--config", cfg)
    assert r.exit_code == 0, r.stderr
    got = {m: mod.delta() for m, mod in read_adapter(tmp_path / "out").modules().items()}
    parts = [{m: mod.delta() for m, mod in read_adapter(p).modules().items()} for p in (one, two)]
    for m, d in got.items():
        want = 0.7 * parts[0].get(m, torch.zeros_like(d)) - 1.3 * parts[1].get(m, torch.zeros_like(d))
        assert float((d - want).abs().max()) <= 1e-6
    # a flag typed on the command line wins over the file; an unknown key is named
    r = cli("merge", "--config", cfg, "--output", tmp_path / "svd", "--method", "svd", "--rank", "2")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "svd" / "adapter_merge.json").read_text())["method"] == "svd"
    cfg.write_text(f"adapters: [{one}, {two}]\nmethod: cat\nbase: {tiny_llama}\noutput: {tmp_path / 'x'}\n")
    r = cli("merge", "--config", cfg)
    assert r.exit_code == 2 and "unknown key 'base'" in r.stderr and not (tmp_path / "x").exists()
