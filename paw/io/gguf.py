"""Open a GGUF file (llama.cpp's single-file format) as a PAW checkpoint, config and tokenizer.

A GGUF holds the weights (often block-quantized), the architecture's hyper-parameters and the
tokenizer in one file, under llama.cpp's names (``blk.3.attn_q.weight``). PAW sees it as any other
model: :func:`open_gguf` gives a lazy mapping of **Hugging Face** names to dequantized float32
tensors, one tensor at a time, so opening Gemma-3-270M needs memory for its embedding matrix, not
for the model.

Who does what, so that nothing here is a private copy of llama.cpp's conventions:

- the header and tensor table are parsed by :mod:`paw.io.gguf_header` (every count, length,
  dimension, offset and the alignment checked against the file before anything is allocated);
  string arrays such as the 262k-token vocabulary are skipped, not decoded; the metadata's block
  count and every shape the config implies are checked against the tensor table before
  ``transformers`` builds a config or a model from them;
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
import tempfile
from math import prod
from pathlib import Path
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.io.gguf_header import GgufHeader, TensorEntry, read_gguf_header
from paw.io.hub import quiet_transformers
from paw.io.lazy_checkpoint import Checkpoint
from paw.io.manifest import write_json

__all__ = ["SUPPORTED_ARCHITECTURES", "GgufHeader", "read_gguf_header", "open_gguf", "gguf_config",
           "gguf_side_folder", "load_gguf_model", "is_gguf", "causal_lm_class"]

# GGUF ``general.architecture`` values PAW reads: transformers maps their names and undoes their
# llama.cpp transforms, and PAW's transfer/merge code knows the Hugging Face family they become.
SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3")
_MODEL_TYPE = {"gemma3": "gemma3_text"}  # the GGUF holds Gemma 3's text backbone only
_CHUNK_BYTES = 16 << 20  # dequantize big tensors this many output bytes at a time


def is_gguf(path: str | Path) -> bool:
    """True for a path ending in ``.gguf`` (the only way llama.cpp names them)."""
    return str(path).lower().endswith(".gguf")


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
    _check_block_count(header, fields.get("num_hidden_layers"))
    model_type = _MODEL_TYPE.get(header.architecture, header.architecture)
    try:
        config = AutoConfig.for_model(model_type, **fields)
    except (ValueError, TypeError, ArithmeticError) as err:
        raise PawError(f"cannot build a {model_type} config from the GGUF metadata ({err})", path=path) from None
    return config, header


def _check_block_count(header: GgufHeader, blocks) -> None:
    """``{arch}.block_count`` must be a count of blocks the tensor table holds (``blk.0.`` .. ``blk.N-1.``).

    transformers builds one layer (and per-layer lists) per block before a tensor is read: a 0.6 MB
    file claiming 2^31 - 1 blocks would otherwise grow for minutes.
    """
    key = f"{header.architecture}.block_count"
    held = {int(name.split(".")[1]) for name in header.tensors
            if name.startswith("blk.") and name.split(".")[1].isdigit()}
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 0 < blocks <= len(held) \
            or not set(range(blocks)) <= held:
        raise PawError(f"not a readable GGUF file: {key}: {blocks!r}, but the tensor table holds "
                       f"tensors for {len(held)} blocks", path=header.path)


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
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, TypeError, RuntimeError, ArithmeticError) as err:
        raise PawError(f"cannot build the model the GGUF metadata describes ({str(err).splitlines()[0][:200]})",
                       path=path) from None
    processor = TENSOR_PROCESSORS.get(header.architecture, TensorProcessor)(config=config.to_dict())
    return get_gguf_hf_weights_map(model, processor), {n: tuple(p.shape) for n, p in model.named_parameters()}


def _check_shapes(path: Path, header: GgufHeader, hf_to_gguf: dict[str, str], params: dict[str, tuple],
                  tied_head: str | None) -> None:
    """Every weight of the model the metadata describes is in the file with that shape.

    Checked on the ``meta`` model, before a real one is allocated: the metadata's sizes (hidden size,
    heads, vocabulary) are numbers a writer chose, the tensor table is what the file holds.
    """
    missing = [n for n in params if n not in hf_to_gguf and n != tied_head]
    if missing:
        raise PawError(f"GGUF lacks {len(missing)} weight(s) of the model its metadata describes, e.g. "
                       f"{missing[0]}", path=path)
    for name, shape in params.items():
        if name in hf_to_gguf and header.tensors[hf_to_gguf[name]].shape != shape:
            raise PawError(f"tensor {hf_to_gguf[name]!r} has shape {list(header.tensors[hf_to_gguf[name]].shape)} "
                           f"but the metadata implies {list(shape)} for {name}", path=path)


class _GgufTensors:
    """The tensor source behind a GGUF :class:`~paw.io.lazy_checkpoint.Checkpoint` (one file)."""

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
    """A lazy :class:`~paw.io.lazy_checkpoint.Checkpoint` of a GGUF file, under Hugging Face names.

    Raises a one-line :class:`PawError` for an architecture PAW does not read or a block type the
    ``gguf`` package cannot dequantize, before any tensor is read.
    """
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
    gguf_to_hf, params = _name_map(str(path))
    hf_to_gguf = {gguf_to_hf[g]: g for g in header.tensors if g in gguf_to_hf}
    if not hf_to_gguf:
        raise PawError("no tensor of this GGUF maps to a Hugging Face name", path=path)
    tied_head = arch.family(config.to_dict()).head if config.tie_word_embeddings else None
    _check_shapes(path, header, hf_to_gguf, params, tied_head)
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
    check_gguf_tokenizer(type(tokenizer).from_pretrained(folder), path)   # as written: what everything reads
    config_dict = config.to_dict()
    config_dict["architectures"] = [causal_lm_class(config)]
    write_json(folder / "config.json", config_dict)
    return folder


def _gguf_tokenizer(path: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise PawError(f"cannot build a tokenizer from the GGUF vocabulary ({str(err).splitlines()[0][:200]})",
                       path=path) from None


PROBE = "The capital of France is Paris and the capital of Germany is Berlin."


def check_gguf_tokenizer(tokenizer, path: Path) -> None:
    """Refuse a tokenizer ``transformers`` built from a GGUF vocabulary that splits whole words its
    vocabulary holds into single characters.

    transformers 5.17 does this with Gemma-3-270M's GGUF (5.24 does not): the tokenizer it builds
    works, the one it saves and reads back makes "The capital of France..." one token per character,
    and the model written beside it cost 10.11 nats per token instead of 2.39, silently
    (docs/benchmarks/gpu.md, fourth lease)."""
    import transformers

    vocab = tokenizer.get_vocab()
    whole = [w for w in PROBE.rstrip(".").split() if any(v in vocab for v in (w, "\u2581" + w, "\u0120" + w))]
    ids = tokenizer(PROBE, add_special_tokens=False)["input_ids"]
    if len(whole) >= 3 and len(ids) >= 0.8 * len(PROBE):
        raise PawError(f"transformers {transformers.__version__} built a tokenizer from this GGUF that splits "
                       f"text into single characters ({len(ids)} tokens for {len(PROBE)} characters, though the "
                       f"vocabulary holds {', '.join(repr(w) for w in whole[:3])} as tokens): its GGUF conversion "
                       "is broken for this vocabulary; use another transformers version (5.24 reads Gemma-3's "
                       "correctly)", path=path)


def causal_lm_class(config) -> str:
    """The ``transformers`` class name of a causal LM of this config's model type (``'LlamaForCausalLM'``)."""
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
