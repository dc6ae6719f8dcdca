"""``paw zoo``: build tiny local models, fine-tunes and adapters to try PAW without downloads; each command made
from its options class in :mod:`paw.zoo_options`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from paw.cli._options import argument, options_command
from paw.zoo_options import BuildOptions, FineTuneOptions


def _output():
    return argument("output", Path, ..., "Folder to create.")


def register(app: typer.Typer) -> None:
    zoo_app = typer.Typer(help="Tiny local models for trying PAW (nothing is downloaded).",
                          no_args_is_help=True)
    app.add_typer(zoo_app, name="zoo")
    options_command(zoo_app, "build", [(BuildOptions, "")], build, doc=build.__doc__, arguments=(_output(),))
    base = argument("base", Path, ..., "Model folder to start from (for example one `paw zoo build` wrote).")
    options_command(zoo_app, "fine-tune", [(FineTuneOptions, "")], fine_tune, doc=fine_tune.__doc__,
                    arguments=(base, _output()))


def build(options: BuildOptions, *, output: Path) -> None:
    """Build a tiny base model (+ a fine-tune and a LoRA adapter).

    Example: paw zoo build ./tiny --arch qwen2 --hidden-size 64
    """
    from paw import zoo

    zoo.build_zoo(dataclasses.replace(options, output=output), say=typer.echo)


def fine_tune(options: FineTuneOptions, *, base: Path, output: Path) -> None:
    """Write a stand-in fine-tune of BASE: the same model with every matching tensor moved a little.

    Enough for task vectors and merges to have something to measure; nothing is trained.

    Example: paw zoo fine-tune ./tiny/base ./tiny/ft-math --seed 1 --scale 0.02
    """
    from paw import zoo

    deltas = zoo.fine_tune_folder(dataclasses.replace(options, base=base, output=output))
    typer.echo(f"fine-tune:   {output} ({len(deltas)} tensors changed)")
