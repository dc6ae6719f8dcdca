"""``paw extract-lora`` end to end on tiny zoo models whose deltas are known by construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from paw import arch
from paw.extract.svd import reference_error
from paw.io.adapter import read_adapter
from paw.io.checkpoint import open_checkpoint


def _extract(cli, base, ft, out, *extra):
    res = cli("extract-lora", "--base", base, "--finetune", ft, "--output", out, "--device", "cpu", *extra)
    assert res.exit_code == 0, res.stderr
    return res, json.loads((Path(out) / "extract_report.json").read_text())


def _logits(model_dir, adapter=None):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter)
    ids = torch.arange(3, 40).reshape(1, -1)
    with torch.no_grad():
        return model(ids).logits


def _relative(a, b) -> float:
    return float((a - b).norm() / b.norm())


def test_rank2_adapter_reproduces_the_finetune_in_peft(cli, tmp_path, tiny_llama, llama_ft):
    out = tmp_path / "lora"
    res, report = _extract(cli, tiny_llama, llama_ft, out, "--rank", "2")
    assert "extracted 14 LoRA modules, rank 2" in res.stdout
    assert _relative(_logits(tiny_llama, out), _logits(llama_ft)) < 1e-4
    assert _relative(_logits(tiny_llama), _logits(llama_ft)) > 1e-2  # the fine-tune did move the logits
    by_module = {m["module"]: m for m in report["modules"]}
    fam = arch.get("llama")
    embed, head = fam.embed.removesuffix(".weight"), fam.head.removesuffix(".weight")
    assert by_module[embed]["how"] == "unchanged" and by_module[head]["how"] == "modules_to_save"
    assert all(m["rank"] == 2 and m["relative_error"] < 1e-4 for m in by_module.values() if m["how"] == "lora")
    assert report["not_carried"] == [] and report["summary"]["lora_modules"] == 14
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 2 and config["lora_alpha"] == 2 and config["modules_to_save"] == [head]
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors",
                                                     "energy_vs_rank.png", "extract_report.json"]
    files = _contents(out)
    _extract(cli, tiny_llama, llama_ft, out, "--rank", "2", "--overwrite")  # same seed: same bytes
    assert _contents(out) == files


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file's bytes; the command line (which gains --overwrite) left out of the report and the card."""
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    report = json.loads(files["extract_report.json"])
    files["extract_report.json"] = json.dumps({k: v for k, v in report.items() if k != "command"}).encode()
    files["README.md"] = files["README.md"].replace(report["command"].encode(), b"COMMAND")
    return files


def test_energy_picks_the_known_rank_per_module(cli, tmp_path, tiny_llama, llama_ft_norm):
    out = tmp_path / "lora"
    _, report = _extract(cli, tiny_llama, llama_ft_norm, out, "--energy", "0.75", "--exact")
    lora = {m["module"]: m for m in report["modules"] if m["how"] == "lora"}
    # layer 0 holds 0.8 of its energy at rank 1, layer 1 and the head 0.5
    assert {m: r["rank"] for m, r in lora.items()} == {m: 1 if ".0." in m else 2 for m in lora}
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 2 and set(config["rank_pattern"]) == {m for m in lora if ".0." in m}
    assert config["alpha_pattern"] == config["rank_pattern"]
    fam = arch.get("llama")
    assert [n["tensor"] for n in report["not_carried"]] == [fam.final_norm]
    adapter = read_adapter(out)  # PAW's own PEFT checks: ranks agree with rank_pattern
    assert {m: mod.rank for m, mod in adapter.modules().items()} == {m: r["rank"] for m, r in lora.items()}
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), out)  # loads with the pattern


def test_errors_match_a_dense_svd_reference(cli, tmp_path, tiny_llama, llama_ft_norm):
    _, report = _extract(cli, tiny_llama, llama_ft_norm, tmp_path / "lora", "--rank", "1", "--embed-energy", "0.4")
    base, ft = open_checkpoint(tiny_llama), open_checkpoint(llama_ft_norm)
    lora = [m for m in report["modules"] if m["how"] == "lora"]
    assert len(lora) == 15
    for m in lora:
        delta = ft[m["tensor"]].float() - base[m["tensor"]].float()
        assert m["relative_error"] == pytest.approx(reference_error(delta, 1), abs=1e-5), m["module"]
        assert m["relative_error"] == pytest.approx(0.4472136 if ".0." in m["module"] else 0.7071068, abs=1e-5)
        assert m["energy"] == pytest.approx(1 - m["relative_error"] ** 2, abs=1e-5)


def test_tied_embedding_gets_the_same_lora_on_the_head(cli, tmp_path, tiny_qwen, qwen_ft):
    out = tmp_path / "lora"
    _, report = _extract(cli, tiny_qwen, qwen_ft, out, "--rank", "2")
    fam = arch.get("qwen2")
    vocab = {m["module"]: m for m in report["modules"] if m["role"] in ("embed", "head")}
    assert set(vocab) == {fam.embed.removesuffix(".weight"), fam.head.removesuffix(".weight")}
    assert all(m["how"] == "lora" and m["tied"] and m["relative_error"] < 1e-4 for m in vocab.values())
    assert _relative(_logits(tiny_qwen, out), _logits(qwen_ft)) < 1e-4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gives_the_cpu_adapter(cli, tmp_path, tiny_llama, llama_ft):
    _, cpu = _extract(cli, tiny_llama, llama_ft, tmp_path / "cpu", "--rank", "2")
    _, gpu = _extract(cli, tiny_llama, llama_ft, tmp_path / "gpu", "--rank", "2", "--device", "cuda")
    assert gpu["options"]["device"] == "cuda"
    for a, b in zip(cpu["modules"], gpu["modules"], strict=True):
        assert (a["module"], a["how"], a["rank"]) == (b["module"], b["how"], b["rank"])
        # an exact-rank fine-tune: both errors are float32 noise (H100, 2026-11-26: 3.3e-7 on the CPU,
        # 4.4e-5 from CUDA's SVD), so they agree to 1e-4, the bar the logits below are held to
        assert (a["relative_error"] or 0) == pytest.approx(b["relative_error"] or 0, abs=1e-4)
    assert _relative(_logits(tiny_llama, tmp_path / "gpu"), _logits(llama_ft)) < 1e-4


def test_pickled_bin_input_and_the_python_api(tmp_path, tiny_llama, llama_ft):
    """A .bin fine-tune (weights_only pickle) through the library function: the same errors as safetensors."""
    import shutil

    from paw.extract import ExtractOptions, extract_lora

    ft_bin = tmp_path / "ft-bin"
    ft_bin.mkdir()
    shutil.copy(llama_ft / "config.json", ft_bin / "config.json")
    ckpt = open_checkpoint(llama_ft)
    torch.save({name: ckpt[name] for name in ckpt}, ft_bin / "pytorch_model.bin")
    a = extract_lora(tiny_llama, llama_ft, tmp_path / "a", ExtractOptions(rank=2)).report
    b = extract_lora(tiny_llama, ft_bin, tmp_path / "b", ExtractOptions(rank=2)).report
    assert b["command"].startswith("paw.extract.pipeline.extract_lora(base=")  # recorded from Python
    assert [m["relative_error"] for m in a["modules"]] == [m["relative_error"] for m in b["modules"]]
