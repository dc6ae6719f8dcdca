"""A merge output carries a ``README.md`` model card (as mergekit's do): Hub front matter, then the
method, the base, the models with their weights, the parameters and the command; ``base_model`` holds
the inputs that are Hub IDs (mergekit YAMLs may name them: they are downloaded)."""

from __future__ import annotations

import json

import yaml
from huggingface_hub import ModelCard

from tests.io.fake_hub import FakeHub

FILES = ["README.md", "config.json", "generation_config.json", "model.safetensors", "paw_merge.json",
         "tokenizer.json", "tokenizer_config.json"]


def _card(folder) -> tuple[dict, str]:
    """(front matter, body) of ``folder/README.md``."""
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def test_merge_writes_a_card_naming_base_method_models_and_parameters(cli, family, tmp_path):
    out = tmp_path / "m"
    r = cli("merge", "--base", family.base, "--models", *family.models[:2], "--method", "ties", "--density", "0.3",
            "--weights", "0.7", "0.3", "--output", out)
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == FILES
    meta, body = _card(out)
    assert meta == {"library_name": "transformers", "tags": ["paw", "merge", "ties"]}  # local inputs: no base_model
    assert ModelCard.load(out / "README.md").data.to_dict() == meta
    assert f"# {out.name}\n" in body
    assert f"`{family.base}`, `{family.models[0]}`, `{family.models[1]}` are local paths, not Hub IDs: the Hub " \
           "would refuse a local path in `base_model`, so the front matter leaves them out." in body
    assert f"Merged with the **ties** method, with `{family.base}` as the base: trim to top density" in body
    assert "Reference: Yadav et al. 2023, TIES-Merging" in body
    assert f"| `{family.models[0]}` | 0.7000 | - |" in body and f"| `{family.models[1]}` | 0.3000 | - |" in body
    for row in ("| density | `0.3` |", "| weights | given (`--weights`) |", "| scale | `1.0` |", "| dtype | `auto` |"):
        assert row in body
    assert "| seed |" not in body  # ties draws nothing at random
    command = json.loads((out / "paw_merge.json").read_text())["command"]
    assert f"## How it was made\n\n```bash\n{command}\n```" in body and command.startswith("paw merge --base")
    assert body.endswith("| `paw_merge.json` | provenance and the full merge record: inputs, weights, norms, tensors "
                         "copied |\n\ntransformers and PEFT never read these files. To upload without them: "
                         "`hf upload REPO FOLDER --exclude paw_merge.json`.\n")
    again = tmp_path / "again"
    assert cli("merge", "--base", family.base, "--models", *family.models[:2], "--method", "ties", "--density",
               "0.3", "--weights", "0.7", "0.3", "--output", again).exit_code == 0
    assert (again / "README.md").read_text() == (out / "README.md").read_text().replace("/m\n", "/again\n") \
        .replace("# m\n", "# again\n")  # no clock, no host: only the output name differs


def test_card_of_a_norm_weighted_random_merge_gives_norms_and_seed(cli, family, tmp_path):
    out = tmp_path / "dare"
    assert cli("merge", "--base", family.base, "--models", *family.models, "--method", "dare-linear",
               "--drop-rate", "0.5", "--seed", "4", "--output", out).exit_code == 0
    record = json.loads((out / "paw_merge.json").read_text())
    meta, body = _card(out)
    assert meta["tags"] == ["paw", "merge", "dare_linear"]  # mergekit's name of the method
    for model, row in zip(family.models, record["models"], strict=True):
        assert f"| `{model}` | {row['weight']:.4f} | {row['l2']:.6f} |" in body
    assert "| weights | from L2 norms, mode exp, beta 1.0 (norms computed) |" in body
    assert "| drop_rate | `0.5` |" in body and "| seed | `4` |" in body


def test_a_mergekit_config_naming_hub_models_downloads_them_and_the_card_links_them(cli, family, tmp_path,
                                                                                     monkeypatch):
    hub = FakeHub(monkeypatch, tmp_path / "cache")
    hub.publish("org/base", family.base)
    hub.publish("org/ft0", family.models[0])
    hub.publish("org/ft1", family.models[1], revision="v1")
    models = [("org/ft0", family.models[0]), ("org/ft1@v1", family.models[1])]
    config = {"merge_method": "ties", "base_model": "org/base",
              "models": [{"model": m, "parameters": {"weight": 0.5, "density": 0.5}} for m, _ in models],
              "dtype": "float32"}
    path = tmp_path / "ties.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    r = cli("merge", "--config", path, "--output", tmp_path / "out", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    assert sorted((c["repo_id"], c["revision"]) for c in hub.calls) == [("org/base", None), ("org/ft0", None),
                                                                        ("org/ft1", "v1")]
    meta, body = _card(tmp_path / "out")
    assert meta == {"base_model": ["org/base", "org/ft0", "org/ft1"], "library_name": "transformers",
                    "tags": ["paw", "merge", "ties"]}
    assert ModelCard.load(tmp_path / "out" / "README.md").data.base_model == ["org/base", "org/ft0", "org/ft1"]
    assert "local path" not in body and "with `org/base` as the base" in body
    yaml_block = body.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(yaml_block) == config
    local = dict(config, base_model=str(family.base),
                 models=[{**entry, "model": str(folder)}
                         for entry, (_, folder) in zip(config["models"], models, strict=True)])
    path.write_text(yaml.safe_dump(local, sort_keys=False))
    assert cli("merge", "--config", path, "--output", tmp_path / "here", "--device", "cpu").exit_code == 0
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == (tmp_path / "here" / "model.safetensors").read_bytes()


def _cache(hf_home, repo_id: str, folder, commit: str) -> None:
    """Put ``folder`` in the Hugging Face cache under ``hf_home`` as ``repo_id`` at main, as ``hf download`` does."""
    import shutil

    storage = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(folder, storage / "snapshots" / commit)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(commit)


def test_a_mergekit_config_of_cached_hub_models_runs_offline_in_a_fresh_process(cli, family, tmp_path):
    """The real huggingface_hub, HF_HUB_OFFLINE=1 and HF_HOME from the environment: cached IDs merge as the
    local folders do; an ID not in the cache is exit code 2 and one line naming `hf download`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    hf_home = tmp_path / "hf"
    for i, (repo, folder) in enumerate([("org/base", family.base), ("org/ft0", family.models[0]),
                                        ("org/ft1", family.models[1])]):
        _cache(hf_home, repo, folder, f"{i}" * 40)
    config = {"merge_method": "ties", "base_model": "org/base",
              "models": [{"model": m, "parameters": {"weight": 0.5, "density": 0.5}} for m in ("org/ft0", "org/ft1")],
              "dtype": "float32"}
    path = tmp_path / "ties.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", PAW_PROGRESS="0",
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))

    def paw(*args):
        return subprocess.run([sys.executable, "-m", "paw", *map(str, args)], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=300)

    done = paw("merge", "--config", path, "--output", tmp_path / "out", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    local = dict(config, base_model=str(family.base),
                 models=[{**e, "model": str(f)} for e, f in zip(config["models"], family.models[:2], strict=True)])
    path.write_text(yaml.safe_dump(local, sort_keys=False))
    assert cli("merge", "--config", path, "--output", tmp_path / "here", "--device", "cpu").exit_code == 0
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == (tmp_path / "here" / "model.safetensors").read_bytes()
    assert _card(tmp_path / "out")[0]["base_model"] == ["org/base", "org/ft0", "org/ft1"]
    path.write_text(yaml.safe_dump(dict(config, base_model="org/missing"), sort_keys=False))
    refused = paw("merge", "--config", path, "--output", tmp_path / "no", "--device", "cpu")
    assert refused.returncode == 2 and not (tmp_path / "no").exists()
    assert refused.stderr == (f"error: model 'org/missing' is not in the Hugging Face cache ({hf_home / 'hub'}) and "
                              "HF_HUB_OFFLINE=1 forbids downloading it: fetch it with `hf download org/missing`, or "
                              "pass a local folder\n")
