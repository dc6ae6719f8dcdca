"""Options first: a command's knobs are the fields of frozen dataclasses, and everything else is made from them.

A field declared with :func:`knob` carries its default, its help, its range and its flag; from those

- :func:`cli_parameters` makes the command's Typer options (no command restates a default or a help text),
- :func:`from_mapping` turns a mapping (a ``--config FILE.yaml``) into the same objects, each value checked
  and named by its key, and :func:`merged` lets the flags typed on the command line win over the file,
- :func:`flag` names the flag of a field, so a library error can name what the user typed.

A field typed ``tuple[X, ...]`` is a list: on the command line ``--models a b c`` (or ``--models a --models
b``; with ``cli=str`` one comma list instead: ``--target-modules q,v``), in a file a YAML list (one value
reads as a list of one), each item checked and named by its index (``weights[1]``).

This is the shape of mergekit's ``MergeOptions`` (one frozen model, its click options generated from its
fields), PEFT's ``LoraConfig`` (fields carrying their own help) and transformers' ``HfArgumentParser``.

    >>> @dataclass(frozen=True)
    ... class Demo:
    ...     steps: int = knob(300, "Optimiser steps.", min=1)
    >>> flag(Demo, "steps"), from_mapping({"steps": 40}, Demo).steps
    ('--steps', 40)

Light on purpose: ``paw --help`` imports it, so typer and the standard library only.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from paw.device import DEVICE_HELP
from paw.errors import PawError


def knob(default: Any, help: str, *, flag: str | None = None, short: str | None = None, min: float | None = None,
         max: float | None = None, choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None,
         cli: type | None = None, parse: Callable[[Any], Any] | None = None,
         metavar: str | None = None, judge: Callable[[str, Any, Mapping], Any] | None = None,
         verbatim: bool = False, shown: str | None = None) -> Any:
    """A dataclass field that is also a command-line flag.

    ``flag``: its name on the command line (default ``--field-name``; ``'--a/--no-a'`` for a switch pair);
    ``min``/``max``: the range the parser enforces (the options' ``check`` may say more); ``choices``: the
    values allowed (or a function giving them, read when the command is built); ``cli``: the type the parser
    reads when the field's own type is a union (``str | Path | None`` is read as ``str``); ``parse``: what
    turns the parsed value into the field's (``'a, b'`` -> ``('a', 'b')``); ``judge(label, value, mapping)``:
    what judges a value from a file instead of the field's type, range and choices (for a list, each item),
    returning it as the field holds it or raising a PawError that starts with ``label`` (merge's knobs use
    :func:`paw.merge.knobs.check_knob`, so a file's value is refused as the flag's would be); ``verbatim``: a
    tuple of strings whose items a config file gives as written (tokens: ``' zebra'`` keeps its space, ``'a,b'``
    is one item), never split at commas or stripped; ``shown``: what ``--help`` says the default is, where the
    value itself would only repeat the help (``all`` for a tuple of every registered name).
    """
    meta = {"help": help, "flag": flag, "short": short, "min": min, "max": max, "choices": choices, "cli": cli,
            "parse": parse, "metavar": metavar, "judge": judge,
            "verbatim": verbatim, "shown": shown}
    if isinstance(default, list | dict | set):
        raise TypeError("a knob's default must be immutable (a tuple, not a list)")
    return field(default=default, metadata={"paw": meta})


def knobs(cls) -> list[dataclasses.Field]:
    """The fields of ``cls`` declared with :func:`knob`, in order."""
    return [f for f in fields(cls) if "paw" in f.metadata]


def flag(cls, name: str) -> str:
    """The command-line flag of field ``name`` of ``cls`` (``max_steps`` -> ``--max-steps``)."""
    for f in fields(cls):
        if f.name == name:
            declared = f.metadata.get("paw", {}).get("flag")
            return declared.split("/")[0] if declared else "--" + name.replace("_", "-")
    raise KeyError(name)


@dataclass(frozen=True)
class RunOptions:
    """How any command runs, whatever it does: where the arithmetic goes, what it may replace, what it logs.
    Every pipeline takes it beside its own options: ``pipeline(options, run=RunOptions(), *, command, progress)``."""

    device: str = knob("auto", f"Where the arithmetic runs: {DEVICE_HELP}.")
    overwrite: bool = knob(False, "Replace the output if it already exists.")
    track: str = knob("none", "Tracking: none, csv, swanlab or wandb (offline), to OUT-tracking/.")


@dataclass(frozen=True)
class WriteOptions:
    """For a command that writes tensors: whether NaN/Inf may be written (:mod:`paw.io.finite`)."""

    allow_nonfinite: bool = knob(False, "Write the output even if it holds NaN or Inf.")


@dataclass(frozen=True)
class Given:
    """Which knobs the user set: ``typed`` on the command line, or keys of the ``--config`` file ``config``
    (``in_file``), by field name. For a command whose defaults depend on another knob (``paw merge
    --adapters``: method cat, weights 1 each) or that refuses a knob beside another."""

    typed: frozenset[str] = frozenset()
    in_file: frozenset[str] = frozenset()
    config: Path | None = None

    def __contains__(self, name: object) -> bool:
        return name in self.typed or name in self.in_file

    def names(self) -> set[str]:
        return set(self.typed | self.in_file)


def require(options, *names: str) -> None:
    """Refuse options whose ``names`` (the files a command cannot run without) were given neither as a flag nor
    in ``--config``, naming the first missing flag."""
    for name in names:
        if getattr(options, name) is None:
            raise PawError(f"missing option '{flag(type(options), name)}' (a flag, or '{name}:' in --config)")


def choices_of(cls, name: str) -> tuple[str, ...] | None:
    """The values field ``name`` of ``cls`` allows (None: any of its type)."""
    for f in knobs(cls):
        if f.name == name:
            values = f.metadata["paw"]["choices"]
            return tuple(values() if callable(values) else values) if values is not None else None
    raise KeyError(name)


# ------------------------------------------------------------------------------------ the command line

def cli_parameters(cls, *, skip: tuple[str, ...] = (), help_prefix: str = "") -> list[inspect.Parameter]:
    """One keyword parameter per knob of ``cls`` (but ``skip``), each with its ``typer.Option`` as default:
    the signature Typer reads to make the command's options."""
    import typer

    hints = typing.get_type_hints(cls)
    out = []
    for f in knobs(cls):
        if f.name in skip:
            continue
        m = f.metadata["paw"]
        kind = _cli_type(hints[f.name], m, f.name)
        if _item_type(hints[f.name]) is not None and m["cli"] is None:  # several values: --models a b c
            out.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                         default=typer.Option(None, *_decls(f), help=help_prefix + m["help"],
                                                              metavar=m["metavar"], show_default=False)))
            continue
        default = _shown(f.default)
        if isinstance(kind, type) and issubclass(kind, enum.Enum) and default not in (None, ...):
            default = kind(default)
        extra = {k: m[k] for k in ("min", "max") if m[k] is not None and kind in (int, float)}
        option = typer.Option(default, *_decls(f), help=help_prefix + m["help"], metavar=m["metavar"],
                              show_default=m["shown"] or f.default is not None, **extra)
        out.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                     annotation=kind if f.default is not None else kind | None))
    return out


def _decls(f: dataclasses.Field) -> list[str]:
    m = f.metadata["paw"]
    return [m["flag"] or "--" + f.name.replace("_", "-")] + ([m["short"]] if m["short"] else [])


def list_flags(cls) -> list[str]:
    """The flags of ``cls`` that take several values (``--models a b c``)."""
    hints = typing.get_type_hints(cls)
    return [flag(cls, f.name) for f in knobs(cls) if _item_type(hints[f.name]) is not None
            and f.metadata["paw"]["cli"] is None]


def _item_type(hint: Any) -> Any:
    """``X`` for a field typed ``tuple[X, ...]`` (or ``tuple[X, ...] | None``), else None."""
    for a in [hint, *typing.get_args(hint)]:
        if typing.get_origin(a) is tuple:
            return typing.get_args(a)[0]
    return None


def _shown(default: Any) -> Any:
    """A default as the parser holds it: a tuple of strings is typed as one comma list."""
    if isinstance(default, tuple):
        return ",".join(str(x) for x in default)
    return default


def _cli_type(hint: Any, meta: dict, name: str) -> Any:
    """What the parser reads for a field of type ``hint``: its ``cli`` type, an Enum of its choices, or the
    one type of ``X | None``."""
    if meta["choices"] is not None:
        values = meta["choices"]() if callable(meta["choices"]) else meta["choices"]
        return enum.Enum(name.title().replace("_", ""), {v: v for v in values}, type=str)
    if meta["cli"] is not None:
        return meta["cli"]
    item = _item_type(hint)
    if item in (int, float, str, Path):
        return list[item]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if len(args) == 1 and args[0] in (int, float, str, bool, Path):
            return args[0]
        raise TypeError(f"knob {name!r}: give cli= for its type {hint}")
    if hint in (int, float, str, bool, Path):
        return hint
    raise TypeError(f"knob {name!r}: give cli= for its type {hint}")


def from_parsed(cls, values: Mapping[str, Any], **more: Any):
    """``cls`` from the parser's values of its knobs (enums to their value, ``parse`` applied) and ``more``."""
    kwargs = {}
    for f in knobs(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        if isinstance(value, enum.Enum):
            value = value.value
        if value is None or value == []:   # nothing typed (a list knob's parser gives None): the field's default
            continue
        if isinstance(value, list):
            value = tuple(v.value if isinstance(v, enum.Enum) else v for v in value)
        parse = f.metadata["paw"]["parse"]
        kwargs[f.name] = parse(value) if parse is not None else value
    return cls(**kwargs, **more)


def typed_on_command_line(names: list[str]) -> set[str]:
    """Which of the current command's parameters ``names`` the user typed (the parser's parameter sources;
    typer from 0.2x carries its own copy of click, older ones use click itself)."""
    ctx = None
    for module in ("typer._click", "click"):
        try:
            core = __import__(f"{module}.core", fromlist=["ParameterSource"])
            found = __import__(f"{module}.globals", fromlist=["get_current_context"]).get_current_context(silent=True)
        except ImportError:
            continue
        if found is not None:
            ctx, source = found, core.ParameterSource
            break
    if ctx is None:
        return set(names)
    return {n for n in names if ctx.get_parameter_source(n) in (source.COMMANDLINE, source.ENVIRONMENT)}


# ------------------------------------------------------------------------------------ mappings (--config)

def config_keys(cls, name: str) -> set[str]:
    """The keys a config file may give field ``name`` of ``cls`` by: the field's name and its flag without
    ``--``, each with ``_`` or ``-`` (``commonsense``, ``data`` for ``--data``)."""
    spelled = {name, flag(cls, name).removeprefix("--")}
    return spelled | {k.replace("_", "-") for k in spelled} | {k.replace("-", "_") for k in spelled}


MAX_DEPTH = 8   # a config is a flat mapping of knobs; nothing PAW reads nests deeper


def from_mapping(data: Mapping[str, Any], *classes, where: str = "--config",
                 skip: Mapping[type, tuple[str, ...]] | None = None) -> Any:
    """The options of ``classes`` (one object, or a tuple for several) from a mapping of field names (or flag
    names without ``--``) to values, each checked against its field's type and range and named by its key
    when refused. Keys no class has are refused, naming the ones it could be. ``skip``: fields of a class
    the mapping cannot set (a command's own knob of that name takes the key: ``bench transfer``'s ``device``)."""
    by_key: dict[str, tuple[Any, dataclasses.Field]] = {}
    for cls in classes:
        for f in knobs(cls):
            if f.name in (skip or {}).get(cls, ()):
                continue
            for key in config_keys(cls, f.name):
                by_key[key] = (cls, f)
    chosen: dict[Any, dict[str, Any]] = {cls: {} for cls in classes}
    for key, value in data.items():
        if not isinstance(key, str) or key not in by_key:
            known = sorted({f.name for cls in classes for f in knobs(cls)})
            raise PawError(f"{where}: unknown key {key!r}; the keys are {', '.join(known)}")
        cls, f = by_key[key]
        chosen[cls][f.name] = coerce(value, f, typing.get_type_hints(cls)[f.name], key=f"{where}: {key}", data=data)
    made = tuple(cls(**chosen[cls]) for cls in classes)
    return made if len(made) > 1 else made[0]


def coerce(value: Any, f: dataclasses.Field, hint: Any, *, key: str, data: Mapping[str, Any] | None = None) -> Any:
    """``value`` from a YAML or JSON mapping as field ``f`` holds it, or a PawError naming ``key``.

    Strings are never numbers here (YAML reads ``1.0e300`` as a string, so a value that looks like a number
    but is a string is refused), booleans are never numbers, numbers must be finite and in the knob's range,
    and nothing nests deeper than :data:`MAX_DEPTH`. A knob with a ``judge`` is judged by it instead
    (``data``, the whole mapping, is what it may consult: merge's ``t`` depends on the file's ``method``).
    """
    _depth(value, key)
    m = f.metadata["paw"]
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    allowed = list(typing.get_args(hint)) if union else [hint]
    if value is None:
        if type(None) in allowed:
            return None
        raise PawError(f"{key}: a value is required")
    item = _item_type(hint)
    if item is not None:
        return _items(value, item, m, key, data or {})
    return _one(value, allowed, m, key, data or {})


def _one(value: Any, allowed: list, m: dict, key: str, data: Mapping[str, Any]) -> Any:
    if m["judge"] is not None:
        return m["judge"](key, value, data)
    if m["choices"] is not None:
        values = m["choices"]() if callable(m["choices"]) else m["choices"]
        if str(value) not in values or not isinstance(value, str):
            raise PawError(f"{key}: {value!r} is not one of {', '.join(values)}")
        return value
    if m["parse"] is not None and str in allowed and isinstance(value, str):   # "auto" for an int | str knob
        try:
            return m["parse"](value)
        except PawError as err:
            raise PawError(f"{key}: {err}") from None
    if bool in allowed:
        if not isinstance(value, bool):
            raise PawError(f"{key}: expected true or false, not {value!r}")
        return value
    if int in allowed or float in allowed:
        return _number(value, int if int in allowed and float not in allowed else float, m, key)
    if str in allowed or Path in allowed:
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise PawError(f"{key}: expected text, not {value!r}")
        return str(value)
    raise PawError(f"{key}: cannot read {value!r}")


def _items(value: Any, item: type, m: dict, key: str, data: Mapping[str, Any]) -> tuple:
    """A list knob's value: a YAML list, one value (a list of one), or, for a knob typed as one comma list
    (``cli=str``), that text as the flag takes it (``'q_proj, v_proj'``, ``'8,16,64'``)."""
    if m.get("verbatim") and item is str:
        return _verbatim(value, key)
    comma = isinstance(value, str) and m["cli"] is str
    items = value.split(",") if comma else value if isinstance(value, list) else [value]
    if item is str:
        if not all(isinstance(x, str) and x.strip() for x in items):
            raise PawError(f"{key}: expected a list of names, not {value!r}")
        return tuple(x.strip() for x in items)
    if comma:   # numbers written as the flag is typed: each is text
        if not all(looks_numeric(x) for x in items):
            raise PawError(f"{key}: expected numbers separated by commas, not {value!r}")
        items = [float(x) if item is float else int(float(x)) if float(x).is_integer() else float(x) for x in items]
    return tuple(_one(x, [item], m, f"{key}[{i}]", data) for i, x in enumerate(items))


def _verbatim(value: Any, key: str) -> tuple[str, ...]:
    """A list of strings as written (one string: a list of one)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
        raise PawError(f"{key}: expected a list of strings, not {value!r}")
    return tuple(items)


def _number(value: Any, kind: type, m: dict, key: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        looks = isinstance(value, str) and looks_numeric(value)
        why = " (YAML reads it as text: write it as 1.0e+300, or quote nothing)" if looks else ""
        raise PawError(f"{key}: expected a number, not {value!r}{why}")
    if kind is int and (isinstance(value, float) and not value.is_integer()):
        raise PawError(f"{key}: expected a whole number, not {value!r}")
    if not math.isfinite(value):
        raise PawError(f"{key}: {value} is not a finite number")
    if m["min"] is not None and value < m["min"]:
        raise PawError(f"{key}: {value} is below its minimum {m['min']:g}")
    if m["max"] is not None and value > m["max"]:
        raise PawError(f"{key}: {value} is above its maximum {m['max']:g}")
    return kind(value)


def looks_numeric(text: str) -> bool:
    """Whether ``text`` reads as a number (``'-0.5'``, ``'1.0e300'``, ``'nan'``)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _depth(value: Any, key: str, level: int = 0) -> None:
    if level > MAX_DEPTH:
        raise PawError(f"{key}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for v in value.values():
            _depth(v, key, level + 1)
    elif isinstance(value, list):
        for v in value:
            _depth(v, key, level + 1)


def merged(from_file: Any, from_flags: Any, typed: set[str]) -> Any:
    """``from_file`` with the fields the user ``typed`` on the command line taken from ``from_flags``."""
    return dataclasses.replace(from_file, **{f.name: getattr(from_flags, f.name) for f in knobs(type(from_flags))
                                             if f.name in typed})
