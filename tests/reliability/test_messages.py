"""Issue 24: every bad input ends in one line that names the file or flag at fault.

One test per class of message the issue reported: inputs that ended in PAW's catch-all
``unexpected <Type>`` line, a check that listed every constraint instead of the one that failed,
two models with one folder name, a rank PEFT's default was reported as the config's, a GGUF folder
read as a tokenizer problem, LoRA knobs accepted at values that make no LoRA, and usage errors
printed in another style. Each case must end like the bad-input table's (``test_bad_inputs.py``):
exit code 2, exactly one ``error:`` line holding the file or flag, no traceback, no
``unexpected``, inputs unchanged and nothing at the output path.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import typer

from tests.reliability.conftest import tree_hash
from tests.reliability.test_bad_inputs import CASES as TABLE

CLICK_STYLE = re.compile(r"(?m)(^|[^A-Za-z])Error:")  # click's "Error: ..." (not a library's "TypeError: ...")


@pytest.fixture(scope="module")
def mx(fx, tmp_path_factory) -> Path:
    """Wrong inputs of the kinds the issue lists, built from the table's good ones (``fx``)."""
    root = tmp_path_factory.mktemp("messages") / "mx"
    root.mkdir()
    shutil.copytree(fx / "base", root / "a" / "base")
    shutil.copytree(fx / "other", root / "b" / "base")  # same folder name, another model
    tokenizer = json.loads((fx / "base" / "tokenizer.json").read_text())
    _folder(root / "config_list", fx / "base", {"config.json": [1, 2]})
    _folder(root / "tokcfg_list", fx / "base", {"tokenizer_config.json": ["<s>"]})
    _folder(root / "special_map_list", fx / "base", {"special_tokens_map.json": ["<s>"]})
    config_json = json.loads((fx / "base" / "config.json").read_text())
    _folder(root / "vocab_size_str", fx / "base", {"config.json": {**config_json, "vocab_size": "many"}})
    _folder(root / "vocab_list", None, {"tokenizer.json": {**tokenizer, "model": {**tokenizer["model"], "vocab": [1, 2]}}})
    (root / "x.gguf").mkdir()
    shutil.copy(fx / "base" / "config.json", root / "x.gguf" / "config.json")
    (root / "only_gguf").mkdir()
    (root / "only_gguf" / "tiny.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    config = json.loads((fx / "lora" / "adapter_config.json").read_text())
    _folder(root / "no_r", fx / "lora", {"adapter_config.json": {k: v for k, v in config.items() if k != "r"}})
    _folder(root / "save_int", fx / "lora", {"adapter_config.json": {**config, "modules_to_save": 3}})
    _folder(root / "layers_str", fx / "lora", {"adapter_config.json": {**config, "layers_to_transform": "x"}})
    _folder(root / "targets_regex", fx / "lora", {"adapter_config.json": {**config, "target_modules": "["}})
    _folder(root / "bias_int", fx / "lora", {"adapter_config.json": {**config, "bias": 5}})
    _folder(root / "dropout_str", fx / "lora", {"adapter_config.json": {**config, "lora_dropout": "x"}})
    return root


def _folder(folder: Path, src: Path | None, files: dict) -> None:
    if src is not None:
        shutil.copytree(src, folder)
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data))


@pytest.fixture(scope="module")
def mx_hash(mx):
    return tree_hash(mx)


@pytest.fixture
def refused(cli, fx, mx, mx_hash, tmp_path):
    """``refused('eval', '--model', ..., expect=[...])`` -> the one error line, checked as the table does."""
    def run(*args, expect: tuple[str, ...] = (), forbid: tuple[str, ...] = ()) -> str:
        out = tmp_path / "out"
        argv = [str(a).replace("{fx}", str(fx)).replace("{mx}", str(mx)).replace("{out}", str(out)) for a in args]
        res = cli(*argv)
        text = res.stdout + res.stderr
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2, (argv, res.exit_code, res.stderr[-2000:])
        assert "Traceback" not in text and not CLICK_STYLE.search(text), text[-2000:]
        assert lines and lines[-1].startswith("error: ") and "unexpected" not in lines[-1], res.stderr
        assert len([x for x in lines if x.startswith("error:")]) == 1, res.stderr
        for fragment in expect:
            assert fragment.replace("{mx}", str(mx)) in lines[-1], (fragment, lines[-1])
        for fragment in forbid:
            assert fragment not in lines[-1], (fragment, lines[-1])
        assert not out.exists() or not any(out.iterdir())
        assert tree_hash(mx) == mx_hash, "an input changed"
        return lines[-1]

    return run


# ---- 1. inputs that ended in "unexpected <Type>": each now names its file or flag

@pytest.mark.parametrize("argv,expect", [
    (["analyze-tokenizers", "-s", "{mx}/config_list", "-t", "{fx}/base", "-o", "{out}"],
     ["{mx}/config_list/config.json", "JSON object"]),
    (["align-vocab", "-s", "{fx}/base", "-t", "{mx}/tokcfg_list", "-o", "{out}/map.json"],
     ["{mx}/tokcfg_list/tokenizer_config.json", "JSON object"]),
    (["extend-tokenizer", "--model", "{fx}/base", "--output", "{out}", "--from-tokenizer", "{mx}/vocab_list"],
     ["{mx}/vocab_list/tokenizer.json", "tokenizers cannot load"]),
    (["zoo", "fine-tune", "{fx}/base", "{out}", "--include", "["], ["--include", "regex"]),
    (["zoo", "fine-tune", "{fx}/lora", "{out}"], ["lora", "adapter"]),
    (["extend-tokenizer", "--model", "{fx}/base", "--output", "{out}", "--tokens", "alpha",
      "--pad-to-multiple", "99999999999"], ["--pad-to-multiple"]),
    (["eval", "--model", "{mx}/special_map_list", "--data", "{fx}/data/mc.jsonl"],
     ["{mx}/special_map_list/special_tokens_map.json", "JSON object"]),
    (["eval", "--model", "{mx}/vocab_size_str", "--data", "{fx}/data/mc.jsonl"], ["{mx}/vocab_size_str", "vocab_size"]),
], ids=["config-is-a-list", "tokenizer-config-is-a-list", "bpe-vocab-is-a-list", "fine-tune-bad-regex",
        "fine-tune-an-adapter", "pad-to-multiple-huge", "special-tokens-map-is-a-list", "config-field-of-wrong-type"])
def test_former_catch_alls_name_the_file_or_flag(refused, argv, expect):
    refused(*argv, expect=tuple(expect))


@pytest.mark.parametrize("name,key", [("save_int", "modules_to_save"), ("layers_str", "layers_to_transform"),
                                      ("targets_regex", "target_modules"), ("bias_int", "bias"),
                                      ("dropout_str", "lora_dropout")])
def test_adapter_config_types_name_the_key(refused, name, key):
    refused("eval", "--model", "{fx}/base", "--data", "{fx}/data/mc.jsonl", "--adapter", f"{{mx}}/{name}",
            expect=(f"{{mx}}/{name}", key))
    refused("transfer-lora", "--adapter", f"{{mx}}/{name}", "--source-base", "{fx}/base", "--target-base",
            "{fx}/ft", "-o", "{out}", expect=(key,))


# ---- 2. a check names the flag that failed, not every constraint

def test_distill_knobs_name_only_the_flag_out_of_range(refused):
    distill = ["transfer-lora", "--method", "distill", "--prompts", "generic", "--adapter", "{fx}/lora",
               "--source-base", "{fx}/base", "--target-base", "{fx}/ft", "-o", "{out}", "--device", "cpu"]
    refused(*distill, "--holdout", "1", expect=("--holdout 1.0", "[0, 1)"), forbid=("--lr", "--synthesize"))
    refused(*distill, "--lr", "0", expect=("--lr",), forbid=("--holdout", "--synthesize"))
    both = refused("transfer-lora", "--adapter", "{fx}/lora", "--source-base", "{fx}/base", "--target-base",
                   "{fx}/ft", "-o", "{out}", "--rank", "4", "--alpha", "2")
    assert "--rank, --alpha are --method distill options" in both and "--holdout" not in both


# ---- 3. two models with one folder name are told apart

def test_models_with_one_folder_name_are_named_by_their_paths(refused):
    line = refused("merge", "--base", "{mx}/a/base", "--models", "{mx}/b/base", "--output", "{out}",
                   "--weights", "1", expect=("a/base", "b/base"))
    assert "base base" not in line
    refused("task-vectors", "--base", "{mx}/a/base", "--models", "{mx}/b/base", "--outdir", "{out}",
            expect=("a/base", "b/base"), forbid=("base base",))


# ---- 4. a rank the config does not hold is not reported as the config's

def test_missing_rank_is_said_to_be_missing(refused):
    line = refused("adapter", "check", "--adapter", "{mx}/no_r", "--base", "{fx}/base", expect=("{mx}/no_r",))
    assert "says r=8" not in line and ("no 'r'" in line or "missing" in line or "default" in line), line


# ---- 5. a GGUF folder is named as such, not as a tokenizer problem

@pytest.mark.parametrize("argv,expect", [
    (["eval", "--model", "{mx}/x.gguf", "--data", "{fx}/data/mc.jsonl"], ["{mx}/x.gguf", "GGUF", "the file itself"]),
    (["train-lora", "--model", "{mx}/only_gguf", "--data", "{fx}/data/mc.jsonl", "--output", "{out}"],
     ["{mx}/only_gguf/tiny.gguf"]),
    (["analyze-tokenizers", "-s", "{mx}/only_gguf", "-t", "{fx}/base", "-o", "{out}"], ["{mx}/only_gguf/tiny.gguf"]),
    (["merge", "--base", "{fx}/base", "--models", "{mx}/x.gguf", "--output", "{out}", "--weights", "1"],
     ["{mx}/x.gguf", "GGUF"]),
    (["eval", "--model", "{fx}/lora", "--data", "{fx}/data/mc.jsonl"], ["lora", "--adapter"]),
], ids=["eval-gguf-named-folder", "train-folder-with-a-gguf", "tokenizer-folder-with-a-gguf", "merge-gguf-named-folder",
        "eval-adapter-as-model"])
def test_wrong_model_folders_say_what_they_are(refused, argv, expect):
    line = refused(*argv, expect=tuple(expect))
    assert "cannot load a tokenizer" not in line


# ---- 6. LoRA knobs at values that make no LoRA are refused with the flag and the limit

def test_rank_above_the_layer_width_and_nonpositive_alpha_are_refused(refused):
    train = ["train-lora", "--model", "{fx}/base", "--data", "{fx}/data/mc.jsonl", "--output", "{out}", "--steps", "1"]
    line = refused(*train, "--rank", "100000", expect=("--rank 100000", "min(out, in) = "))
    assert "k_proj" in line  # the tiny Llama's narrowest projection (grouped KV heads)
    refused(*train, "--batch-size", "100000000000000000000", expect=("--batch-size", "4096"))
    refused(*train, "--alpha", "0", expect=("--alpha", "positive"))
    refused(*train, "--alpha", "-3", expect=("--alpha", "positive"))
    distill = ["transfer-lora", "--method", "distill", "--prompts", "generic", "--adapter", "{fx}/lora",
               "--source-base", "{fx}/base", "--target-base", "{fx}/ft", "-o", "{out}", "--device", "cpu"]
    refused(*distill, "--alpha", "-1", expect=("--alpha", "positive"))
    refused(*distill, "--rank", "100000", expect=("--rank 100000", "min(out, in)"))


def test_the_rank_limit_follows_the_targeted_layers():
    import torch

    from paw.errors import PawError
    from paw.validate import lora_layer_shapes, lora_rank

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.lm_head = (torch.nn.Linear(32, 32), torch.nn.Linear(32, 8),
                                                      torch.nn.Linear(32, 300))

        def get_output_embeddings(self):
            return self.lm_head

    model = Tiny()
    assert lora_layer_shapes(model, "all-linear") == {"q_proj": (32, 32), "k_proj": (8, 32)}  # no head
    assert lora_layer_shapes(model, ["q_proj"]) == {"q_proj": (32, 32)}
    assert lora_layer_shapes(model, r"k_.*") == {"k_proj": (8, 32)}
    lora_rank("--rank", 32, model, ["q_proj"])
    lora_rank("--rank", 8, model, "all-linear")
    with pytest.raises(PawError, match=r"--rank 9 is above min\(out, in\) = 8 of the smallest targeted layer k_proj"):
        lora_rank("--rank", 9, model, "all-linear")


# ---- 7. usage errors read like every other error: "error: ...", exit code 2

def _command_paths() -> list[list[str]]:
    from paw.cli import app

    paths = []

    def walk(command, prefix):
        subs = getattr(command, "commands", None)
        for name, sub in (subs or {}).items():
            walk(sub, [*prefix, name])
        if not subs:
            paths.append(prefix)

    walk(typer.main.get_command(app), [])
    return paths


def test_usage_errors_are_one_lowercase_error_line(cli):
    for path in _command_paths():
        for extra in (["--no-such-flag"], ["--seed", "x"], ["--device"]):
            res = cli(*path, *extra)
            lines = res.stderr.strip().splitlines()
            assert res.exit_code == 2, (path, extra, res.stderr)
            assert not CLICK_STYLE.search(res.stdout + res.stderr) and "Traceback" not in res.stderr, (path, extra, res.stderr)
            assert lines and lines[-1].startswith("error: ") and len(lines) == 1, (path, extra, res.stderr)


def test_a_group_without_its_command_ends_in_one_error_line(cli):
    for group in ([], ["bpe"], ["zoo"], ["adapter"], ["bench"]):
        res = cli(*group)
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and "Usage:" in res.stderr, (group, res.stderr)
        assert lines[-1].startswith(f"error: {' '.join(['paw', *group])}: missing command ("), lines[-1]
        assert len([x for x in lines if x.startswith("error:")]) == 1


# ---- 8. the bad-input table and these cases: nothing ends in "unexpected"

def test_the_table_fails_on_unexpected():
    """The table's own check (test_bad_inputs.py) refuses an 'unexpected' line; it covers every command."""
    import inspect

    from tests.reliability import test_bad_inputs

    assert '"unexpected" not in lines[-1]' in inspect.getsource(test_bad_inputs.test_bad_input)
    commands = {argv[0] for _, argv, _ in TABLE}
    assert {"merge", "task-vectors", "transfer-lora", "adapter", "eval", "train-lora", "bpe", "zoo"} <= commands
