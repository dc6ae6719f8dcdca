"""The GGUF header reader: metadata and tensor table, every number checked against the file first.

A GGUF file is ``b"GGUF"``, ``u32 version``, ``u64 tensor_count``, ``u64 kv_count``, then
``kv_count`` metadata entries (``string key, u32 type, value``), ``tensor_count`` tensor entries
(``string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset``), padding to
``general.alignment`` and the tensor data. Strings are ``u64 length`` + UTF-8 bytes.

Every count and length in it is 8 bytes a writer (or an attacker) chooses, so none is trusted: a
0.6 MB file claiming 2^31 - 1 entries used to loop and allocate for minutes. Each one is checked
against the bytes left in the file *before* anything is looped over or allocated:

- a metadata entry needs at least :data:`MIN_KV_BYTES`, a tensor entry :data:`MIN_TENSOR_BYTES`,
  an array element its item size (8 bytes for a string): a count larger than the bytes left allow
  is refused at once;
- a string is never longer than the bytes left; keys are at most 65,535 bytes and tensor names at
  most 63 (the GGUF specification and llama.cpp's ``GGML_MAX_NAME``);
- keys and tensor names are unique, a tensor has at most 4 dimensions (``GGML_MAX_DIMS``) whose
  product fits a signed 64-bit integer, its rows are whole quantization blocks;
- ``general.alignment`` is a positive power of two (llama.cpp's rule; 0 divided by zero);
- every tensor's data is aligned, inside the file and overlaps no other tensor's.

A refusal is one :class:`~paw.errors.PawError` line naming the file and the field. The header is
read through a window of a few MB, so the reader's memory is bounded by that window plus the
metadata it keeps (string arrays such as a 262k-token vocabulary are walked, kept as their length).
"""

from __future__ import annotations

import struct
from math import prod
from pathlib import Path
from typing import Any, NamedTuple

from paw.errors import PawError

__all__ = ["GgufHeader", "TensorEntry", "read_gguf_header", "MIN_KV_BYTES", "MIN_TENSOR_BYTES"]

_VERSIONS = (2, 3)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_INTEGER = {0, 1, 2, 3, 4, 5, 10, 11}
MIN_KV_BYTES = 8 + 4 + 1          # empty key, value type, a one-byte value
MIN_TENSOR_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims = 0, ggml type, offset
MAX_KEY_BYTES = 65_535            # GGUF specification
MAX_NAME_BYTES = 63               # llama.cpp: GGML_MAX_NAME (64) with its terminating NUL
MAX_DIMS = 4                      # GGML_MAX_DIMS
MAX_ELEMENTS = 2**63 - 1          # ggml counts elements in int64
DEFAULT_ALIGNMENT = 32
_KEEP_ARRAY = 4096                # scalar arrays up to this length are kept as lists, longer ones as their length
_KEEP_STRINGS = 64                # string arrays up to this length are kept, longer ones walked
_WINDOW = 4 << 20                 # bytes read from the file at a time


class TensorEntry(NamedTuple):
    name: str  # GGUF name, e.g. ``blk.0.attn_q.weight``
    shape: tuple[int, ...]  # torch order (GGUF stores the fastest dimension first)
    ggml_type: int
    offset: int  # absolute, in the file
    nbytes: int


class GgufHeader(NamedTuple):
    path: Path
    metadata: dict[str, Any]  # string arrays (vocabulary, merges) are kept as their length
    tensors: dict[str, TensorEntry]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))


def _bad(path: Path, field: str, why: str):
    raise PawError(f"not a readable GGUF file: {field}: {why}", path=path)


class _Cursor:
    """Little-endian reads through a sliding window of the file; every length is checked first."""

    def __init__(self, path: Path, file):
        self.path, self._file = path, file
        self.size = path.stat().st_size
        self.pos, self._base, self._buf = 0, 0, b""

    @property
    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, field: str) -> None:
        if n > self.left:
            _bad(self.path, field, f"needs {n:,} bytes but only {self.left:,} are left in the file (truncated "
                                   "or corrupt)")

    def take(self, n: int, field: str) -> bytes:
        self.need(n, field)
        start = self.pos - self._base
        if start + n > len(self._buf):
            have = self._buf[start:] if start < len(self._buf) else b""
            self._file.seek(self.pos + len(have))
            self._buf = have + self._file.read(max(n - len(have), _WINDOW))
            self._base, start = self.pos, 0
            if len(self._buf) < n:
                _bad(self.path, field, "the file ended while it was being read")
        self.pos += n
        return self._buf[start:start + n]

    def skip(self, n: int, field: str) -> None:
        self.need(n, field)
        self.pos += n

    def unpack(self, fmt: str, field: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), field))[0]

    def count(self, field: str, each: int) -> int:
        """A ``u64`` count of items of at least ``each`` bytes, refused if the bytes left cannot hold them."""
        n = self.unpack("<Q", field)
        if n * each > self.left:
            _bad(self.path, field, f"claims {n:,} entries but the {self.left:,} bytes left hold at most "
                                   f"{self.left // each:,}")
        return n

    def string(self, field: str, *, limit: int | None = None) -> str:
        n = self.unpack("<Q", field)
        if limit is not None and n > limit:
            _bad(self.path, field, f"a string of {n:,} bytes (at most {limit:,} allowed)")
        raw = self.take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            _bad(self.path, field, "a string that is not UTF-8")

    def value(self, vtype: int, field: str) -> Any:
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype], field)
        if vtype == _STRING:
            return self.string(field)
        if vtype != _ARRAY:
            _bad(self.path, field, f"unknown value type {vtype}")
        etype = self.unpack("<I", field)
        if etype == _STRING:
            count = self.count(field, 8)
            if count <= _KEEP_STRINGS:
                return [self.string(field) for _ in range(count)]
            for _ in range(count):  # a vocabulary or merge table: walk it, keep its length
                self.skip(self.unpack("<Q", field), field)
            return count
        if etype not in _SCALAR:
            _bad(self.path, field, f"an array of value type {etype}")
        fmt = _SCALAR[etype]
        count = self.count(field, struct.calcsize(fmt))
        if count > _KEEP_ARRAY:
            self.skip(count * struct.calcsize(fmt), field)
            return count
        return list(struct.unpack(f"<{count}{fmt[1]}", self.take(count * struct.calcsize(fmt), field)))


def read_gguf_header(path: str | Path) -> GgufHeader:
    """Metadata and tensor table of a GGUF file, checked against its size; no tensor data is read."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            cur = _Cursor(path, f)
            if cur.left < 4 or cur.take(4, "magic") != b"GGUF":
                raise PawError("not a GGUF file (no GGUF magic bytes at the start)", path=path)
            version = cur.unpack("<I", "version")
            if version not in _VERSIONS:
                raise PawError(f"GGUF version {version} is not supported (PAW reads versions 2 and 3)", path=path)
            n_tensors = cur.unpack("<Q", "tensor_count")
            n_kv = cur.count("kv_count", MIN_KV_BYTES)
            if n_tensors * MIN_TENSOR_BYTES > cur.left:  # checked before the metadata is walked
                _bad(path, "tensor_count", f"claims {n_tensors:,} tensors but the {cur.left:,} bytes left hold "
                                           f"at most {cur.left // MIN_TENSOR_BYTES:,}")
            metadata = _read_metadata(cur, n_kv)
            raw = _read_tensor_infos(cur, n_tensors)
            align = _alignment(path, metadata)
            data_start = (cur.pos + align - 1) // align * align
    except OSError as err:
        raise PawError(f"cannot read: {err.strerror or err}", path=path) from None
    return GgufHeader(path, metadata, _place_tensors(path, raw, data_start, align, cur.size))


def _read_metadata(cur: _Cursor, n_kv: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = cur.string(f"metadata entry {i} key", limit=MAX_KEY_BYTES)
        if key in metadata:
            _bad(cur.path, f"metadata key {key!r}", "appears twice")
        metadata[key] = cur.value(cur.unpack("<I", f"metadata {key!r} type"), f"metadata {key!r}")
    return metadata


def _read_tensor_infos(cur: _Cursor, n_tensors: int) -> list[tuple[str, tuple[int, ...], int, int]]:
    raw, seen = [], set()
    for i in range(n_tensors):
        name = cur.string(f"tensor entry {i} name", limit=MAX_NAME_BYTES)
        field = f"tensor {name!r}"
        if name in seen:
            _bad(cur.path, field, "appears twice in the tensor table")
        seen.add(name)
        n_dims = cur.unpack("<I", f"{field} n_dims")
        if n_dims > MAX_DIMS:
            _bad(cur.path, f"{field} n_dims", f"{n_dims:,} dimensions (GGUF allows at most {MAX_DIMS})")
        dims = [cur.unpack("<Q", f"{field} dims") for _ in range(n_dims)]
        if prod(dims) > MAX_ELEMENTS:
            _bad(cur.path, f"{field} dims", f"{dims} holds more elements than a signed 64-bit count")
        raw.append((name, tuple(reversed(dims)), cur.unpack("<I", f"{field} type"), cur.unpack("<Q", f"{field} offset")))
    return raw


def _alignment(path: Path, metadata: dict[str, Any]) -> int:
    align = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
        _bad(path, "general.alignment", f"{align!r} is not a positive power of two")
    return align


def _place_tensors(path: Path, raw, data_start: int, align: int, size: int) -> dict[str, TensorEntry]:
    """Each tensor's byte range: a known type, whole blocks, aligned, inside the file, no overlap."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    tensors = {}
    for name, shape, ggml_type, offset in raw:
        field = f"tensor {name!r}"
        try:
            block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            raise PawError(f"tensor {name!r} has unknown ggml type {ggml_type}", path=path) from None
        row = shape[-1] if shape else 1
        if row % block:
            _bad(path, f"{field} dims", f"rows of {row} values are not whole blocks of {block}")
        nbytes = prod(shape) // block * block_bytes
        if offset % align:
            _bad(path, f"{field} offset", f"{offset} is not a multiple of the alignment {align}")
        if data_start + offset + nbytes > size:
            raise PawError(f"tensor {name!r} ends past the end of the file (truncated)", path=path)
        tensors[name] = TensorEntry(name, shape, ggml_type, data_start + offset, nbytes)
    end = 0
    for entry in sorted(tensors.values(), key=lambda e: (e.offset, e.nbytes)):
        if entry.offset < end:
            _bad(path, f"tensor {entry.name!r} offset", "its data overlaps the tensor before it")
        end = entry.offset + entry.nbytes
    return tensors
