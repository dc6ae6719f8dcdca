"""Good and bad inputs for every command, built once per session under one folder (``fx``).

Everything the bad-input table reads lives in ``fx``; outputs go elsewhere. The table hashes
``fx`` before and after each case, so a command that writes over an input is caught.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
from pathlib import Path

import pytest


def tree_hash(root: Path) -> str:
    """One digest of every file's path, mode and bytes under ``root`` (symlinks by target)."""
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_symlink():
            h.update(os.readlink(path).encode())
        elif path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _st_bytes(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _corrupt_model(root: Path, name: str, src: Path, edit) -> Path:
    """A copy of model folder ``src`` whose ``model.safetensors`` header is passed through ``edit``."""
    folder = root / name
    shutil.copytree(src, folder)
    st = folder / "model.safetensors"
    raw = st.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    st.write_bytes(edit(header, data))
    return folder


def _first_tensor(header: dict) -> str:
    return min((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])


def _set_offsets(value):
    def edit(header, data):
        header[_first_tensor(header)]["data_offsets"] = value(header[_first_tensor(header)]["data_offsets"])
        return _st_bytes(header, data)
    return edit


def _overlap(header, data):
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    a, b = header[names[0]], header[names[1]]
    if a["dtype"] == b["dtype"] and a["shape"] == b["shape"]:
        b["data_offsets"] = list(a["data_offsets"])
    else:  # same byte count at the other's offset
        size = b["data_offsets"][1] - b["data_offsets"][0]
        b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + size]
    return _st_bytes(header, data)


def _bad_dtype(header, data):
    header[_first_tensor(header)]["dtype"] = "Q7"
    return _st_bytes(header, data)


def _bad_shape(header, data):
    header[_first_tensor(header)]["shape"][0] += 1
    return _st_bytes(header, data)


def _str_shape(header, data):
    header[_first_tensor(header)]["shape"] = ["8", "x"]
    return _st_bytes(header, data)


def _meta_nonstr(header, data):
    header["__metadata__"] = {"format": 3}
    return _st_bytes(header, data)


def _write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _poison(folder: Path, value: float) -> Path:
    """Put ``value`` (nan or inf) into a few entries of one weight of the model in ``folder``."""
    from paw.io.checkpoint import open_checkpoint
    from paw.io.writer import write_checkpoint

    ckpt = open_checkpoint(folder)
    tensors = {k: ckpt[k].clone() for k in ckpt}
    target = "model.layers.0.mlp.down_proj.weight"
    tensors[target].view(-1)[:3] = value
    staging = folder.with_name(folder.name + "-new")
    write_checkpoint(staging, tensors, copy_from=folder, allow_nonfinite=True)
    shutil.rmtree(folder)
    staging.rename(folder)
    return folder


class Evil:
    """Unpickling this runs a shell command; PAW must refuse before that happens."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="session")
def fx(tmp_path_factory, tiny_llama, tiny_lora):
    """The inputs folder (see the module docstring); built once, never written by a command."""
    import torch

    from paw import zoo

    root = tmp_path_factory.mktemp("reliability") / "fx"
    root.mkdir()
    shutil.copytree(tiny_llama, root / "base")
    zoo.fine_tune(root / "base", root / "ft", seed=11, scale=0.02)
    zoo.fine_tune(root / "base", root / "ft2", seed=12, scale=0.03)
    zoo.tiny_model(root / "other", "llama", seed=5, hidden_size=48, num_layers=2)  # another shape
    shutil.copytree(tiny_lora, root / "lora")
    for name, value in (("nan_ft", math.nan), ("inf_ft", math.inf)):
        shutil.copytree(root / "ft", root / name)
        _poison(root / name, value)
    (root / "victim").mkdir()
    shutil.copytree(root / "base", root / "victim" / "base")
    shutil.copytree(root / "ft", root / "victim" / "finetune")

    bad = root / "bad"
    bad.mkdir()
    for name, edit in {
        "neg_offset": _set_offsets(lambda o: [-64, o[1] - o[0] - 64]),
        "str_offset": _set_offsets(lambda o: [str(o[0]), str(o[1])]),
        "float_offset": _set_offsets(lambda o: [float(o[0]), float(o[1]) + 0.5]),
        "past_end": _set_offsets(lambda o: [o[0] + 10**9, o[1] + 10**9]),
        "reversed": _set_offsets(lambda o: [o[1], o[0]]),
        "bool_offset": _set_offsets(lambda o: [False, True]),
        "overlap": _overlap,
        "bad_dtype": _bad_dtype,
        "bad_shape": _bad_shape,
        "str_shape": _str_shape,
        "meta_nonstr": _meta_nonstr,
        "trailing": lambda h, d: _st_bytes(h, d + b"\0" * 16),
        "truncated": lambda h, d: _st_bytes(h, d[: len(d) // 2]),
        "not_json": lambda h, d: struct.pack("<Q", 12) + b"{not json!!}" + d,
        "not_object": lambda h, d: struct.pack("<Q", 2) + b"[]" + d,
        "huge_length": lambda h, d: struct.pack("<Q", 2**62) + d,
        "empty_file": lambda h, d: b"",
    }.items():
        _corrupt_model(bad, name, root / "base", edit)
    _sharded_variants(bad, root / "base")
    (bad / "evil_bin").mkdir()
    shutil.copy(root / "base" / "config.json", bad / "evil_bin" / "config.json")
    torch.save({"model.embed_tokens.weight": Evil(root / "PWNED")}, bad / "evil_bin" / "pytorch_model.bin")
    (bad / "garbage_bin").mkdir()
    shutil.copy(root / "base" / "config.json", bad / "garbage_bin" / "config.json")
    (bad / "garbage_bin" / "pytorch_model.bin").write_bytes(os.urandom(4096))
    (bad / "list_bin").mkdir()
    torch.save([torch.zeros(2)], bad / "list_bin" / "pytorch_model.bin")
    (bad / "empty_dir").mkdir()
    (bad / "config_only").mkdir()
    shutil.copy(root / "base" / "config.json", bad / "config_only" / "config.json")
    _write_json(bad / "bad_config" / "config.json", {"model_type": "llama"})
    (bad / "bad_config" / "config.json").write_text("{not json")
    shutil.copy(root / "base" / "model.safetensors", bad / "bad_config" / "model.safetensors")

    _adapters(root, root / "lora")
    _data(root)
    _tokenizers(root)
    return root


def _sharded_variants(bad: Path, base: Path) -> None:
    """Index files whose shard names leave the folder, are missing, or are not names."""
    from paw.io.checkpoint import open_checkpoint

    names = list(open_checkpoint(base))
    for name, value in {"idx_escape": "../../base/model.safetensors", "idx_abs": "/etc/hostname",
                        "idx_missing": "model-00009-of-00009.safetensors", "idx_int": 7}.items():
        folder = bad / name
        shutil.copytree(base, folder)
        (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
        weight_map = {n: "model-00001-of-00001.safetensors" for n in names}
        weight_map[names[0]] = value
        _write_json(folder / "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map})
    folder = bad / "idx_nomap"
    shutil.copytree(base, folder)
    _write_json(folder / "model.safetensors.index.json", {"weight_map": []})


def _adapters(root: Path, lora: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    ad = root / "adapters"
    ad.mkdir()
    config = json.loads((lora / "adapter_config.json").read_text())

    def variant(name: str, cfg=None, edit=None) -> Path:
        folder = ad / name
        shutil.copytree(lora, folder)
        if cfg is not None:
            (folder / "adapter_config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
        if edit is not None:
            tensors = load_file(folder / "adapter_model.safetensors")
            edit(tensors)
            save_file(tensors, folder / "adapter_model.safetensors")
        return folder

    variant("r_changed", {**config, "r": config["r"] * 2})
    variant("r_string", {**config, "r": "four"})
    variant("r_zero", {**config, "r": 0})
    variant("alpha_nan", json.dumps({**config, "lora_alpha": "x"}).replace('"x"', "NaN"))
    variant("alpha_str", {**config, "lora_alpha": "sixteen"})
    variant("targets_wrong", {**config, "target_modules": ["nothing_like_this"]})
    variant("targets_int", {**config, "target_modules": 5})
    variant("rank_pattern_bad", {**config, "rank_pattern": {"q_proj": "big"}})
    variant("dora", {**config, "use_dora": True})
    variant("ia3", {**config, "peft_type": "IA3"})
    variant("config_not_json", "{not json")
    variant("config_list", "[1, 2]")
    variant("missing_b", edit=lambda t: t.pop(next(k for k in sorted(t) if "lora_B" in k)))
    variant("a_3d", edit=lambda t: t.__setitem__(next(k for k in sorted(t) if "lora_A" in k),
                                                 torch.zeros(4, 2, 2)))

    def poison(t):
        key = next(k for k in sorted(t) if "lora_B" in k)
        t[key] = t[key].clone()
        t[key].view(-1)[0] = math.nan

    variant("nan_tensor", edit=poison)
    folder = variant("bad_weights")
    (folder / "adapter_model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}")
    folder = variant("no_config")
    (folder / "adapter_config.json").unlink()
    folder = variant("no_weights")
    (folder / "adapter_model.safetensors").unlink()
    (ad / "evil_bin").mkdir()
    shutil.copy(lora / "adapter_config.json", ad / "evil_bin" / "adapter_config.json")
    torch.save({"x": Evil(root / "PWNED")}, ad / "evil_bin" / "adapter_model.bin")


def _data(root: Path) -> None:
    data = root / "data"
    data.mkdir()
    items = [{"question": f"What colour is item {i}?", "choices": ["red", "green", "blue"], "answer": i % 3}
             for i in range(6)]
    (data / "mc.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    (data / "binary.jsonl").write_bytes(bytes(range(256)) * 8)
    (data / "empty.jsonl").write_text("")
    (data / "bad_json.jsonl").write_text('{"question": "x", "choices": [\n')
    (data / "no_fields.jsonl").write_text('{"foo": 1}\n')
    (data / "bad_answer.jsonl").write_text('{"question": "q", "choices": ["a", "b"], "answer": 7}\n')
    (data / "list_line.jsonl").write_text("[1, 2, 3]\n")
    (data / "corpus.txt").write_text("hello world, this is a small corpus of text.\n" * 20)
    (data / "text.vocab").write_text("a text file that happens to end in .vocab\n" * 20)
    (data / "binary.txt").write_bytes(bytes(range(128, 256)) * 4)
    (data / "empty.txt").write_text("")
    (data / "tokens.txt").write_text("alpha\nbeta\n")
    _write_json(data / "bad_map.json", {"format": "something-else"})
    (data / "not_json.json").write_text("{{{")
    _write_json(data / "tokens_dict.json", {"a": 1})
    (data / "bad.yaml").write_text("method: [unclosed\n")
    (data / "list.yaml").write_text("- a\n- b\n")
    (data / "unknown_key.yaml").write_text("no_such_key: 1\n")
    (data / "nan_weights.yaml").write_text("weights: [.nan, .nan]\n")


def _tokenizers(root: Path) -> None:
    from tokenizers import Tokenizer, models

    tok = root / "tok"
    tok.mkdir()
    (tok / "unigram").mkdir()
    Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -2.0)], 0)).save(
        str(tok / "unigram" / "tokenizer.json"))
    (tok / "garbage").mkdir()
    (tok / "garbage" / "tokenizer.json").write_text("{\"model\": 12}")
    (tok / "notjson").mkdir()
    (tok / "notjson" / "tokenizer.json").write_bytes(os.urandom(300))
    (tok / "bad.model").write_text("not a paw model\n")
    (tok / "bad.tiktoken").write_text("!!!! notbase64 x\n")
    (tok / "empty.model").write_text("")
