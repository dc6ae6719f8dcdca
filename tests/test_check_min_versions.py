"""scripts/check_min_versions.py: what its comparison of two environments' records calls a difference.

The check itself runs in CI (scripts/check_min_versions.sh, two environments, minutes); here its
rules run on hand-made records, and its reader on one zoo folder in this environment.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_min_versions.py"
_spec = importlib.util.spec_from_file_location("check_min_versions", SCRIPT)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

TOKENIZER = {"size": 5, "specials": {"bos": 0, "eos": 1, "pad": None, "unk": None}, "ids": [[3, 4], [4]],
             "ids_special": [[0, 3, 4], [0, 4]], "decoded": ["ab", "b"], "auto_class": "PreTrainedTokenizerFast"}
RECORD = {"versions": {"transformers": "5.24.0"},
          "folders": {"m": {"tokenizer": TOKENIZER, "model": {"class": "LlamaForCausalLM", "logits": [1.0, -2.0]}},
                      "lora": {"adapter": {"base": "m", "logits": [0.5, 0.25], "change": 0.1}}}}


def _other(**changes) -> dict:
    other = copy.deepcopy(RECORD)
    other["versions"] = {"transformers": "4.45.2"}
    for path, value in changes.items():
        *keys, last = path.split("__")
        target = other["folders"]
        for key in keys:
            target = target[key]
        target[last] = value
    return other


def test_equal_records_and_float_noise_pass():
    assert check.compare(RECORD, _other()) == ([], [])
    assert check.compare(RECORD, _other(m__model__logits=[1.00005, -2.00015])) == ([], [])


def test_ids_decodings_specials_logits_and_failures_are_differences():
    cases = {
        "tokenizer ids differ": _other(m__tokenizer__ids=[[3, 4], [2, 2]]),
        "tokenizer ids_special differ": _other(m__tokenizer__ids_special=[[3, 4], [0, 4]]),
        "tokenizer decoded differ": _other(m__tokenizer__decoded=["ab", "b "]),
        "tokenizer specials differ": _other(m__tokenizer__specials={"bos": 0, "eos": 2, "pad": None, "unk": None}),
        "model logit 1 is -2.0 and -2.001": _other(m__model__logits=[1.0, -2.001]),
        "adapter logit 0 is 0.5 and 0.4": _other(lora__adapter__logits=[0.4, 0.25]),
        "model class LlamaForCausalLM and MistralForCausalLM": _other(m__model__class="MistralForCausalLM"),
        "lora: second: TypeError: unexpected key": _other(lora={"error": "TypeError: unexpected key"}),
    }
    for expected, other in cases.items():
        diffs, _ = check.compare(RECORD, other)
        assert len(diffs) == 1 and expected in diffs[0], (expected, diffs)
    missing = _other()
    del missing["folders"]["lora"]
    assert check.compare(RECORD, missing)[0] == ["lora: second: missing"]


def test_a_model_specific_auto_class_is_a_note():
    """transformers 5 opens a qwen2 folder with Qwen2Tokenizer whatever tokenizer_config.json says."""
    over = _other(m__tokenizer__auto_overrides={"class": "Qwen2Tokenizer", "model_type": "qwen2"})
    diffs, notes = check.compare(RECORD, over)
    assert diffs == [] and len(notes) == 1 and "4.45.2 AutoTokenizer opens it as Qwen2Tokenizer" in notes[0]


def test_reads_a_zoo_folder_and_its_lora(tiny_llama, tiny_lora):
    root = tiny_llama.parent
    names = {p.relative_to(root).as_posix() for p in check.folders(root)}
    assert {tiny_llama.name, tiny_lora.name} <= names
    model = check.check(tiny_llama, root)
    assert model["tokenizer"]["decoded"][0] == check.TEXTS[0] and "auto_overrides" not in model["tokenizer"]
    assert model["model"]["class"] == "LlamaForCausalLM" and len(model["model"]["logits"]) == 300
    adapter = check.check(tiny_lora, root)["adapter"]
    assert adapter["change"] > 0.01  # the LoRA was applied
