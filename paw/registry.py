"""One name -> value table, filled by a decorator, for every pluggable part of PAW.

Merge methods and weight modes, vocabulary alignment methods, multiple-choice readers, transfer
methods and layer maps, benchmark targets and demo steps are each a :class:`Registry`. The CLI
builds its choices from :meth:`Registry.names`, so a newly registered entry reaches ``--help``
without touching the CLI. A name registered twice is refused at import time (two plugins would
otherwise silently shadow each other), and an unknown name becomes a :class:`PawError` listing the
valid ones; ``-`` and ``_`` are one character in a name (``dare_ties`` finds ``dare-ties``)::

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

    def canonical(self, name: str) -> str | None:
        """The registered spelling of ``name``, with ``-`` and ``_`` alike, or None.

        >>> R = Registry("merge method"); _ = R.add("dare-ties", 1)
        >>> R.canonical("dare_ties"), R.canonical("dare-ties"), R.canonical("dareties")
        ('dare-ties', 'dare-ties', None)
        """
        if name in self._entries:
            return name
        key = same_name(name)
        return next((n for n in self._entries if same_name(n) == key), None)

    def lookup(self, name: str, *, what: str | None = None) -> T:
        """The entry called ``name`` (``dare_ties`` finds ``dare-ties``); an unknown name raises a PawError
        that lists the valid ones.

        ``what`` replaces the kind in the message when the user typed a flag (``"--layer-map"``).
        """
        found = self.canonical(name) if isinstance(name, str) else None
        if found is None:
            raise PawError(f"unknown {what or self.kind} {name!r}; choose one of: {', '.join(self._entries)}")
        return self._entries[found]

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


def same_name(name: str) -> str:
    """``name`` with ``_`` read as ``-``: mergekit and YAML write ``dare_ties``, PAW's flags ``dare-ties``;
    the CLI parses choices through this too (``paw.cli``'s ``token_normalize_func``)."""
    return name.replace("_", "-")


def _describe(value: object) -> str:
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}.{name}" if module and name else type(value).__name__
