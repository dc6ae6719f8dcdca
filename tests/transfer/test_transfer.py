"""transfer_lora on zoo pairs: exactness where a method is exact, recovery of rotations and pruning."""

from __future__ import annotations

import pytest
import torch

from paw.errors import PawError
from paw.io.adapter import LoraAdapter, read_adapter, write_adapter
from paw.io.checkpoint import open_checkpoint
from paw.transfer import transfer_lora

from .conftest import HIDDEN, INTER, KV, LAYERS


def _deltas(adapter: LoraAdapter) -> dict:
    return {m: lm.delta() for m, lm in adapter.modules().items()}


def _kept(changed, reference, base) -> float:
    """1 - ‖Δlogits_transferred − Δlogits_true‖ / ‖Δlogits_true‖ (1: everything kept)."""
    true = reference - base
    return 1.0 - float((changed - reference).norm() / true.norm())


def test_source_to_source_every_method(tmp_path, src, src_lora, logits, record_property):
    adapter, ckpt = read_adapter(src_lora), open_checkpoint(src)
    base, reference = logits(src), logits(src, src_lora)
    assert float((reference - base).abs().max()) > 1e-2  # the adapter does something
    kept = {}
    shares = {}
    for method in ("auto", "copy", "embed-map", "structural", "lora-x", "cross-lora"):
        moved, report = transfer_lora(adapter, ckpt, ckpt, method=method)
        assert moved.r == adapter.r and all(lm.rank == 4 for lm in moved.modules().values())
        out = write_adapter(tmp_path / method, moved)
        kept[method] = _kept(logits(src, out), reference, base)
        shares[method] = report["summary"]["kept_share"]
        assert report["summary"]["transferred"] == 7 * LAYERS
        for rec in report["modules"]:  # similarity is always next to its null (other layers) and chance
            assert rec["similarity_chance"] is not None and 0 < rec["similarity_chance"] < 1
            assert rec["similarity_null"] >= rec["similarity_chance"] and rec["related"]
    record_property("kept", kept)
    for exact in ("auto", "copy", "embed-map", "structural"):
        assert kept[exact] > 1 - 1e-5, (exact, kept)
    assert shares["copy"] == 1.0 and shares["structural"] == 1.0 and shares["embed-map"] is None
    # lossy on source -> source: projecting onto top-R subspaces drops LoRA directions outside them,
    # and the report says so (kept share of ΔW, a warning per module and for the adapter)
    assert kept["lora-x"] < 0.5 and shares["lora-x"] < 0.5
    lossy, rep = transfer_lora(adapter, ckpt, ckpt, method="lora-x")
    assert all("warning: keeps" in r["decision"] for r in rep["modules"])
    assert any("most of it was dropped" in w for w in rep["warnings"])
    # cross-lora at its paper rank (320, capped at the weight's size) drops only what lies outside a
    # rectangular weight's row or column space
    assert kept["lora-x"] < kept["cross-lora"] < 1 - 1e-3 and shares["lora-x"] < shares["cross-lora"] < 1
    full, _ = transfer_lora(adapter, ckpt, ckpt, method="lora-x", subspace_rank=HIDDEN)
    kept_full = _kept(logits(src, write_adapter(tmp_path / "lx-full", full)), reference, base)
    record_property("kept_lora_x_full_rank", kept_full)
    assert kept["lora-x"] < kept_full < 1 - 1e-3  # rectangular k/v/gate/up/down still lose directions


def test_embed_map_recovers_orthogonal_change_of_basis(tmp_path, src, src_lora, rotated, logits):
    """Target = source with x_t = Q x_s and RMSNorm gains folded into the weights: same function."""
    reference = logits(src, src_lora)
    assert torch.allclose(logits(rotated), logits(src), atol=1e-4)  # the target is the same function
    adapter, s, t = read_adapter(src_lora), open_checkpoint(src), open_checkpoint(rotated)
    moved, report = transfer_lora(adapter, s, t, method="embed-map", ridge=1e-8)
    got = logits(rotated, write_adapter(tmp_path / "exact", moved))
    assert torch.allclose(got, reference, atol=1e-4), float((got - reference).abs().max())
    assert report["residual_map"]["fit_residual_source_to_target"] < 1e-3
    # copy on the rotated target keeps nothing of the adapter's change
    copied, _ = transfer_lora(adapter, s, t, method="copy")
    base = logits(src)
    assert _kept(logits(rotated, write_adapter(tmp_path / "copy", copied)), reference, base) < 0.5
    # default ridge: still close; auto picks embed-map for every module
    auto, rep = transfer_lora(adapter, s, t)
    assert rep["summary"]["methods"] == {"embed-map": 7 * LAYERS}
    assert _kept(logits(rotated, write_adapter(tmp_path / "auto", auto)), reference, base) > 0.9


def _prune_spec():
    gen = torch.Generator().manual_seed(5)
    hidden = sorted(torch.randperm(HIDDEN, generator=gen)[:24].tolist())
    neurons = {layer: sorted(torch.randperm(INTER, generator=gen)[:40].tolist()) for layer in (0, 2)}
    return dict(hidden_keep=hidden, kv_heads_keep={0: [1], 2: [0]}, neurons_keep=neurons, layers_keep=[0, 2])


def test_structural_recovers_pruned_target_exactly(tmp_path, src, src_lora, state, save_state, logits):
    from paw.bench.surgery import prune_state_dict

    sd, cfg = state
    spec = _prune_spec()
    small_sd, small_cfg = prune_state_dict(sd, cfg, **spec)
    pruned = save_state(small_sd, small_cfg, tmp_path / "pruned")
    adapter = read_adapter(src_lora)
    moved, report = transfer_lora(adapter, open_checkpoint(src), open_checkpoint(pruned), method="structural",
                                  layer_map="similarity")
    assert report["layers"]["pairs"] == [[0, 0], [2, 1]]
    assert report["layers"]["source_without_partner"] == [1]
    skipped = [r for r in report["modules"] if not r["transferred"]]
    assert len(skipped) == 7 and all("no partner" in r["decision"] for r in skipped)
    assert report["hidden_channels"]["paired"] == 24
    # expected: the source update pruned exactly like the weights
    delta_sd = {f"{m}.weight": d for m, d in _deltas(adapter).items()}
    expected, _ = prune_state_dict(delta_sd, cfg, **spec)
    got = {f"{m}.weight": d for m, d in _deltas(moved).items()}
    assert sorted(got) == sorted(expected)
    for name, d in expected.items():
        assert torch.allclose(got[name], d, atol=1e-6), name
    assert all(r["remix_residual"] < 1e-6 for r in report["modules"] if r["transferred"])
    logits(pruned, write_adapter(tmp_path / "moved", moved))  # PEFT loads it on the pruned target


def test_grown_target_wider_and_deeper_keeps_the_function(tmp_path, src, src_lora, state, save_state, logits):
    from paw.bench.surgery import grow_state_dict

    sd, cfg = state
    big_sd, big_cfg = grow_state_dict(sd, cfg, hidden_size=48, intermediate_size=96, num_layers=5, seed=3)
    grown = save_state(big_sd, big_cfg, tmp_path / "grown")
    adapter = read_adapter(src_lora)
    moved, report = transfer_lora(adapter, open_checkpoint(src), open_checkpoint(grown), layer_map="similarity")
    assert report["summary"]["methods"] == {"structural": 7 * LAYERS}
    assert len(report["layers"]["target_without_partner"]) == 2
    out = write_adapter(tmp_path / "moved", moved)
    assert all(lm.rank == 4 for lm in read_adapter(out).modules().values())
    got, reference = logits(grown, out), logits(src, src_lora)
    assert torch.allclose(got, reference, atol=1e-4), float((got - reference).abs().max())


def test_different_family_width_and_depth_gives_loadable_rank_r_adapter(tmp_path, troot, src, src_lora, logits):
    from paw import zoo

    other = zoo.tiny_model(troot / "wide", "mistral", seed=4, hidden_size=48, num_layers=2, num_heads=6,
                           num_kv_heads=3, intermediate_size=80)
    adapter = read_adapter(src_lora)
    with pytest.raises(PawError, match="unrelated"):
        transfer_lora(adapter, open_checkpoint(src), open_checkpoint(other))
    moved, report = transfer_lora(adapter, open_checkpoint(src), open_checkpoint(other), method="embed-map",
                                  layer_map="relative-depth")
    assert report["layers"]["pairs"] == [[0, 0], [2, 1]] and report["layers"]["source_without_partner"] == [1]
    out = write_adapter(tmp_path / "moved", moved)
    shapes = {m: (tuple(lm.A.shape), tuple(lm.B.shape)) for m, lm in read_adapter(out).modules().items()}
    assert shapes["model.layers.1.self_attn.k_proj"] == ((4, 48), (24, 4))
    assert shapes["model.layers.1.mlp.down_proj"] == ((4, 80), (48, 4))
    assert torch.isfinite(logits(other, out)).all()
    for rec in [r for r in report["modules"] if r["transferred"]]:  # unrelated families: the blow-up guard is reported, not hidden
        assert rec["norm_ratio"] > 0 and (rec["norm_ratio"] <= 3 or "warning: norm ratio" in rec["decision"])


def test_auto_copies_drifted_and_refuses_independent(src, src_lora, drifted, independent):
    adapter, s = read_adapter(src_lora), open_checkpoint(src)
    moved, report = transfer_lora(adapter, s, open_checkpoint(drifted))
    assert report["summary"]["methods"] == {"copy": 7 * LAYERS}
    assert 0.1 < report["summary"]["median_remix_residual"] < 0.3
    for a, b in zip(adapter.tensors.values(), moved.tensors.values(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(PawError, match=r"unrelated to the source under every layer pairing.*similarity .* for the other layers.*--force"):
        transfer_lora(adapter, s, open_checkpoint(independent))
    forced, rep = transfer_lora(adapter, s, open_checkpoint(independent), force=True)
    assert rep["summary"]["unrelated"] and rep["summary"]["related"] <= 2
    assert all(r["transferred"] for r in rep["modules"])


def test_embedding_lora_and_modules_to_save_follow_the_maps(tmp_path, troot, src, rotated, logits):
    from paw import zoo

    folder = zoo.make_lora(src, troot / "emb-lora", rank=4, alpha=8, seed=5, scale=0.2,
                           target_modules=["q_proj", "embed_tokens"], modules_to_save=["lm_head"])
    adapter = read_adapter(folder)
    key = "base_model.model.lm_head.weight"
    adapter.tensors[key] = adapter.tensors[key] + 0.05 * torch.randn(adapter.tensors[key].shape,
                                                                     generator=torch.Generator().manual_seed(1))
    changed = write_adapter(tmp_path / "changed", adapter)
    reference = logits(src, changed)
    moved, report = transfer_lora(read_adapter(changed), open_checkpoint(src), open_checkpoint(rotated),
                                  method="embed-map", ridge=1e-8)
    assert "model.embed_tokens" in [r["module"] for r in report["modules"] if r["transferred"]]
    assert {n["tensor"] for n in report["extras"]} == {"lm_head.weight", "model.embed_tokens.base_layer.weight"}
    got = logits(rotated, write_adapter(tmp_path / "moved", moved))
    assert torch.allclose(got, reference, atol=1e-4), float((got - reference).abs().max())


def test_vocabulary_map_permutes_embedding_lora(tmp_path, troot, src, state, save_state, logits):
    """Target = source with its token ids permuted; a vocab map says so; copy + map gives the same logits."""
    from paw import zoo
    from paw.io.vocab_map import VocabMapping

    sd, cfg = state
    V = sd["model.embed_tokens.weight"].shape[0]
    perm = torch.randperm(V, generator=torch.Generator().manual_seed(2))  # target id t = source id perm[t]
    psd = dict(sd, **{"model.embed_tokens.weight": sd["model.embed_tokens.weight"][perm],
                      "lm_head.weight": sd["lm_head.weight"][perm]})
    permuted = save_state(psd, cfg, tmp_path / "permuted")
    folder = zoo.make_lora(src, troot / "emb-lora2", rank=4, alpha=8, seed=6, scale=0.2,
                           target_modules=["v_proj", "embed_tokens", "lm_head"])
    mapping = VocabMapping(V, V, {t: ("exact", [int(perm[t])], [1.0]) for t in range(V)})
    s, t = open_checkpoint(src), open_checkpoint(permuted)
    moved, report = transfer_lora(read_adapter(folder), s, t, method="copy", vocab_map=mapping)  # auto refuses a map
    assert report["summary"]["methods"] == {"copy": LAYERS + 2}
    assert any("tokenizers differ" in w for w in report["warnings"])  # the benchmark's finding, said
    ids = torch.randint(4, 250, (2, 12), generator=torch.Generator().manual_seed(0))
    inv = torch.argsort(perm)  # source id -> target id
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        ref = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(src), folder)(input_ids=ids).logits
        out = write_adapter(tmp_path / "moved", moved)
        got = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(permuted), out)(
            input_ids=inv[ids]).logits
    assert torch.allclose(got[..., inv], ref, atol=1e-4)


def test_bad_inputs_are_one_line_errors(tmp_path, src, src_lora, troot):
    from paw import zoo

    adapter, s = read_adapter(src_lora), open_checkpoint(src)
    renamed = {k.replace("layers.0.mlp.up_proj", "layers.0.mlp.upp"): v for k, v in adapter.tensors.items()}
    bad = LoraAdapter(adapter.config, renamed)
    with pytest.raises(PawError, match=r"'base_model.model.model.layers.0.mlp.upp.lora_A.weight' matches no module"):
        transfer_lora(bad, s, s)
    wide = open_checkpoint(zoo.tiny_model(troot / "wide-src", "llama", seed=1, hidden_size=48, num_layers=3))
    with pytest.raises(PawError, match="is not this adapter's base"):
        transfer_lora(adapter, wide, s)
    with pytest.raises(PawError, match="lora-x needs equal shapes"):
        transfer_lora(adapter, s, wide, method="lora-x")
    with pytest.raises(PawError, match="unknown transfer method 'svd'; choose one of auto, copy"):
        transfer_lora(adapter, s, s, method="svd")


def test_cross_lora_pairs_bases_across_shapes(src, src_lora, troot):
    """Different widths: P_U = U_t U_sᵀ maps B into the target's top-R basis (rank and shapes right)."""
    from paw import zoo

    wide = open_checkpoint(zoo.tiny_model(troot / "wide-f", "llama", seed=8, hidden_size=48, num_layers=3,
                                          num_heads=4, num_kv_heads=KV, intermediate_size=80))
    moved, report = transfer_lora(read_adapter(src_lora), open_checkpoint(src), wide, method="cross-lora")
    lm = moved.modules()["model.layers.0.mlp.down_proj"]
    assert tuple(lm.A.shape) == (4, 80) and tuple(lm.B.shape) == (48, 4)
    for r in report["modules"]:  # no common frame: nothing faked
        assert r["similarity"] is None and r["remix_residual"] is None and r["kept"] is None
