"""Options shared by several commands, defined once so their help reads the same everywhere."""

from __future__ import annotations

import enum
import inspect
import math
from pathlib import Path

import typer

from paw.errors import PawError
from paw.io.manifest import command_line  # noqa: F401  (re-exported: the CLI modules import it from here)
from paw.knobs import (
    Given,
    RunOptions,  # noqa: F401  (re-exported: every command's run options)
    WriteOptions,  # noqa: F401  (re-exported: a writing command's NaN/Inf switch)
    cli_parameters,
    config_keys,
    from_mapping,
    from_parsed,
    knobs,
    list_flags,
    looks_numeric,
    merged,
    typed_on_command_line,
)

OVERWRITE = typer.Option(False, "--overwrite", help="Replace the output if it already exists.")
ALLOW_NONFINITE = typer.Option(False, "--allow-nonfinite", help="Write the output even if it holds NaN or Inf "
                               "(refused by default, naming the input at fault).")
SEED = typer.Option(0, "--seed", help="Random seed; same inputs and seed give byte-identical outputs.")
TRACK = typer.Option("none", "--track", help="Experiment tracking: none, csv, swanlab or wandb (offline), "
                     "logged to OUT-tracking/.")


def console():
    """A rich console on stdout. Off a terminal (a pipe, a log file, CI) it is wide enough that table
    headers and long lines never wrap: a log should read like the screen, not be cut at 80 columns."""
    from rich.console import Console

    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = 1000
    return out


def choices(name: str, values) -> type[enum.Enum]:
    """A str Enum of a registry's names, so ``--help`` lists them and click refuses any other."""
    return enum.Enum(name, {v: v for v in values}, type=str)


def multi_value_command(*flags: str):
    """A click command class that accepts ``--models a b c`` as well as ``--models a --models b``.

    Click gives an option one value per occurrence; this rewrites the space-separated form before
    parsing, so every list option of PAW reads the way users type it. Negative numbers stay values
    (``--weights 0.5 -0.2``).
    """
    from typer.core import TyperCommand

    class MultiValueCommand(TyperCommand):
        def parse_args(self, ctx, args):
            return super().parse_args(ctx, expand_multi(list(args), flags))

    return MultiValueCommand


def expand_multi(args: list[str], flags: tuple[str, ...]) -> list[str]:
    """``['--models', 'a', 'b', '-o', 'x']`` -> ``['--models', 'a', '--models', 'b', '-o', 'x']``."""
    out: list[str] = []
    current = None  # the multi-value flag whose values are being read, if any
    for arg in args:
        if arg.startswith("-") and not looks_numeric(arg):
            flag = arg.partition("=")[0]
            current = flag if flag in flags else None
            out.append(arg)
        elif current is not None and out[-1] != current:
            out += [current, arg]
        else:
            out.append(arg)
    return out


def track_once(kind: str, output, config: dict, metrics: dict) -> None:
    """Log a one-shot command's figures to ``OUT-tracking/`` (``--track csv|swanlab|wandb``) and say where."""
    if kind == "none":
        return
    from pathlib import Path

    from paw.io.tracking import log_once

    output = Path(output)
    where = log_once(kind, output.with_name(output.name + "-tracking"), config, metrics)
    typer.echo(f"tracking ({kind}): {where}")


def track_steps(kind: str, output, config: dict, points: list[tuple[int, dict]]) -> None:
    """Log a finished training's curve, ``(step, figures)`` in order, to ``OUT-tracking/`` and say where.

    For trainers whose loop kept the curve in their record (``train-full``, distillation, the heals):
    the run reads as if logged live, one point per step given.
    """
    if kind == "none":
        return
    from pathlib import Path

    from paw.io.tracking import log_steps

    output = Path(output)
    run_dir = log_steps(kind, output.with_name(output.name + "-tracking"), config, points)
    typer.echo(f"tracking ({kind}): {run_dir}")


def finite_floats(command) -> None:
    """Make every command under ``command`` refuse ``nan`` and ``inf`` in its float options.

    The parser reads ``--scale inf`` or ``--weights nan nan`` as floats, and a NaN weight silently
    turns a whole merged model into NaN. Each command's callback is wrapped once, so a new
    command's float options are covered without a line of its own. The same wrapper runs the
    command under :func:`paw.io.finite.nonfinite_policy` with its ``--allow-nonfinite`` (off where
    the command has no such flag), so every writer refuses or writes NaN/Inf as the user asked.
    """
    callback = getattr(command, "callback", None)
    if callback is not None and not getattr(callback, "_paw_finite", False):
        command.callback = _checking_floats(callback, _flag_names(command))
    for sub in (getattr(command, "commands", None) or {}).values():
        finite_floats(sub)


def _flag_names(command) -> dict[str, str]:
    names = {}
    for param in getattr(command, "params", []):
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        names[param.name] = opts[0] if opts else param.name
    return names


def _checking_floats(callback, flags: dict[str, str]):
    import functools

    from paw.errors import PawError

    @functools.wraps(callback)
    def run(*args, **kwargs):
        for name, value in kwargs.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
            if bad:
                raise PawError(f"{flags.get(name, name)} {bad[0]} is not a finite number")
        from paw.io.finite import nonfinite_policy

        with nonfinite_policy(bool(kwargs.get("allow_nonfinite"))):  # what every writer of this run honours
            return callback(*args, **kwargs)

    run._paw_finite = True
    return run


def tidy_help(command) -> None:
    """Make ``--help`` read well at 80 columns, for every command under ``command``.

    The app prints click's plain help (``rich_markup_mode=None``): one column of flags, one of help
    text that wraps. A number with bounds reads ``<int>`` (the bounds follow its help as ``[x>=1]``)
    and a long list of choices reads ``<choice>`` with the values in the help text, so the flag
    column stays narrow; a group lists each command's whole first paragraph, not a cut sentence.
    Lines break at spaces only, so ``./other-tok`` or ``task-arithmetic`` can be copied whole.
    """
    _no_breaks_at_hyphens()
    for param in getattr(command, "params", []):
        _tidy_option(param)
    for sub in (getattr(command, "commands", None) or {}).values():
        if not sub.short_help and sub.help:
            sub.short_help = " ".join(inspect.cleandoc(sub.help).split("\n\n")[0].split())
        tidy_help(sub)


def _no_breaks_at_hyphens() -> None:
    """Have click's help wrapper (built afresh for each paragraph) break lines at spaces only."""
    import importlib

    for name in ("typer._click._textwrap", "click._textwrap"):  # typer >= 0.20 carries its own click
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if not getattr(module.TextWrapper, "_paw_spaces_only", False):
            module.TextWrapper = type("TextWrapper", (module.TextWrapper,), {
                "_paw_spaces_only": True, "__init__": _spaces_only_init(module.TextWrapper)})


def _spaces_only_init(base):
    def __init__(self, *args, **kwargs):
        base.__init__(self, *args, **{**kwargs, "break_on_hyphens": False})

    return __init__


def _tidy_option(param) -> None:
    described = getattr(param, "type_descriptor", None)  # typer's view of the type (absent before 0.20)
    if param.metavar is not None or described is None:
        return
    if getattr(param, "param_type_name", None) == "argument":  # `FILES...`, not `{files}...`
        param.metavar = param.name.upper()
        return
    if described.is_ranged:
        param.metavar = f"<{described.ranged_type_name}>"
        return
    names = [str(getattr(v, "value", v)) for v in (described.choices if described.is_choice else None) or ()]
    if len("|".join(names)) > _SHORT_CHOICES:
        param.metavar = "<choice>"
        if not all(name in (param.help or "") for name in names):
            param.help = f"{param.help or ''} One of: {', '.join(names)}.".strip()


_SHORT_CHOICES = 12  # `<auto|none>` stays beside the flag; a longer list moves into the help text


# ------------------------------------------------------------------------------------ options-first commands

CONFIG_HELP = "YAML of option values (keys: flags without '--'); typed flags win."


def options_command(app, name: str, groups: list[tuple], body, *, doc: str, cls=None, given: bool = False,
                    foreign=None, config_help: str = CONFIG_HELP, arguments: tuple[inspect.Parameter, ...] = ()):
    """Register command ``name`` whose options are the knobs of ``groups`` (``(options class, help prefix)``, or
    ``(class, prefix, fields to leave out)`` where a field means nothing to this command: extract-lora has no
    ``--track``) and ``--config FILE.yaml``; ``body(*objects)`` gets one object per class, in order, each with
    the values of the config file overridden by the flags the user typed (:func:`paw.knobs.merged`).

    A list knob takes several values after its flag (``--models a b c``). ``given=True``: the body also gets
    ``given=`` :class:`paw.knobs.Given`, the knobs the user set by flag or file. ``foreign(mapping)``: whether
    a config file is another tool's schema (merge: mergekit's YAML); such a file is not read as knobs, and the
    body gets ``foreign=(path, mapping)`` (else None) to translate, with the objects from the flags alone.
    ``arguments``: hand-written parameters no option can express (the positional ``FILES...`` of ``paw bpe
    train``, made with :func:`argument`), passed to ``body`` by name after the objects.
    """
    classes = [g[0] for g in groups]
    params = [*arguments, inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                                            default=typer.Option(None, "--config", help=config_help))]
    for c, prefix, *skip in groups:
        params += cli_parameters(c, help_prefix=prefix, skip=tuple(skip[0]) if skip else ())
    shown = {p.name for p in params}
    several = [f for c in classes for f in list_flags(c)]

    def callback(**values):
        config = values.pop("config")
        positional = {p.name: values.pop(p.name) for p in arguments}
        objects = [from_parsed(c, values) for c in classes]
        typed = typed_on_command_line(list(values))
        extra = {"foreign": None} if foreign is not None else {}
        in_file: set[str] = set()
        if config is not None:
            from paw.io.yaml_file import read_yaml_mapping

            data = read_yaml_mapping(config)
            if foreign is not None and foreign(data):
                extra["foreign"] = (config, data)
            else:
                skip = {g[0]: tuple(g[2]) for g in groups if len(g) > 2}
                objects, in_file = _with_file(name, config, data, classes, objects, shown, typed, skip)
        if given:
            extra["given"] = Given(frozenset(typed), frozenset(in_file - typed), config)
        from paw.io.finite import nonfinite_policy

        allow = any(getattr(o, "allow_nonfinite", False) for o in objects)   # from the file too
        with nonfinite_policy(allow):
            return body(*objects, **extra, **positional)

    callback.__signature__ = inspect.Signature(params)
    callback.__annotations__ = {p.name: p.annotation for p in params}
    callback.__doc__ = doc
    callback.__name__ = name.replace("-", "_")
    return app.command(name, cls=cls or (multi_value_command(*several) if several else None))(callback)


def _with_file(name: str, config: Path, data: dict, classes: list, objects: list, shown: set[str],
               typed: set[str], skip: dict) -> tuple[list, set[str]]:
    """The objects from ``--config`` with the typed flags laid over, and the knobs the file set."""
    field_of = {key: f.name for c in classes for f in knobs(c) if f.name in shown and f.name not in skip.get(c, ())
                for key in config_keys(c, f.name)}
    unknown = [k for k in data if isinstance(k, str) and k.replace("-", "_") not in shown and k not in field_of]
    if unknown:   # a knob of a shared class that this command has no flag for
        raise PawError(f"--config {config}: unknown key {unknown[0]!r} for paw {name}")
    from_file = from_mapping(data, *classes, where=f"--config {config}", skip=skip)
    from_file = from_file if isinstance(from_file, tuple) else (from_file,)
    merged_objects = [merged(f, o, typed) for f, o in zip(from_file, objects, strict=True)]
    return merged_objects, {field_of.get(k, k.replace("-", "_")) for k in data}


def argument(name: str, annotation, default, help: str) -> inspect.Parameter:
    """A positional command-line argument (``typer.Argument``) for :func:`options_command`'s ``arguments``."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Argument(default, help=help))
