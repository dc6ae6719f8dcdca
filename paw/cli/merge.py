"""``paw merge``: merge fine-tunes of one base, weighted by their task-vector L2 norms, streamed."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import RunOptions, WriteOptions, command_line, options_command, track_once
from paw.knobs import Given, flag, knobs, merged
from paw.merge.mergekit import is_mergekit_config  # light: the translation is read when a config names it
from paw.merge.options import AdapterInputs, MergeRun, MergeSpec

_GROUPS = [(MergeSpec, ""), (AdapterInputs, ""), (MergeRun, ""), (RunOptions, ""), (WriteOptions, "")]
CONFIG_HELP = ("YAML of option values (keys: flags without '--'; typed flags win), or a mergekit config "
               "(it names merge_method; typed flags may only say how to run).")


def register(app: typer.Typer) -> None:
    options_command(app, "merge", _GROUPS, merge_command, doc=merge_command.__doc__, given=True,
                    foreign=is_mergekit_config, config_help=CONFIG_HELP)


def merge_command(spec: MergeSpec, adapters: AdapterInputs, out: MergeRun, run: RunOptions, write: WriteOptions,
                  *, given: Given, foreign: tuple[Path, dict] | None) -> None:
    """Merge fine-tunes of one base into one model, weighted by their task-vector L2 norms.

    Streams in blocks of rows (memory near one output tensor plus N+2 float32 blocks) and writes
    sharded safetensors atomically, with the base's config and tokenizer and a paw_merge.json
    record. NaN/Inf in the result is refused, naming the input it comes from.

    Example: paw merge --base ./tiny/base --models ./ft1 ./ft2 --method ties --output ./merged

    mergekit's YAML: paw merge --config gradient-slerp.yml --output ./merged

    Adapters: paw merge --adapters ./lora1 ./lora2 --method svd --rank 8 --output ./merged-lora
    """
    from paw.errors import PawError
    from paw.io.tracking import check_kind
    from paw.merge import MergeOptions, prepare
    from paw.merge.adapters import ADAPTER_METHODS

    check_kind(run.track)
    if foreign is not None:
        _run(prepare(_from_mergekit(*foreign, out, run, write, given)), run.track)
        return
    if adapters.adapters:
        _merge_adapters(spec, adapters, out, run, write, given)
        return
    only = [f for f in ("rank", "majority_sign_method") if f in given.names()]
    if only or spec.method in ADAPTER_METHODS:
        shown = _flags()[only[0]] if only else f"--method {spec.method}"
        raise PawError(f"{shown} applies to adapter merges only: pass --adapters A1 A2 ...")
    _run(prepare(MergeOptions.of(spec, out, run, write)), run.track)


def _run(job, track: str) -> None:
    """Print the weights table, stream the merge, print one line, log to the tracker."""
    from paw.merge import execute

    _print_table(job)
    out = execute(job, command=command_line())
    typer.echo(f"merged {len(job.models)} model(s) with {job.method.name} into {out}")
    track_once(track, out, {"command": command_line(), "method": job.method.name},
               {"merge": {name: {"l2": norm, "weight": w} for name, norm, w in job.table()}})


def _from_mergekit(config: Path, data: dict, out: MergeRun, run: RunOptions, write: WriteOptions, given: Given):
    """A mergekit config translated into the merge's options (refusing what PAW cannot do); only flags that say
    how to run (:class:`MergeRun`, :class:`RunOptions`, :class:`WriteOptions`) combine with it, and win."""
    from paw.errors import PawError
    from paw.merge import MergeOptions
    from paw.merge.mergekit import options_from_mergekit

    stray = [f.name for cls in (MergeSpec, AdapterInputs) for f in knobs(cls) if f.name in given.typed]
    if stray:
        raise PawError(f"{_flags()[stray[0]]} does not combine with a mergekit config ({config}): set it in the YAML")
    translated = options_from_mergekit(data, source=str(config))
    out = merged(MergeRun(dtype=translated.dtype), out, given.typed)   # the config's dtype, unless typed
    return MergeOptions.of(translated, out, run, write, token_overrides=translated.token_overrides,
                           rules=translated.rules, slices=translated.slices)


def _merge_adapters(spec: MergeSpec, adapters: AdapterInputs, out: MergeRun, run: RunOptions,
                    write: WriteOptions, given: Given) -> None:
    """``--adapters`` (or ``adapters:`` in the config): one call to
    :func:`paw.merge.adapter_pipeline.merge_adapters` with the knobs the user set, then one summary line."""
    from paw.errors import PawError
    from paw.merge.adapter_pipeline import FIELDS, AdapterMergeOptions, merge_adapters

    unused = given.names() - {*FIELDS, "track"}
    typed = [f for f in _flags() if f in unused & given.typed]
    if {"base", "models"} & set(typed):
        raise PawError("--adapters replaces --base/--models: pass adapters or models, not both")
    if typed:
        raise PawError(f"{_flags()[typed[0]]} does not apply to --adapters merges")
    if unused:
        raise PawError(f"--config {given.config}: unknown key {sorted(unused)[0]!r} for an adapter merge; the keys "
                       f"are {', '.join(FIELDS)}")
    objects = (spec, adapters, out, run, write)
    values = {name: getattr(next(o for o in objects if hasattr(o, name)), name) for name in given.names() & {*FIELDS}}
    values = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
    result = merge_adapters(AdapterMergeOptions(**values), command=command_line())
    report, ranks = result.report, sorted(set(result.ranks.values()))
    shown = str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
    error = "" if result.max_relative_error is None else \
        f", largest relative truncation error {result.max_relative_error:.4g}"
    typer.echo(f"merged {len(report['adapters'])} adapter(s) with {report['method']} (weights "
               f"{', '.join(f'{w:.4g}' for w in report['weights'])}) into {result.output}: "
               f"{len(result.ranks)} module(s), rank {shown}, {len(report['partial_modules'])} from some "
               f"adapters only{error}")
    track_once(run.track, result.output, {"command": command_line(), "method": report["method"]},
               {"merge": {"weights": report["weights"], "max_relative_error": result.max_relative_error}})


def _flags() -> dict[str, str]:
    """Field name -> flag, for every knob of the command, in the order of ``--help``."""
    return {f.name: flag(cls, f.name) for cls, _ in _GROUPS for f in knobs(cls)}


def _print_table(job) -> None:
    from rich.table import Table

    from paw.cli._options import console as make_console

    mode = "explicit --weights" if job.options.weights is not None else f"mode {job.options.mode}"
    per_tensor = job.options.rules is not None
    if per_tensor:
        mode = f"mergekit config (merge_method {job.options.rules.method}): weights per tensor from the config"
    if not job.method.weighted:
        mode = "weights not used by this method" + (f" (mergekit config, {job.options.rules.method})"
                                                     if per_tensor else "")
    console = make_console()
    console.print(f"paw merge: {job.method.name}, {mode}, L2 norms {job.norm_source}")
    table = Table()
    table.add_column("model")
    table.add_column("L2", justify="right")
    table.add_column("weight", justify="right")
    for name, norm, weight in job.table():
        table.add_row(name, "-" if norm is None else f"{norm:.6g}", "-" if not job.method.weighted else "per tensor" if per_tensor else f"{weight:.4f}")
    console.print(table)
