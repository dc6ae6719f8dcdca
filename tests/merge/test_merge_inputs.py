"""Bad input is one line, exit 2, nothing written; vocabulary mismatches; non-float tensors copied."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from paw.io.checkpoint import open_checkpoint
from paw.io.writer import write_checkpoint
from tests.merge.conftest import load_numpy


def _variant(source: Path, folder: Path, edit) -> Path:
    """A copy of ``source`` whose tensors went through ``edit(dict) -> dict`` (config and tokenizer kept)."""
    ckpt = open_checkpoint(source)
    tensors = edit({name: ckpt[name] for name in ckpt})
    config = dict(ckpt.config)
    if "model.embed_tokens.weight" in tensors:
        config["vocab_size"] = tensors["model.embed_tokens.weight"].shape[0]
    return write_checkpoint(folder, tensors, config=config, copy_from=source)


def _refused(cli, tmp_path, *args, message: str):
    out = tmp_path / "never"
    r = cli("merge", *args, "--output", out)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert message in r.stderr, r.stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".never")]  # no temp folder left
    return r.stderr


def test_empty_model_list(cli, family, tmp_path):
    _refused(cli, tmp_path, "--base", family.base, message="no models to merge")


@pytest.mark.parametrize("flag,values", [("--weights", ["0.5", "0.5"]), ("--l2-norms", ["1", "2", "3", "4"])])
def test_count_of_weights_or_norms_differs(cli, family, tmp_path, flag, values):
    n = len(values)
    _refused(cli, tmp_path, "--base", family.base, "--models", *family.models, flag, *values,
             message=f"{flag} has {n} value(s) but there are 3 model(s)")


def test_existing_output_is_refused_unless_overwrite(cli, family, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = cli("merge", "--base", family.base, "--models", *family.models, "--output", out)
    assert r.exit_code == 2 and "output already exists (pass --overwrite" in r.stderr
    assert (out / "keep.txt").read_text() == "mine"
    r = cli("merge", "--base", family.base, "--models", *family.models, "--output", out, "--overwrite")
    assert r.exit_code == 0 and (out / "model.safetensors").exists() and not (out / "keep.txt").exists()


def test_shape_mismatch_names_the_first_one(cli, family, tmp_path):
    def widen(t):
        t["model.layers.1.mlp.up_proj.weight"] = torch.zeros(80, 32)
        t["model.layers.0.mlp.up_proj.weight"] = torch.zeros(70, 32)
        return t

    odd = _variant(family.models[1], tmp_path / "odd", widen)
    err = _refused(cli, tmp_path, "--base", family.base, "--models", family.models[0], odd,
                   message="the models do not match the base (llama): 2 tensor(s) differ in name or shape")
    assert "first: model.layers.0.mlp.up_proj.weight: shape mismatch in odd: [70, 32] vs base [64, 32]" in err


def test_missing_and_extra_names(cli, family, tmp_path):
    def drop(t):
        del t["model.norm.weight"]
        return t

    short = _variant(family.models[0], tmp_path / "short", drop)
    _refused(cli, tmp_path, "--base", family.base, "--models", short, message="model.norm.weight: missing in short")
    extra = _variant(family.models[0], tmp_path / "extra", lambda t: {**t, "model.extra.weight": torch.ones(3)})
    _refused(cli, tmp_path, "--base", family.base, "--models", extra,
             message="model.extra.weight: missing in the base (llama)")


def test_unknown_method_and_missing_model(cli, family, tmp_path):
    r = cli("merge", "--base", family.base, "--models", *family.models, "--method", "slerp", "--output", tmp_path / "o")
    assert r.exit_code == 2 and not (tmp_path / "o").exists()
    _refused(cli, tmp_path, "--base", family.base, "--models", tmp_path / "nowhere", message="nowhere")


def test_zero_norm_with_linear_mode(cli, family, tmp_path):
    _refused(cli, tmp_path, "--base", family.base, "--models", *family.models, "--l2-norms", "0", "1", "2",
             "--mode", "linear", message="--mode linear divides by the L2 norm, but model 1 has norm 0")


def test_out_of_range_knobs(cli, family, tmp_path):
    _refused(cli, tmp_path, "--base", family.base, "--models", *family.models, "--method", "ties",
             "--density", "1.5", message="--density 1.5 is outside (0, 1]")
    _refused(cli, tmp_path, "--base", family.base, "--models", *family.models, "--drop-rate", "1",
             message="--drop-rate 1.0 is outside [0, 1)")


def test_base_required_except_for_linear(cli, family, tmp_path):
    _refused(cli, tmp_path, "--models", *family.models, "--method", "ties", message="--base is required")


def _short_vocab(family, tmp_path) -> Path:
    def cut(t):
        return {k: (v[:250].clone() if k in ("model.embed_tokens.weight", "lm_head.weight") else v)
                for k, v in t.items()}

    return _variant(family.models[2], tmp_path / "short_vocab", cut)


def test_vocab_mismatch_refused_with_a_pointer_to_the_tokenizer_commands(cli, family, tmp_path):
    short = _short_vocab(family, tmp_path)
    err = _refused(cli, tmp_path, "--base", family.base, "--models", family.models[0], short,
                   message="vocabulary sizes differ in lm_head.weight, model.embed_tokens.weight")
    assert "paw transplant-tokenizer" in err and "--vocab-policy base" in err and "base llama 300 rows" in err


def test_vocab_policy_base_merges_shared_rows_and_keeps_the_rest(cli, family, tmp_path):
    short = _short_vocab(family, tmp_path)
    r = cli("merge", "--base", family.base, "--models", family.models[0], short, "--weights", "0.6", "0.4",
            "--vocab-policy", "base", "--output", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    merged, base = load_numpy(tmp_path / "m"), load_numpy(family.base)
    m0, m1 = load_numpy(family.models[0]), load_numpy(short)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert merged[name].shape == base[name].shape
        want = base[name][:250] + 0.6 * (m0[name][:250] - base[name][:250]) + 0.4 * (m1[name] - base[name][:250])
        np.testing.assert_allclose(merged[name][:250], want, atol=1e-6)
        np.testing.assert_array_equal(merged[name][250:], base[name][250:])
    record = json.loads((tmp_path / "m" / "paw_merge.json").read_text())
    assert record["vocab_rows_merged"] == {"lm_head.weight": 250, "model.embed_tokens.weight": 250}


def test_non_float_tensors_are_copied_from_the_base(cli, tmp_path):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(4, 3, generator=gen)
    ids = torch.arange(6)
    write_checkpoint(tmp_path / "b", {"w": w, "position_ids": ids})
    write_checkpoint(tmp_path / "f", {"w": w + 1, "position_ids": ids * 5})
    r = cli("merge", "--base", tmp_path / "b", "--models", tmp_path / "f", "--weights", "0.5", "--output", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    out = open_checkpoint(tmp_path / "m")
    assert torch.equal(out["position_ids"], ids) and out.dtype("position_ids") == "int64"
    assert torch.allclose(out["w"], w + 0.5)
    assert json.loads((tmp_path / "m" / "paw_merge.json").read_text())["copied_from_base"] == ["position_ids"]


def test_planning_reads_headers_only(family, monkeypatch):
    """``name in checkpoint`` and the merge plan must not read tensor data (that doubled the I/O)."""
    from paw.io import lazy_checkpoint as ck
    from paw.merge.plan import plan_merge

    base, models = open_checkpoint(family.base), [open_checkpoint(m) for m in family.models]

    def no_read(self, name):
        raise AssertionError(f"tensor {name} read while planning")

    monkeypatch.setattr(ck.SafetensorsFile, "get", no_read)
    assert "model.norm.weight" in base and "nope" not in base
    plan = plan_merge(base, models)
    assert len(plan.merge) == len(base) and not plan.copy
