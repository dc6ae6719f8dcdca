"""The one safetensors header reader of PAW, checked as strictly as the ``safetensors`` library.

A safetensors file is ``u64 little-endian n`` + ``n`` bytes of JSON + the tensor bytes. The JSON
maps each tensor name to ``{"dtype": "BF16", "shape": [4, 8], "data_offsets": [begin, end]}``
(offsets into the byte section) plus an optional ``__metadata__`` of strings. Reading a header
costs a few kilobytes whatever the model size, so every command checks it before trusting it:

- offsets are non-negative integers with ``begin <= end``; sorted, they tile the byte section
  exactly from 0 to its end (no overlap, no gap, nothing outside the file);
- the dtype is known and ``numel(shape) * itemsize == end - begin``;
- shard file names in an index stay inside the model folder.

A header that breaks a rule is a :class:`~paw.errors.PawError` naming the file and the tensor;
negative, overlapping or string offsets would otherwise read header bytes as weights or crash.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError

# safetensors dtype code -> (torch dtype name, bytes per element)
DTYPES = {
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1), "U8": ("uint8", 1),
    "BOOL": ("bool", 1), "F8_E4M3": ("float8_e4m3fn", 1), "F8_E5M2": ("float8_e5m2", 1),
    "U16": ("uint16", 2), "U32": ("uint32", 4), "U64": ("uint64", 8),
}
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
MAX_DIMS = 64                   # torch's limit on a tensor's dimensions


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the header: its dtype code, shape and byte range within the data section."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def torch_dtype(self) -> str:
        """``'bfloat16'`` for ``BF16``: the name of the ``torch`` attribute."""
        return DTYPES[self.dtype][0]


@dataclass(frozen=True)
class SafetensorsHeader:
    """A checked header: tensors in file order, where their bytes start, and the metadata."""

    path: Path
    entries: dict[str, TensorEntry]
    data_start: int                 # file offset of byte 0 of the data section
    metadata: dict[str, str]


def read_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Read and check the header of the safetensors file at ``path``. Raises :class:`PawError`."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or n > MAX_HEADER_BYTES or 8 + n > size:
                _bad(path, "header length does not fit the file")
            raw = f.read(n)
    except OSError as err:
        raise PawError(f"cannot read: {err.strerror or err}", path=path) from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:  # ValueError: 5000-digit integers
        _bad(path, f"header is not JSON ({type(err).__name__})")
    if not isinstance(header, dict):
        _bad(path, "header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        _bad(path, "__metadata__ is not a mapping of strings")
    entries = {name: _entry(path, name, value) for name, value in header.items()}
    _check_tiling(path, entries, size - 8 - n)
    return SafetensorsHeader(path, entries, 8 + n, metadata)


def _entry(path: Path, name: str, value) -> TensorEntry:
    if not isinstance(value, dict):
        _bad(path, f"entry {name!r} is not an object")
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        _bad(path, f"tensor {name!r} has dtype {dtype!r}, not one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(_natural(d) for d in shape):
        _bad(path, f"tensor {name!r} has shape {str(shape)[:80]}, not a list of non-negative integers")
    if len(shape) > MAX_DIMS:
        _bad(path, f"tensor {name!r} has {len(shape)} dimensions (at most {MAX_DIMS})")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_natural(o) for o in offsets) \
            or offsets[0] > offsets[1]:
        _bad(path, f"tensor {name!r} has data_offsets {offsets!r}, not two non-negative integers "
                   "[begin, end] with begin <= end")
    begin, end = offsets
    expected = _nbytes(shape, DTYPES[dtype][1])
    if end - begin != expected:
        _bad(path, f"tensor {name!r} has {end - begin} bytes for shape {str(shape)[:80]} of {dtype} "
                   f"({expected if expected < 2**64 else 'more than 2^64'} expected)")
    return TensorEntry(dtype, tuple(shape), begin, end)


def _nbytes(shape: list[int], itemsize: int) -> int:
    """``numel * itemsize``, stopping once past 2^64 (no file is larger): 64 dimensions of 4,300
    digits each would otherwise cost a long big-integer product per tensor."""
    if 0 in shape:
        return 0
    n = itemsize
    for d in shape:
        n *= d
        if n > 2**64:
            break
    return n


def _natural(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_tiling(path: Path, entries: dict[str, TensorEntry], data_size: int) -> None:
    """Sorted by offset, tensors must follow each other exactly and end with the file."""
    at = 0
    for name, e in sorted(entries.items(), key=lambda item: (item[1].begin, item[1].end)):
        if e.begin < at:
            _bad(path, f"tensor {name!r} overlaps the tensor before it (bytes {e.begin}-{e.end})")
        if e.begin > at:
            _bad(path, f"a gap of {e.begin - at} bytes before tensor {name!r}")
        at = e.end
    if at > data_size:
        _bad(path, f"tensors need {at} bytes but the file holds {data_size} after the header (truncated)")
    if at < data_size:
        _bad(path, f"{data_size - at} bytes after the last tensor belong to none")


def _bad(path: Path, why: str):
    raise PawError(f"not a readable safetensors file: corrupt or truncated header ({why})", path=path)


def shard_path(folder: Path, name, *, index: Path) -> Path:
    """``folder / name`` for a shard named in an index, refused unless it stays inside ``folder``."""
    if not isinstance(name, str) or not name or os.path.isabs(name) \
            or ".." in Path(name).parts or "\\" in name:
        raise PawError(f"index names shard {name!r}, which is not a file name inside the model folder",
                       path=index)
    shard = folder / name
    real_folder = os.path.realpath(folder)
    if not os.path.realpath(shard).startswith(real_folder.rstrip(os.sep) + os.sep):
        raise PawError(f"index names shard {name!r}, which resolves outside the model folder", path=index)
    return shard
