"""The ``paw`` command line.

Every module in this package that does not start with ``_`` defines ``register(app)`` and is
discovered at start-up, so adding a command group touches no shared file. Command modules import
torch and friends inside the command bodies only, which keeps ``paw --help`` fast.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from paw import __version__
from paw.errors import PawError

app = typer.Typer(
    name="paw",
    help="PAW: move what a language model has learned between models "
    "(tokenizers, LoRA transfer, task vectors, merging, BPE).\n\n"
    "Start with:  paw demo",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="markdown",
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
    """Console entry point: PawError -> one line on stderr, exit 2."""
    from paw.io.manifest import cli_invocation

    _quiet_libraries()
    args = sys.argv[1:] if argv is None else list(argv)  # what this CLI parses, recorded as its command
    try:
        with cli_invocation(args):
            app(args=args, prog_name="paw", standalone_mode=True)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    except PawError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    return 0
