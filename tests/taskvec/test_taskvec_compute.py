"""compute_task_vectors on zoo models with known task vectors: every number against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paw.errors import PawError
from paw.io.checkpoint import open_checkpoint
from paw.taskvec.compute import compute_task_vectors, unique_names
from paw.taskvec.groups import groups_of
from paw.taskvec.report import PER_PARAM_COLUMNS, param_rows, summary, top_rows


@pytest.fixture(scope="module")
def results(tv_models):
    return compute_task_vectors(open_checkpoint(tv_models["base"]),
                                [open_checkpoint(tv_models["ft1"]), open_checkpoint(tv_models["ft2"])])


def test_every_column_matches_numpy(results, tv_models, numpy_deltas, np_reference):
    for i, key in enumerate(["ft1", "ft2"]):
        deltas = numpy_deltas(tv_models["base"], tv_models[key])
        rows = param_rows(results, i)
        assert [r["param"] for r in rows] == sorted(deltas)  # base order, all tensors
        for row in rows:
            ref = np_reference(deltas[row["param"]])
            assert row["shape"] == "x".join(map(str, deltas[row["param"]].shape))
            for column in PER_PARAM_COLUMNS[2:]:
                assert row[column] == pytest.approx(ref[column], rel=1e-9, abs=1e-15), (row["param"], column)
            assert row["q0"] == ref["q0"] and row["q100"] == ref["q100"] and row["maxabs"] == ref["maxabs"]


def test_task_vector_is_the_one_the_zoo_added(results, tv_models):
    """Δ is the perturbation the zoo applied (up to float32 rounding of base + Δ)."""
    known = tv_models["deltas1"]
    rows = {r["param"]: r for r in param_rows(results, 0)}
    for name, d in known.items():
        assert rows[name]["l2"] == pytest.approx(float(d.double().norm()), rel=1e-4)
        assert rows[name]["q50"] == pytest.approx(float(np.median(d.numpy())), abs=1e-4 * float(d.abs().max()))


def test_global_norms_groups_and_cosines(results, tv_models, numpy_deltas):
    d1 = numpy_deltas(tv_models["base"], tv_models["ft1"])
    d2 = numpy_deltas(tv_models["base"], tv_models["ft2"])
    flat1 = np.concatenate([d1[k].ravel() for k in sorted(d1)]).astype(np.float64)
    flat2 = np.concatenate([d2[k].ravel() for k in sorted(d2)]).astype(np.float64)
    info = summary(results, 0, top_k=5)
    assert info["global_l2"] == pytest.approx(np.linalg.norm(flat1), rel=1e-12)
    assert info["global_l1"] == pytest.approx(np.abs(flat1).sum(), rel=1e-12)
    assert info["n_params_considered"] == flat1.size
    assert info["skipped_params"] == {}
    for group, values in info["groups"].items():
        members = [k for k in d1 if group in groups_of(k)]
        assert values["param_count"] == sum(d1[k].size for k in members), group
        expected = math.sqrt(sum(float(np.sum(d1[k].astype(np.float64) ** 2)) for k in members))
        assert values["l2"] == pytest.approx(expected, rel=1e-12), group
    assert info["groups"]["lm_head"]["param_count"] == d1["lm_head.weight"].size  # untied llama
    assert set(info["groups"]) >= {"embed", "lm_head", "attn", "mlp", "norm", "other", "layer_0", "layer_1"}
    cos = flat1 @ flat2 / (np.linalg.norm(flat1) * np.linalg.norm(flat2))
    assert results.cosines() == [[1.0, pytest.approx(cos, abs=1e-12)], [pytest.approx(cos, abs=1e-12), 1.0]]
    assert abs(cos) < 0.05  # independent random perturbations are nearly orthogonal


def test_top_rows_sorted_by_column(results):
    rows = param_rows(results, 0)
    top = top_rows(rows, "l2", 3)
    assert [r["l2"] for r in top] == sorted((r["l2"] for r in rows), reverse=True)[:3]
    assert len(top_rows(rows, "maxabs", 1000)) == len(rows)


def test_several_devices_give_identical_numbers(results, tv_models):
    spread = compute_task_vectors(open_checkpoint(tv_models["base"]),
                                  [open_checkpoint(tv_models["ft1"]), open_checkpoint(tv_models["ft2"])],
                                  devices=["cpu", "cpu", "cpu"])
    assert spread.stats == results.stats
    assert spread.gram == results.gram


def test_include_and_exclude_filter_names(tv_models):
    r = compute_task_vectors(open_checkpoint(tv_models["base"]), [open_checkpoint(tv_models["ft1"])],
                             include=r"layers\.0\.", exclude=r"norm")
    assert r.names and all("layers.0." in n and "norm" not in n for n in r.names)


def test_skip_reasons(odd_pair):
    r = compute_task_vectors(open_checkpoint(odd_pair["base"]), [open_checkpoint(odd_pair["ft"])])
    assert r.skipped == {
        "empty.bias": "empty tensor (no elements)",
        "extra.only_in_ft": "missing in the base (base)",
        "model.layers.1.mlp.up_proj.weight": "missing in oddft",
        "model.norm.weight": "shape mismatch in oddft: [30] vs base [32]",
        "step_counter": "non-float dtype int64",
    }
    assert not set(r.skipped) & set(r.names)
    assert summary(r, 0, top_k=5)["skipped_params"] == r.skipped


def test_tied_lm_head_is_counted_once(zoo_root, tiny_qwen):
    from paw import zoo

    zoo.fine_tune(tiny_qwen, zoo_root / "taskvec-qwen-ft", seed=5)
    base = open_checkpoint(tiny_qwen)
    assert base.tied_embeddings
    r = compute_task_vectors(base, [open_checkpoint(zoo_root / "taskvec-qwen-ft")])
    info = summary(r, 0, top_k=5)
    assert info["tied_lm_head"]["tied"] is True
    assert info["tied_lm_head"]["embedding"] == "model.embed_tokens.weight"
    assert info["groups"]["lm_head"]["param_count"] == 0
    assert info["n_params_considered"] == sum(base.numel(n) for n in base)


def test_stored_but_tied_lm_head_is_skipped_as_a_duplicate(zoo_root, tiny_qwen):
    from paw.io.writer import write_checkpoint

    for name in ("base", "ft"):
        tensors = dict(open_checkpoint(tiny_qwen).items())
        if name == "ft":
            tensors = {k: v + 0.01 for k, v in tensors.items()}
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        write_checkpoint(zoo_root / f"taskvec-tied-{name}", tensors, copy_from=tiny_qwen, overwrite=True)
    r = compute_task_vectors(open_checkpoint(zoo_root / "taskvec-tied-base"),
                             [open_checkpoint(zoo_root / "taskvec-tied-ft")])
    assert "lm_head.weight" not in r.names
    assert r.skipped["lm_head.weight"].startswith("tied to model.embed_tokens.weight")
    assert r.tied_lm_head["tied"] is True


def test_architecture_mismatch_is_refused(tv_models, tiny_qwen):
    with pytest.raises(PawError, match="architectures do not match"):
        compute_task_vectors(open_checkpoint(tv_models["base"]), [open_checkpoint(tiny_qwen)])


def test_no_tensor_in_common_is_refused(tv_models):
    with pytest.raises(PawError, match="no tensor in common"):
        compute_task_vectors(open_checkpoint(tv_models["base"]), [open_checkpoint(tv_models["ft1"])],
                             include="does-not-exist")
    with pytest.raises(PawError, match="not a valid regular expression"):
        compute_task_vectors(open_checkpoint(tv_models["base"]), [open_checkpoint(tv_models["ft1"])],
                             include="([")


def test_unique_names():
    assert unique_names(["ft", "ft", "a/b", "ft"]) == ["ft", "ft-2", "a_b", "ft-3"]


def test_zero_task_vector_has_nan_cosines(tv_models):
    r = compute_task_vectors(open_checkpoint(tv_models["base"]),
                             [open_checkpoint(tv_models["base"]), open_checkpoint(tv_models["ft1"])])
    cos = r.cosines()
    assert math.isnan(cos[0][0]) and math.isnan(cos[0][1]) and cos[1][1] == 1.0
    assert r.global_l2(0) == 0.0
    assert torch.isfinite(torch.tensor(r.global_l2(1)))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(results, tv_models):
    """Same order statistics bit for bit; sums agree to float64 rounding; several GPUs = one GPU."""
    ckpts = [open_checkpoint(tv_models[k]) for k in ("base", "ft1", "ft2")]
    gpu = compute_task_vectors(ckpts[0], ckpts[1:], device="cuda", chunk_size=4096)
    for cpu_stats, gpu_stats in zip(results.stats, gpu.stats, strict=True):
        for a, b in zip(cpu_stats, gpu_stats, strict=True):
            assert a.quantiles == b.quantiles and a.maxabs == b.maxabs
            assert b.l2 == pytest.approx(a.l2, rel=1e-12) and b.skew == pytest.approx(a.skew, rel=1e-9, abs=1e-12)
    many = compute_task_vectors(ckpts[0], ckpts[1:], devices=[f"cuda:{i}" for i in range(torch.cuda.device_count())],
                                chunk_size=4096)
    assert many.stats == gpu.stats and many.gram == gpu.gram


@pytest.fixture(scope="module")
def nan_ft(tv_models, tmp_path_factory):
    """``ft1`` with 3 NaN entries in one weight (written with ``allow_nonfinite``, as a broken fine-tune would be)."""
    from paw.io.writer import write_checkpoint

    tensors = {k: v.clone() for k, v in open_checkpoint(tv_models["ft1"]).items()}
    tensors["model.layers.1.self_attn.v_proj.weight"].view(-1)[:3] = math.nan
    return write_checkpoint(tmp_path_factory.mktemp("tv-nan") / "nan_ft", tensors, copy_from=tv_models["ft1"],
                            allow_nonfinite=True)


def test_a_nan_model_is_refused_by_model_and_tensor(tv_models, nan_ft):
    from paw.validate import NonFinite

    with pytest.raises(NonFinite) as err:
        compute_task_vectors(open_checkpoint(tv_models["base"]), [open_checkpoint(tv_models["ft1"]),
                                                                  open_checkpoint(nan_ft)])
    text = str(err.value)
    assert text.startswith(f"{nan_ft}: model nan_ft") and "'model.layers.1.self_attn.v_proj.weight' holds 3 NaN/Inf" in text
    assert "--allow-nonfinite" in text


def test_a_nan_base_is_named_as_the_base(tv_models, nan_ft):
    from paw.validate import NonFinite

    with pytest.raises(NonFinite, match="base nan_ft"):
        compute_task_vectors(open_checkpoint(nan_ft), [open_checkpoint(tv_models["ft1"])])


def test_allow_nonfinite_reports_nan_statistics(tv_models, nan_ft):
    r = compute_task_vectors(open_checkpoint(tv_models["base"]), [open_checkpoint(nan_ft)], allow_nonfinite=True)
    row = r.names.index("model.layers.1.self_attn.v_proj.weight")
    assert math.isnan(r.stats[0][row].mean) and math.isnan(r.cosines()[0][0])
