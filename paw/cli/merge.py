"""``paw merge``: merge fine-tunes of one base, weighted by their task-vector L2 norms, streamed."""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from paw.cli._options import (
    ALLOW_NONFINITE,
    DEVICE,
    OVERWRITE,
    SEED,
    TRACK,
    choices,
    command_line,
    multi_value_command,
    track_once,
)
from paw.merge.adapters import ADAPTER_METHODS  # light, like METHODS
from paw.merge.methods import METHODS  # light: torch is imported inside the functions
from paw.merge.options import DTYPES, VOCAB_POLICIES
from paw.merge.weights import WEIGHT_MODES

_Method = choices("Method", [*METHODS, *ADAPTER_METHODS])
_Mode = choices("Mode", WEIGHT_MODES)
_Dtype = choices("Dtype", DTYPES)
_VocabPolicy = choices("VocabPolicy", VOCAB_POLICIES)

_HELP = {
    "base": "The common base model (folder, .safetensors or .gguf file, or cached ID); optional for --method linear.",
    "models": "Fine-tunes of the base, space separated: --models A B C.",
    "output": "Folder to write (sharded safetensors + config + tokenizer + paw_merge.json).",
    "method": "A merge method (see docs/commands/merge.md for each one's paper); with --adapters: "
              "cat (default, exact, ranks add), svd, ties-svd, dare-linear-svd, dare-ties-svd or magnitude-prune-svd.",
    "adapters": "PEFT LoRA folders of one base, space separated, merged into one LoRA folder (instead of "
                "--base/--models); weights 1 each unless --weights or --mode.",
    "rank": "With --adapters and an svd method: the output rank (default: the largest input rank).",
    "mode": "Weights from task-vector L2 norms: exp (w ∝ exp(-beta L/mean L)), linear (1/L), "
            "power (L^-alpha) or equal.",
    "l2_norms": "Task-vector L2 norms, one per model (else --stats-dir, else computed in a first pass).",
    "stats_dir": "Output folder of `paw task-vectors`: norms read from DIR/MODEL_NAME/summary.json.",
    "weights": "Explicit weights, one per model (overrides --mode).",
    "beta": "exp mode sharpness.",
    "alpha": "power mode exponent.",
    "scale": "Result = base + scale x merged task vector.",
    "density": "ties/breadcrumbs: fraction of entries kept per tensor.",
    "drop_rate": "dare-*: probability of dropping each entry (survivors rescaled by 1/(1-p)).",
    "gamma": "breadcrumbs: fraction of the largest entries dropped.",
    "dtype": "Output dtype: auto (the base's), float32, bfloat16 or float16.",
    "vocab_policy": "refuse (default); base: merge shared vocabulary rows, keep the base's for the rest; "
                    "union: merge on the union vocabulary and write the merged tokenizer.",
    "config": "YAML file: PAW's keys (the flag names, drop_rate for --drop-rate; flags win), or a mergekit config "
              "(merge_method, base_model, models/slices, parameters, dtype, tokenizer_source, chat_template).",
    "t": "slerp/nearswap: interpolation factor, 0 = the base, 1 = the model.",
    "epsilon": "della/della-linear: keep probabilities span density ± epsilon by magnitude rank.",
    "select_topk": "sce: fraction of entries kept by their variance across the models.",
    "normalize": "Divide by the weights that take part (default: the method's own: on for ties/della, off for task-arithmetic).",
    "rescale": "dare/della: rescale the entries that survive the random drop.",
    "filter_wise": "model-stock: one interpolation ratio per row instead of per tensor.",
    "max_iter": "karcher: iterations at most.",
    "tol": "karcher: convergence tolerance.",
    "tokenizer_from": "Copy the tokenizer files from this model instead of the base.",
    "max_shard_size": "Largest safetensors shard, e.g. 2GB or 500MB.",
}


def register(app: typer.Typer) -> None:
    @app.command("merge", cls=multi_value_command("--models", "--adapters", "--l2-norms", "--weights"))
    def merge_cmd(
        ctx: typer.Context,
        base: str = typer.Option(None, "--base", help=_HELP["base"]),
        models: list[str] = typer.Option(None, "--models", help=_HELP["models"]),
        adapters: list[str] = typer.Option(None, "--adapters", help=_HELP["adapters"]),
        rank: int = typer.Option(None, "--rank", help=_HELP["rank"]),
        output: Path = typer.Option(None, "--output", "-o", help=_HELP["output"]),
        method: _Method = typer.Option("task-arithmetic", "--method", help=_HELP["method"]),
        mode: _Mode = typer.Option("exp", "--mode", help=_HELP["mode"]),
        l2_norms: list[float] = typer.Option(None, "--l2-norms", help=_HELP["l2_norms"]),
        stats_dir: Path = typer.Option(None, "--stats-dir", help=_HELP["stats_dir"]),
        weights: list[float] = typer.Option(None, "--weights", help=_HELP["weights"]),
        beta: float = typer.Option(1.0, "--beta", help=_HELP["beta"]),
        alpha: float = typer.Option(1.5, "--alpha", help=_HELP["alpha"]),
        scale: float = typer.Option(1.0, "--scale", help=_HELP["scale"]),
        density: float = typer.Option(0.2, "--density", help=_HELP["density"]),
        drop_rate: float = typer.Option(0.9, "--drop-rate", help=_HELP["drop_rate"]),
        gamma: float = typer.Option(0.01, "--gamma", help=_HELP["gamma"]),
        seed: int = SEED,
        dtype: _Dtype = typer.Option("auto", "--dtype", help=_HELP["dtype"]),
        device: str = DEVICE,
        vocab_policy: _VocabPolicy = typer.Option("refuse", "--vocab-policy", help=_HELP["vocab_policy"]),
        max_shard_size: str = typer.Option("2GB", "--max-shard-size", help=_HELP["max_shard_size"]),
        overwrite: bool = OVERWRITE,
        allow_nonfinite: bool = ALLOW_NONFINITE,
        t: float = typer.Option(0.5, "--t", help=_HELP["t"]),
        epsilon: float = typer.Option(0.15, "--epsilon", help=_HELP["epsilon"]),
        select_topk: float = typer.Option(1.0, "--select-topk", help=_HELP["select_topk"]),
        normalize: bool = typer.Option(None, "--normalize/--no-normalize", help=_HELP["normalize"]),
        rescale: bool = typer.Option(True, "--rescale/--no-rescale", help=_HELP["rescale"]),
        filter_wise: bool = typer.Option(False, "--filter-wise", help=_HELP["filter_wise"]),
        max_iter: int = typer.Option(10, "--max-iter", help=_HELP["max_iter"]),
        tol: float = typer.Option(1e-5, "--tol", help=_HELP["tol"]),
        tokenizer_from: str = typer.Option(None, "--tokenizer-from", help=_HELP["tokenizer_from"]),
        config: Path = typer.Option(None, "--config", help=_HELP["config"]),
        track: str = TRACK,
    ):
        """Merge fine-tunes of one base into one model, weighted by their task-vector L2 norms.

        Streams in blocks of rows (memory near one output tensor plus N+2 float32 blocks) and writes
        sharded safetensors atomically, with the base's config and tokenizer and a paw_merge.json
        record. NaN/Inf in the result is refused, naming the input it comes from.

        Example: paw merge --base ./tiny/base --models ./ft1 ./ft2 --method ties --output ./merged

        mergekit's YAML: paw merge --config gradient-slerp.yml --output ./merged

        Adapters: paw merge --adapters ./lora1 ./lora2 --method svd --rank 8 --output ./merged-lora
        """
        from paw.io.tracking import check_kind
        from paw.io.yaml_file import read_yaml_mapping
        from paw.merge import MergeOptions, prepare
        from paw.merge.mergekit import is_mergekit_config

        check_kind(track)
        data = read_yaml_mapping(config) if config is not None else None
        if adapters or (data is not None and "adapters" in data and not is_mergekit_config(data)):
            _merge_adapters(ctx, track, data, config)
            return
        if data is not None and is_mergekit_config(data):
            _merge_mergekit(ctx, data, config, track)
            return
        if rank is not None or method.value in ADAPTER_METHODS:
            from paw.errors import PawError

            flag = "--rank" if rank is not None else f"--method {method.value}"
            raise PawError(f"{flag} applies to adapter merges only: pass --adapters A1 A2 ...")
        given = {k: v for k, v in ctx.params.items() if k not in ("config", "track", "adapters", "rank")}
        options = MergeOptions(**_with_config(ctx, given, data, config))
        _run(prepare(options), track)


def _run(job, track: str) -> None:
    """Print the weights table, stream the merge, print one line, log to the tracker."""
    from paw.merge import execute

    _print_table(job)
    out = execute(job, command=command_line())
    typer.echo(f"merged {len(job.models)} model(s) with {job.method.name} into {out}")
    track_once(track, out, {"command": command_line(), "method": job.method.name},
               {"merge": {name: {"l2": norm, "weight": w} for name, norm, w in job.table()}})


# flags that say how to run, not what to merge: the only ones that combine with a mergekit config
_RUN_FLAGS = ("output", "overwrite", "device", "max_shard_size", "allow_nonfinite", "seed", "config", "track")


def _merge_mergekit(ctx: typer.Context, data: dict, config: Path, track: str) -> None:
    """``--config`` holding mergekit's schema: translate it (refusing what PAW cannot do), then merge."""
    from paw.errors import PawError
    from paw.merge import prepare
    from paw.merge.mergekit import options_from_mergekit

    typed = [k for k in ctx.params if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE"]
    stray = [k for k in typed if k not in _RUN_FLAGS]
    if stray:
        raise PawError(f"--{stray[0].replace('_', '-')} does not combine with a mergekit config ({config}): "
                       "set it in the YAML")
    options = options_from_mergekit(data, source=str(config))
    for key in _RUN_FLAGS[:-2]:
        value = ctx.params[key]
        setattr(options, key, str(value) if isinstance(value, Path) else value)
    _run(prepare(options), track)


_ADAPTER_FLAGS = ("adapters", "output", "method", "weights", "mode", "beta", "alpha", "scale", "rank",
                  "density", "drop_rate", "seed", "device", "overwrite", "allow_nonfinite")


def _merge_adapters(ctx: typer.Context, track: str, data: dict | None, config: Path | None) -> None:
    """``--adapters`` (or ``adapters:`` in a PAW config): one call to
    :func:`paw.merge.adapter_pipeline.merge_adapters`, then one summary line. Flags typed win over the file."""
    from paw.errors import PawError
    from paw.merge.adapter_pipeline import AdapterMergeOptions, adapter_options_from_mapping, merge_adapters

    typed = [k for k in ctx.params if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE"]
    if "base" in typed or "models" in typed:
        raise PawError("--adapters replaces --base/--models: pass adapters or models, not both")
    stray = [k for k in typed if k not in (*_ADAPTER_FLAGS, "track", "config")]
    if stray:
        raise PawError(f"--{stray[0].replace('_', '-')} does not apply to --adapters merges")
    values = adapter_options_from_mapping(data, source=str(config)) if data is not None else {}
    values.update({k: (str(v) if isinstance(v, Path) else v.value if isinstance(v, enum.Enum) else v)
                   for k, v in ctx.params.items() if k in typed and k in _ADAPTER_FLAGS})
    values["adapters"] = list(values["adapters"])
    if "weights" in values:
        values["weights"] = list(values["weights"])
    merged = merge_adapters(AdapterMergeOptions(**values), command=command_line())
    report, ranks = merged.report, sorted(set(merged.ranks.values()))
    shown = str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
    error = "" if merged.max_relative_error is None else \
        f", largest relative truncation error {merged.max_relative_error:.4g}"
    typer.echo(f"merged {len(report['adapters'])} adapter(s) with {report['method']} (weights "
               f"{', '.join(f'{w:.4g}' for w in report['weights'])}) into {merged.output}: "
               f"{len(merged.ranks)} module(s), rank {shown}, {len(report['partial_modules'])} from some "
               f"adapters only{error}")
    track_once(track, merged.output, {"command": command_line(), "method": report["method"]},
               {"merge": {"weights": report["weights"], "max_relative_error": merged.max_relative_error}})


def _with_config(ctx: typer.Context, given: dict, data: dict | None, config: Path | None) -> dict:
    """Flags typed on the command line win; the config fills the rest; defaults fill what is left."""
    values = {k: (str(v) if isinstance(v, Path) else v.value if isinstance(v, enum.Enum) else v)
              for k, v in given.items()}
    for key in ("models", "l2_norms", "weights"):
        values[key] = list(values[key]) if values[key] else None
    values["models"] = values["models"] or []
    if data is None:
        return values
    from paw.merge.options import options_from_mapping

    from_file = options_from_mapping(data, source=str(config))
    for key, value in from_file.items():
        if getattr(ctx.get_parameter_source(key), "name", None) != "COMMANDLINE":
            values[key] = value
    return values


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
