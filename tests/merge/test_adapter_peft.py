"""PEFT's ``add_weighted_adapter`` combination types, each against PEFT itself on tiny adapters.

Factor-space methods (``peft-*``) are compared factor by factor (PAW's A and B against the A and B
PEFT builds), the svd family on the dense deltas. DARE's drop is random in both: PEFT draws it from
torch's global generator in its own module order, so its masks cannot be replayed; the tests hand
PEFT the masks PAW drew (patching PEFT's ``random_pruning``), which checks every other step exactly,
and check PAW's draw on its own (keep fraction, rescale, seed).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from paw.errors import PawError
from paw.io.adapter import read_adapter
from paw.merge import adapters as adapter_math
from paw.merge.adapter_pipeline import AdapterMergeOptions, merge_adapters
from paw.merge.adapters import ADAPTER_METHODS, count_consensus_mean, dare, split_weights, trim

WEIGHTS = [0.7, -1.3]


@pytest.fixture(scope="module")
def loras(tmp_path_factory, tiny_llama) -> tuple[Path, Path]:
    """Two rank-4 LoRAs with different alphas: all seven projections, and three of them."""
    from paw import zoo

    root = tmp_path_factory.mktemp("adapter-peft")
    one = zoo.make_lora(tiny_llama, root / "one", rank=4, alpha=8, seed=3)
    two = zoo.make_lora(tiny_llama, root / "two", rank=4, alpha=6, seed=5, target_modules=["q_proj", "v_proj", "down_proj"])
    return one, two


@pytest.fixture(scope="module")
def peft_model(loras, tiny_llama):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), loras[0], adapter_name="one")
    model.load_adapter(loras[1], adapter_name="two")
    return model


def _peft_factors(model, name: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    from peft.tuners.lora import LoraLayer

    prefix = "base_model.model."
    return {key[len(prefix):]: (mod.lora_A[name].weight.detach(), mod.lora_B[name].weight.detach())
            for key, mod in model.named_modules() if isinstance(mod, LoraLayer) and name in mod.lora_A}


def _peft_deltas(model, name: str) -> dict[str, torch.Tensor]:
    from peft.tuners.lora import LoraLayer

    prefix = "base_model.model."
    return {key[len(prefix):]: mod.get_delta_weight(name).detach() for key, mod in model.named_modules()
            if isinstance(mod, LoraLayer) and name in mod.lora_A}


def _paw(folder: Path):
    return read_adapter(folder).modules()


def _merge(loras, out: Path, method: str, **extra):
    return merge_adapters(AdapterMergeOptions(adapters=[str(p) for p in loras], output=str(out), method=method,
                                              weights=WEIGHTS, **extra))


# ---------------------------------------------------------------- pure functions, by hand

def test_split_weights_put_the_sign_on_a():
    wa, wb = split_weights([0.5, -2.0], [2.0, 2.0])
    assert wa == [1.0, -2.0] and wb == [1.0, 2.0]


def test_trim_keeps_int_density_n_like_peft():
    t = torch.tensor([0.1, -0.5, 0.3, 0.2])
    assert trim(t.clone(), 0.5).tolist() == pytest.approx([0.0, -0.5, 0.3, 0.0])
    assert trim(t.clone(), 0.2).tolist() == [0.0, 0.0, 0.0, 0.0]  # int(0.8) = 0 entries, as PEFT's topk(k=0)
    from peft.utils.merge_utils import magnitude_based_pruning
    x = torch.randn(7, 9, generator=torch.Generator().manual_seed(1))
    assert torch.equal(trim(x.clone(), 0.37), magnitude_based_pruning(x, 0.37))


def test_majority_sign_total_and_frequency_by_hand():
    t = [torch.tensor([3.0]), torch.tensor([-1.0]), torch.tensor([-1.0])]
    assert count_consensus_mean([x.clone() for x in t], [1, 1, 1], "total").item() == 3.0
    assert count_consensus_mean([x.clone() for x in t], [1, 1, 1], "frequency").item() == -1.0


def test_dare_keeps_density_of_the_entries_and_rescales():
    t = torch.ones(400, 250)
    out = dare(t.clone(), 0.3, torch.Generator().manual_seed(0))
    kept = out != 0
    assert abs(float(kept.float().mean()) - 0.3) < 0.01   # 100k draws: 4.5 standard deviations
    assert torch.allclose(out[kept], torch.full_like(out[kept], 1 / 0.3))
    assert abs(float(out.mean()) - 1.0) < 0.035           # unbiased: E[mask / density] = 1
    again = dare(t.clone(), 0.3, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


# ---------------------------------------------------------------- parity with add_weighted_adapter

@pytest.mark.parametrize("method, extra", [
    ("peft-linear", {}),
    ("peft-magnitude-prune", {"density": 0.5}),
    ("peft-ties", {"density": 0.6}),
    ("peft-ties", {"density": 0.6, "majority_sign_method": "frequency"}),
])
def test_factor_methods_build_peft_factors_and_peft_loads_them(loras, peft_model, tmp_path, method, extra):
    out = tmp_path / "out"
    _merge(loras, out, method, **extra)
    name = f"{method}-{extra.get('majority_sign_method', '')}"
    peft_model.add_weighted_adapter(["one", "two"], WEIGHTS, name, combination_type=ADAPTER_METHODS[method].peft_name,
                                    density=extra.get("density"),
                                    majority_sign_method=extra.get("majority_sign_method", "total"))
    theirs, ours = _peft_factors(peft_model, name), _paw(out)
    assert theirs.keys() == ours.keys()
    for module, (A, B) in theirs.items():
        torch.testing.assert_close(ours[module].A, A, atol=1e-6, rtol=0)
        torch.testing.assert_close(ours[module].B, B, atol=1e-6, rtol=0)
        assert ours[module].scaling == 1.0
    peft_model.load_adapter(out, adapter_name=f"paw-{name}")  # PEFT loads PAW's folder, with the same deltas
    loaded, want = _peft_deltas(peft_model, f"paw-{name}"), _peft_deltas(peft_model, name)
    assert max(float((loaded[m] - want[m]).abs().max()) for m in want) <= 1e-6


def test_peft_linear_is_not_the_weighted_sum(loras, tmp_path):
    """PEFT's warning, measured: its cross terms B_i A_j make linear an approximation of Σ w_i Δ_i."""
    merged = _paw(_merge(loras, tmp_path / "lin", "peft-linear").output)
    q = "model.layers.0.self_attn.q_proj"
    one, two = (read_adapter(p).modules()[q] for p in loras)
    exact = WEIGHTS[0] * one.delta() + WEIGHTS[1] * two.delta()
    assert float((merged[q].delta() - exact).norm() / exact.norm()) > 0.1


@pytest.fixture
def masks(monkeypatch):
    """Record every mask PAW's DARE draws and make PEFT's random pruning use the one drawn for its tensor."""
    drawn: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = adapter_math.dare

    def recording(t, density, generator):
        before = t.clone()
        out = original(t, density, generator)
        drawn.append((before, out != 0))
        return out

    def replay(tensor, density, rescale):
        hits = [m for x, m in drawn if x.shape == tensor.shape and torch.allclose(x, tensor.float(), atol=1e-7, rtol=0)]
        assert len(hits) == 1, "PEFT pruned a tensor PAW did not"
        out = tensor * hits[0]
        return out / density if rescale else out

    monkeypatch.setattr(adapter_math, "dare", recording)
    monkeypatch.setattr("peft.utils.merge_utils.random_pruning", replay)
    return drawn


@pytest.mark.parametrize("method, extra", [
    ("peft-dare-linear", {"density": 0.7}),
    ("peft-dare-ties", {"drop_rate": 0.4, "majority_sign_method": "frequency"}),
])
def test_dare_factor_methods_equal_peft_given_the_same_masks(loras, peft_model, masks, tmp_path, method, extra):
    out = tmp_path / "out"
    result = _merge(loras, out, method, seed=11, **extra)
    density = result.report["parameters"]["density"]
    assert density == pytest.approx(extra.get("density", 1 - extra.get("drop_rate", 0)))
    assert masks and all(0.45 < float(m.float().mean()) < 0.9 for _, m in masks)
    name = f"{method}-masked"
    peft_model.add_weighted_adapter(["one", "two"], WEIGHTS, name, combination_type=ADAPTER_METHODS[method].peft_name,
                                    density=density, majority_sign_method=extra.get("majority_sign_method", "total"))
    theirs, ours = _peft_factors(peft_model, name), _paw(out)
    for module, (A, B) in theirs.items():
        torch.testing.assert_close(ours[module].A, A, atol=1e-6, rtol=0)
        torch.testing.assert_close(ours[module].B, B, atol=1e-6, rtol=0)


@pytest.mark.parametrize("method, extra", [
    ("ties-svd", {"density": 0.5, "majority_sign_method": "frequency"}),
    ("dare-linear-svd", {"density": 0.6}),
    ("dare-ties-svd", {"drop_rate": 0.3}),
])
def test_svd_methods_equal_peft(loras, peft_model, masks, tmp_path, method, extra):
    out = tmp_path / "out"
    result = _merge(loras, out, method, seed=3, **extra)
    name = f"{method}-svd"
    peft_model.add_weighted_adapter(["one", "two"], WEIGHTS, name, combination_type=ADAPTER_METHODS[method].peft_name,
                                    density=result.report["parameters"]["density"],
                                    majority_sign_method=extra.get("majority_sign_method", "total"))
    theirs, ours = _peft_deltas(peft_model, name), {m: mod.delta() for m, mod in _paw(out).items()}
    assert max(float((theirs[m] - ours[m]).abs().max()) for m in ours) <= 1e-5


# ---------------------------------------------------------------- names and refusals

@pytest.mark.parametrize("spelling", ["peft_dare_ties", "peft-dare-ties"])
def test_cli_and_yaml_take_both_spellings(cli, loras, tmp_path, spelling):
    cli_out, yaml_out = tmp_path / "cli", tmp_path / "yaml"
    r = cli("merge", "--adapters", *map(str, loras), "--method", spelling, "--density", "0.5", "--output", str(cli_out))
    assert r.exit_code == 0, r.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"adapters: [{loras[0]}, {loras[1]}]\nmethod: {spelling}\ndensity: 0.5\noutput: {yaml_out}\n")
    r = cli("merge", "--config", str(cfg))
    assert r.exit_code == 0, r.stderr
    a, b = (cli_out / "adapter_model.safetensors").read_bytes(), (yaml_out / "adapter_model.safetensors").read_bytes()
    assert a == b and "peft-dare-ties" in r.stdout


@pytest.mark.parametrize("method, message", [
    ("ties", "--method ties merges full models; PEFT's add_weighted_adapter combination_type 'ties' is --method peft-ties"),
    ("magnitude_prune", "combination_type 'magnitude_prune' is --method peft-magnitude-prune"),
])
def test_peft_names_point_to_paw_names(method, message):
    with pytest.raises(PawError, match=re.escape(message)):
        AdapterMergeOptions(adapters=["a"], output="o", method=method).check()


def test_unequal_ranks_refused_before_anything_is_written(tiny_llama, loras, tmp_path):
    from paw import zoo

    low = zoo.make_lora(tiny_llama, tmp_path / "low", rank=2, alpha=4, seed=9, target_modules=["q_proj"])
    with pytest.raises(PawError, match=r"peft-ties combines the A and B factors entry by entry.*ranks 4 \(.*\), 2"):
        merge_adapters(AdapterMergeOptions(adapters=[str(loras[0]), str(low)], output=str(tmp_path / "o"),
                                           method="peft-ties"))
    assert not (tmp_path / "o").exists()


def test_density_and_drop_rate_must_agree():
    opts = AdapterMergeOptions(adapters=["a"], output="o", method="peft-dare-linear", density=0.5, drop_rate=0.9)
    with pytest.raises(PawError, match="--density 0.5 and --drop-rate 0.9 disagree"):
        opts.check()
    ok = AdapterMergeOptions(adapters=["a"], output="o", method="dare_linear_svd", density=0.25, drop_rate=0.75)
    ok.check()
    assert ok.keep() == 0.25 and AdapterMergeOptions(adapters=["a"], output="o", method="peft-ties").keep() == 0.2


def test_rank_and_sign_method_refused_where_they_do_not_apply(cli, loras, tmp_path):
    r = cli("merge", "--adapters", *map(str, loras), "--method", "peft-ties", "--rank", "2", "--output", str(tmp_path / "o"))
    assert r.exit_code == 2 and "--rank applies to the svd methods; peft-ties's rank is the adapters' common rank" in r.stderr
    r = cli("merge", "--base", "b", "--models", "m", "--majority-sign-method", "frequency", "--output", str(tmp_path / "o"))
    assert r.exit_code == 2 and "--majority-sign-method applies to adapter merges only" in r.stderr
