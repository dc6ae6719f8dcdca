"""Issue 53, the remaining cases: silent outcomes turned into one-line refusals, and byte-identical reruns.

Each refusal is checked as in ``test_issue53.py`` (its ``refused`` fixture, over this module's ``ix``):
exit code 2, exactly one ``error:`` line naming the file, key or flag, no traceback and no
``unexpected``, the inputs unchanged and nothing at the output path.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.reliability.test_issue53 import refused  # noqa: F401  (a fixture; it reads this module's ``ix``)


@pytest.fixture(scope="module")
def ix(tiny_llama, tmp_path_factory) -> Path:
    """A base, a fine-tune, and a copy of the base whose tokenizer gives ids 100 and 101 the other's token."""
    from paw import zoo

    root = tmp_path_factory.mktemp("issue53b") / "ix"
    root.mkdir()
    shutil.copytree(tiny_llama, root / "base")
    zoo.fine_tune(root / "base", root / "ft", seed=11, scale=0.02)
    zoo.make_lora(root / "base", root / "lora", rank=4, alpha=8, seed=3)
    shutil.copytree(root / "base", root / "swapped")
    data = json.loads((root / "swapped" / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    first, second = (token for token, i in vocab.items() if i in (100, 101))
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (root / "swapped" / "tokenizer.json").write_text(json.dumps(data))
    _poisoned_copy(root / "ft", root / "nan_ft", "model.safetensors", "model.layers.1.mlp.down_proj.weight", math.nan)
    _poisoned_copy(root / "lora", root / "inf_lora", "adapter_model.safetensors",
                   "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight", math.inf)
    return root


def _poisoned_copy(src: Path, dst: Path, file: str, key: str, value: float) -> None:
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(dst / file)
    tensors[key][0, 0] = value
    save_file(tensors, dst / file, metadata={"format": "pt"})


# ---- 1. auto across another tokenizer of the same size refuses, as across one of another size

TRANSFER = ("transfer-lora", "--adapter", "{ix}/lora", "--source-base", "{ix}/base", "-o", "{out}", "--device", "cpu")


def test_auto_refuses_another_tokenizer_of_the_same_size(refused):  # noqa: F811
    line = refused(*TRANSFER, "--target-base", "{ix}/swapped",
                   expect=("the vocabularies differ (300 rows each, but id 100 is", "--method distill --prompts"))
    assert "--method auto moves no adapter across a tokenizer change" in line


def test_auto_refuses_with_the_same_message_when_the_sizes_differ(refused, tmp_path):  # noqa: F811
    from paw import zoo

    wider = zoo.tiny_model(tmp_path / "wider", "llama", seed=0, hidden_size=32, num_layers=2, vocab_size=301)
    same = refused(*TRANSFER, "--target-base", "{ix}/swapped").split("): ", 1)[1]
    other = refused(*TRANSFER, "--target-base", wider,
                    expect=("the vocabularies differ (300 source rows, 301 target rows)",)).split("): ", 1)[1]
    assert same == other


def test_auto_refuses_a_vocab_map_that_moves_ids(refused, ix, tmp_path):  # noqa: F811
    from paw.io.vocab_map import VocabMapping, write_vocab_map

    entries = {t: ("exact", [{100: 101, 101: 100}.get(t, t)], [1.0]) for t in range(300)}
    write_vocab_map(tmp_path / "map.json", VocabMapping(300, 300, entries))
    refused(*TRANSFER, "--target-base", "{ix}/ft", "--vocab-map", tmp_path / "map.json",
            expect=("--vocab-map sends target ids to other source ids", "--method distill"))


def test_a_named_method_still_moves_it_and_warns(cli, ix, tmp_path):
    res = cli(*[a.replace("{ix}", str(ix)).replace("{out}", str(tmp_path / "out")) for a in TRANSFER],
              "--target-base", ix / "swapped", "--method", "copy")
    assert res.exit_code == 0, res.stderr
    assert "warning: source and target tokenizers differ (300 rows each, but id 100" in res.stderr


def test_the_same_tokenizer_in_another_folder_is_no_change(cli, ix, tmp_path):
    res = cli(*[a.replace("{ix}", str(ix)).replace("{out}", str(tmp_path / "out")) for a in TRANSFER],
              "--target-base", ix / "ft")
    assert res.exit_code == 0 and "warning" not in res.stderr, res.stderr


# ---- 2. --resume: a folder where the checkpoint goes, an empty or cut checkpoint, and where a run resumed from

def _mc(tmp_path: Path) -> Path:
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(f'{{"question": "q{i}?", "choices": ["a", "b"], "answer": {i % 2}}}\n' for i in range(8)))
    return data


TRAIN = ("train-lora", "--model", "{ix}/base", "--output", "{out}", "--steps", "4", "--batch-size", "2", "--rank", "2",
         "--save-every", "2", "--device", "cpu")


def test_resume_refuses_a_folder_where_the_checkpoint_goes(refused, tmp_path):  # noqa: F811
    (tmp_path / "out-work" / "train-state.pt").mkdir(parents=True)
    refused(*TRAIN, "--data", _mc(tmp_path), "--resume",
            expect=(str(tmp_path / "out-work" / "train-state.pt"), "is a folder", "--resume"))


@pytest.mark.parametrize("cut", ["empty", "half"])
def test_distill_resume_refuses_an_empty_or_cut_checkpoint(refused, tmp_path, cut):  # noqa: F811
    import torch

    from paw.io.train_state import save_train_state

    state = save_train_state(tmp_path / "out-work", {"step": 2, "settings": {}, "params": [torch.ones(64, 64)],
                                                     "optimizer": {}})
    state.write_bytes(b"" if cut == "empty" else state.read_bytes()[: state.stat().st_size // 2])
    refused("transfer-lora", "--method", "distill", "--adapter", "{ix}/lora", "--source-base", "{ix}/base",
            "--target-base", "{ix}/ft", "-o", "{out}", "--prompts", "generic", "--max-steps", "2", "--batch-size", "2",
            "--max-new-tokens", "2", "--resume", "--device", "cpu",
            expect=(str(state), "empty" if cut == "empty" else "not a readable training checkpoint"))


def test_a_resumed_run_says_where_it_resumed_from(cli, ix, tmp_path, monkeypatch):
    from tests.conftest import dies_after_saving

    args = [a.replace("{ix}", str(ix)).replace("{out}", str(tmp_path / "out")) for a in TRAIN]
    with dies_after_saving(monkeypatch, "paw.evaluate.pipeline.save_train_state"):
        cli(*args, "--data", _mc(tmp_path))
    monkeypatch.delenv("PAW_PROGRESS", raising=False)
    res = cli(*args, "--data", tmp_path / "mc.jsonl", "--resume")
    assert res.exit_code == 0, res.stderr
    assert f"resumed from step 2 of {tmp_path / 'out-work' / 'train-state.pt'}" in res.stderr
    (tmp_path / "out-work" / "train-state.pt").unlink(missing_ok=True)
    res = cli(*[a.replace(str(tmp_path / "out"), str(tmp_path / "again")) for a in args], "--data",
              tmp_path / "mc.jsonl", "--resume")  # nothing to resume from: a fresh run, and no such line
    assert res.exit_code == 0 and "resumed" not in res.stderr, res.stderr


def test_a_checkpoint_past_the_run_is_refused(refused, tmp_path):  # noqa: F811
    import torch

    from paw.io.train_state import save_train_state

    save_train_state(tmp_path / "out-work", {"step": 10, "settings": {}, "params": [torch.ones(2)], "optimizer": {}})
    refused(*TRAIN, "--data", _mc(tmp_path), "--resume", expect=("train-state.pt says step 10", "4-step run"))


# ---- 3. a NaN/Inf fine-tune or adapter is named before any SVD runs

@pytest.fixture
def no_svd(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("a decomposition ran on a NaN/Inf input")

    monkeypatch.setattr("paw.extract.pipeline.spectrum", boom)
    monkeypatch.setattr("paw.merge.adapter_pipeline.svd_factors", boom)


NAN_TENSOR = "'model.layers.1.mlp.down_proj.weight' holds 1 NaN/Inf value(s)"


def test_extract_lora_names_a_nan_fine_tune_before_any_svd(refused, no_svd, ix):  # noqa: F811
    refused("extract-lora", "--base", "{ix}/base", "--finetune", "{ix}/nan_ft", "--output", "{out}", "--device", "cpu",
            expect=(str(ix / "nan_ft"), NAN_TENSOR, "SVD"))


def test_transfer_lora_finetune_names_a_nan_fine_tune_before_any_svd(refused, no_svd, ix):  # noqa: F811
    refused("transfer-lora", "--finetune", "{ix}/nan_ft", "--source-base", "{ix}/base", "--target-base", "{ix}/ft",
            "-o", "{out}", "--device", "cpu", expect=(str(ix / "nan_ft"), NAN_TENSOR))


@pytest.mark.parametrize("method", ["svd", "ties-svd", "cat"])
def test_merge_adapters_names_an_inf_adapter_before_any_svd(refused, no_svd, ix, method):  # noqa: F811
    refused("merge", "--adapters", "{ix}/inf_lora", "{ix}/lora", "--method", method, "--output", "{out}",
            "--device", "cpu", expect=(str(ix / "inf_lora"), "layers.1.self_attn.v_proj.lora_B.weight", "NaN/Inf"))


def test_merge_adapters_allow_nonfinite_carries_them_with_cat_only(cli, refused, ix, tmp_path):  # noqa: F811
    res = cli("merge", "--adapters", ix / "inf_lora", ix / "lora", "--method", "cat", "--output", tmp_path / "cat",
              "--device", "cpu", "--allow-nonfinite")
    assert res.exit_code == 0, res.stderr
    refused("merge", "--adapters", "{ix}/inf_lora", "{ix}/lora", "--method", "svd", "--output", "{out}",
            "--device", "cpu", "--allow-nonfinite", expect=(str(ix / "inf_lora"),))


# ---- 4. --spectra's options without --spectra

@pytest.mark.parametrize("extra,expect", [
    (["--spectra-ranks", "4"], "--spectra-ranks is a --spectra option"),
    (["--spectra-exact", "--mask-density", "0.3"], "--mask-density, --spectra-exact are --spectra options"),
])
def test_spectra_options_without_spectra_are_refused(refused, extra, expect):  # noqa: F811
    refused("task-vectors", "--base", "{ix}/base", "--models", "{ix}/ft", "--outdir", "{out}", *extra,
            expect=(expect, "add --spectra"))


def test_spectra_options_with_spectra_still_run(cli, ix, tmp_path):
    res = cli("task-vectors", "--base", ix / "base", "--models", ix / "ft", "--outdir", tmp_path / "tv", "--spectra",
              "--spectra-ranks", "4")
    assert res.exit_code == 0, res.stderr


# ---- 5. a Unigram tokenizer without unk_id meets a character it has no piece for

def test_analyze_tokenizers_names_a_tokenizer_that_cannot_encode_the_corpus(refused, tmp_path):  # noqa: F811
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(["hello world, a test"] * 20, trainers.UnigramTrainer(vocab_size=40))
    path = tmp_path / "unigram.json"
    tok.save(str(path))
    data = json.loads(path.read_text())
    data["model"]["unk_id"] = None
    path.write_text(json.dumps(data))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\nzebra quiz\n")
    refused("analyze-tokenizers", "-s", "{ix}/base", "-t", path, "-o", "{out}", "--corpus", corpus, "--no-plots",
            expect=(str(path), "cannot encode the text 'zebra quiz'", "unk_id"))


# ---- 7. a prompt line nested too deeply for the JSON parser

def test_a_deeply_nested_prompt_line_is_refused(refused, tmp_path):  # noqa: F811
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"text": "a first input"}\n\n{"text": ' + "[" * 30_000 + "]" * 30_000 + "}\n")  # under the 65,536-byte line limit
    refused("transfer-lora", "--method", "distill", "--adapter", "{ix}/lora", "--source-base", "{ix}/base",
            "--target-base", "{ix}/ft", "-o", "{out}", "--prompts", prompts, "--max-steps", "1", "--device", "cpu",
            expect=(str(prompts), "line 3", "nested too deeply"))


# ---- 6. seeded heals write the same bytes, and record no duration and no path that is gone

def _paths(value):
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in ([v] if k == "path" else _paths(v))]
    return [p for v in value for p in _paths(v)] if isinstance(value, list) else []


def test_seeded_heals_write_the_same_bytes(cli, ix, tmp_path):
    from paw import zoo
    from paw.data import sample_texts
    from tests.reliability.conftest import tree_hash

    zoo.train_tokenizer(sample_texts("multi") + sample_texts("en"), 400,
                        kind="sentencepiece-bpe").save_pretrained(tmp_path / "sp")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sample_texts("multi") * 3), encoding="utf-8")
    runs = {
        "transplant": ("transplant-tokenizer", "--model", ix / "base", "--tokenizer", tmp_path / "sp", "--no-check",
                       "--heal-steps", "2", "--heal-corpus", corpus),
        "heal": ("heal-transplant", "--model", tmp_path / "transplant-1", "--corpus", corpus, "--steps", "2",
                 "--seed", "5"),
    }
    for name, args in runs.items():
        for run in (1, 2):  # the same --output each time (the command line is recorded), moved aside after
            res = cli(*args, "--output", tmp_path / "out", "--device", "cpu")
            assert res.exit_code == 0, res.stderr
            (tmp_path / "out").rename(tmp_path / f"{name}-{run}")
        assert tree_hash(tmp_path / f"{name}-1") == tree_hash(tmp_path / f"{name}-2"), name
        for report in ("paw_heal.json", "paw_transplant.json"):
            text = (tmp_path / f"{name}-1" / report).read_text()
            assert '"seconds"' not in text, (name, report)
            assert all(Path(p).exists() for p in _paths(json.loads(text))), (name, report, _paths(json.loads(text)))
    assert "healed" in res.stdout and " s: held-out bits per byte" in res.stdout  # the time is still said


# ---- 8. bench transfer --jobs: forked workers, spawned where PyTorch sees a GPU, the same results either way

def test_jobs_spawn_where_pytorch_sees_a_gpu():
    from paw.bench.quality import start_method

    assert start_method(gpu_visible=True) == "spawn" and start_method(gpu_visible=False) == "fork"


def _scores(folder: Path) -> dict:
    """A results.json without its timings: every setting, note, row and 0/1 outcome."""
    def timeless(x):
        if isinstance(x, dict):
            return {k: timeless(v) for k, v in x.items() if k != "seconds"}
        return [timeless(v) for v in x] if isinstance(x, list) else x

    return timeless(json.loads((folder / "results.json").read_text()))


def test_spawned_jobs_give_the_results_of_one_process(tmp_path, monkeypatch, capsys):
    """Two spawned workers, one per seed, write the results.json of one process (timings aside).

    Spawned workers once scored other numbers: multiprocessing's pickler put the bases' weights in
    memory shared by every worker, and each merges its adapters into them in place.
    """
    from dataclasses import replace

    import torch

    from paw.bench.options import quick_options
    from paw.bench.quality import benchmark_to_folder

    opts = quick_options(seeds=(0, 1), tasks=("facts",), targets=("pruned",), methods=("auto",), distill=("inputs",))
    benchmark_to_folder(opts, tmp_path / "one", progress=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine: no fork after autograd
    capsys.readouterr()
    benchmark_to_folder(replace(opts, jobs=2), tmp_path / "two", progress=False)
    assert "--jobs 2: 2 (seed, task) units over 2 spawned worker processes on the CPU" in capsys.readouterr().err
    one, two = _scores(tmp_path / "one"), _scores(tmp_path / "two")
    assert two.pop("settings")["jobs"] == 2 and one.pop("settings")["jobs"] == 1
    assert "jobs=2" in two.pop("command") and "jobs=1" in one.pop("command")
    assert two == one and set(one["raw"]["facts"]["pruned"]) == {"0", "1"}


def test_bench_runs_on_the_cpu_by_default_and_takes_jobs_on_a_gpu(cli, tmp_path, monkeypatch):
    """No --device: the CPU, even where CUDA is available; --device cuda --jobs 2 is not refused."""
    import torch

    from paw.bench import quality
    from paw.errors import PawError

    def reached(opts, workdir, **kwargs):
        raise PawError(f"reached the build on {opts.device} with --jobs {opts.jobs}")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(quality, "build_bases", reached)
    args = ("bench", "transfer", "--output", tmp_path / "out", "--seeds", "0,1", "--tasks", "facts", "--targets",
            "pruned", "--jobs", "2")
    res = cli(*args)
    assert res.stderr.strip().splitlines()[-1] == "error: reached the build on cpu with --jobs 2", res.stderr
    res = cli(*args, "--device", "cuda")
    assert res.stderr.strip().splitlines()[-1] == "error: reached the build on cuda with --jobs 2", res.stderr


def test_a_model_named_dot_dot_reports_under_its_own_folder_name(cli, tiny_llama, tmp_path, monkeypatch):
    """``--models ..`` once made the report folder ``OUTDIR/..`` ("cannot write the report: File exists")."""
    import shutil

    from paw.taskvec.compute import unique_names

    assert unique_names(["..", ".", "ft"]) == ["model", "model-2", "ft"]
    model = tmp_path / "tuned"
    shutil.copytree(tiny_llama, model)
    (model / "inside").mkdir()
    monkeypatch.chdir(model / "inside")
    result = cli("task-vectors", "--base", tiny_llama, "--models", "..", "--outdir", tmp_path / "tv")
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "tv").iterdir()) == ["pairwise_cosines.csv", "tuned"]
