"""Distillation at scale (paw.transfer.distill.scale): rank-weighted losses, a killed run resumed to the same bytes,
cached teacher continuations reused, the teacher offloaded. The launched torchrun and SIGKILL runs: tests/test_torchrun.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.conftest import Killed, dies_after_saving

ADAPTER = "adapter_model.safetensors"
FAST = ("--prompts", "generic", "--max-steps", "6", "--batch-size", "4", "--max-new-tokens", "3", "--init", "none",
        "--lr", "1e-2", "--device", "cpu")


@pytest.fixture(scope="module")
def other_tokenizer(troot) -> Path:
    """A Llama like ``src`` with a smaller tokenizer of its own: only the sequence loss applies."""
    from paw import zoo

    return zoo.tiny_model(troot / "other-tokenizer", "llama", seed=98, vocab_size=260, hidden_size=32, num_layers=2,
                          num_heads=4, num_kv_heads=2, intermediate_size=64)


def _distill(cli, src, src_lora, target, out, *extra):
    return cli("transfer-lora", "--method", "distill", "--adapter", src_lora, "--source-base", src,
               "--target-base", target, "--output", out, *FAST, *extra)


def _killed_at_the_first_checkpoint(cli, src, src_lora, target, out, monkeypatch) -> None:
    """A distillation into ``out`` that dies (as by SIGKILL) right after writing its step-2 checkpoint."""
    with dies_after_saving(monkeypatch, "paw.transfer.distill.run.save_train_state"):
        _distill(cli, src, src_lora, target, out, "--save-every", "2")


def test_rank_weighted_losses_sum_to_the_batch_gradient(src, src_lora, independent):
    """Token KL, sequence NLL and choice KL over unequal shards (3 ranks, 5 inputs, some with choices)."""
    import torch

    from paw.distributed import Ranks
    from paw.io.adapter import read_adapter
    from paw.io.tokenizer import open_tokenizer
    from paw.transfer.distill import scale, train
    from paw.transfer.distill.lora import _student, _vocabulary
    from paw.transfer.distill.prompts import Prompt
    from paw.transfer.distill.run import _side

    teacher = _side(src, open_tokenizer(src), "cpu", adapter=src_lora)
    student = _side(independent, open_tokenizer(independent), "cpu")
    vocab = _vocabulary(teacher, student, False)
    assert vocab.shared
    prompts = [Prompt("The cat sat"), Prompt("Over the hills and far away we went", (("Q:", " yes"), ("Q:", " no"))),
               Prompt("Numbers: 1 2 3"), Prompt("A", (("Pick", " red"), ("Pick", " green"), ("Pick", " blue"))),
               Prompt("Hello there, friend")]
    examples = train.examples(prompts, teacher, student, 4, "cpu", vocab)
    model = _student(read_adapter(src_lora), copy.deepcopy(student.model), None, None, None, None, 0, "cpu")
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))

    def loss(chosen, share):
        local = scale.mine(chosen, share)
        parts = {}
        seq = [e for e in local if e.sequence is not None]
        if seq:
            parts.update(train._sequence_losses(model, teacher.model, seq, vocab, train.PAD_ID, "cpu")[0])
        if any(e.choices for e in local):
            parts[train.CHOICE] = train._choice_loss(model, [e for e in local if e.choices], train.PAD_ID, "cpu")[0]
        parts = scale.weigh(parts, local, chosen, share)
        return sum(parts.values()) if parts else None, parts

    def grads():
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    model.zero_grad(set_to_none=True)
    whole_loss, whole_parts = loss(examples, None)
    assert {train.TOKEN_KL, train.SEQUENCE, train.CHOICE} <= set(whole_parts)
    whole_loss.backward()
    whole = grads()
    total: dict = {}
    for r in range(3):
        model.zero_grad(set_to_none=True)
        part, _ = loss(examples, scale.Scale(ranks=Ranks(r, 3)))
        if part is not None:
            part.backward()
            total = {n: total.get(n, 0) + g for n, g in grads().items()}
    assert max(float((whole[n] - total[n]).abs().max()) for n in whole) < 1e-6
    assert max(float(g.abs().max()) for g in whole.values()) > 1e-4


def test_a_killed_distillation_resumes_to_the_bytes_of_an_uninterrupted_one(cli, src, src_lora, independent,
                                                                         tmp_path, monkeypatch):
    from paw.io.train_state import load_train_state

    assert _distill(cli, src, src_lora, independent, tmp_path / "whole").exit_code == 0
    _killed_at_the_first_checkpoint(cli, src, src_lora, independent, tmp_path / "cut", monkeypatch)
    assert not (tmp_path / "cut").exists() and load_train_state(tmp_path / "cut-work")["step"] == 2
    from paw.transfer.distill import scale

    steps, sync = [], scale.sync
    monkeypatch.setattr(scale, "sync", lambda *a: steps.append(1) or sync(*a))  # once per optimiser step
    monkeypatch.setenv("PAW_PROGRESS", "1")  # the progress line even for work this short
    result = _distill(cli, src, src_lora, independent, tmp_path / "cut", "--save-every", "2", "--resume")
    assert result.exit_code == 0, result.stderr
    assert len(steps) == 4  # steps 3 to 6: the first two came from the checkpoint
    assert "[paw] distilling: 6/6 steps (100%)" in result.stderr  # counted from the checkpoint (not 4/4)
    assert f"[paw] resumed from step 2 of {tmp_path / 'cut-work' / 'train-state.pt'}" in result.stderr
    assert (tmp_path / "cut" / ADAPTER).read_bytes() == (tmp_path / "whole" / ADAPTER).read_bytes()


def _agreement_of(folder: Path) -> dict:
    import json

    return json.loads((folder / "transfer_report.json").read_text())["distill"]["agreement"]


def test_agreement_is_measured_on_a_seeded_sample_and_trains_the_same_bytes(cli, src, src_lora, independent, tmp_path,
                                                                          monkeypatch):
    """The before/after agreement reads at most AGREEMENT_INPUTS inputs, the same ones both times; it trains
    nothing, so the adapter's bytes are those of a run that measured every input. A run checkpointed while
    every input was measured is resumed measuring every input again, so before and after stay comparable."""
    assert _distill(cli, src, src_lora, independent, tmp_path / "all").exit_code == 0
    every = _agreement_of(tmp_path / "all")
    n = every["before"]["prompts"]
    assert n > 3 and every["after"]["prompts"] == n and every["measured_on"] == "training prompts (none held out)"
    monkeypatch.setattr("paw.transfer.distill.lora.AGREEMENT_INPUTS", 3)
    assert _distill(cli, src, src_lora, independent, tmp_path / "three").exit_code == 0
    three = _agreement_of(tmp_path / "three")
    assert three["before"]["prompts"] == three["after"]["prompts"] == 3
    assert three["measured_on"] == f"3 of the {n} training prompts (none held out), drawn by the seed"
    assert (tmp_path / "three" / ADAPTER).read_bytes() == (tmp_path / "all" / ADAPTER).read_bytes()

    monkeypatch.setattr("paw.transfer.distill.lora.AGREEMENT_INPUTS", 10_000)   # an older run: every input
    _killed_at_the_first_checkpoint(cli, src, src_lora, independent, tmp_path / "cut", monkeypatch)
    monkeypatch.setattr("paw.transfer.distill.lora.AGREEMENT_INPUTS", 3)
    result = _distill(cli, src, src_lora, independent, tmp_path / "cut", "--save-every", "2", "--resume")
    assert result.exit_code == 0, result.stderr
    resumed = _agreement_of(tmp_path / "cut")
    assert resumed["before"]["prompts"] == resumed["after"]["prompts"] == n
    assert resumed["after"] == every["after"]


def test_a_rerun_reuses_the_cached_continuations(cli, src, src_lora, other_tokenizer, tmp_path, monkeypatch):
    from paw.transfer.distill import generation

    assert _distill(cli, src, src_lora, other_tokenizer, tmp_path / "first").exit_code == 0
    cache = sorted((tmp_path / "first-work").glob("continuations-rank*.jsonl"))
    assert [p.name for p in cache] == ["continuations-rank0.jsonl"] and cache[0].read_text().count("\n") >= 4

    def no_teacher(*args, **kwargs):
        raise AssertionError("the teacher generated again")

    monkeypatch.setattr(generation, "generate", no_teacher)
    result = _distill(cli, src, src_lora, other_tokenizer, tmp_path / "first", "--overwrite")
    assert result.exit_code == 0, result.stderr
    second = _distill(cli, src, src_lora, other_tokenizer, tmp_path / "longer", "--max-new-tokens", "5")
    assert second.exit_code != 0  # another length is another continuation: not in the cache, so the teacher runs


def test_offload_teacher_frees_it_and_changes_nothing_else(cli, src, src_lora, independent, other_tokenizer, tmp_path,
                                                          monkeypatch):
    from paw.transfer.distill import scale

    refused = _distill(cli, src, src_lora, independent, tmp_path / "kl", "--offload-teacher")
    assert refused.exit_code == 2 and "token-kl loss reads the teacher" in refused.stderr
    assert not (tmp_path / "kl").exists()

    freed = []
    real = scale.free_teacher
    monkeypatch.setattr(scale, "free_teacher", lambda teacher: freed.append(teacher) or real(teacher))
    assert _distill(cli, src, src_lora, other_tokenizer, tmp_path / "kept").exit_code == 0
    assert _distill(cli, src, src_lora, other_tokenizer, tmp_path / "freed", "--offload-teacher").exit_code == 0
    assert len(freed) == 1 and freed[0].model is None
    assert (tmp_path / "freed" / ADAPTER).read_bytes() == (tmp_path / "kept" / ADAPTER).read_bytes()


def test_the_report_records_predicted_and_measured_memory(cli, src, src_lora, other_tokenizer, tmp_path):
    import json

    result = _distill(cli, src, src_lora, other_tokenizer, tmp_path / "out", "--gradient-checkpointing")
    assert result.exit_code == 0, result.stderr
    memory = json.loads((tmp_path / "out" / "transfer_report.json").read_text())["memory"]
    predicted = memory["predicted"]
    assert predicted["predicted_peak_bytes"] == sum(predicted["parts"].values())
    assert memory["measured"]["peak_rss_bytes"] > 2**20
    assert memory["measured_over_predicted"] > 0


def test_a_rerun_reuses_the_teachers_choice_scores_and_gains(cli, src, src_lora, independent, tmp_path, monkeypatch):
    """The teacher scores each input's choices once and its tokens twice (with and without the adapter); a rerun
    over the same work folder reads them back, and writes the same adapter bytes."""
    import json

    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items
    from paw.transfer.distill import train

    write_items(tmp_path / "items.jsonl", fact_task("colour", n=6, seed=0))
    calls = {"score": 0, "logprobs": 0}
    score, logprobs = train.score_encoded, train.token_logprobs
    monkeypatch.setattr(train, "score_encoded", lambda *a, **k: calls.__setitem__("score", calls["score"] + 1) or score(*a, **k))
    monkeypatch.setattr(train, "token_logprobs",
                        lambda *a, **k: calls.__setitem__("logprobs", calls["logprobs"] + 1) or logprobs(*a, **k))

    def run(out, *extra):
        result = _distill(cli, src, src_lora, independent, out, *extra, "--prompts", str(tmp_path / "items.jsonl"))
        assert result.exit_code == 0, result.stderr
        made, calls["score"], calls["logprobs"] = dict(calls), 0, 0
        return made

    first = run(tmp_path / "a")
    made = (tmp_path / "a" / ADAPTER).read_bytes()
    kept = {p.name: json.loads(p.read_text()) for p in (tmp_path / "a-work").glob("teacher-*.json")}
    assert set(kept) == {"teacher-choice-scores.json", "teacher-excess.json"}
    assert len(kept["teacher-choice-scores.json"]["values"]) == sum(len(i.choices) for i in fact_task("colour", n=6, seed=0))
    again = run(tmp_path / "a", "--overwrite")
    assert first["score"] - again["score"] == 1 and first["logprobs"] - again["logprobs"] == 2
    assert (tmp_path / "a" / ADAPTER).read_bytes() == made
    other = run(tmp_path / "b")   # another output folder: another work folder, so the teacher scores again
    assert other == first


def test_a_killed_synthesis_goes_on_from_its_last_round(cli, src, src_lora, independent, tmp_path, monkeypatch):
    """``--synthesize`` keeps its inputs after each round of candidates in OUT-work/synthesis.json: a run killed
    there writes only the rounds left, and its adapter is the bytes of an uninterrupted run's."""
    import json

    from paw.transfer.distill import generation, scale

    seeds = tmp_path / "seeds.txt"
    seeds.write_text("Kavo Milret likes the colour\nTin Sulo likes the colour\nAnn Bo likes the colour\n")
    synth = ("--synthesize", "12", "--seed-examples", str(seeds), *FAST[2:])
    rounds, said = [], []
    generate = generation.generate

    def sampled(model, tokenizer, texts, **kwargs):   # the teacher's sampling stood in for: 4 new names a round,
        if not kwargs.get("sample"):                   # from the round's seed and the first shuffled seeds; its
            return generate(model, tokenizer, texts, **kwargs)   # continuations are the tiny model's own
        rounds.append(1)
        first = texts[0].split("\n")[-2][:4]
        return [f"{first}{kwargs['seed'] % 89}x{i % 4} likes the colour" for i in range(len(texts))]

    monkeypatch.setattr(generation, "generate", sampled)

    def run(out):
        rounds.clear()
        result = cli("transfer-lora", "--method", "distill", "--adapter", src_lora, "--source-base", src,
                     "--target-base", independent, "--output", out, *synth)
        assert result.exit_code == 0, result.stderr
        said[:] = [result.stderr]
        return len(rounds), json.loads((out / "transfer_report.json").read_text())["distill"]["inputs"]["synthesis"]

    whole, whole_stats = run(tmp_path / "whole")
    assert whole == 3 and whole_stats["kept"] == 12 and whole_stats["duplicates"] == 36
    real = scale.write_synthesis

    def keep_then_die(folder, key, state):
        real(folder, key, state)
        if state["stats"]["rounds"] == 2:
            raise Killed

    monkeypatch.setattr(scale, "write_synthesis", keep_then_die)
    with pytest.raises(Killed):
        run(tmp_path / "cut")
    kept = json.loads((tmp_path / "cut-work" / "synthesis.json").read_text())["state"]
    assert kept["stats"]["rounds"] == 2 and len(kept["kept"]) == 8 and not (tmp_path / "cut").exists()
    monkeypatch.setattr(scale, "write_synthesis", real)
    left, stats = run(tmp_path / "cut")
    assert left == whole - 2 and stats == whole_stats
    assert f"the synthesis goes on from {tmp_path / 'cut-work' / 'synthesis.json'} (8 inputs kept in 2 rounds)" in said[0]
    assert (tmp_path / "cut" / ADAPTER).read_bytes() == (tmp_path / "whole" / ADAPTER).read_bytes()


def test_a_barren_synthesis_or_an_older_synthesis_is_tried_afresh(src_lora, tmp_path, monkeypatch):
    """A kept state with no input in it is not resumed (the rerun tries again, as after a fix), and a change to
    what the teacher is shown (SYNTHESIS_VERSION) is another key."""
    from paw.io.adapter import read_adapter
    from paw.io.train_state import write_synthesis
    from paw.transfer.distill import scale, synthesis
    from paw.transfer.distill.prompts import Prompt

    cache, handed = scale.Scale(work=tmp_path), []
    barren = {"kept": [], "known": [], "stats": {"rounds": 4, "blank": 64}, "rng": [3, [1], None]}
    write_synthesis(tmp_path, "k", barren)
    scale.synthesized(cache, "k", lambda state, keep: handed.append(state))
    write_synthesis(tmp_path, "k", {**barren, "kept": ["Question: Why?\nAnswer:"]})
    scale.synthesized(cache, "k", lambda state, keep: handed.append(state))
    assert handed[0] is None and handed[1]["kept"] == ["Question: Why?\nAnswer:"]
    lora = read_adapter(src_lora)
    key = scale.synthesis_key("t", lora, [Prompt("a b")], 10, 0, False)
    assert key == scale.synthesis_key("t", lora, [Prompt("a b")], 10, 0, False)
    assert key != scale.synthesis_key("t", lora, [Prompt("a b")], 10, 1, False)
    monkeypatch.setattr(synthesis, "SYNTHESIS_VERSION", synthesis.SYNTHESIS_VERSION + 1)
    assert key != scale.synthesis_key("t", lora, [Prompt("a b")], 10, 0, False)


def test_a_rerun_of_the_shift_target_reuses_the_students_base_scores(cli, src, src_lora, independent, tmp_path,
                                                                     monkeypatch):
    """Under ``--target shift`` the student's base scores every choice once before training; a rerun over the same
    work folder reads those back with the teacher's two (with and without the adapter), to the same adapter bytes."""
    import json

    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items
    from paw.transfer.distill import train

    write_items(tmp_path / "items.jsonl", fact_task("colour", n=6, seed=0))
    calls = {"score": 0}
    score = train.score_encoded
    monkeypatch.setattr(train, "score_encoded", lambda *a, **k: calls.__setitem__("score", calls["score"] + 1) or score(*a, **k))

    def run(*extra):
        calls["score"] = 0
        result = _distill(cli, src, src_lora, independent, tmp_path / "a", "--target", "shift", *extra,
                          "--prompts", str(tmp_path / "items.jsonl"))
        assert result.exit_code == 0, result.stderr
        return calls["score"]

    first = run()
    made = (tmp_path / "a" / ADAPTER).read_bytes()
    kept = json.loads((tmp_path / "a-work" / "teacher-student-base-choice-scores.json").read_text())
    assert len(kept["values"]) == sum(len(i.choices) for i in fact_task("colour", n=6, seed=0))
    again = run("--overwrite")
    assert first - again == 3 and (tmp_path / "a" / ADAPTER).read_bytes() == made
