"""Open a GGUF file (llama.cpp's single-file format) as a PAW checkpoint, config and tokenizer.

A GGUF holds the weights (often block-quantized), the architecture's hyper-parameters and the
tokenizer in one file, under llama.cpp's names (``blk.3.attn_q.weight``). PAW sees it as any other
model: :func:`open_gguf` gives a lazy mapping of **Hugging Face** names to dequantized float32
tensors, one tensor at a time, so opening Gemma-3-270M needs memory for its embedding matrix, not
for the model.

Who does what, so that nothing here is a private copy of llama.cpp's conventions:

- the header and tensor table are parsed here (a few hundred bytes per tensor, checked against
  the file size); string arrays such as the 262k-token vocabulary are skipped, not decoded;
- ``gguf`` (llama.cpp's Python package) dequantizes each block type;
- ``transformers`` maps GGUF keys to config fields (``GGUF_CONFIG_MAPPING``), GGUF tensor names
  to Hugging Face names (``get_gguf_hf_weights_map``), undoes llama.cpp's value transforms
  (``TENSOR_PROCESSORS``: the rotary Q/K row permutation of Llama, the ``w + 1`` norms of Gemma)
  and builds the tokenizer (``AutoTokenizer.from_pretrained(..., gguf_file=...)``).

>>> ckpt = open_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")          # doctest: +SKIP
>>> ckpt.shape("model.layers.0.self_attn.q_proj.weight")           # doctest: +SKIP
(576, 576)
"""

from __future__ import annotations

import atexit
import functools
import shutil
import struct
import tempfile
from math import prod
from pathlib import Path
from typing import Any, NamedTuple

from paw.errors import PawError

__all__ = ["SUPPORTED_ARCHITECTURES", "GgufHeader", "read_gguf_header", "open_gguf", "gguf_config",
           "gguf_side_folder", "load_gguf_model", "is_gguf", "write_hf_folder"]

# GGUF ``general.architecture`` values PAW reads: transformers maps their names and undoes their
# llama.cpp transforms, and PAW's transfer/merge code knows the Hugging Face family they become.
SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3")
_MODEL_TYPE = {"gemma3": "gemma3_text"}  # the GGUF holds Gemma 3's text backbone only
_VERSIONS = (2, 3)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_CHUNK_BYTES = 16 << 20  # dequantize big tensors this many output bytes at a time


def is_gguf(path: str | Path) -> bool:
    """True for a path ending in ``.gguf`` (the only way llama.cpp names them)."""
    return str(path).lower().endswith(".gguf")


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


class _Cursor:
    """Sequential little-endian reads over the head of a file, growing the buffer on demand."""

    def __init__(self, path: Path):
        self.path, self.size = path, path.stat().st_size
        self._file = open(path, "rb")
        self.buf, self.pos = b"", 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            if self.pos + n > self.size:
                raise PawError("not a readable GGUF file: header runs past the end of the file (truncated)",
                               path=self.path)
            self._file.seek(len(self.buf))
            self.buf += self._file.read(max(self.pos + n - len(self.buf), 4 << 20))
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.unpack("<Q"))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PawError("not a readable GGUF file: a key or name is not UTF-8", path=self.path) from None

    def skip_string(self) -> None:
        length = self.unpack("<Q")  # read first: ``pos += unpack()`` would add to the old pos
        self.pos += length

    def value(self, vtype: int) -> Any:
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.unpack("<I"), self.unpack("<Q")
            if etype == _STRING and count <= 64:
                return [self.string() for _ in range(count)]
            if etype == _STRING:  # a vocabulary or merge table: walk it, keep its length
                for _ in range(count):
                    self.skip_string()
                return count
            if etype not in _SCALAR:
                raise PawError(f"not a readable GGUF file: array of value type {etype}", path=self.path)
            fmt = _SCALAR[etype]
            raw = self.take(count * struct.calcsize(fmt))
            return list(struct.unpack(f"<{count}{fmt[1]}", raw)) if count <= 4096 else count
        raise PawError(f"not a readable GGUF file: unknown value type {vtype}", path=self.path)

    def close(self) -> None:
        self._file.close()


def read_gguf_header(path: str | Path) -> GgufHeader:
    """Metadata and tensor table of a GGUF file, checked against its size; no tensor data is read."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    cur = _Cursor(path)
    try:
        if cur.take(4) != b"GGUF":
            raise PawError("not a GGUF file (no GGUF magic bytes at the start)", path=path)
        version = cur.unpack("<I")
        if version not in _VERSIONS:
            raise PawError(f"GGUF version {version} is not supported (PAW reads versions 2 and 3)", path=path)
        n_tensors, n_kv = cur.unpack("<Q"), cur.unpack("<Q")
        metadata = {}
        for _ in range(n_kv):
            key = cur.string()
            metadata[key] = cur.value(cur.unpack("<I"))
        raw = []
        for _ in range(n_tensors):
            name = cur.string()
            dims = [cur.unpack("<Q") for _ in range(cur.unpack("<I"))]
            raw.append((name, tuple(reversed(dims)), cur.unpack("<I"), cur.unpack("<Q")))
        align = int(metadata.get("general.alignment", 32))
        data_start = (cur.pos + align - 1) // align * align
    finally:
        cur.close()
    tensors = {}
    for name, shape, ggml_type, offset in raw:
        try:
            qtype = GGMLQuantizationType(ggml_type)
            block, block_bytes = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise PawError(f"tensor {name!r} has unknown ggml type {ggml_type}", path=path) from None
        nbytes = prod(shape) // block * block_bytes
        if data_start + offset + nbytes > cur.size:
            raise PawError(f"tensor {name!r} ends past the end of the file (truncated)", path=path)
        tensors[name] = TensorEntry(name, shape, ggml_type, data_start + offset, nbytes)
    return GgufHeader(path, metadata, tensors)


@functools.cache
def _dequantizable(ggml_type: int) -> bool:
    """Whether the ``gguf`` package can dequantize this type (tried on one block of zeros)."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize

    qtype = GGMLQuantizationType(ggml_type)
    try:
        dequantize(np.zeros((1, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8), qtype)
    except (NotImplementedError, KeyError, ValueError):
        return False
    return True


def _type_name(ggml_type: int) -> str:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType(ggml_type).name


def _config_dict(header: GgufHeader) -> dict[str, Any]:
    """The transformers config fields the GGUF metadata implies (transformers' own key mapping)."""
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    arch = header.architecture
    if arch not in SUPPORTED_ARCHITECTURES or arch not in GGUF_CONFIG_MAPPING:
        raise PawError(f"GGUF architecture {arch!r} is not supported (PAW reads "
                       f"{', '.join(SUPPORTED_ARCHITECTURES)})", path=header.path)
    fields: dict[str, Any] = dict(GGUF_CONFIG_DEFAULTS_MAPPING.get(arch, {}))
    for key, value in header.metadata.items():
        prefix, _, rest = key.partition(".")
        if prefix not in (arch, "tokenizer"):
            continue
        target = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest)
        if isinstance(target, str):
            fields[target] = value
    fields["tie_word_embeddings"] = "output.weight" not in header.tensors
    if "vocab_size" not in fields and isinstance(header.metadata.get("tokenizer.ggml.tokens"), int):
        fields["vocab_size"] = header.metadata["tokenizer.ggml.tokens"]
    fields.pop("rotary_dim", None)  # llama's rope.dimension_count; not a Llama config field
    return fields


def gguf_config(path: str | Path):
    """The ``transformers`` config object of a GGUF file (``AutoConfig.for_model`` + its metadata)."""
    return _config_and_header(str(Path(path).resolve()))[0]


@functools.cache
def _config_and_header(path: str):
    from transformers import AutoConfig

    header = read_gguf_header(path)
    fields = _config_dict(header)
    model_type = _MODEL_TYPE.get(header.architecture, header.architecture)
    try:
        config = AutoConfig.for_model(model_type, **fields)
    except (ValueError, TypeError) as err:
        raise PawError(f"cannot build a {model_type} config from the GGUF metadata ({err})", path=path) from None
    return config, header


@functools.cache
def _name_map(path: str) -> dict[str, str]:
    """GGUF tensor name -> Hugging Face name, from transformers' mapping over a model on ``meta``."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    config, header = _config_and_header(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    processor = TENSOR_PROCESSORS.get(header.architecture, TensorProcessor)(config=config.to_dict())
    return get_gguf_hf_weights_map(model, processor)


class _GgufTensors:
    """The tensor source behind a GGUF :class:`~paw.io.checkpoint.Checkpoint` (one file)."""

    def __init__(self, path: Path, header: GgufHeader, hf_to_gguf: dict[str, str], config: dict[str, Any]):
        from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

        self.path = path
        self._header = header
        self._gguf_name = hf_to_gguf
        self._processor = TENSOR_PROCESSORS.get(header.architecture, TensorProcessor)(config=config)

    def keys(self) -> list[str]:
        return list(self._gguf_name)

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        return self._header.tensors[self._gguf_name[name]].shape, "float32"

    def get(self, name: str, rows: tuple[int, int] | None = None):
        """Dequantize one tensor to float32, then undo llama.cpp's transform of it, if any.

        ``rows=(start, stop)`` slices the first dimension after the transform: the Q/K row permutation
        mixes rows, so a block is cut from the whole tensor, not read alone.
        """
        import numpy as np
        import torch

        cached = getattr(self, "_last", None)
        if rows is not None and cached is not None and cached[0] == name:
            out = cached[1]  # a streamed pass asks for one tensor block by block: dequantize it once
        else:
            entry = self._header.tensors[self._gguf_name[name]]
            values = _dequantize(self.path, entry).numpy()
            result = self._processor.process(weights=values, name=entry.name).weights
            out = torch.from_numpy(result if result is values else np.ascontiguousarray(result, dtype=np.float32))
        if rows is None or out.ndim == 0:
            self._last = None
            return out
        self._last = (name, out) if rows[1] < out.shape[0] else None  # kept until its last block is read
        return out[rows[0]:rows[1]].clone()


def _dequantize(path: Path, entry: TensorEntry):
    """Read and dequantize ``entry`` in row chunks: memory is the float32 result plus one chunk."""
    import numpy as np
    import torch
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize

    qtype = GGMLQuantizationType(entry.ggml_type)
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    cols = entry.shape[-1] if entry.shape else 1
    rows = prod(entry.shape[:-1]) if len(entry.shape) > 1 else 1
    if cols % block:
        raise PawError(f"tensor {entry.name!r}: row of {cols} values is not whole {qtype.name} blocks", path=path)
    row_bytes = cols // block * block_bytes
    out = torch.empty(rows, cols, dtype=torch.float32)
    step = max(1, _CHUNK_BYTES // (4 * cols))
    with open(path, "rb", buffering=0) as f:
        f.seek(entry.offset)
        for start in range(0, rows, step):
            n = min(step, rows - start)
            buf = np.empty((n, row_bytes), dtype=np.uint8)
            if f.readinto(memoryview(buf).cast("B")) != buf.nbytes:
                raise PawError(f"cannot read tensor {entry.name!r}: file truncated", path=path)
            out[start:start + n] = torch.from_numpy(np.asarray(dequantize(buf, qtype), dtype=np.float32))
    return out.reshape(entry.shape)


def open_gguf(path: str | Path):
    """A lazy :class:`~paw.io.checkpoint.Checkpoint` of a GGUF file, under Hugging Face names.

    Raises a one-line :class:`PawError` for an architecture PAW does not read or a block type the
    ``gguf`` package cannot dequantize, before any tensor is read.
    """
    from paw.io.checkpoint import Checkpoint

    path = Path(path).resolve()
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise PawError("reading GGUF files needs the 'gguf' package (pip install gguf)", path=path) from None
    config, header = _config_and_header(str(path))
    bad = sorted({_type_name(e.ggml_type) for e in header.tensors.values() if not _dequantizable(e.ggml_type)})
    if bad:
        raise PawError(f"GGUF holds tensors of type {', '.join(bad)}, which the gguf package cannot "
                       "dequantize", path=path)
    gguf_to_hf = _name_map(str(path))
    hf_to_gguf = {gguf_to_hf[g]: g for g in header.tensors if g in gguf_to_hf}
    if not hf_to_gguf:
        raise PawError("no tensor of this GGUF maps to a Hugging Face name", path=path)
    source = _GgufTensors(path, header, hf_to_gguf, config.to_dict())
    return Checkpoint(path, dict.fromkeys(hf_to_gguf, source), config.to_dict(), path.stem)


# ----- side files: config.json and the tokenizer, for commands that want a model folder ----------
_SIDE_ROOT: list[Path] = []


@functools.cache
def gguf_side_folder(path: str | Path) -> Path:
    """A folder (temporary, removed at exit) with the GGUF's ``config.json`` and tokenizer files.

    Commands that copy a base model's side files into their output, or open its tokenizer, read
    them here. The tokenizer is transformers' conversion of the GGUF vocabulary (for Gemma-3's
    262k pieces this takes about a minute, once per process).
    """
    from paw.io.lm import quiet_transformers
    from paw.io.manifest import write_json

    path = Path(path).resolve()
    config = gguf_config(path)
    if not _SIDE_ROOT:
        _SIDE_ROOT.append(Path(tempfile.mkdtemp(prefix="paw-gguf-")))
        atexit.register(shutil.rmtree, _SIDE_ROOT[0], True)
    folder = _SIDE_ROOT[0] / f"{len(list(_SIDE_ROOT[0].iterdir())):03d}-{path.stem}"
    folder.mkdir()
    quiet_transformers()
    tokenizer = _gguf_tokenizer(path)
    tokenizer.save_pretrained(folder)
    config_dict = config.to_dict()
    config_dict["architectures"] = [_causal_lm_class(config)]
    write_json(folder / "config.json", config_dict)
    return folder


def _gguf_tokenizer(path: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise PawError(f"cannot build a tokenizer from the GGUF vocabulary ({str(err).splitlines()[0][:200]})",
                       path=path) from None


def _causal_lm_class(config) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]


def load_gguf_model(path: str | Path, *, dtype=None):
    """A ``transformers`` causal LM built from the GGUF's config and filled one tensor at a time."""
    import torch
    from transformers import AutoModelForCausalLM

    ckpt = open_gguf(path)
    config = gguf_config(path)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32)
    params = dict(model.named_parameters())
    from paw import arch

    head = arch.family(config.to_dict()).head
    missing = [n for n in params if n not in ckpt and not (n == head and config.tie_word_embeddings)]
    if missing:
        raise PawError(f"GGUF lacks {len(missing)} weight(s) of the model, e.g. {missing[0]}", path=path)
    with torch.no_grad():
        for name in ckpt:
            if name in params:
                params[name].copy_(ckpt[name])
    model.tie_weights()
    return model.eval()


def write_hf_folder(path: str | Path, output: str | Path, *, dtype: str = "bfloat16", overwrite: bool = False,
                    extra_files: dict[str, Any] | None = None) -> Path:
    """Write a GGUF file as a plain Hugging Face folder: safetensors in ``dtype``, config, tokenizer.

    Streamed: one dequantized tensor at a time goes to the sharded writer. The folder loads with
    ``AutoModelForCausalLM.from_pretrained`` and every PAW command, without the ``gguf`` package.
    """
    import torch

    from paw.io.writer import write_checkpoint

    ckpt = open_gguf(path)
    config = gguf_config(path).to_dict()
    config["architectures"] = [_causal_lm_class(gguf_config(path))]
    config["dtype"] = dtype
    side = gguf_side_folder(path)
    target = getattr(torch, dtype)
    tensors = ((name, ckpt[name].to(target)) for name in ckpt)
    return write_checkpoint(output, tensors, config=config, tokenizer_from=side, overwrite=overwrite,
                            extra_files=extra_files)
