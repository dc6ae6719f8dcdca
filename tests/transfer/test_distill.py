"""``paw transfer-lora --method distill``: a LoRA moved across families and tokenizers, files, errors.

The models are built so that a LoRA can express confident answers (init std 0.2; the zoo's 0.05
squeezes the logits of a tied-embedding Qwen2 so much that even a LoRA trained on the target with
labels stays at the one-token choices).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from tests.transfer.conftest import TARGET_DIMS


def _accuracy(base: Path, items, adapter: Path | None = None) -> float:
    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm

    model, tokenizer = load_lm(base, adapter=adapter, device="cpu")  # PEFT applies the adapter
    return evaluate(model, tokenizer, items, progress=False)["accuracy"]


def _distill(cli, w, out, *extra):
    return cli("transfer-lora", "--method", "distill", "--adapter", w["lora"], "--source-base", w["source"],
               "--target-base", w["target"], "--output", out, "--device", "cpu", *extra)


FAST = ("--max-steps", "40", "--lr", "1e-2", "--max-new-tokens", "4", "--holdout", "0")


def test_distill_moves_a_lora_across_family_tokenizer_and_width(cli, world, tmp_path):
    w = world
    assert _accuracy(w["source"], w["task"], w["lora"]) == 1.0  # the teacher knows the facts
    first = _distill(cli, w, tmp_path / "a", "--prompts", w["root"] / "questions.txt", *FAST)
    assert first.exit_code == 0, first.stderr
    assert "distilled 14 LoRA modules on 16 inputs (prompts)" in first.stdout and "sequence-nll" in first.stdout
    base, moved = _accuracy(w["target"], w["task"]), _accuracy(w["target"], w["task"], tmp_path / "a")
    assert base <= 0.375 and moved >= base + 0.5, (base, moved)  # the answers were never shown
    second = _distill(cli, w, tmp_path / "b", "--prompts", w["root"] / "questions.txt", *FAST)
    assert second.exit_code == 0
    for name in ("adapter_model.safetensors", "adapter_config.json", "distill_curve.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(w["target"]) and config["r"] == 4 and config["lora_alpha"] == 8
    report = json.loads((tmp_path / "a" / "transfer_report.json").read_text())
    d = report["method"], report["distill"]
    assert d[0] == "distill" and d[1]["losses"] == ["sequence-nll"] and d[1]["init"]["how"] == "none"
    assert "next_words" not in d[1]["inputs"]  # opt-in: --next-words K
    third = _distill(cli, w, tmp_path / "c", "--prompts", w["root"] / "questions.txt", *FAST, "--next-words", "4",
                     "--byte-kl")
    d3 = json.loads((tmp_path / "c" / "transfer_report.json").read_text())["distill"]
    assert third.exit_code == 0 and d3["losses"] == ["sequence-nll", "choice-kl"], third.stderr
    assert d3["inputs"]["next_words"] == {"k": 4, "inputs": 16, "held_out": 0}
    assert _accuracy(w["target"], w["task"], tmp_path / "c") >= base + 0.5
    assert d[1]["vocabulary"].startswith("different tokenizers") and len(d[1]["curve"]["loss"]) == 40
    assert d[1]["agreement"]["after"]["top1_agreement"] > d[1]["agreement"]["before"]["top1_agreement"]
    from paw.transfer.distill.loss import tail_drop

    drop = tail_drop(d[1]["curve"]["loss"], 0.2)
    assert d[1]["loss_tail_drop"] == pytest.approx(drop, abs=1e-6)
    assert ("had not levelled off" in first.stderr) == (drop > 0.05) == bool(report["warnings"])


def test_another_byte_level_tokenizer_adds_the_byte_aligned_kl(world, tmp_path):
    # a target whose byte-level BPE has other merges cuts most words where the source does: there the
    # next-token distributions are matched over the tokens both vocabularies hold
    from paw import zoo
    from paw.data import sample_texts
    from paw.evaluate.synthetic import tokenizer_corpus
    from paw.transfer.folder_pipeline import run_distill

    w = world
    tok = zoo.train_tokenizer(sample_texts("multi") + tokenizer_corpus(w["task"]), 200, kind="byte-bpe")
    zoo.save_model(zoo.build_model("llama", seed=2, init_std=0.2, vocab_size=len(tok), **TARGET_DIMS),
                   tmp_path / "target", tokenizer=tok)
    runs = {}
    for byte_kl in (True, False):
        runs[byte_kl] = run_distill(w["lora"], w["source"], tmp_path / "target", tmp_path / f"out-{byte_kl}",
                                    prompts=w["root"] / "questions.txt", steps=30, lr=1e-2, max_new_tokens=4,
                                    holdout=0, byte_kl=byte_kl, next_words=4 if byte_kl else 0, device="cpu",
                                    progress=False).report["distill"]
    d = runs[True]
    assert d["losses"] == ["aligned-kl", "sequence-nll", "choice-kl"] and "byte-aligned" in d["vocabulary"]
    assert len(d["curve"]["aligned-kl"]) == 30 and d["curve"]["aligned-kl"][-1] < d["curve"]["aligned-kl"][0]
    before, after = d["agreement"]["before"], d["agreement"]["after"]
    assert after["kl_positions"] == before["kl_positions"] > 0 and after["kl"] < before["kl"]
    assert runs[False]["losses"] == ["sequence-nll"] and "--byte-kl" in runs[False]["vocabulary"]
    assert runs[False]["agreement"]["after"]["kl"] is None


def test_next_words_are_the_teachers_likeliest_words_first_its_greedy_answer(world):
    import torch

    from paw.io.lm import load_lm
    from paw.transfer.distill.generation import generate, next_words
    from paw.transfer.distill.prompts import Prompt

    w = world
    teacher, tok = load_lm(w["source"], adapter=w["lora"], device="cpu")
    prompts = [Prompt(item.question) for item in w["task"]] + [Prompt("already", (("already", " a"), ("already", " b")))]
    out, n = next_words(teacher, tok, prompts, 3, device=torch.device("cpu"))
    greedy = generate(teacher, tok, [p.text for p in prompts[:-1]], max_new_tokens=4)
    assert n == 16 and out[-1] == prompts[-1]  # inputs with choices keep theirs
    for item, p, g in zip(w["task"], out, greedy, strict=False):
        words = [c for _, c in p.pairs]
        assert 2 <= len(words) <= 3 and len(set(words)) == len(words) and all(c == p.text for c, _ in p.pairs)
        assert words[0] == item.choices[item.answer] and g.startswith(words[0])  # first: the teacher's greedy pick


def test_choices_of_a_multiple_choice_file_add_the_choice_loss(world):
    from paw.io.adapter import read_adapter
    from paw.io.lm import load_lm
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import LM, distill_lora
    from paw.transfer.distill.run import read_inputs

    w = world
    teacher, tok_s = load_lm(w["source"], adapter=w["lora"], device="cpu")
    student, tok_t = load_lm(w["target"], device="cpu")
    before = {k: v.clone() for k, v in student.state_dict().items()}
    moved, report = distill_lora(read_adapter(w["lora"]), LM(teacher, tok_s, "s", tokenizer_info=open_tokenizer(w["source"])),
                                 LM(student, tok_t, "t", tokenizer_info=open_tokenizer(w["target"])),
                                 prompts=read_inputs(w["root"] / "items.jsonl"), steps=3, lr=1e-2, max_new_tokens=2,
                                 holdout=0.25, progress=False)
    d = report["distill"]
    assert d["cost"]["predicted"]["flop"]["training"] > 0 and d["cost"]["measured"]["total_seconds"] > 0
    assert d["losses"] == ["sequence-nll", "choice-kl"] and d["inputs"]["with_choices"] == 12
    assert d["inputs"]["held_out"] == 4 and d["agreement"]["measured_on"] == "held-out prompts"
    assert d["agreement"]["after"]["choice_items"] == 4 and d["agreement"]["after"]["choice_kl"] is not None
    after = student.state_dict()  # the student's base is handed back untouched (no LoRA layers left)
    assert set(after) == set(before) and all((after[k] == before[k]).all() for k in before)


def test_every_long_phase_of_distill_shows_progress(world, monkeypatch, capsys):
    """The teacher's writing, its choice scores, its excess and both agreement passes each print a line
    (PAW_PROGRESS=1 forces them off a terminal): on real tasks each is minutes, and they were silent."""
    from paw.io.adapter import read_adapter
    from paw.io.lm import load_lm
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import LM, distill_lora
    from paw.transfer.distill.run import read_inputs

    w = world
    teacher, tok_s = load_lm(w["source"], adapter=w["lora"], device="cpu")
    student, tok_t = load_lm(w["target"], device="cpu")
    monkeypatch.setenv("PAW_PROGRESS", "1")
    distill_lora(read_adapter(w["lora"]), LM(teacher, tok_s, "s", tokenizer_info=open_tokenizer(w["source"])),
                 LM(student, tok_t, "t", tokenizer_info=open_tokenizer(w["target"])),
                 prompts=read_inputs(w["root"] / "items.jsonl"), steps=2, lr=1e-2, max_new_tokens=2, progress=True)
    err = capsys.readouterr().err
    for phase in ("teacher writing", "scoring choices", "teacher with its adapter", "teacher without its adapter",
                  "distilling"):
        assert f"[paw] {phase}: " in err, (phase, err)
    assert err.count("[paw] measuring agreement: ") == 2, err   # before and after


def test_shared_tokenizer_uses_token_kl_and_starts_from_the_auto_transfer(src, src_lora, drifted, independent):
    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import distill_lora
    from paw.transfer.distill.run import _side

    adapter = read_adapter(src_lora)
    teacher = _side(src, open_tokenizer(src), "cpu", adapter=src_lora)
    for target, how in ((drifted, "auto transfer"), (independent, "none")):
        student = _side(target, open_tokenizer(target), "cpu")
        moved, report = distill_lora(adapter, teacher, student, prompts="generic", steps=2, max_new_tokens=3,
                                     progress=False)
        d = report["distill"]
        assert d["losses"] == ["token-kl", "sequence-nll"] and d["init"]["how"] == how, d["init"]
        assert set(d["curve"]) == {"loss", "token-kl", "sequence-nll"}
        assert d["agreement"]["after"]["kl"] is not None and d["inputs"]["source"] == "generic"
        assert sorted(moved.modules()) == sorted(adapter.modules())
    assert "unrelated" in d["init"]["why"]


def test_the_teacher_works_only_on_the_inputs_the_steps_reach(src, src_lora, independent, monkeypatch):
    from paw.evaluate.train import batches_in_order
    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import train as distill_train
    from paw.transfer.distill.lora import _visited, distill_lora
    from paw.transfer.distill.prompts import Prompt
    from paw.transfer.distill.run import _side

    prompts = [Prompt(f"input {i}") for i in range(100)]
    kept = _visited(prompts, 3, 8, 0)
    reached = sorted({i for b in batches_in_order(100, 8, 3, 0) for i in b})
    assert [p.text for p in kept] == [f"input {i}" for i in reached] and len(kept) <= 24
    assert _visited(prompts, 13, 8, 0) is prompts  # 104 draws: one epoch reaches all 100

    seen = []
    real = distill_train.examples
    monkeypatch.setattr(distill_train, "examples", lambda inputs, *a, **k: seen.append(len(inputs)) or real(inputs, *a, **k))
    adapter = read_adapter(src_lora)
    _, report = distill_lora(adapter, _side(src, open_tokenizer(src), "cpu", adapter=src_lora),
                             _side(independent, open_tokenizer(independent), "cpu"), prompts="generic", steps=2,
                             batch_size=4, max_new_tokens=2, progress=False)
    d = report["distill"]["inputs"]
    assert d["train"] > 8 and d["train_used"] <= 8 and seen[0] == d["train_used"]  # then the held-out ones
    assert any(f"reached {d['train_used']} of the {d['train']} training inputs" in w for w in report["warnings"])


def test_batched_generation_equals_one_by_one(world):
    from paw.io.lm import load_lm
    from paw.transfer.distill.generation import generate

    teacher, tok = load_lm(world["source"], adapter=world["lora"], device="cpu")
    texts = ["Fact: the colour of", "Fact: the colour of " + world["task"][3].question.split()[-2] + " is", "A"]
    with warnings.catch_warnings():   # the cache goes in under the name this transformers version reads
        warnings.filterwarnings("error", message=".*past_key_values.*")
        batched = generate(teacher, tok, texts, max_new_tokens=6, batch_size=3)
    assert batched == [generate(teacher, tok, [t], max_new_tokens=6)[0] for t in texts]  # left padding is inert
    assert all("\n" not in t for t in batched) and any(t.strip() for t in batched)


def test_synthesis_from_seed_examples_with_the_discriminator(world):
    from paw.io.lm import load_lm
    from paw.transfer.distill.prompts import Prompt
    from paw.transfer.distill.synthesis import synthesize

    w = world
    teacher, tok = load_lm(w["source"], adapter=w["lora"], device="cpu")
    seeds = [Prompt(item.question) for item in w["task"][:5]]
    made, stats = synthesize(teacher, tok, seeds, 6, seed=0, max_new_tokens=12, filter_lines=["The sky is blue."])
    assert 1 <= len(made) <= 6 and stats["kept"] == len(made) and "filter_threshold" in stats
    assert len({p.text for p in made}) == len(made) and not {p.text for p in made} & {s.text for s in seeds}
    assert stats["generated"] == sum(stats[k] for k in ("blank", "off_template", "duplicates", "filtered", "surplus", "kept"))
    assert stats["template_end"] == " is" and all(p.text.endswith(" is") for p in made)  # no answer written
    again, _ = synthesize(teacher, tok, seeds, 6, seed=0, max_new_tokens=12, filter_lines=["The sky is blue."])
    assert again == made
    from paw.transfer.distill.synthesis import discriminator_passes, discriminator_threshold, task_likeness

    assert discriminator_passes(teacher, tok, [p.text for p in made], seeds, ["The sky is blue."]) == [1] * len(made)
    assert discriminator_threshold(teacher, tok, seeds, ["The sky is blue."]) == stats["filter_threshold"]
    off = ["zzz qqq", "The sky is blue."]   # the discriminator's verdicts are the likeness against that threshold
    likeness = task_likeness(teacher, tok, off, seeds, ["The sky is blue."])
    assert discriminator_passes(teacher, tok, off, seeds, ["The sky is blue."]) == [
        int(x >= stats["filter_threshold"]) for x in likeness]


def test_bad_inputs_exit_2_with_one_line_and_write_nothing(cli, world, tmp_path):
    w = world
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    six = tmp_path / "six.txt"
    six.write_text("".join(f"input {i}\n" for i in range(6)))
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(w["target"] / name, no_tokenizer / name)
    cases = [((), "needs inputs"), (("--prompts", empty), "empty prompt file"),
             (("--synthesize", "10", "--seed-examples", six), "at most 5"),
             (("--prompts", tmp_path / "missing.txt"), "no such prompt file"),
             (("--synthesize", "10"), "--seed-examples"),
             (("--prompts", w["root"] / "questions.txt", "--next-words", "1"), "--next-words 1")]
    for extra, message in cases:
        res = _distill(cli, w, tmp_path / "out", *extra)
        assert res.exit_code == 2 and message in res.stderr, (extra, res.stderr)
        assert res.stderr.count("\n") == 1 and not (tmp_path / "out").exists()
    res = cli("transfer-lora", "--method", "distill", "--adapter", w["lora"], "--source-base", w["source"],
              "--target-base", no_tokenizer, "--output", tmp_path / "out", "--prompts", "generic", "--device", "cpu")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and not (tmp_path / "out").exists()
    assert str(no_tokenizer) in res.stderr
    res = cli("transfer-lora", "--adapter", w["lora"], "--source-base", w["source"], "--target-base", w["source"],
              "--output", tmp_path / "out", "--prompts", "generic")
    assert res.exit_code == 2 and "--prompts is a --method distill option" in res.stderr


def test_synthesis_counts_blank_and_off_template_candidates(monkeypatch):
    """A blank sample, an off-template one, one cut after the shared ending, and its repeat."""
    from paw.transfer.distill import generation, synthesis
    from paw.transfer.distill.prompts import Prompt

    lines = ["", "   ", "no ending here", "Ann Bo likes the colour red. More text", "Ann Bo likes the colour blue"]
    monkeypatch.setattr(generation, "generate", lambda *a, **k: list(lines))
    seeds = [Prompt(f"{name} likes the colour") for name in ("Kavo Milret", "Tin Sulo")]
    made, stats = synthesis.synthesize(None, None, seeds, 1, seed=0)
    assert [p.text for p in made] == ["Ann Bo likes the colour"]
    assert (stats["blank"], stats["off_template"], stats["duplicates"], stats["kept"]) == (2, 1, 1, 1)


def test_synthesis_begins_the_teachers_reply_with_the_seeds_shared_beginning(monkeypatch):
    """SmolLM2-135M-Instruct shown ARC-Easy seeds answered the last one or talked about the list (0 to 1 usable
    candidate in 16); begun with 'Question:' it wrote questions (6 to 7 in 16 with the seeds' ending)."""
    from paw.transfer.distill import generation, synthesis
    from paw.transfer.distill.prompts import Prompt

    contexts = []

    def generate(model, tokenizer, texts, **kwargs):
        contexts.extend(texts)
        return [" Why is the sky blue?\nAnswer: light", "  ", " What melts?", "Question: Why?\nAnswer:"]

    monkeypatch.setattr(generation, "generate", generate)
    seeds = [Prompt("Question: Which list?\nAnswer:"), Prompt("Question: A team of surveyors\nAnswer:")]
    made, stats = synthesis.synthesize(None, None, seeds, 2, seed=0, batch_size=4)
    assert [p.text for p in made] == ["Question: Why is the sky blue?\nAnswer:", "Question: Why?\nAnswer:"]
    assert stats["template_start"] == "Question:" and stats["template_end"] == "\nAnswer:"
    assert (stats["blank"], stats["off_template"], stats["kept"]) == (1, 1, 2)
    assert contexts and all(c.endswith("\n\nQuestion:") for c in contexts)


def test_synthesis_counts_the_inputs_it_keeps_on_stderr(monkeypatch, capsys):
    """A thousand inputs written by the teacher took minutes on a GPU in silence: now a line counts them."""
    from paw.transfer.distill import generation, synthesis
    from paw.transfer.distill.prompts import Prompt

    rounds = iter(range(100))
    monkeypatch.setattr(generation, "generate", lambda *a, **k: [f"Name{next(rounds)} likes the colour"] * 2)
    seeds = [Prompt(f"{name} likes the colour") for name in ("Kavo Milret", "Tin Sulo")]
    monkeypatch.setenv("PAW_PROGRESS", "1")
    made, stats = synthesis.synthesize(None, None, seeds, 3, seed=0, batch_size=2, progress=True)
    assert [p.text for p in made] == [f"Name{i} likes the colour" for i in range(3)]
    assert (stats["rounds"], stats["duplicates"], stats["kept"]) == (3, 3, 3)   # each round: one new, one repeat
    err = capsys.readouterr().err
    assert "[paw] teacher writing inputs: 3/3 inputs (100%)" in err, err
    rounds = iter(range(100))
    assert synthesis.synthesize(None, None, seeds, 3, seed=0, batch_size=2)[0] == made   # the same inputs, silently
    assert capsys.readouterr().err == ""


def test_a_synthesis_resumed_from_a_rounds_state_ends_as_an_uninterrupted_one(monkeypatch, capsys):
    """A thousand inputs take an hour of a CPU: a killed run goes on from its last round, not from nothing,
    and ends with the inputs and counts of a run that was never stopped (the restored sampler RNG shuffles
    the seeds as it would have, round r samples with its own seed)."""
    from paw.errors import PawError
    from paw.transfer.distill import generation, synthesis
    from paw.transfer.distill.prompts import Prompt

    def generate(model, tokenizer, texts, *, seed, **kwargs):   # depends on the shuffled seeds and the round's seed
        return [f"{t.split(chr(10))[0][:7]} {seed % 97} {i % 3} likes the colour" for i, t in enumerate(texts)]

    monkeypatch.setattr(generation, "generate", generate)
    seeds = [Prompt(f"{name} likes the colour") for name in ("Kavo Milret", "Tin Sulo", "Ann Bo")]
    states = []
    whole, stats = synthesis.synthesize(None, None, seeds, 10, seed=3, batch_size=4, on_round=states.append)
    assert len(whole) == 10 and stats["rounds"] == len(states) >= 3 and stats["duplicates"] > 0
    assert [len(s["kept"]) for s in states] == sorted(len(s["kept"]) for s in states)   # each round adds to the last
    saved = json.loads(json.dumps(states[1]))   # as the work folder keeps it
    monkeypatch.setenv("PAW_PROGRESS", "1")
    later = []
    resumed, again = synthesis.synthesize(None, None, seeds, 10, seed=3, batch_size=4, state=saved,
                                          on_round=later.append, progress=True)
    assert resumed == whole and again == stats and len(later) == len(states) - 2
    assert "teacher writing inputs: 10/10 inputs (100%)" in capsys.readouterr().err
    done, _ = synthesis.synthesize(None, None, seeds, 10, seed=3, batch_size=4, state=json.loads(json.dumps(states[-1])))
    assert done == whole   # nothing left to write
    with pytest.raises(PawError, match="synthesis state is damaged"):
        synthesis.synthesize(None, None, seeds, 10, seed=3, batch_size=4, state={"kept": []})
