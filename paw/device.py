"""Resolve a ``--device`` string once, with a clear error when CUDA is asked for but absent."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from paw.errors import PawError

DEVICE_HELP = "auto (CUDA when available, else CPU), cpu, cuda, or cuda:N"


def check_device(spec: str | None = "auto") -> str:
    """The normalised ``--device`` string, refused when it is none of ``auto``, ``cpu``, ``cuda``, ``cuda:N``.

    Reads the string only (no torch, no GPU), so an options ``check()`` can call it before any work.

    >>> check_device(" CUDA:1 ")
    'cuda:1'
    >>> check_device("gpu")
    Traceback (most recent call last):
    paw.errors.PawError: --device 'gpu': expected auto (CUDA when available, else CPU), cpu, cuda, or cuda:N
    """
    spec = (spec or "auto").strip().lower()
    if spec in ("auto", "cpu", "cuda"):
        return spec
    if spec.startswith("cuda:"):
        index = spec.partition(":")[2]
        if index and not index.isdigit():   # 'cuda:' alone means the current GPU, as torch reads it
            raise PawError(f"--device {spec}: expected cuda:N with N a GPU index")
        return spec
    raise PawError(f"--device {spec!r}: expected {DEVICE_HELP}")


def resolve_device(spec: str | None = "auto"):
    """``'auto' | 'cpu' | 'cuda' | 'cuda:N'`` -> ``torch.device``.

    >>> resolve_device("cpu")   # doctest: +SKIP
    device(type='cpu')
    """
    import torch

    spec = check_device(spec)
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise PawError(f"--device {spec}: CUDA is not available here (torch {torch.__version__}, "
                           "no GPU visible); use --device cpu or auto")
        index = spec.partition(":")[2]
        if index:
            if int(index) >= torch.cuda.device_count():
                raise PawError(f"--device {spec}: only {torch.cuda.device_count()} GPU(s) visible")
            return torch.device("cuda", int(index))
        return torch.device("cuda")
    raise AssertionError(spec)  # check_device let through a spec it does not know


def visible_devices(primary) -> list:
    """All GPUs for ``--multi-gpu`` runs; ``[primary]`` when fewer than two are visible."""
    import torch

    if primary.type == "cuda" and torch.cuda.device_count() > 1:
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [primary]


@contextlib.contextmanager
def single_threaded_cpu(devices: Iterable) -> Iterator[None]:
    """Run CPU tensor arithmetic on one intra-op thread inside the block; a no-op on GPUs.

    Small ops (cache-sized chunks, a 40x700 QR) spend most of their time in OpenMP barriers when
    one core is busy: on a loaded 2-core machine the exact quantiles of 17.5M floats took 13 s
    with two threads and 1.3 s with one. PAW parallelises across tensors instead.
    """
    import torch

    if not any(getattr(d, "type", str(d)) == "cpu" for d in devices):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def key_value_heads(model) -> int | None:
    """The model's key/value head count (its text config's, for multimodal configs), or None."""
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    heads = getattr(config, "num_key_value_heads", None)
    return int(heads) if heads is not None else None


def guard_cuda_attention(model) -> bool:
    """Turn CUDA's memory-efficient SDPA kernel off when ``model`` sits on CUDA with one key/value head.

    With a single key/value head transformers expands keys and values as a stride-0 view; with an
    attention mask (every padded batch) that kernel has returned wrong values for such views in
    torch releases before the fix of pytorch issue 191937. On an H200 with torch 2.11 Gemma-3-270M
    (one key/value head) scored 54.5% on PIQA where the CPU scored 65.4% (docs/benchmarks/gpu.md).
    The math, flash and cuDNN kernels stay. Process-wide (torch's switch is global, and says whether it is done);
    ``True`` when the kernel is off for this reason. A no-op on the CPU and with several heads.
    """
    import torch

    first = next(iter(model.parameters()), None)
    if first is None or first.device.type != "cuda" or key_value_heads(model) != 1:
        return False
    if torch.backends.cuda.mem_efficient_sdp_enabled():
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        from paw.progress import status

        status("CUDA: memory-efficient attention off for this process (one key/value head: wrong values under "
               "masks in older torch, pytorch issue 191937)")
    return True
