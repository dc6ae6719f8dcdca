"""``paw transfer-lora --check-data`` (the gain gate): passes when the move helps, says "no gain" when it
does not, ``--require-gain`` exits 3 writing nothing, and bad check files are one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paw.transfer.gate import verdict
from tests.io.fake_hub import card_of

DIMS = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny Llama with a LoRA that learned 16 colour facts; a fine-tune of it (related, knows none of
    them); that base with the LoRA merged in (knows them all); a random LoRA (knows nothing)."""
    import copy

    from peft import get_peft_model_state_dict

    from paw import zoo
    from paw.data import sample_texts
    from paw.evaluate.synthetic import fact_task, tokenizer_corpus
    from paw.evaluate.train import train_lora
    from paw.io.adapter import LoraAdapter, lora_config_dict, write_adapter
    from paw.io.mcdata import write_items

    root = tmp_path_factory.mktemp("gate")
    task = fact_task("colour", n=16, seed=0)
    tok = zoo.train_tokenizer(sample_texts("multi") + tokenizer_corpus(task), 300, kind="byte-bpe")
    source = zoo.build_model("llama", seed=0, init_std=0.2, vocab_size=len(tok), **DIMS)
    zoo.save_model(source, root / "source", tokenizer=tok)
    peft_model, _ = train_lora(copy.deepcopy(source), tok, task, rank=4, alpha=8, steps=30, batch_size=8, lr=1e-2,
                               seed=0, progress=False)
    tensors = {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
    config = lora_config_dict(r=4, alpha=8, target_modules=zoo.ALL_LINEAR, base_model=str(root / "source"))
    write_adapter(root / "lora", LoraAdapter(config=config, tensors=tensors))
    zoo.save_model(peft_model.merge_and_unload(), root / "knows", tokenizer=tok)   # a target that already knows
    zoo.fine_tune(root / "source", root / "related", seed=5, scale=0.01)
    zoo.make_lora(root / "source", root / "random-lora", rank=4, alpha=8, seed=3, scale=0.01)
    write_items(root / "check.jsonl", task)
    (root / "questions.txt").write_text("".join(item.question + "\n" for item in task))
    return {"root": root, "task": task, "source": root / "source", "lora": root / "lora", "knows": root / "knows",
            "related": root / "related", "random": root / "random-lora", "check": root / "check.jsonl"}


def _move(cli, w, out, adapter, target, *extra):
    return cli("transfer-lora", "--adapter", adapter, "--source-base", w["source"], "--target-base", target,
               "--output", out, "--check-data", w["check"], *extra)


def _accuracy(base: Path, items, adapter: Path | None = None) -> float:
    from paw.evaluate.options import EvalOptions
    from paw.evaluate.pipeline import evaluate_model
    from paw.io.mcdata import write_items

    data = write_items(base.parent / "eval-items.jsonl", items)
    return evaluate_model(EvalOptions(model=str(base), data=data, adapter=adapter), progress=False).metrics["accuracy"]


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("method", ["auto", "copy"])
def test_gate_passes_when_the_moved_adapter_helps(cli, world, tmp_path, method):
    w = world
    result = _move(cli, w, tmp_path / "moved", w["lora"], w["related"], "--method", method)
    assert result.exit_code == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("gain gate (") and last.endswith(": passed"), last
    report = json.loads((tmp_path / "moved" / "transfer_report.json").read_text())
    gate = report["gate"]
    assert gate["passed"] is True and gate["items"] == 16
    acc = {k: v["mean"] for k, v in gate["accuracy"].items()}
    # the same figures as paw eval gives (PEFT applies the adapter the same way)
    assert acc["target_adapted"] == pytest.approx(_accuracy(w["related"], w["task"], tmp_path / "moved"))
    assert acc["target_base"] == pytest.approx(_accuracy(w["related"], w["task"]))
    assert acc["source_adapted"] == pytest.approx(_accuracy(w["source"], w["task"], w["lora"]))
    assert acc["source_adapted"] >= 0.9 and acc["target_adapted"] >= 0.9 and acc["target_base"] <= 0.5, acc
    assert gate["gain"]["difference"] == pytest.approx(acc["target_adapted"] - acc["target_base"])
    assert report["inputs"]["check_data"]["path"] == str(w["check"])
    assert "Passed" in (tmp_path / "moved" / "gate.md").read_text()


def test_gate_reports_no_gain_when_the_teacher_is_worse_than_the_target(cli, world, tmp_path):
    w = world  # the teacher is the source with a random LoRA (chance); the target already knows every fact
    result = _move(cli, w, tmp_path / "moved", w["random"], w["knows"], "--method", "copy")
    assert result.exit_code == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert "NO GAIN" in last and "not better than the target base" in last, last
    gate = json.loads((tmp_path / "moved" / "transfer_report.json").read_text())["gate"]
    assert gate["passed"] is False
    assert gate["teacher_vs_target"]["difference"] <= -0.5, gate  # the teacher knows less than the target
    assert gate["accuracy"]["target_base"]["mean"] >= 0.9
    assert "not better than the target base" in result.stderr  # also among the warnings

    refused = _move(cli, w, tmp_path / "refused", w["random"], w["knows"], "--method", "copy", "--require-gain")
    assert refused.exit_code == 3, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert "NO GAIN" in lines[-1] and "nothing was written (--require-gain)" in lines[-1], lines
    assert _listing(tmp_path) == ["moved"]  # no output folder, no staging folder left behind
    (tmp_path / "moved" / "old.txt").write_text("the previous output")  # a replacement would not have it
    again = _move(cli, w, tmp_path / "moved", w["random"], w["knows"], "--method", "copy", "--require-gain",
                  "--overwrite")
    assert again.exit_code == 3 and _listing(tmp_path) == ["moved"]
    assert (tmp_path / "moved" / "old.txt").read_text() == "the previous output"  # --overwrite replaced nothing


def test_gate_on_a_distillation(cli, world, tmp_path):
    w = world
    result = _move(cli, w, tmp_path / "d", w["lora"], w["related"], "--method", "distill", "--prompts", "generic",
                   "--max-steps", "4", "--max-new-tokens", "2", "--holdout", "0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("gain gate (")
    report = json.loads((tmp_path / "d" / "transfer_report.json").read_text())
    assert report["method"] == "distill" and report["gate"]["items"] == 16
    assert report["gate"]["accuracy"]["target_adapted"]["mean"] == pytest.approx(
        _accuracy(w["related"], w["task"], tmp_path / "d"))
    meta, body = card_of(tmp_path / "d")  # the card, written before the gate ran, lists its gate.md too
    assert meta["tags"] == ["paw", "lora", "transfer-lora", "distill"] and "## Distillation\n\n- distilled " in body
    assert "| `gate.md` | the gain gate" in body and "| `distill_curve.png` |" in body


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("records, says", [
    ([{"question": "Fact: the colour of zor is", "choices": ["red", "blue"]}] * 3, "line 1: the item has no answer"),
    ([{"question": "Fact: the colour of zor is", "choices": ["red", "blue"], "answer": 5}] * 3, "out of range"),
    ([{"question": "Fact: the colour of zor is", "choices": ["red", "blue"], "answer": 0}], "at least 2"),
])
def test_bad_check_files_are_one_line_and_exit_2(cli, world, tmp_path, records, says):
    check = _write(tmp_path / "bad.jsonl", records)
    w = dict(world, check=check)
    result = _move(cli, w, tmp_path / "out", w["lora"], w["related"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--check-data" in result.stderr and says in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_check_set_overlapping_the_distillation_prompts_is_refused(cli, world, tmp_path):
    w = world
    result = _move(cli, w, tmp_path / "out", w["lora"], w["related"], "--method", "distill",
                   "--prompts", w["root"] / "questions.txt")
    assert result.exit_code == 2
    assert "16 of its 16 questions are also inputs of --prompts" in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_require_gain_needs_check_data(cli, world, tmp_path):
    w = world
    result = cli("transfer-lora", "--adapter", w["lora"], "--source-base", w["source"], "--target-base", w["related"],
                 "--output", tmp_path / "out", "--require-gain")
    assert result.exit_code == 2 and "--require-gain needs --check-data" in result.stderr


def test_verdict_by_hand():
    # gain: differences (1, 1, 0, 0) -> mean 0.5, sd 0.577, stderr 0.289 -> 1.7 stderrs: passed at z = 1, not 2
    outcomes = {"target_base": [0, 0, 1, 0], "target_adapted": [1, 1, 1, 0],
                "source_base": [0, 0, 0, 1], "source_adapted": [1, 1, 1, 1]}
    gate = verdict(outcomes, z=1.0)
    assert gate["gain"]["difference"] == pytest.approx(0.5)
    assert gate["gain"]["stderr"] == pytest.approx((1 / 3) ** 0.5 / 2)
    assert gate["passed"] is True and verdict(outcomes)["passed"] is False
    assert gate["teacher_vs_target"]["difference"] == pytest.approx(0.75)
    assert gate["kept"] == pytest.approx(0.5 / 0.75)
    # one item better, one worse: no gain; nothing better at all: no gain (0 is not above a stderr of 0)
    assert verdict({"target_base": [0, 1], "target_adapted": [1, 0], "source_base": [0, 0],
                    "source_adapted": [1, 1]})["passed"] is False
    assert verdict({"target_base": [1, 0], "target_adapted": [1, 0], "source_base": [0, 0],
                    "source_adapted": [0, 0]})["passed"] is False


def test_a_refused_transfer_leaves_no_staging_folder(cli, world, tmp_path):
    from paw import zoo

    other = zoo.tiny_model(tmp_path / "other", "llama", seed=9, **DIMS)  # same shapes, trained apart: unrelated
    (tmp_path / "runs").mkdir()
    result = _move(cli, world, tmp_path / "runs" / "out", world["lora"], other)
    # trained apart with its own tokenizer: auto refuses (the vocabularies differ), before any scoring
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "unrelated" in result.stderr or "vocabularies differ" in result.stderr, result.stderr
    assert _listing(tmp_path / "runs") == []  # neither the output nor the gate's staging folder


def test_track_logs_the_gate(cli, world, tmp_path):
    import csv

    w = world
    result = _move(cli, w, tmp_path / "moved", w["lora"], w["related"], "--method", "copy", "--track", "csv")
    assert result.exit_code == 0, result.stderr
    rows = csv.DictReader((tmp_path / "moved-tracking" / "metrics.csv").open())
    logged = {r["metric"]: float(r["value"]) for r in rows}
    gate = json.loads((tmp_path / "moved" / "transfer_report.json").read_text())["gate"]
    assert logged["gate/passed"] == 1.0 and logged["gate/gain"] == pytest.approx(gate["gain"]["difference"])
    assert logged["gate/gain_stderr"] == pytest.approx(gate["gain"]["stderr"])


def test_the_bar_is_gain_z_stderrs():
    # 16 items: 6 gained, 2 lost -> +0.25 with paired stderr sqrt(7 / 15) / 4 = 0.1708 (sd with n - 1)
    base = [0] * 16
    moved = [1] * 6 + [0] * 10
    outcomes = {"target_base": [0] * 6 + [1, 1] + [0] * 8, "target_adapted": moved,
                "source_base": base, "source_adapted": [1] * 16}
    assert verdict(outcomes, z=1.0)["passed"] is True and verdict(outcomes, z=2.0)["passed"] is False
    gate = verdict(outcomes)
    assert gate["z"] == 2.0 and gate["gain"]["difference"] == pytest.approx(0.25)
    assert gate["gain"]["stderr"] == pytest.approx((7 / 15) ** 0.5 / 4) and "2 x its paired stderr" in gate["rule"]
    assert gate["outcomes"]["target_adapted"] == moved and "groups" not in gate   # every outcome, for a re-analysis


def test_items_naming_a_group_get_a_clustered_stderr():
    from paw.evaluate.stats import clustered_difference, paired_difference

    # four facts, two questions each: both questions of a fact move together
    moved = [1, 1, 1, 1, 0, 0, 1, 1]
    base = [0, 0, 0, 0, 0, 0, 1, 1]
    groups = ["a", "a", "b", "b", "c", "c", "d", "d"]
    # d = [1,1,1,1,0,0,0,0], mean 0.5; group sums of deviations 1, 1, -1, -1: se = sqrt(4/3 * 4) / 8
    c = clustered_difference(moved, base, groups)
    assert c["stderr"] == pytest.approx((4 / 3 * 4) ** 0.5 / 8) and c["groups"] == 4
    assert c["stderr"] > paired_difference(moved, base)["stderr"]   # counted as 8 draws it looked surer
    outcomes = {"target_base": base, "target_adapted": moved, "source_base": base, "source_adapted": moved}
    gate = verdict(outcomes, groups=groups, z=1.0)
    assert gate["gain"]["stderr"] == pytest.approx(c["stderr"]) and gate["groups"] == groups
    assert "clustered" in gate["rule"]


def test_the_default_bar_lets_about_two_null_moves_in_a_hundred_through():
    """The seeded simulation docs/transfer.md quotes: 96 items, moves with no gain, 2,000 of them."""
    from paw.evaluate.stats import false_pass_rate

    one, two = false_pass_rate(items=96, z=1.0), false_pass_rate(items=96, z=2.0)
    assert 0.12 <= one <= 0.19 and 0.008 <= two <= 0.035, (one, two)   # ~16% and ~2.3% for a normal tail
    naive = false_pass_rate(items=96, z=2.0, per_group=2, told_groups=False)
    clustered = false_pass_rate(items=96, z=2.0, per_group=2)
    assert naive >= 3 * clustered and clustered <= 0.035, (naive, clustered)
    assert false_pass_rate(items=96, z=2.0, seed=3) == false_pass_rate(items=96, z=2.0, seed=3)


def test_a_group_field_in_the_check_file_reaches_the_gate(cli, world, tmp_path):
    w = world
    records = [json.loads(line) for line in w["check"].read_text().splitlines()]
    check = _write(tmp_path / "grouped.jsonl", [dict(r, group=i // 2) for i, r in enumerate(records)])
    result = _move(cli, dict(w, check=check), tmp_path / "moved", w["lora"], w["related"], "--method", "copy",
                   "--gain-z", "1.5")
    assert result.exit_code == 0, result.stderr
    gate = json.loads((tmp_path / "moved" / "transfer_report.json").read_text())["gate"]
    assert gate["groups"] == [str(i // 2) for i in range(16)] and gate["gain"]["groups"] == 8 and gate["z"] == 1.5
    assert set(gate["outcomes"]) == {"target_base", "target_adapted", "source_base", "source_adapted"}
    for flags, says in ((("--gain-z", "-1"), "--gain-z -1"), (("--gain-z", "nan"), "--gain-z")):
        r = _move(cli, w, tmp_path / "x", w["lora"], w["related"], *flags)
        assert r.exit_code == 2 and says in r.stderr, r.stderr
    r = cli("transfer-lora", "--adapter", w["lora"], "--source-base", w["source"], "--target-base", w["related"],
            "--output", tmp_path / "y", "--gain-z", "3")
    assert r.exit_code == 2 and "--gain-z needs --check-data" in r.stderr
    bad = _write(tmp_path / "bad-group.jsonl", [dict(r, group=[1]) for r in records])
    r = _move(cli, dict(w, check=bad), tmp_path / "z", w["lora"], w["related"])
    assert r.exit_code == 2 and "'group' must be" in r.stderr, r.stderr


def test_a_gain_exactly_on_the_bar_does_not_clear_it():
    # 3 gained and 1 lost of 16: (3 - 1)^2 == 3 + 1, so the gain is exactly one stderr; rounding must not decide
    base = [0, 0, 0, 1] + [0] * 12
    moved = [1, 1, 1, 0] + [0] * 12
    outcomes = {"target_base": base, "target_adapted": moved, "source_base": base, "source_adapted": moved}
    gate = verdict(outcomes, z=1.0)
    assert gate["gain"]["difference"] == pytest.approx(gate["gain"]["stderr"]) and gate["passed"] is False
    assert verdict(outcomes, z=0.99)["passed"] is True
