"""The ``paw`` command line.

Every module in this package that does not start with ``_`` defines ``register(app)`` and is
discovered at start-up, so adding a command group touches no shared file. Command modules import
torch and friends inside the command bodies only, which keeps ``paw --help`` fast.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import typer

from paw import __version__
from paw.errors import PawError
from paw.registry import same_name

app = typer.Typer(
    name="paw",
    help="PAW: move what a language model has learned between models "
    "(tokenizers, LoRA transfer, task vectors, merging, BPE).\n\n"
    "Start with:  paw demo",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # choices (--method dare_ties or dare-ties) and option names are read with "_" as "-"
    context_settings={"help_option_names": ["-h", "--help"], "token_normalize_func": same_name},
    rich_markup_mode=None,  # click's plain help: it fits 80 columns (see _options.tidy_help)
)


def _version(value: bool):
    if value:
        typer.echo(f"paw {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the PAW version and exit."),
):
    """PAW command line."""


def _register_all() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(app)


_register_all()


def _quiet_libraries() -> None:
    """Library deprecation notices and per-shard bars are noise in a CLI's output; PAW reports itself."""
    import os
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    """Console entry point: every failure is one line on stderr and exit code 2 (3: ``--require-gain``'s
    ``NoGain``), never a traceback.

    ``PawError`` (bad input, named by file), ``OSError`` (disk full, permissions), a bad flag and
    any other library exception all end the same way; ``PAW_TRACEBACK=1`` shows the traceback of the
    unexpected ones. Each command runs in one :func:`paw.io.input_guard.input_scope`, so nothing it
    reads can be written over, and records the arguments it parsed as its command (not the host
    process's ``sys.argv``).
    """
    from paw.cli._options import finite_floats, tidy_help
    from paw.io.input_guard import input_scope
    from paw.io.manifest import cli_invocation

    _quiet_libraries()
    command = typer.main.get_command(app)
    finite_floats(command)
    tidy_help(command)
    args = sys.argv[1:] if argv is None else list(argv)  # what this CLI parses, recorded as its command
    try:
        with input_scope(), cli_invocation(args):
            code = command.main(args=args, prog_name="paw", standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool) and code:  # typer returns Ctrl-C as 130, not raises it
            return _fail("interrupted", code=130) if code == 130 else code
    except PawError as err:
        return _fail(str(err), code=err.exit_code)  # 2: bad input; 3: NoGain (--require-gain)
    except KeyboardInterrupt:
        return _fail("interrupted", code=130)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else _fail(str(exit_.code)))
    except Exception as err:
        return _other(err)
    return 0


def _kind(err: BaseException, *names: str) -> bool:
    """Whether ``err`` is one of click's exception classes (typer vendors its own copy of click)."""
    return any(cls.__name__ in names for cls in type(err).__mro__)


def _other(err: Exception) -> int:
    if _kind(err, "NoArgsIsHelpError"):  # `paw` or `paw bpe` alone: the help, then the one error line
        ctx = getattr(err, "ctx", None)
        typer.echo(ctx.get_help() if ctx else "", err=True)
        names = ", ".join(getattr(ctx.command, "commands", None) or ()) if ctx else ""
        return _fail(f"{ctx.command_path if ctx else 'paw'}: missing command" + (f" ({names})" if names else ""))
    if _kind(err, "Exit"):
        return int(getattr(err, "exit_code", 0) or 0)
    if _kind(err, "Abort"):
        return _fail("aborted", code=130)
    if _kind(err, "ClickException"):  # a bad flag: unknown, missing, not a number, out of range
        ctx = getattr(err, "ctx", None)
        return _fail(f"{ctx.command_path + ': ' if ctx else ''}{err.format_message()} (see --help)")
    if isinstance(err, OSError):  # disk full, permission denied, ...
        return _fail(f"{err.filename + ': ' if isinstance(err.filename, str) else ''}{err.strerror or err}")
    if os.environ.get("PAW_TRACEBACK"):
        raise err
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return _fail(f"unexpected {type(err).__name__}: {first} (set PAW_TRACEBACK=1 to see where)")


def _fail(message: str, *, code: int = 2) -> int:
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    sys.exit(code)
