"""One name -> value table, filled by a decorator, for every pluggable part of PAW.

Merge methods and weight modes, vocabulary alignment methods, multiple-choice readers, transfer
methods and layer maps, benchmark targets and demo steps are each a :class:`Registry`. The CLI
builds its choices from :meth:`Registry.names`, so a newly registered entry reaches ``--help``
without touching the CLI. A name registered twice is refused at import time (two plugins would
otherwise silently shadow each other), and an unknown name becomes a :class:`PawError` listing the
valid ones::

    ALIGNERS = Registry("alignment method")

    @ALIGNERS.register("exact")
    def exact(ctx, todo): ...

    ALIGNERS.lookup("exakt")  # PawError: unknown alignment method 'exakt'; choose one of: exact

A registry is a read-only ``Mapping``: ``name in R``, ``R[name]``, ``list(R)`` work as on a dict.
It imports nothing heavy, so building CLI choices from it keeps ``paw --help`` free of torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from paw.errors import PawError

T = TypeVar("T")


class DuplicateName(ValueError):
    """Two entries claim one name in a registry: a programming error, raised at import time."""


class Registry(Mapping[str, T], Generic[T]):
    """Names in registration order, each mapped to one value (a function or a small record)."""

    def __init__(self, kind: str):
        self.kind = kind              # what an entry is, for messages: "merge method", "layer map", ...
        self._entries: dict[str, T] = {}

    def add(self, name: str, value: T) -> T:
        """Register ``value`` under ``name``; a name already taken raises :class:`DuplicateName`."""
        if name in self._entries:
            raise DuplicateName(f"{self.kind} {name!r} is registered twice "
                                f"({_describe(self._entries[name])} and {_describe(value)})")
        self._entries[name] = value
        return value

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`: ``@R.register("exact")`` on the function, returned unchanged."""

        def deco(value: T) -> T:
            return self.add(name, value)

        return deco

    def names(self) -> list[str]:
        """Registered names in registration order (the order ``--help`` lists them)."""
        return list(self._entries)

    def lookup(self, name: str, *, what: str | None = None) -> T:
        """The entry called ``name``; an unknown name raises a PawError that lists the valid ones.

        ``what`` replaces the kind in the message when the user typed a flag (``"--layer-map"``).
        """
        try:
            return self._entries[name]
        except KeyError:
            raise PawError(f"unknown {what or self.kind} {name!r}; choose one of: {', '.join(self._entries)}") \
                from None

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"


def _describe(value: object) -> str:
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}.{name}" if module and name else type(value).__name__
