"""Hub IDs: a cached model is used without the network; one that is not is downloaded (only the files
PAW reads, at the asked revision, with HF_TOKEN); offline, one line names it and the `hf download` that
fetches it. The Hub is :class:`tests.io.fake_hub.FakeHub`: nothing leaves the machine."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from paw.errors import PawError
from paw.io.checkpoint import open_checkpoint
from paw.io.hub import files_to_fetch, hub_id, split_revision
from paw.io.tokenizer import open_tokenizer
from tests.io.fake_hub import FakeHub

LLAMA_FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json"]
NOISE = {"README.md": "# a card\n", "onnx/model.safetensors": "not ours", "training_args.bin": "a pickle"}


@pytest.fixture
def hub(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return FakeHub(monkeypatch, tmp_path / "cache")


def _items(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"question": f"Fact {i}:", "choices": [" red", " blue"], "answer": i % 2}) + "\n"
                            for i in range(4)))
    return path


def test_files_to_fetch_keeps_what_paw_reads():
    repo = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
            "model.safetensors.index.json", "pytorch_model.bin", "README.md", "LICENSE", "tokenizer.json",
            "tokenizer_config.json", "special_tokens_map.json", "original/consolidated.safetensors", "training_args.bin"]
    assert files_to_fetch(repo, "model") == [
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    pickles = ["config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
               "pytorch_model.bin.index.json", "training_args.bin", "vocab.json", "merges.txt"]
    assert files_to_fetch(pickles, "model") == sorted(set(pickles) - {"training_args.bin"})
    assert files_to_fetch(["adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", "README.md"],
                          "adapter") == ["adapter_config.json", "adapter_model.safetensors"]
    assert files_to_fetch(repo, "tokenizer") == ["config.json", "special_tokens_map.json", "tokenizer.json",
                                                 "tokenizer_config.json"]
    assert split_revision("org/name@refs/pr/3") == ("org/name", "refs/pr/3")


def test_download_asks_for_only_the_model_files_then_the_cache_serves(hub, monkeypatch, tiny_llama):
    hub.publish("org/tiny", tiny_llama, extra=NOISE)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    ckpt = open_checkpoint("org/tiny")
    assert hub.calls == [{"repo_id": "org/tiny", "revision": None, "allow_patterns": LLAMA_FILES,
                          "token": "hf_secret"}]
    assert sorted(ckpt.keys()) == sorted(open_checkpoint(tiny_llama).keys())
    assert sorted(p.name for p in ckpt.path.iterdir()) == LLAMA_FILES  # no README, no pickle, no subfolder
    assert hub_id(ckpt.path) == "org/tiny" and hub_id("org/tiny@v2") == "org/tiny" and hub_id(tiny_llama) is None
    again = open_checkpoint("org/tiny")  # a cache hit: no request at all
    assert again.path == ckpt.path and len(hub.calls) == 1 and len(hub.infos) == 1


def test_a_revision_is_fetched_and_cached_under_its_ref(hub, tiny_llama):
    hub.publish("org/tiny", tiny_llama, revision="v2")
    ckpt = open_checkpoint("org/tiny@v2")
    assert [(c["repo_id"], c["revision"]) for c in hub.calls] == [("org/tiny", "v2")]
    assert (hub.cache / "models--org--tiny" / "refs" / "v2").read_text() == ckpt.path.name
    with pytest.raises(PawError, match=r"model 'org/tiny' \(revision v9\): the Hub repo has no such revision"):
        open_checkpoint("org/tiny@v9")


def test_a_tokenizer_fetches_tokenizer_files_and_a_model_then_completes_the_snapshot(hub, tiny_llama):
    hub.publish("org/tiny", tiny_llama)
    assert open_tokenizer("org/tiny").vocab == open_tokenizer(tiny_llama).vocab
    assert hub.calls[0]["allow_patterns"] == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    open_checkpoint("org/tiny")  # the cached snapshot holds no weights: fetched now
    assert [c["allow_patterns"] for c in hub.calls][1] == LLAMA_FILES


def test_pickled_weights_only_where_no_safetensors(hub, tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    torch.save({"w": torch.arange(4.0)}, folder / "pytorch_model.bin")
    (folder / "config.json").write_text("{}")
    hub.publish("org/old", folder, extra={"training_args.bin": "x"})
    ckpt = open_checkpoint("org/old")
    assert hub.calls[0]["allow_patterns"] == ["config.json", "pytorch_model.bin"]
    assert torch.equal(ckpt["w"], torch.arange(4.0))  # read with weights_only=True (paw.io.lazy_checkpoint)


def test_offline_is_one_line_naming_the_model_and_hf_download(cli, monkeypatch, tmp_path, tiny_llama):
    hub = FakeHub(monkeypatch, tmp_path / "cache", offline=True)
    hub.publish("org/tiny", tiny_llama, revision="v2")
    r = cli("eval", "--model", "org/tiny@v2", "--data", _items(tmp_path), "--output", tmp_path / "res.json")
    assert r.exit_code == 2 and hub.calls == [] and hub.infos == []
    assert r.stderr == (f"error: model 'org/tiny@v2' is not in the Hugging Face cache ({hub.cache}) and "
                        "HF_HUB_OFFLINE=1 forbids downloading it: fetch it with `hf download org/tiny --revision v2`, "
                        "or pass a local folder\n")
    assert not (tmp_path / "res.json").exists()


def test_no_network_is_one_line_too(cli, hub, tmp_path):
    class ConnectError(Exception):  # what huggingface_hub's HTTP client raises without a network
        pass

    hub.fail = ConnectError("[Errno -2] Name or service not known")
    r = cli("task-vectors", "--base", "org/tiny", "--models", "org/ft", "--outdir", tmp_path / "tv")
    assert r.exit_code == 2
    assert r.stderr == ("error: model 'org/tiny' is not in the Hugging Face cache and could not be downloaded "
                        "(ConnectError); fetch it where the Hub can be reached with `hf download org/tiny`, or pass "
                        "a local folder\n")
    assert not (tmp_path / "tv").exists()


def test_unknown_or_private_repo(hub):
    with pytest.raises(PawError, match="adapter 'org/nope' is not on the Hugging Face Hub, or is private .set HF_TOKEN"):
        from paw.io.adapter import read_adapter

        read_adapter("org/nope")


def test_eval_of_a_hub_model_and_adapter_matches_the_local_folders(cli, hub, tmp_path, tiny_llama, tiny_lora):
    hub.publish("org/tiny", tiny_llama)
    hub.publish("org/lora", tiny_lora, extra={"README.md": "card"})
    data = _items(tmp_path)
    local = cli("eval", "--model", tiny_llama, "--adapter", tiny_lora, "--data", data)
    remote = cli("eval", "--model", "org/tiny", "--adapter", "org/lora", "--data", data)
    assert local.exit_code == remote.exit_code == 0, remote.stderr
    assert remote.stdout == local.stdout and "accuracy" in remote.stdout
    assert {c["repo_id"]: c["allow_patterns"] for c in hub.calls} == {
        "org/tiny": LLAMA_FILES, "org/lora": ["adapter_config.json", "adapter_model.safetensors"]}


def test_an_incomplete_cached_snapshot_offline_says_so(monkeypatch, tmp_path, tiny_llama):
    hub = FakeHub(monkeypatch, tmp_path / "cache", offline=True)
    snapshot = hub.cache / "models--org--tiny" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    shutil.copyfile(tiny_llama / "config.json", snapshot / "config.json")
    (hub.cache / "models--org--tiny" / "refs").mkdir()
    (hub.cache / "models--org--tiny" / "refs" / "main").write_text("a" * 40)
    with pytest.raises(PawError, match="model 'org/tiny' is only partly in the Hugging Face cache"):
        open_checkpoint("org/tiny")
