"""``paw transfer-lora --finetune``: extract a LoRA from a full fine-tune, then move it (every method).

The reference is the two-step route a user could take by hand: ``paw extract-lora`` then
``paw transfer-lora --adapter``; the one-step route must write the same adapter tensors, plus the
extraction's block in the report.
"""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="module")
def target(zoo_root, tiny_llama):
    """A related target: tiny_llama moved a little everywhere (a continued pre-training, say)."""
    from paw import zoo

    folder = zoo_root / "extract-transfer-target"
    zoo.fine_tune(tiny_llama, folder, seed=5, scale=0.01)
    return folder


def _tensors(folder):
    from paw.io.adapter import read_adapter

    return read_adapter(folder).tensors


def test_one_step_equals_extract_then_transfer(cli, tmp_path, tiny_llama, llama_ft_norm, target):
    two = tmp_path / "two"
    assert cli("extract-lora", "--base", tiny_llama, "--finetune", llama_ft_norm, "--output", two,
               "--rank", "2").exit_code == 0
    assert cli("transfer-lora", "--adapter", two, "--source-base", tiny_llama, "--target-base", target,
               "-o", tmp_path / "moved-two").exit_code == 0
    res = cli("transfer-lora", "--finetune", llama_ft_norm, "--source-base", tiny_llama, "--target-base", target,
              "-o", tmp_path / "moved", "--rank", "2")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("extracted 15 modules at rank 2: held 1.0000 of the fine-tune's squared delta")
    one, ref = _tensors(tmp_path / "moved"), _tensors(tmp_path / "moved-two")
    assert sorted(one) == sorted(ref) and all(torch.equal(one[k], ref[k]) for k in one)

    report = json.loads((tmp_path / "moved" / "transfer_report.json").read_text())
    ext = report["extraction"]
    assert ext["summary"]["energy_held"] == pytest.approx(1.0, abs=1e-6)  # rank-2 deltas at rank 2
    assert ext["summary"]["not_carried"] == 1 and ext["not_carried"][0]["kind"] == "norm"
    assert ext["options"]["rank"] == 2 and ext["finetune"] == str(llama_ft_norm)
    assert report["inputs"]["finetune"]["path"] == str(llama_ft_norm) and "adapter" not in report["inputs"]
    assert (tmp_path / "moved" / "extract_report.json").is_file()
    assert (tmp_path / "moved" / "extract_energy_vs_rank.png").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def test_low_rank_extraction_is_warned_and_energy_works(tmp_path, tiny_llama, llama_ft, target):
    from paw.extract import ExtractOptions
    from paw.extract.finetune_transfer import transfer_finetune

    low = transfer_finetune(llama_ft, tiny_llama, target, tmp_path / "low", extract=ExtractOptions(rank=1),
                            progress=False)
    s = low.report["extraction"]["summary"]
    assert s["rank_max"] == 1 and s["energy_held"] < 0.9
    by_energy = transfer_finetune(llama_ft, tiny_llama, target, tmp_path / "e",
                                  extract=ExtractOptions(energy=0.75), progress=False)
    e = by_energy.report["extraction"]["summary"]
    assert (e["rank_min"], e["rank_max"]) == (1, 2)  # layer 0 holds 0.8 at rank 1, layer 1 needs 2
    assert low.output == tmp_path / "low" and low.report["warnings"] == json.loads(
        (tmp_path / "low" / "transfer_report.json").read_text())["warnings"]


def test_distill_moves_the_extracted_lora(cli, tmp_path, tiny_llama, llama_ft, target):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"The colour of thing {i} is\n" for i in range(12)))
    res = cli("transfer-lora", "--finetune", llama_ft, "--source-base", tiny_llama, "--target-base", target,
              "-o", tmp_path / "d", "--method", "distill", "--prompts", prompts, "--max-steps", "2",
              "--batch-size", "4", "--rank", "2", "--device", "cpu")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("extracted 14 modules at rank 2") and "distilled" in res.stdout
    report = json.loads((tmp_path / "d" / "transfer_report.json").read_text())
    assert report["method"] == "distill" and report["extraction"]["summary"]["rank_max"] == 2
    assert json.loads((tmp_path / "d" / "adapter_config.json").read_text())["r"] == 2  # the extracted rank


@pytest.fixture(scope="module")
def narrow(zoo_root):
    from paw import zoo

    return zoo.save_model(zoo.build_model("llama", hidden_size=16, num_layers=2, vocab_size=300),
                          zoo_root / "extract-transfer-narrow")


@pytest.mark.parametrize("case, message", [
    ("both", "give --adapter or --finetune, not both"),
    ("neither", "give --adapter (a PEFT LoRA folder) or --finetune"),
    ("energy-alone", "--energy chooses the extraction's ranks: it needs --finetune"),
    ("energy-0", "--energy must lie in (0, 1]"),
    ("energy-big", "--energy must lie in (0, 1]"),
    ("rank-0", "--rank"),
    ("rank-and-energy", "give --rank or --energy, not both"),
    ("shapes", "in the fine-tune but"),
    ("distill-knob", "--max-steps is a --method distill option"),
])
def test_bad_input_exits_2_in_one_line_writing_nothing(cli, tmp_path, tiny_llama, tiny_lora, llama_ft, narrow,
                                                       target, case, message):
    ft = ["--finetune", llama_ft]
    extra = {"both": [*ft, "--adapter", tiny_lora], "neither": [], "energy-alone": ["--adapter", tiny_lora,
             "--energy", "0.9"], "energy-0": [*ft, "--energy", "0"], "energy-big": [*ft, "--energy", "1.5"],
             "rank-0": [*ft, "--rank", "0"], "rank-and-energy": [*ft, "--rank", "2", "--energy", "0.5"],
             "shapes": ["--finetune", narrow], "distill-knob": [*ft, "--max-steps", "3"]}[case]
    out = tmp_path / "out"
    res = cli("transfer-lora", *extra, "--source-base", tiny_llama, "--target-base", target, "-o", out)
    assert res.exit_code == 2 and message in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: ")
    assert list(tmp_path.iterdir()) == []  # neither the output nor a staging folder


def test_gain_gate_and_extraction_share_one_report(cli, tmp_path, tiny_llama, llama_ft, target, commonsense):
    check = commonsense / "formatted" / "arc-easy_test_formatted.jsonl"
    res = cli("transfer-lora", "--finetune", llama_ft, "--source-base", tiny_llama, "--target-base", target,
              "-o", tmp_path / "g", "--rank", "2", "--check-data", check)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("extracted 14 modules") and res.stdout.strip().splitlines()[-1].startswith("gain gate")
    report = json.loads((tmp_path / "g" / "transfer_report.json").read_text())
    assert {"gate", "extraction"} <= set(report) and {"finetune", "check_data"} <= set(report["inputs"])
    assert (tmp_path / "g" / "gate.md").is_file() and [p.name for p in tmp_path.iterdir()] == ["g"]
