"""A model checkpoint as a lazy mapping ``tensor name -> torch.Tensor``, over one reader per weight file.

Reading is one tensor at a time: a safetensors header is parsed once and each tensor is read from
disk only when asked for, so iterating over an 8B model needs memory for its largest tensor, not
for the model. A reader is any object with ``keys()``, ``get(name, rows)`` and ``meta(name)``:
:class:`SafetensorsFile`, :class:`TorchFile` (a pickled state dict, ``weights_only=True``) or the
GGUF reader of :mod:`paw.io.gguf`. Which reader opens a path is decided in one place,
:func:`paw.io.checkpoint.open_checkpoint`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.io.safetensors_header import DTYPES, read_header

SAFETENSORS_DTYPES = {code: torch_name for code, (torch_name, _) in DTYPES.items()}


class SafetensorsFile:
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


class TorchFile:
    """A pickled state dict, loaded with ``weights_only=True`` (memory-mapped where torch allows)."""

    def __init__(self, path: Path):
        self.path = path
        self._tensors: dict | None = None

    def _load(self) -> dict:
        if self._tensors is None:
            self._tensors = load_pickle(self.path)
        return self._tensors

    def keys(self) -> list[str]:
        return list(self._load())

    def get(self, name: str, rows: tuple[int, int] | None = None):
        t = self._load()[name]
        return t if rows is None or t.ndim == 0 else t[rows[0]:rows[1]]

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        t = self._load()[name]
        return tuple(t.shape), str(t.dtype).removeprefix("torch.")


def load_pickle(path: Path) -> dict:
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
