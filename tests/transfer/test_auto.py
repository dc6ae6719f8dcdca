"""What ``auto`` decides: layer pairing, relatedness against the other target layers, skipped candidates."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from paw.errors import PawError
from paw.io.adapter import read_adapter, write_adapter
from paw.io.checkpoint import open_checkpoint
from paw.transfer import transfer_lora
from paw.transfer.relatedness import RESIDUAL_LIFT, SIMILARITY_LIFT

from .conftest import LAYERS

SPEED_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_transfer_speed.py"


def test_auto_pairs_grown_target_by_similarity(tmp_path, src, src_lora, state, save_state, logits):
    """LLaMA Pro growth inserts copies after layers 0 and 1; name pairing would land on a copy."""
    from paw.bench.surgery import grow_state_dict

    sd, cfg = state
    big_sd, big_cfg = grow_state_dict(sd, cfg, hidden_size=40, num_layers=5, seed=3)
    gen = torch.Generator().manual_seed(4)  # a little further training, so the copies are not exact
    big_sd = {k: v + 0.03 * float(v.std()) * torch.randn(v.shape, generator=gen) if v.ndim == 2 else v
              for k, v in big_sd.items()}
    grown = save_state(big_sd, big_cfg, tmp_path / "grown")
    moved, report = transfer_lora(read_adapter(src_lora), open_checkpoint(src), open_checkpoint(grown))
    layers = report["layers"]
    assert layers["how"] == "similarity" and layers["pairs"] == [[0, 0], [1, 2], [2, 4]]
    assert "depths differ (3 source, 5 target layers)" in layers["why"]
    assert report["summary"]["related"] == 7 * LAYERS and report["summary"]["methods"] == {"structural": 21}
    assert logits(grown, write_adapter(tmp_path / "moved", moved)).isfinite().all()
    named, rep = transfer_lora(read_adapter(src_lora), open_checkpoint(src), open_checkpoint(grown),
                               layer_map="name", force=True)
    # by name, source layers 1 and 2 meet a copy of layer 0 and the original layer 1: not their partners
    wrong = [r for r in rep["modules"] if r["module"].startswith(("model.layers.1.", "model.layers.2."))]
    assert sum(r["related"] for r in wrong) <= 2


def _permuted(sd: dict, order: list[int]) -> dict:
    """Target layer i = source layer order[i]: every module by name meets another layer of the same model."""
    out = {k: v for k, v in sd.items() if ".layers." not in k}
    for i, j in enumerate(order):
        for k, v in sd.items():
            if k.startswith(f"model.layers.{j}."):
                out[k.replace(f"model.layers.{j}.", f"model.layers.{i}.", 1)] = v
    return out


def test_same_model_other_layer_scores_below_the_threshold(tmp_path, trained, trained_lora, save_state):
    """Layers of one *trained* model share much of their subspaces; the null of other layers absorbs it."""
    sd, cfg = trained
    shuffled = save_state(_permuted(sd, [1, 2, 0]), cfg, tmp_path / "shuffled")
    _, report = transfer_lora(read_adapter(trained_lora), open_checkpoint(save_state(sd, cfg, tmp_path / "same")),
                              open_checkpoint(shuffled), method="copy", layer_map="name")
    records = report["modules"]
    assert len(records) == 7 * LAYERS
    assert max(r["similarity"] for r in records) > 0.3 > min(r["similarity_chance"] for r in records)
    for r in records:  # raw similarity is well above chance, yet below the partner's null
        assert r["similarity_lift"] < SIMILARITY_LIFT and r["residual_lift"] < RESIDUAL_LIFT, r
        assert not r["related"]
    with pytest.raises(PawError, match="unrelated to the source under every layer pairing"):
        transfer_lora(read_adapter(trained_lora), open_checkpoint(tmp_path / "same"), open_checkpoint(shuffled))


def _speed_script():
    spec = importlib.util.spec_from_file_location("bench_transfer_speed", SPEED_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHRINK = {"qwen2.5-1.5b": 4, "llama-3.2-3b": 8, "small": 4, "tiny": 4}  # widths 384, 384, 256, 64


def test_every_speed_benchmark_shape_is_covered():
    assert set(SHRINK) == set(_speed_script().SHAPES)


@pytest.mark.parametrize("shape", sorted(SHRINK))
def test_independent_random_models_are_unrelated_at_speed_benchmark_shapes(tmp_path, shape):
    """The speed benchmark's layouts (heads, KV heads, MLP ratio) at reduced width, two layers; widths
    above 256 still take the randomized SVD, whose sketches must be independent per model."""
    from paw.io.writer import write_checkpoint

    speed = _speed_script()
    s = speed.scaled(shape, SHRINK[shape])

    def save(name, seed, drift_of=None):
        return write_checkpoint(tmp_path / name, speed.random_tensors(s, seed, drift_of=drift_of),
                                config=speed.config_of(shape, s), overwrite=True)

    a, b = open_checkpoint(save("a", 1)), open_checkpoint(save("b", 2))
    adapter = speed.random_lora(s, rank=4, layers=1)  # layer 0's seven projections; layer 1 is the null
    _, report = transfer_lora(adapter, a, b, force=True)
    assert report["summary"]["related"] == 0 and report["summary"]["judged"] == 7 and report["summary"]["unrelated"]
    for r in report["modules"]:  # every candidate auto tried was judged unrelated, none by chance
        assert not any(c.get("related") for c in r["candidates"]), r
    # the same layout drifted by 17% (the speed benchmark's target) is related, module by module
    _, rep = transfer_lora(adapter, a, open_checkpoint(save("d", 3, drift_of=1)))
    assert rep["summary"]["methods"] == {"copy": 7} and rep["summary"]["related"] == 7


def test_candidate_that_does_not_apply_is_skipped_with_its_reason(troot, src, src_lora):
    """head_dim 20 against 8: structural cannot apply; auto tries embed-map and refuses on evidence."""
    from paw import zoo

    other = open_checkpoint(zoo.tiny_model(troot / "hd20", "llama", seed=5, hidden_size=40, num_layers=3,
                                           num_heads=2, num_kv_heads=1, intermediate_size=72))
    adapter, s = read_adapter(src_lora), open_checkpoint(src)
    with pytest.raises(PawError, match="unrelated to the source") as err:
        transfer_lora(adapter, s, other)
    assert "head_dim" not in str(err.value) and "--method distill --prompts" in str(err.value)
    _, report = transfer_lora(adapter, s, other, force=True)
    layer_modules = [r for r in report["modules"] if "layers" in r["module"]]
    for r in layer_modules:
        skipped = {c["method"]: c.get("unavailable") for c in r["candidates"]}
        assert "head_dim" in skipped["structural"] and r["method"] == "embed-map"


def test_kept_share_of_lora_x_on_a_small_fine_tune_is_reported(tmp_path, troot, src, src_lora):
    """A 1%-drifted fine-tune: lora-x drops most of ΔW and says so; copy keeps all of it."""
    from paw import zoo

    zoo.fine_tune(src, troot / "ft1", seed=3, scale=0.01)
    adapter, s, t = read_adapter(src_lora), open_checkpoint(src), open_checkpoint(troot / "ft1")
    _, lx = transfer_lora(adapter, s, t, method="lora-x")
    assert lx["summary"]["kept_share"] < 0.5 and any("most of it was dropped" in w for w in lx["warnings"])
    _, auto = transfer_lora(adapter, s, t)
    assert auto["summary"]["kept_share"] == 1.0 and auto["warnings"] == []
    assert auto["layers"]["how"] == "name" and "correlates best with its namesake" in auto["layers"]["why"]


def test_another_vocabulary_without_a_map_names_the_map_and_distill(troot, src, src_lora):
    """Another tokenizer and no --vocab-map: one error that points to both ways forward."""
    from paw import zoo

    other = open_checkpoint(zoo.tiny_model(troot / "vocab-other", "llama", seed=6, vocab_size=301))
    with pytest.raises(PawError, match="vocabularies differ") as err:
        transfer_lora(read_adapter(src_lora), open_checkpoint(src), other)
    assert "--vocab-map" in str(err.value) and "--method distill --prompts" in str(err.value)
