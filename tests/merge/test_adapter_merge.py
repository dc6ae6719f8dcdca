"""``paw merge --adapters``: cat is the exact sum, the svd family equals PEFT's add_weighted_adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from paw.io.adapter import LoraAdapter, lora_config_dict, read_adapter, write_adapter
from paw.merge.adapter_pipeline import AdapterMergeOptions, merge_adapters
from paw.merge.adapters import concat_factors, count_consensus_mean, lora_norm, svd_factors

WEIGHTS = [0.7, -1.3]


@pytest.fixture(scope="module")
def loras(tmp_path_factory, tiny_llama) -> tuple[Path, Path]:
    """Rank 4 / alpha 8 on all seven projections, and rank 2 / alpha 5 on three of them."""
    from paw import zoo

    root = tmp_path_factory.mktemp("adapter-merge")
    one = zoo.make_lora(tiny_llama, root / "one", rank=4, alpha=8, seed=3)
    two = zoo.make_lora(tiny_llama, root / "two", rank=2, alpha=5, seed=4,
                        target_modules=["q_proj", "v_proj", "down_proj"])
    return one, two


def _deltas(folder: Path) -> dict[str, torch.Tensor]:
    return {m: mod.delta() for m, mod in read_adapter(folder).modules().items()}


def _expected_sum(loras, weights) -> dict[str, torch.Tensor]:
    total: dict[str, torch.Tensor] = {}
    for folder, w in zip(loras, weights, strict=True):
        for m, d in _deltas(folder).items():
            total[m] = total.get(m, 0) + w * d
    return total


# ---------------------------------------------------------------- pure functions

def test_cat_factors_multiply_to_the_weighted_sum():
    gen = torch.Generator().manual_seed(0)
    f = [(torch.randn(3, 5, generator=gen), torch.randn(4, 3, generator=gen), 2.0),
         (torch.randn(1, 5, generator=gen), torch.randn(4, 1, generator=gen), 0.5)]
    A, B = concat_factors(f, [0.5, -2.0], scale=3.0)
    assert A.shape == (4, 5) and B.shape == (4, 4)
    want = 3.0 * (0.5 * 2.0 * f[0][1] @ f[0][0] - 2.0 * 0.5 * f[1][1] @ f[1][0])
    torch.testing.assert_close(B @ A, want, atol=1e-6, rtol=0)


def test_svd_factors_exact_at_full_rank_and_error_from_singular_values():
    D = torch.diag(torch.tensor([3.0, 4.0, 0.0]))
    A, B, error = svd_factors(D, 3)
    torch.testing.assert_close(B @ A, D, atol=1e-6, rtol=0)
    assert error == 0.0
    A, B, error = svd_factors(D, 1)  # keeps the 4, drops the 3: error 3/5
    assert A.shape == (1, 3) and B.shape == (3, 1)
    assert error == pytest.approx(0.6)


def test_peft_consensus_and_norm_by_hand():
    # elected sign of 2 + (-1) is +; only the first agrees; divided by the count (1), not its weight
    assert count_consensus_mean([torch.tensor([2.0]), torch.tensor([-1.0])], [0.5, 1.0]).item() == 1.0
    A, B = torch.randn(3, 6), torch.randn(5, 3)
    assert lora_norm(A, B, 1.5) == pytest.approx(float((1.5 * B @ A).norm()), rel=1e-5)


# ---------------------------------------------------------------- pipeline

def test_cat_is_the_exact_weighted_sum(loras, tmp_path):
    merged = merge_adapters(AdapterMergeOptions(adapters=[str(p) for p in loras], output=str(tmp_path / "cat"),
                                                method="cat", weights=WEIGHTS))
    got, want = _deltas(tmp_path / "cat"), _expected_sum(loras, WEIGHTS)
    assert got.keys() == want.keys()
    assert max(float((got[m] - want[m]).abs().max()) for m in want) <= 1e-6
    q, k = "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj"
    assert merged.ranks[q] == 6 and merged.ranks[k] == 4  # k_proj only in the first adapter
    report = json.loads((tmp_path / "cat" / "adapter_merge.json").read_text())
    assert report["partial_modules"][k] == [0] and report["max_relative_error"] is None
    assert json.loads((tmp_path / "cat" / "paw_merge.json").read_text())["command"].startswith("paw.merge")


def test_mode_weights_are_normalised(loras, tmp_path):
    merged = merge_adapters(AdapterMergeOptions(adapters=[str(p) for p in loras], output=str(tmp_path / "m"),
                                                method="svd", mode="equal", rank=3))
    assert merged.report["weights"] == [0.5, 0.5]
    assert set(merged.ranks.values()) == {3} and 0 < merged.max_relative_error < 1


@pytest.fixture(scope="module")
def peft_model(loras, tiny_llama):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), loras[0], adapter_name="one")
    model.load_adapter(loras[1], adapter_name="two")
    return model


def _peft_deltas(model, name: str) -> dict[str, torch.Tensor]:
    from peft.tuners.lora import LoraLayer

    prefix = "base_model.model."
    return {key[len(prefix):]: mod.get_delta_weight(name).detach() for key, mod in model.named_modules()
            if isinstance(mod, LoraLayer) and name in mod.lora_A}


@pytest.mark.parametrize("method, peft_type, extra", [
    ("cat", "cat", {}),
    ("svd", "svd", {}),
    ("svd", "svd", {"rank": 3}),
    ("ties-svd", "ties_svd", {"density": 0.5}),
    ("magnitude-prune-svd", "magnitude_prune_svd", {"density": 0.3}),
])
def test_same_deltas_as_peft_and_peft_loads_the_folder(loras, peft_model, tmp_path, method, peft_type, extra):
    out = tmp_path / method
    merge_adapters(AdapterMergeOptions(adapters=[str(p) for p in loras], output=str(out), method=method,
                                       weights=WEIGHTS, **extra))
    name = f"peft-{method}-{extra.get('rank', '')}"
    peft_model.add_weighted_adapter(["one", "two"], WEIGHTS, name, combination_type=peft_type,
                                    svd_rank=extra.get("rank"), density=extra.get("density"))
    peft_model.load_adapter(out, adapter_name=f"paw-{name}")  # PEFT loads PAW's folder
    theirs, loaded, ours = _peft_deltas(peft_model, name), _peft_deltas(peft_model, f"paw-{name}"), _deltas(out)
    assert theirs.keys() == ours.keys() == loaded.keys()
    assert max(float((theirs[m] - ours[m]).abs().max()) for m in ours) <= 1e-5
    assert max(float((loaded[m] - ours[m]).abs().max()) for m in ours) <= 1e-6


def test_dare_is_seeded(loras, tmp_path):
    runs = [merge_adapters(AdapterMergeOptions(adapters=[str(p) for p in loras], output=str(tmp_path / f"d{i}"),
                                               method="dare-ties-svd", drop_rate=0.5, seed=7)) for i in range(2)]
    a, b = _deltas(runs[0].output), _deltas(runs[1].output)
    assert all(torch.equal(a[m], b[m]) for m in a)


# ---------------------------------------------------------------- refusals: one line, exit 2, nothing written

def _other_base_lora(folder: Path, src: Path, **config) -> Path:
    adapter = read_adapter(src)
    write_adapter(folder, LoraAdapter(config={**adapter.config, **config}, tensors=adapter.tensors))
    return folder


@pytest.mark.parametrize("case", ["other-base", "shapes", "not-lora", "missing", "weights", "mixed", "full-method"])
def test_bad_inputs_exit_2_with_one_line(cli, loras, tmp_path, case):
    one, two = (str(p) for p in loras)
    args = ["--adapters", one, two]
    if case == "other-base":
        args = ["--adapters", one, str(_other_base_lora(tmp_path / "o", loras[1], base_model_name_or_path="other"))]
    elif case == "shapes":
        t = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(2, 7),
             "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.zeros(32, 2)}
        cfg = lora_config_dict(r=2, alpha=2, target_modules=["q_proj"], base_model=read_adapter(one).base_model)
        write_adapter(tmp_path / "s", LoraAdapter(config=cfg, tensors=t))
        args = ["--adapters", one, str(tmp_path / "s")]
    elif case == "not-lora":
        (tmp_path / "ia3").mkdir()
        (tmp_path / "ia3" / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3"}))
        args = ["--adapters", one, str(tmp_path / "ia3")]
    elif case == "missing":
        args = ["--adapters", one, str(tmp_path / "nowhere")]
    elif case == "weights":
        args += ["--weights", "1"]
    elif case == "mixed":
        args += ["--models", one]
    elif case == "full-method":
        args += ["--method", "ties"]
    result = cli("merge", *args, "--output", str(tmp_path / "out"))
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert not (tmp_path / "out").exists()


def test_cli_cat_prints_one_summary(cli, loras, tmp_path):
    result = cli("merge", "--adapters", *map(str, loras), "--method", "cat", "--output", str(tmp_path / "c"))
    assert result.exit_code == 0, result.stderr
    assert "14 module(s), rank 4-6, 8 from some adapters only" in result.stdout
