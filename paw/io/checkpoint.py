"""Open any model checkpoint as a lazy mapping ``tensor name -> torch.Tensor``.

Reading is one tensor at a time: a safetensors header is parsed once and each tensor is read from
disk only when asked for, so iterating over an 8B model needs memory for its largest tensor, not
for the model. Supported inputs (see :func:`open_checkpoint`):

- a Hugging Face model folder: ``model.safetensors``, sharded safetensors with
  ``model.safetensors.index.json``, or ``pytorch_model*.bin`` (with or without index);
- a single ``.safetensors`` file;
- a ``.pt`` / ``.pth`` / ``.bin`` file, unpickled with ``weights_only=True`` and ``mmap=True``;
- a llama.cpp ``.gguf`` file, dequantized tensor by tensor under Hugging Face names (:mod:`paw.io.gguf`);
- a Hugging Face model ID already in the local cache (never downloaded).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.io.hub import resolve_path
from paw.io.safetensors_header import DTYPES, read_header, shard_path

SAFETENSORS_DTYPES = {code: torch_name for code, (torch_name, _) in DTYPES.items()}
_TORCH_SUFFIXES = (".bin", ".pt", ".pth")


class _SafetensorsFile:
    """One safetensors file: the header is read and checked once; each tensor is read on demand.

    Tensors are read with plain ``readinto`` calls into a fresh buffer rather than through a
    memory map, so the process holds exactly the tensor asked for: mapped file pages would
    otherwise count against resident memory and grow with every tensor touched.
    """

    def __init__(self, path: Path):
        self.path = path
        header = read_header(path)  # offsets, dtypes and sizes checked (paw.io.safetensors_header)
        self._entries, self._data_start = header.entries, header.data_start

    def keys(self) -> list[str]:
        return list(self._entries)

    def get(self, name: str, rows: tuple[int, int] | None = None):
        """The tensor, or only rows ``[start, stop)`` of its first dimension (read from disk alone)."""
        import torch

        entry = self._entries[name]
        begin, end, shape = entry.begin, entry.end, entry.shape
        if rows is not None and shape:
            row_bytes = (end - begin) // shape[0] if shape[0] else 0
            start, stop = max(0, rows[0]), min(shape[0], rows[1])
            begin, end = begin + start * row_bytes, begin + max(start, stop) * row_bytes
            shape = (max(0, stop - start), *shape[1:])
        buf = torch.empty(end - begin, dtype=torch.uint8)
        view = memoryview(buf.numpy())
        try:
            with open(self.path, "rb", buffering=0) as f:
                f.seek(self._data_start + begin)
                done = 0
                while done < len(view):
                    got = f.readinto(view[done:])
                    if not got:
                        raise PawError(f"cannot read tensor {name!r}: file truncated", path=self.path)
                    done += got
        except OSError as err:
            raise PawError(f"cannot read tensor {name!r}: {err.strerror or err}", path=self.path) from None
        return buf.view(getattr(torch, entry.torch_dtype)).reshape(shape)

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        entry = self._entries[name]
        return entry.shape, entry.torch_dtype


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

    def get(self, name: str, rows: tuple[int, int] | None = None):
        t = self._load()[name]
        return t if rows is None or t.ndim == 0 else t[rows[0]:rows[1]]

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

    def rows(self, name: str, start: int, stop: int):
        """Rows ``[start, stop)`` of tensor ``name`` (its first dimension), reading only those bytes.

        A 0-d tensor is returned whole. Lets a streamed pass hold a block of a 128k-row embedding
        instead of all of it.
        """
        return self._where[name].get(name, (start, stop))

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __contains__(self, name: object) -> bool:
        # a header lookup: Mapping's default __contains__ calls __getitem__, which reads the tensor
        return name in self._where

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
        """True when the output head shares the input embedding (tied by :func:`paw.arch.tied`, no head stored)."""
        return arch.tied(self.config) and arch.family(self.config).head not in self._where


def open_checkpoint(spec: str | Path | Checkpoint) -> Checkpoint:
    """Open a model folder, weight file or cached model ID lazily. Raises :class:`PawError`."""
    if isinstance(spec, Checkpoint):
        return spec
    path = resolve_path(spec, what="model")
    if path.is_file() and path.suffix.lower() == ".gguf":
        from paw.io.gguf import open_gguf

        return open_gguf(path)
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
