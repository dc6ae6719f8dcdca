"""Read what ``paw adapter check`` needs without loading weights: adapter config and tensor shapes.

A safetensors file starts with a JSON header that lists every tensor's name, dtype and shape, so
an adapter can be checked against an 8B base by reading a few kilobytes of each. (A pickled
``adapter_model.bin`` has no such header and is loaded, memory-mapped.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.io.adapter import WEIGHTS_NAME, check_adapter, read_adapter_config
from paw.io.checkpoint import open_checkpoint
from paw.io.lazy_checkpoint import load_pickle
from paw.io.safetensors_header import read_header


@dataclass
class AdapterHeader:
    """An adapter's ``adapter_config.json`` and ``saved key -> shape``, read from headers only."""

    config: dict
    shapes: dict[str, tuple[int, ...]]
    path: Path


@dataclass
class BaseHeader:
    """A base model's ``tensor name -> shape`` (headers only) and whether its head is tied."""

    shapes: dict[str, tuple[int, ...]]
    tied: bool
    path: Path


def read_adapter_header(spec: str | Path) -> AdapterHeader:
    """Config and tensor shapes of a PEFT adapter folder, without reading tensor data."""
    folder, config = read_adapter_config(spec)
    st, binf = folder / WEIGHTS_NAME, folder / "adapter_model.bin"
    if st.exists():
        shapes = {k: e.shape for k, e in read_header(st).entries.items()}
    elif binf.exists():
        shapes = {k: tuple(v.shape) for k, v in load_pickle(binf).items()}
    else:
        raise PawError(f"no adapter weights ({WEIGHTS_NAME} or adapter_model.bin)", path=folder)
    check_adapter(config, shapes, path=folder)
    return AdapterHeader(config, shapes, folder)


def read_base_header(spec: str | Path) -> BaseHeader:
    """Shapes of every base tensor from the weight files' headers."""
    ckpt = open_checkpoint(spec)
    return BaseHeader({name: tuple(ckpt.shape(name)) for name in ckpt}, ckpt.tied_embeddings, ckpt.path)
