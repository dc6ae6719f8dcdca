"""PAW: move what a language model has learned between models.

`import paw` is light: it imports no torch. The public API is re-exported lazily.
"""

from importlib import import_module as _import_module

__version__ = "0.1.0"

_LAZY = {
    "PawError": "paw.errors",
    "open_checkpoint": "paw.io.checkpoint",
    "write_checkpoint": "paw.io.writer",
    "read_adapter": "paw.io.adapter",
    "write_adapter": "paw.io.adapter",
    "resolve_device": "paw.device",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(_import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paw' has no attribute {name!r}")
