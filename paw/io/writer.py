"""Write tensors as (sharded) safetensors plus ``model.safetensors.index.json``, atomically.

Tensors may come as a mapping or as a stream of ``(name, tensor)`` pairs; a shard is flushed as
soon as it is full, so a streamed merge never holds more than one shard in memory. Shard names and
the index follow the Hugging Face convention, so ``from_pretrained`` loads the folder unchanged.
"""

from __future__ import annotations

import json
import math
import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.io.atomic import atomic_dir
from paw.io.finite import mark_checked, nonfinite_policy, refuse_nonfinite_tensor
from paw.io.gguf import causal_lm_class, gguf_config, gguf_side_folder, open_gguf
from paw.io.hub import TOKENIZER_FILES, resolve_path
from paw.io.manifest import write_json
from paw.io.model_card import Card, write_card
from paw.io.model_config import make_portable_config
from paw.io.reports import save_figure
from paw.io.safetensors_header import DTYPES
from paw.io.tokenizer_config import make_portable

DEFAULT_SHARD_BYTES = 2 * 1024**3
_MODEL_SIDE_FILES = ("config.json", "generation_config.json")


def parse_size(size: int | str) -> int:
    """``'2GB'`` -> 2 * 1024**3, ``'500MB'`` -> 500 * 1024**2, ``123`` -> 123; anything else is a PawError."""
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    else:
        text = str(size).strip().upper()
        factor = 1
        for unit, f in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024), ("B", 1)):
            if text.endswith(unit):
                text, factor = text[: -len(unit)], f
                break
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise PawError(f"--max-shard-size {size!r} is not a size such as 2GB, 500MB or 1000000")
        value = int(number * factor)
    if value <= 0:
        raise PawError(f"--max-shard-size {size!r} must be positive")
    return value


class ShardedWriter:
    """Write tensors into shards of at most ``max_shard_bytes`` and the index at close.

    Each tensor's bytes go to disk as soon as it is added (into the shard's data file), so memory
    holds one tensor, never a shard: a streamed merge of an 8B model does not buffer 2 GB. When a
    shard is full its header is written and the data appended behind it (``copy_file_range``, in
    the kernel). The files are plain safetensors: header JSON padded to 8 bytes, then the data in
    the order the tensors came.

    A tensor holding NaN/Inf is refused as it arrives (:func:`paw.io.finite.refuse_nonfinite_tensor`,
    naming ``output``, the folder the user will see) unless the run allows it; ``nonfinite`` then
    counts what was written.

    With ``layout`` (every tensor's ``(name, dtype, shape)`` in the order they will come, dtype as
    torch names it: ``'bfloat16'``) the shards and their headers are known before the first byte:
    each header is written first and each tensor's bytes straight behind it, so the data is written
    once instead of staged and copied. The files are the same bytes either way; a tensor that
    differs from the layout is refused.
    """

    def __init__(self, folder: Path, *, max_shard_bytes: int, metadata: dict[str, str] | None = None,
                 output: str | Path | None = None, layout: Sequence[tuple[str, str, Sequence[int]]] | None = None):
        self.folder = folder
        self.output = folder if output is None else output
        self.nonfinite: dict[str, int] = {}
        self.max_shard_bytes = max_shard_bytes
        self.metadata = {"format": "pt", **(metadata or {})}
        self._entries: dict[str, dict] = {}   # the open shard's header entries
        self._data = None                     # the open shard's data file
        self._pending_bytes = 0
        self._shards: list[list[str]] = []
        self._seen: set[str] = set()
        self.total_bytes = 0
        self._planned = None if layout is None else _plan_shards(layout, max_shard_bytes)
        self._next = 0                        # planned mode: index of the next tensor of the layout

    def add(self, name: str, tensor) -> None:
        """Append ``tensor`` (any device, any layout) under ``name``; it is on disk when this returns."""
        if name in self._seen:
            raise PawError(f"tensor {name!r} written twice")
        code = _SAFETENSORS_CODES.get(str(tensor.dtype).removeprefix("torch."))
        if code is None:
            raise PawError(f"tensor {name!r}: dtype {tensor.dtype} cannot be stored in safetensors")
        refuse_nonfinite_tensor(self.output, name, tensor, counts=self.nonfinite)
        self._seen.add(name)
        nbytes = tensor.numel() * tensor.element_size()
        if self._planned is not None:
            self._add_planned(name, code, list(tensor.shape), tensor)
            self.total_bytes += nbytes
            return
        if self._entries and self._pending_bytes + nbytes > self.max_shard_bytes:
            self._flush()
        if self._data is None:
            self._data = open(self.folder / f".shard-{len(self._shards):05d}.data", "wb")
        self._data.write(_raw_bytes(tensor))
        self._entries[name] = {"dtype": code, "shape": list(tensor.shape),
                               "data_offsets": [self._pending_bytes, self._pending_bytes + nbytes]}
        self._pending_bytes += nbytes
        self.total_bytes += nbytes

    def _flush(self) -> None:
        index = len(self._shards)
        data_path = self.folder / f".shard-{index:05d}.data"
        if self._data is None:
            self._data = open(data_path, "wb")
        self._data.close()
        with open(self.folder / f".shard-{index:05d}.safetensors", "wb") as out, open(data_path, "rb") as data:
            out.write(_header_bytes(self.metadata, self._entries))
            out.flush()
            _append(data, out, self._pending_bytes)
        data_path.unlink()
        self._shards.append(list(self._entries))
        self._entries, self._data, self._pending_bytes = {}, None, 0

    def _add_planned(self, name: str, code: str, shape: list[int], tensor) -> None:
        """Planned mode: check ``tensor`` against the layout, open its shard (header first) if new, append it."""
        shards, order = self._planned
        if self._next >= len(order) or order[self._next][0] != name:
            expected = order[self._next][0] if self._next < len(order) else "no more tensors"
            raise PawError(f"tensor {name!r} arrived where the announced layout has {expected!r}")
        _, shard = order[self._next]
        entry = shards[shard][name]
        if entry["dtype"] != code or entry["shape"] != shape:
            raise PawError(f"tensor {name!r} is {code} {shape}, not the announced {entry['dtype']} {entry['shape']}")
        if shard != len(self._shards) - 1:  # the first tensor of a new shard: close the last, start this one
            self._open_planned(shard)
        self._data.write(_raw_bytes(tensor))
        self._next += 1

    def _open_planned(self, shard: int) -> None:
        shards, _ = self._planned
        if self._data is not None:
            self._data.close()
        self._data = open(self.folder / f".shard-{shard:05d}.safetensors", "wb")
        self._data.write(_header_bytes(self.metadata, shards[shard]))
        self._shards.append(list(shards[shard]))

    def _close_planned(self) -> None:
        shards, order = self._planned
        if self._next < len(order):
            raise PawError(f"the announced layout has {len(order)} tensors but {self._next} arrived")
        if not self._shards:  # no tensor at all: one shard holding an empty header
            self._open_planned(0)
        self._data.close()
        self._data = None

    def close(self) -> list[str]:
        """Write what is pending, give shards their final names, write the index; return file names."""
        if self._planned is not None:
            self._close_planned()
        elif self._entries or not self._shards:
            self._flush()
        count = len(self._shards)
        if count == 1:
            names = ["model.safetensors"]
        else:
            names = [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]
        for i, final in enumerate(names):
            os.replace(self.folder / f".shard-{i:05d}.safetensors", self.folder / final)
            mark_checked(self.folder / final)  # every tensor was checked in add(): no need to read it back
        if count > 1:
            weight_map = {k: names[i] for i, keys in enumerate(self._shards) for k in keys}
            write_json(self.folder / "model.safetensors.index.json",
                       {"metadata": {"total_size": self.total_bytes},
                        "weight_map": dict(sorted(weight_map.items()))})
        return names


_SAFETENSORS_CODES = {torch_name: code for code, (torch_name, _) in DTYPES.items()}


def _header_bytes(metadata: dict[str, str], entries: dict[str, dict]) -> bytes:
    """The 8-byte length and the JSON header of one shard, padded so that its data starts 8-byte aligned."""
    header = json.dumps({"__metadata__": metadata, **entries}, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # tensor data starts 8-byte aligned, as safetensors writes it
    return len(header).to_bytes(8, "little") + header


def _plan_shards(layout: Sequence[tuple[str, str, Sequence[int]]],
                 max_shard_bytes: int) -> tuple[list[dict[str, dict]], list[tuple[str, int]]]:
    """Each shard's header entries, and ``(name, shard)`` in arrival order, by the rule of
    :meth:`ShardedWriter.add`: a tensor opens a new shard when it would overflow a non-empty one."""
    shards: list[dict[str, dict]] = [{}]
    order, pending = [], 0
    for name, dtype, shape in layout:
        code = _SAFETENSORS_CODES.get(str(dtype).removeprefix("torch."))
        if code is None:
            raise PawError(f"tensor {name!r}: dtype {dtype} cannot be stored in safetensors")
        nbytes = math.prod(shape) * DTYPES[code][1]
        if shards[-1] and pending + nbytes > max_shard_bytes:
            shards.append({})
            pending = 0
        shards[-1][name] = {"dtype": code, "shape": [int(d) for d in shape],
                            "data_offsets": [pending, pending + nbytes]}
        order.append((name, len(shards) - 1))
        pending += nbytes
    return shards, order


def _raw_bytes(tensor) -> memoryview:
    """The tensor's bytes in row-major order, without a copy when it is already a CPU contiguous tensor."""
    import torch

    t = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(t.view(torch.uint8).numpy()) if t.numel() else memoryview(b"")


def _append(src, dst, count: int) -> None:
    """Copy ``count`` bytes from ``src`` to the end of ``dst`` (in the kernel where the OS can)."""
    done = 0
    try:
        while done < count:
            step = os.copy_file_range(src.fileno(), dst.fileno(), count - done)
            if step == 0:
                break
            done += step
    except (AttributeError, OSError):  # no copy_file_range here (or not between these files)
        src.seek(done)
        dst.seek(0, os.SEEK_END)
        shutil.copyfileobj(src, dst, 16 << 20)
        return
    if done < count:
        raise PawError("a shard's data file is shorter than what was written to it", path=src.name)


TOKENIZER_CORE = ("tokenizer.json", "tokenizer.model", "vocab.json")  # a folder holding one of these has a tokenizer


def tokenizer_source(spec: str | Path, *, what: str) -> Path:
    """The local folder (or GGUF file) ``spec`` names, refused unless it holds a tokenizer.

    ``what`` names the key or flag in the refusal (``tokenizer_source``, ``--tokenizer-from``): a
    path such as ``../../../etc`` exists but would copy no tokenizer into the output, silently.
    """
    path = resolve_path(spec, what=what, kind="tokenizer")
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path
    folder = path.parent if path.is_file() else path
    if not any((folder / name).is_file() for name in TOKENIZER_CORE):
        raise PawError(f"{what}: holds no tokenizer ({', '.join(TOKENIZER_CORE)}); name a model or tokenizer "
                       "folder", path=path)
    return path


def copy_side_files(source: str | Path | None, dest: Path, names: Iterable[str]) -> list[str]:
    """Copy the files in ``names`` that exist in folder ``source`` into ``dest``; return those copied."""
    if source is None:
        return []
    source = Path(source)
    if source.is_file() and source.suffix.lower() == ".gguf":  # its config and tokenizer, as files
        source = gguf_side_folder(source)
    if source.is_file():
        source = source.parent
    copied = []
    for name in names:
        if (source / name).is_file():
            shutil.copyfile(source / name, dest / name)
            copied.append(name)
    return copied


def write_checkpoint(
    output: str | Path,
    tensors: Mapping[str, Any] | Iterable[tuple[str, Any]],
    *,
    config: dict | None = None,
    copy_from: str | Path | None = None,
    tokenizer_from: str | Path | None = None,
    max_shard_size: int | str = DEFAULT_SHARD_BYTES,
    overwrite: bool = False,
    extra_files: Mapping[str, Any] | None = None,
    figures: Mapping[str, Any] | None = None,
    card: Card | Callable[[], Card] | None = None,
    allow_nonfinite: bool = False,
    layout: Sequence[tuple[str, str, Sequence[int]]] | None = None,
    overlap: bool = False,
) -> Path:
    """Write a Hugging Face model folder at ``output``, atomically.

    ``config`` (a dict) is written as ``config.json``; otherwise ``config.json`` and
    ``generation_config.json`` are copied from ``copy_from`` when present there. Tokenizer files
    are copied from ``tokenizer_from`` (default: ``copy_from``), their ``tokenizer_config.json`` made one
    that transformers 4 reads too (:func:`paw.io.tokenizer_config.make_portable`), and so is ``config.json``
    (:func:`paw.io.model_config.make_portable_config`). ``extra_files`` maps file names to
    JSON-serialisable objects (e.g. a provenance manifest), or to functions returning one (called
    after the last tensor), written beside the weights; ``figures`` maps PNG names to matplotlib figures;
    ``card`` (or a function returning it) becomes the
    ``README.md`` model card, written last (:mod:`paw.io.model_card`). Inputs (``copy_from``, ``tokenizer_from``)
    are never written over. A tensor with NaN/Inf is refused (nothing is written) unless
    ``allow_nonfinite`` or an enclosing :func:`paw.io.finite.nonfinite_policy` allows it.

    ``layout`` announces every tensor (:class:`ShardedWriter`: each byte is then written once).
    ``overlap`` writes each tensor on a second thread while the stream computes the next one (one
    tensor waits in between, so memory holds at most three); the stream must not change a tensor
    after yielding it.
    """
    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    max_shard_bytes = parse_size(max_shard_size)
    with nonfinite_policy(allow_nonfinite), \
            atomic_dir(output, overwrite=overwrite, inputs=[copy_from, tokenizer_from]) as tmp:
        writer = ShardedWriter(tmp, max_shard_bytes=max_shard_bytes, output=output, layout=layout)
        if overlap:
            _add_behind(writer, items)
        else:
            for name, tensor in items:
                writer.add(name, tensor)
        writer.close()
        copy_side_files(copy_from, tmp, _MODEL_SIDE_FILES)
        if config is not None:
            write_json(tmp / "config.json", config)
        copy_side_files(tokenizer_from if tokenizer_from is not None else copy_from, tmp, TOKENIZER_FILES)
        for fname, obj in (extra_files or {}).items():
            write_json(tmp / fname, obj() if callable(obj) else obj)
        make_portable(tmp)  # transformers 4 reads the tokenizer too (paw.io.tokenizer_config)
        make_portable_config(tmp)  # and the rotary settings (paw.io.model_config)
        for fname, figure in (figures or {}).items():
            save_figure(figure, tmp / fname, dpi=figure.dpi)
        if card is not None:
            write_card(tmp, card() if callable(card) else card)
    return Path(output)


def _add_behind(writer: ShardedWriter, items: Iterable[tuple[str, Any]]) -> None:
    """``writer.add`` every item on a writer thread while this thread produces the next item.

    The queue holds one item, so at most three tensors are alive: the one being written, the one
    waiting and the one being produced. An error on either side stops both and is raised here: the
    writer's at the next hand-over, the stream's after the writer has finished the tensor it holds.
    """
    handover: queue.Queue = queue.Queue(maxsize=1)
    failed: list[BaseException] = []

    def drain() -> None:
        while (item := handover.get()) is not None:
            if not failed:
                try:
                    writer.add(*item)
                except BaseException as err:  # noqa: BLE001  (re-raised in the producing thread)
                    failed.append(err)
            del item

    thread = threading.Thread(target=drain, name="paw-writer", daemon=True)
    thread.start()
    try:
        for name, tensor in items:
            if failed:
                break
            handover.put((name, tensor))
            del tensor
    finally:
        handover.put(None)
        thread.join()
    if failed:
        raise failed[0]


def write_hf_folder(path: str | Path, output: str | Path, *, dtype: str = "bfloat16", overwrite: bool = False,
                    extra_files: dict[str, Any] | None = None) -> Path:
    """Write a GGUF file as a plain Hugging Face folder: safetensors in ``dtype``, config, tokenizer.

    Streamed: one dequantized tensor at a time goes to the sharded writer. The folder loads with
    ``AutoModelForCausalLM.from_pretrained`` and every PAW command, without the ``gguf`` package.
    """
    import torch

    ckpt = open_gguf(path)
    config = gguf_config(path).to_dict()
    config["architectures"] = [causal_lm_class(gguf_config(path))]
    config["dtype"] = dtype
    side = gguf_side_folder(path)
    target = getattr(torch, dtype)
    tensors = ((name, ckpt[name].to(target)) for name in ckpt)
    return write_checkpoint(output, tensors, config=config, tokenizer_from=side, overwrite=overwrite,
                            extra_files=extra_files)
