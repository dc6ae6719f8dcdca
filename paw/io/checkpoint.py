"""Open any model checkpoint: which format reader opens a path, found once, here.

The result is a lazy :class:`~paw.io.lazy_checkpoint.Checkpoint` (``tensor name -> torch.Tensor``,
one tensor read at a time). Supported inputs (see :func:`open_checkpoint`):

- a Hugging Face model folder: ``model.safetensors``, sharded safetensors with
  ``model.safetensors.index.json``, or ``pytorch_model*.bin`` (with or without index);
- a single ``.safetensors`` file;
- a ``.pt`` / ``.pth`` / ``.bin`` file, unpickled with ``weights_only=True`` and ``mmap=True``;
- a llama.cpp ``.gguf`` file, dequantized tensor by tensor under Hugging Face names (:mod:`paw.io.gguf`);
- a Hugging Face model ID already in the local cache (never downloaded).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.io.gguf import open_gguf
from paw.io.hub import resolve_path
from paw.io.json_file import read_json, read_json_if_exists
from paw.io.lazy_checkpoint import Checkpoint, SafetensorsFile, TorchFile
from paw.io.safetensors_header import shard_path

__all__ = ["Checkpoint", "distinct_names", "folder_hint", "open_checkpoint"]


def open_checkpoint(spec: str | Path | Checkpoint) -> Checkpoint:
    """Open a model folder, weight file or cached model ID lazily. Raises :class:`PawError`."""
    if isinstance(spec, Checkpoint):
        return spec
    path = resolve_path(spec, what="model")
    if path.is_file() and path.suffix.lower() == ".gguf":
        return open_gguf(path)
    if path.is_dir():
        files = _weight_files(path)
        config = read_json_if_exists(path / "config.json")
        name = path.name if path.name not in ("", ".", "..") else (path.resolve().name or "model")  # '..': its own name
        if "snapshots" in path.parts:  # HF cache: models--org--name/snapshots/<hash>
            name = path.parent.parent.name.split("--")[-1]
    else:
        files = [_weight_file(path)]
        config = read_json_if_exists(path.parent / "config.json")
        name = path.stem
    where: dict[str, Any] = {}
    for file in files:
        source = SafetensorsFile(file) if file.suffix == ".safetensors" else TorchFile(file)
        for key in source.keys():
            where.setdefault(key, source)
    if not where:
        raise PawError("no tensors found in the weight files", path=path)
    return Checkpoint(path, where, config, name)


def distinct_names(checkpoints: Sequence[Checkpoint]) -> list[Checkpoint]:
    """Rename checkpoints that share a name but not a path by their shortest distinguishing path.

    ``a/base`` and ``b/base`` are both ``base`` by folder name, so a message about one would name
    either; they become ``a/base`` and ``b/base``. The same path given twice keeps its name.
    """
    groups: dict[str, list[Checkpoint]] = {}
    for ckpt in checkpoints:
        groups.setdefault(ckpt.name, []).append(ckpt)
    for group in groups.values():
        parts = {ckpt.path.resolve().parts for ckpt in group}
        if len(parts) < 2:
            continue
        for depth in range(2, max(map(len, parts)) + 1):
            if len({p[-depth:] for p in parts}) == len(parts):
                break
        for ckpt in group:
            ckpt.name = "/".join(ckpt.path.resolve().parts[-depth:]).removeprefix("//")
    return list(checkpoints)


def _weight_file(path: Path) -> Path:
    """``path`` if it can be a weight file: by its suffix, or a PyTorch zip or legacy pickle (first byte 0x80).

    A ``.jsonl``, YAML or text file handed over as a model is named as what it is, not passed to the
    unpickler (whose "refusing to unpickle" or IndexError said nothing about the mistake).
    """
    if path.suffix.lower() in (".safetensors", ".bin", ".pt", ".pth"):  # their own readers name what is wrong
        return path
    with path.open("rb") as f:
        head = f.read(4)
    if not (head.startswith(b"PK") or head[:1] == b"\x80"):
        raise PawError("not a model: a model is a folder (config.json and weights), a .safetensors or .gguf file, "
                       "or a PyTorch .bin/.pt/.pth file, and this file is none of these", path=path)
    return path


def _weight_files(folder: Path) -> list[Path]:
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = folder / index_name
        if index.exists():
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise PawError("index has no 'weight_map'", path=index)
            shards = sorted({shard_path(folder, f, index=index) for f in weight_map.values()})
            missing = [s.name for s in shards if not s.exists()]
            if missing:
                raise PawError(f"index lists shard(s) that are missing: {', '.join(missing[:3])}",
                               path=index)
            return shards
    for pattern in ("model.safetensors", "*.safetensors", "pytorch_model.bin", "pytorch_model*.bin",
                    "*.pt", "*.pth", "*.bin"):
        found = sorted(p for p in folder.glob(pattern) if not p.name.startswith("adapter_"))
        if found:
            return found
    raise PawError("no model weights in this folder" + (folder_hint(folder) or " (looked for *.safetensors with or "
                   "without model.safetensors.index.json, pytorch_model*.bin, *.pt, *.pth)"), path=folder)


def folder_hint(folder: Path) -> str:
    """What a folder that is not the expected model or tokenizer folder is, as ``'; ...'`` (or ``''``).

    A folder named ``x.gguf``, a folder holding only a ``.gguf`` file and a PEFT adapter folder are
    the usual wrong folders; saying so beats a list of the files that were looked for.
    """
    ggufs = sorted(p.name for p in folder.glob("*.gguf") if p.is_file())
    if ggufs:
        return f"; it holds the GGUF file {ggufs[0]}, which PAW reads when given the file itself: pass {folder / ggufs[0]}"
    if folder.suffix.lower() == ".gguf":
        return "; it is a folder named like a GGUF file: PAW reads a .gguf file (model and tokenizer), pass the file itself"
    if (folder / "adapter_config.json").is_file():
        return "; it is a PEFT adapter folder (adapter_config.json): pass it as --adapter and its base model as the model"
    if not any(folder.iterdir()):
        return "; the folder is empty"
    return ""
