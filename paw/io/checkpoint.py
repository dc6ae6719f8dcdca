"""Open any model checkpoint as a lazy mapping ``tensor name -> torch.Tensor``.

Reading is one tensor at a time: safetensors files are memory-mapped and a tensor is only copied
out when asked for, so iterating over an 8B model needs memory for its largest tensor, not for the
model. Supported inputs (see :func:`open_checkpoint`):

- a Hugging Face model folder: ``model.safetensors``, sharded safetensors with
  ``model.safetensors.index.json``, or ``pytorch_model*.bin`` (with or without index);
- a single ``.safetensors`` file;
- a ``.pt`` / ``.pth`` / ``.bin`` file, unpickled with ``weights_only=True`` and ``mmap=True``;
- a Hugging Face model ID already in the local cache (never downloaded).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.io.hub import resolve_path

SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
_TORCH_SUFFIXES = (".bin", ".pt", ".pth")


class _SafetensorsFile:
    """One memory-mapped safetensors file; the header is parsed once, tensors copied on demand."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self.path = path
        try:
            self._handle = safe_open(str(path), framework="pt", device="cpu")
            self._keys = list(self._handle.keys())
        except Exception as err:
            raise PawError(f"not a readable safetensors file: corrupt or truncated header ({err})",
                           path=path) from None

    def keys(self) -> list[str]:
        return self._keys

    def get(self, name: str):
        try:
            return self._handle.get_tensor(name)
        except Exception as err:
            raise PawError(f"cannot read tensor {name!r}: file truncated or corrupt ({err})",
                           path=self.path) from None

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        sl = self._handle.get_slice(name)
        return tuple(sl.get_shape()), SAFETENSORS_DTYPES.get(sl.get_dtype(), sl.get_dtype().lower())


class _TorchFile:
    """A pickled state dict, loaded with ``weights_only=True`` (memory-mapped where torch allows)."""

    def __init__(self, path: Path):
        self.path = path
        self._tensors: dict | None = None

    def _load(self) -> dict:
        if self._tensors is None:
            self._tensors = _load_pickle(self.path)
        return self._tensors

    def keys(self) -> list[str]:
        return list(self._load())

    def get(self, name: str):
        return self._load()[name]

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        t = self._load()[name]
        return tuple(t.shape), str(t.dtype).removeprefix("torch.")


def _load_pickle(path: Path) -> dict:
    import pickle

    import torch

    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as err:  # legacy (non-zip) format cannot be memory-mapped
            if "mmap" not in str(err):
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise PawError("refusing to unpickle: not a plain tensor state dict (PAW loads pickles only "
                       f"with weights_only=True; convert it to safetensors) [{str(err).splitlines()[0]}]",
                       path=path) from None
    except Exception as err:
        raise PawError(f"not a readable PyTorch checkpoint ({type(err).__name__}: "
                       f"{str(err).splitlines()[0] if str(err) else ''})", path=path) from None
    return _tensor_dict(obj, path)


def _tensor_dict(obj: Any, path: Path) -> dict:
    import torch

    if isinstance(obj, Mapping):
        for wrapper in ("state_dict", "model", "module"):  # common training-script wrappers
            inner = obj.get(wrapper)
            if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor) for v in inner.values()):
                obj = inner
                break
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if tensors:
            return tensors
    raise PawError("holds no tensors by name (expected a state dict)", path=path)


class Checkpoint(Mapping):
    """Lazy ``name -> tensor``; also ``shape(name)``, ``dtype(name)`` and the model's ``config``."""

    def __init__(self, path: Path, files: dict[str, Any], config: dict | None, name: str):
        self.path = path
        self.name = name
        self.config = config
        self._where = files  # tensor name -> file object

    def __getitem__(self, name: str):
        try:
            source = self._where[name]
        except KeyError:
            raise KeyError(name) from None
        return source.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, {len(self)} tensors)"

    def shape(self, name: str) -> tuple[int, ...]:
        return self._where[name].meta(name)[0]

    def dtype(self, name: str) -> str:
        """dtype as a string without ``torch.`` (``'bfloat16'``), read from the header only."""
        return self._where[name].meta(name)[1]

    def numel(self, name: str) -> int:
        n = 1
        for d in self.shape(name):
            n *= d
        return n

    @property
    def files(self) -> list[Path]:
        return sorted({src.path for src in self._where.values()})

    @property
    def tied_embeddings(self) -> bool:
        """True when the output head shares the input embedding (no separate ``lm_head`` stored)."""
        cfg = self.config or {}
        tie = cfg.get("tie_word_embeddings", cfg.get("text_config", {}).get("tie_word_embeddings"))
        return bool(tie) and "lm_head.weight" not in self._where


def open_checkpoint(spec: str | Path | Checkpoint) -> Checkpoint:
    """Open a model folder, weight file or cached model ID lazily. Raises :class:`PawError`."""
    if isinstance(spec, Checkpoint):
        return spec
    path = resolve_path(spec, what="model")
    if path.is_dir():
        files = _weight_files(path)
        config = read_json_if_exists(path / "config.json")
        name = path.name if path.name != "" else "model"
        if "snapshots" in path.parts:  # HF cache: models--org--name/snapshots/<hash>
            name = path.parent.parent.name.split("--")[-1]
    else:
        files = [path]
        config = read_json_if_exists(path.parent / "config.json")
        name = path.stem
    where: dict[str, Any] = {}
    for file in files:
        source = _SafetensorsFile(file) if file.suffix == ".safetensors" else _TorchFile(file)
        for key in source.keys():
            where.setdefault(key, source)
    if not where:
        raise PawError("no tensors found in the weight files", path=path)
    return Checkpoint(path, where, config, name)


def _weight_files(folder: Path) -> list[Path]:
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = folder / index_name
        if index.exists():
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise PawError("index has no 'weight_map'", path=index)
            shards = [folder / f for f in sorted(set(weight_map.values()))]
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
    raise PawError("no model weights in this folder (looked for *.safetensors with or without "
                   "model.safetensors.index.json, pytorch_model*.bin, *.pt, *.pth)", path=folder)


def read_json(path: str | Path) -> dict:
    """Read a JSON object; a missing or malformed file is a one-line PawError naming it."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise PawError("file not found", path=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PawError(f"not valid JSON ({err})", path=path) from None
    if not isinstance(data, dict):
        raise PawError("expected a JSON object at the top level", path=path)
    return data


def read_json_if_exists(path: Path) -> dict | None:
    return read_json(path) if path.exists() else None
