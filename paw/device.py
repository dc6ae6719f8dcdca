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
