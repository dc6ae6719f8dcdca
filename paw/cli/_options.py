"""Options shared by several commands, defined once so their help reads the same everywhere."""

from __future__ import annotations

import shlex
import sys

import typer

from paw.device import DEVICE_HELP

DEVICE = typer.Option("auto", "--device", help=f"Where the arithmetic runs: {DEVICE_HELP}.")
OVERWRITE = typer.Option(False, "--overwrite", help="Replace the output if it already exists.")
SEED = typer.Option(0, "--seed", help="Random seed; same inputs and seed give byte-identical outputs.")
TRACK = typer.Option("none", "--track", help="Experiment tracking: none, csv, or swanlab (offline).")


def command_line() -> str:
    """The command line as the user typed it, for the provenance JSON of every output folder."""
    return " ".join(shlex.quote(a) for a in ["paw", *sys.argv[1:]])
