"""``paw merge`` end to end on zoo models: every method against its numpy reference, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from paw.merge.methods import tensor_seed
from tests.merge import merge_reference as ref
from tests.merge.conftest import load_numpy

W = [0.5, 0.3, 0.2]


def _merge(cli, family, out: Path, *extra, weights=W):
    r = cli("merge", "--base", family.base, "--models", *family.models, "--output", out,
            "--weights", *map(str, weights), *extra)
    assert r.exit_code == 0, r.stderr
    return load_numpy(out)


def _inputs(family):
    base = load_numpy(family.base)
    models = [load_numpy(m) for m in family.models]
    deltas = {name: [m[name] - base[name] for m in models] for name in base}  # float32, as PAW
    return base, models, deltas


def _dare_masks(name, shape, seed, drop_rate):
    """The keep masks PAW draws for one tensor: uniform draws from a generator seeded per (tensor, model)."""
    return [(torch.rand(shape, generator=torch.Generator().manual_seed(tensor_seed(seed, name, i)))
             >= drop_rate).numpy() for i in range(3)]


def test_zoo_task_vectors_are_known(family):
    base, _, deltas = _inputs(family)
    for i, known in enumerate(family.known):
        for name, d in known.items():
            np.testing.assert_allclose(deltas[name][i], d.numpy(), atol=1e-6)


REFERENCES = {
    "task-arithmetic": lambda name, d, seed: ref.task_arithmetic(d, W),
    "ties": lambda name, d, seed: ref.ties(d, W, 0.3),
    "dare-linear": lambda name, d, seed: ref.task_arithmetic(
        ref.dare(d, _dare_masks(name, d[0].shape, seed, 0.6), 0.6), W),
    "dare-ties": lambda name, d, seed: ref.ties_merge(
        ref.dare(d, _dare_masks(name, d[0].shape, seed, 0.6), 0.6), W),
    "breadcrumbs": lambda name, d, seed: ref.breadcrumbs(d, W, 0.3, 0.05),
}


@pytest.mark.parametrize("method", list(REFERENCES))
def test_method_matches_numpy_reference(cli, family, tmp_path, method):
    base, _, deltas = _inputs(family)
    merged = _merge(cli, family, tmp_path / "m", "--method", method, "--density", "0.3", "--drop-rate", "0.6",
                    "--gamma", "0.05", "--scale", "0.8", "--seed", "7")
    assert set(merged) == set(base)
    for name in base:
        want = base[name] + 0.8 * REFERENCES[method](name, deltas[name], 7)
        np.testing.assert_allclose(merged[name], want, rtol=1e-5, atol=1e-6, err_msg=f"{method} {name}")
    assert json.loads((tmp_path / "m" / "paw_merge.json").read_text())["method"] == method


def test_task_arithmetic_equals_base_plus_known_vectors(cli, family, tmp_path):
    base = load_numpy(family.base)
    merged = _merge(cli, family, tmp_path / "m")
    for name in base:
        want = base[name] + sum(w * k[name].numpy() for w, k in zip(W, family.known, strict=True))
        np.testing.assert_allclose(merged[name], want, atol=2e-6)


def test_linear_with_and_without_base(cli, family, tmp_path):
    _, models, _ = _inputs(family)
    weights = [2.0, 1.0, 1.0]
    with_base = _merge(cli, family, tmp_path / "a", "--method", "linear", weights=weights)
    r = cli("merge", "--models", *family.models, "--output", tmp_path / "b", "--method", "linear",
            "--weights", "2", "1", "1")
    assert r.exit_code == 0, r.stderr
    without = load_numpy(tmp_path / "b")
    for name in with_base:
        want = ref.soup([m[name] for m in models], weights)
        np.testing.assert_allclose(with_base[name], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(without[name], want, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "b" / "tokenizer.json").exists()  # side files from the first model


def test_norms_computed_in_a_streamed_pass(cli, family, tmp_path):
    _, _, deltas = _inputs(family)
    want = [float(np.sqrt(sum((d[i].astype(np.float64) ** 2).sum() for d in deltas.values()))) for i in range(3)]
    r = cli("merge", "--base", family.base, "--models", *family.models, "--output", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    record = json.loads((tmp_path / "m" / "paw_merge.json").read_text())
    assert record["norm_source"] == "computed"
    assert record["norms"] == pytest.approx(want, rel=1e-9)
    assert sum(record["weights"]) == pytest.approx(1.0)
    assert record["weights"][0] > record["weights"][1] > record["weights"][2]  # larger norm, smaller weight


def test_norms_from_task_vector_summaries(cli, family, tmp_path):
    stats = tmp_path / "tv_stats"
    for name, norm in zip(["ft0", "ft1", "ft2"], [3.0, 2.0, 1.0], strict=True):
        (stats / name).mkdir(parents=True)
        (stats / name / "summary.json").write_text(json.dumps({"global_l2": norm}))
    r = cli("merge", "--base", family.base, "--models", *family.models, "--output", tmp_path / "m",
            "--stats-dir", stats, "--mode", "linear")
    assert r.exit_code == 0, r.stderr
    record = json.loads((tmp_path / "m" / "paw_merge.json").read_text())
    assert record["norms"] == [3.0, 2.0, 1.0] and record["norm_source"] == "stats-dir"
    assert record["weights"] == pytest.approx([2 / 11, 3 / 11, 6 / 11])
    (stats / "ft2" / "summary.json").unlink()
    r = cli("merge", "--base", family.base, "--models", *family.models, "--output", tmp_path / "n",
            "--stats-dir", stats)
    assert r.exit_code == 2 and "no task-vector summary for model 'ft2'" in r.stderr


def test_merged_model_loads_and_runs_in_transformers(cli, family, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _merge(cli, family, tmp_path / "m", "--method", "ties", "--dtype", "bfloat16")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert next(model.parameters()).dtype == torch.bfloat16
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    ids = tok("merging keeps what each model learned", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_dare_is_deterministic_in_the_seed(cli, family, tmp_path):
    for out, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        _merge(cli, family, tmp_path / out, "--method", "dare-ties", "--seed", seed)
    a, b, c = ((tmp_path / x / "model.safetensors").read_bytes() for x in "abc")
    assert a == b and a != c


def test_yaml_config_says_the_same_as_flags_and_flags_win(cli, family, tmp_path):
    cfg = tmp_path / "merge.yaml"
    cfg.write_text(
        f"base: {family.base}\nmodels:\n" + "".join(f"  - {m}\n" for m in family.models)
        + "method: ties\nweights: [0.5, 0.3, 0.2]\ndensity: 0.3\ndrop-rate: 0.5\n")
    assert cli("merge", "--config", cfg, "--output", tmp_path / "from_yaml").exit_code == 0
    _merge(cli, family, tmp_path / "from_flags", "--method", "ties", "--density", "0.3")
    assert (tmp_path / "from_yaml" / "model.safetensors").read_bytes() == \
        (tmp_path / "from_flags" / "model.safetensors").read_bytes()
    r = cli("merge", "--config", cfg, "--output", tmp_path / "override", "--method", "task-arithmetic")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "override" / "paw_merge.json").read_text())["method"] == "task-arithmetic"


@pytest.mark.parametrize("cfg_text,message", [
    ("method: ties\ndensty: 0.3\n", "unknown key 'densty'"),
    ("density: lots\n", "density 'lots' is not a number"),
    ("- a\n- b\n", "expected a YAML mapping"),
    ("method: [ties\n", "not valid YAML"),
])
def test_bad_config_is_one_line(cli, family, tmp_path, cfg_text, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(cfg_text)
    r = cli("merge", "--config", cfg, "--base", family.base, "--models", *family.models, "--output", tmp_path / "o")
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_norms_from_paw_task_vectors_equal_the_computed_ones(cli, family, tmp_path):
    r = cli("task-vectors", "--base", family.base, "--models", *family.models, "--outdir", tmp_path / "tv",
            "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    assert cli("merge", "--base", family.base, "--models", *family.models, "--output", tmp_path / "a",
               "--stats-dir", tmp_path / "tv").exit_code == 0
    assert cli("merge", "--base", family.base, "--models", *family.models, "--output", tmp_path / "b").exit_code == 0
    a, b = (json.loads((tmp_path / x / "paw_merge.json").read_text()) for x in "ab")
    assert a["norm_source"] == "stats-dir" and b["norm_source"] == "computed"
    assert a["norms"] == pytest.approx(b["norms"], rel=1e-9)
    merged_a, merged_b = load_numpy(tmp_path / "a"), load_numpy(tmp_path / "b")
    for name in merged_a:
        np.testing.assert_allclose(merged_a[name], merged_b[name], rtol=1e-6, atol=1e-7)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["task-arithmetic", "ties", "breadcrumbs"])
def test_cuda_gives_the_cpu_result(cli, family, tmp_path, method):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cpu = _merge(cli, family, tmp_path / "cpu", "--method", method, "--device", "cpu")
    gpu = _merge(cli, family, tmp_path / "gpu", "--method", method, "--device", "cuda")
    for name in cpu:
        np.testing.assert_allclose(gpu[name], cpu[name], rtol=1e-5, atol=1e-6)


def test_space_separated_lists_after_one_flag():
    from paw.cli._options import expand_multi

    args = ["--models", "a", "b", "--weights", "0.5", "-0.2", "--seed", "3", "--l2-norms=1", "2"]
    assert expand_multi(args, ("--models", "--weights", "--l2-norms")) == ["--models", "a", "--models", "b", "--weights", "0.5", "--weights", "-0.2",
                                   "--seed", "3", "--l2-norms=1", "--l2-norms", "2"]


@pytest.mark.parametrize("method", ["task-arithmetic", "linear", "ties", "dare-ties", "breadcrumbs"])
def test_blockwise_path_gives_the_same_bytes(cli, family, tmp_path, monkeypatch, method):
    """Row blocks, streamed thresholds (radix select) and per-block DARE draws change no byte."""
    import paw.merge.blocks as blocks
    import paw.merge.pipeline as pipeline

    extra = ("--method", method, "--scale", "0.7", "--density", "0.3", "--gamma", "0.05", "--drop-rate", "0.5")
    _merge(cli, family, tmp_path / "whole", *extra)
    monkeypatch.setattr(pipeline, "BLOCK_ELEMENTS", 100)  # every matrix goes through in blocks of rows
    monkeypatch.setattr(blocks, "SMALL", 0)  # and every threshold through the two histogram passes
    _merge(cli, family, tmp_path / "blocks", *extra)
    assert (tmp_path / "whole" / "model.safetensors").read_bytes() == \
        (tmp_path / "blocks" / "model.safetensors").read_bytes()
