"""Read what ``paw adapter check`` needs without loading weights: adapter config and tensor shapes.

A safetensors file starts with a JSON header that lists every tensor's name, dtype and shape, so
an adapter can be checked against an 8B base by reading a few kilobytes of each. (A pickled
``adapter_model.bin`` has no such header and is loaded, memory-mapped.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.io.adapter import CONFIG_NAME, WEIGHTS_NAME
from paw.io.checkpoint import _load_pickle, open_checkpoint, read_json
from paw.io.hub import resolve_path


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
    folder = resolve_path(spec, what="adapter")
    if folder.is_file():
        folder = folder.parent
    if not (folder / CONFIG_NAME).exists():
        raise PawError(f"not a PEFT adapter folder: {CONFIG_NAME} is missing", path=folder)
    config = read_json(folder / CONFIG_NAME)
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise PawError(f"adapter type {peft_type} is not supported (only LoRA)", path=folder / CONFIG_NAME)
    st, binf = folder / WEIGHTS_NAME, folder / "adapter_model.bin"
    if st.exists():
        from safetensors import safe_open

        try:
            with safe_open(str(st), framework="pt") as f:
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        except Exception as err:
            raise PawError(f"not a readable safetensors file ({err})", path=st) from None
    elif binf.exists():
        shapes = {k: tuple(v.shape) for k, v in _load_pickle(binf).items()}
    else:
        raise PawError(f"no adapter weights ({WEIGHTS_NAME} or adapter_model.bin)", path=folder)
    return AdapterHeader(config, shapes, folder)


def read_base_header(spec: str | Path) -> BaseHeader:
    """Shapes of every base tensor from the weight files' headers."""
    ckpt = open_checkpoint(spec)
    return BaseHeader({name: tuple(ckpt.shape(name)) for name in ckpt}, ckpt.tied_embeddings, ckpt.path)
