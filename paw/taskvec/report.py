"""Turn :class:`~paw.taskvec.compute.TaskVectorResults` into the ``paw task-vectors`` files.

Layout (names and columns are an interface: users and ``paw merge`` read them)::

    DIR/<model>/per_param_stats.csv     one row per parameter, PER_PARAM_COLUMNS
    DIR/<model>/top{k}_by_l2.csv        the k rows with the largest l2
    DIR/<model>/top{k}_by_maxabs.csv    the k rows with the largest maxabs
    DIR/<model>/summary.json            global_l2, global_l1, n_params_considered, skipped_params,
                                        groups, tied_lm_head, paw_version, command, inputs
    DIR/<model>/group_l2_bar.png        L2 per module group and per layer
    DIR/pairwise_cosines.csv            N x N cosines of the flattened task vectors

With ``--spectra`` (:mod:`paw.taskvec.spectra`), also::

    DIR/<model>/spectra.csv             one row per 2-D parameter, spectra_columns(ranks)
    DIR/<model>/spectra_groups.csv      the same per group (energies weighted by ‖Δ‖²)
    DIR/<model>/energy_by_rank.png      energy held against rank, one line per module group
    DIR/pairwise_sign_agreement.csv     N x N, with two models or more
    DIR/pairwise_mask_overlap.csv       N x N Jaccard of the top-k masks, with two models or more
    DIR/pairwise_interference.csv       per tensor and pair: sign_agreement, mask_overlap

Row builders, the summary and the figure are pure; :func:`write_report` writes through
``paw.io`` (the whole report folder atomically, as one rename).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from paw.errors import PawError
from paw.io.atomic import atomic_dir, check_output
from paw.io.manifest import describe_input, write_manifest
from paw.io.reports import json_safe, save_figure, write_csv
from paw.taskvec.compute import TaskVectorResults
from paw.taskvec.groups import GROUP_ORDER
from paw.taskvec.quantiles import QUANTILES

QUANTILE_COLUMNS = [f"q{q}" for q in QUANTILES]
PER_PARAM_COLUMNS = ["param", "shape", "numel", "l2", "l1", "maxabs", "mean", "std", "skew",
                     "kurtosis_excess", *QUANTILE_COLUMNS]
COSINES_FILE = "pairwise_cosines.csv"
PAIR_FILES = {"sign_agreement": "pairwise_sign_agreement.csv", "mask_overlap": "pairwise_mask_overlap.csv"}
INTERFERENCE_FILE = "pairwise_interference.csv"
INTERFERENCE_COLUMNS = ["param", "model_a", "model_b", "sign_agreement", "mask_overlap"]


def spectra_columns(ranks) -> list[str]:
    """``['param', 'shape', 'stable_rank', 'effective_rank', 'energy_at_8', ..., 'exact_svd']``."""
    return ["param", "shape", "stable_rank", "effective_rank", *(f"energy_at_{k}" for k in ranks), "exact_svd"]


def spectra_group_columns(ranks) -> list[str]:
    return ["group", "tensors", "stable_rank_mean", "effective_rank_mean", *(f"energy_at_{k}" for k in ranks)]


def spectra_rows(results: TaskVectorResults, i: int) -> list[dict]:
    """One dict per 2-D tensor of model ``i``, keyed by :func:`spectra_columns`."""
    ranks = results.spectra_options.ranks
    rows = []
    for name, shape, s in zip(results.names, results.shapes, results.spectra[i], strict=True):
        if s is not None:
            rows.append({"param": name, "shape": "x".join(map(str, shape)), "stable_rank": s.stable_rank,
                         "effective_rank": s.effective_rank, "exact_svd": s.exact,
                         **{f"energy_at_{k}": e for k, e in zip(ranks, s.energies, strict=True)}})
    return rows


def interference_rows(results: TaskVectorResults) -> list[list]:
    """``[param, model_a, model_b, sign_agreement, mask_overlap]`` per tensor and pair (nan: NaN/Inf)."""
    rows = []
    for name, pairs in zip(results.names, results.pairs, strict=True):
        for (i, j), c in pairs.items():
            figures = [c.sign_agreement, c.mask_overlap] if c is not None else [float("nan")] * 2
            rows.append([name, results.models[i], results.models[j], *figures])
    return rows


def energy_figure(groups: dict[str, dict], ranks, *, model: str, base: str):
    """Energy held by a rank-k update against k (log axis), one line per module group."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.2), layout="constrained")
    ax = fig.subplots()
    for group in (g for g in GROUP_ORDER if g in groups):
        ax.plot(ranks, [groups[group][f"energy_at_{k}"] for k in ranks], marker="o", label=group)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ranks), [str(k) for k in ranks])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("rank k of the update (per tensor)")
    ax.set_ylabel("share of ‖Δ‖² held (weighted by tensor)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Energy at rank k: {model} − {base}", fontsize=11)
    return fig


def param_rows(results: TaskVectorResults, i: int) -> list[dict]:
    """One dict per considered tensor of model ``i``, keyed by :data:`PER_PARAM_COLUMNS`."""
    rows = []
    for name, shape, s in zip(results.names, results.shapes, results.stats[i], strict=True):
        row = {"param": name, "shape": "x".join(map(str, shape)) or "scalar", "numel": s.numel,
               "l2": s.l2, "l1": s.l1, "maxabs": s.maxabs, "mean": s.mean, "std": s.std,
               "skew": s.skew, "kurtosis_excess": s.kurtosis_excess}
        row.update(zip(QUANTILE_COLUMNS, s.quantiles, strict=True))
        rows.append(row)
    return rows


def top_rows(rows: Sequence[dict], column: str, k: int) -> list[dict]:
    """The ``k`` rows with the largest ``column``, ties in parameter order (NaN last)."""
    def key(item):
        value = item[1][column]
        return (value != value, -value if value == value else 0.0, item[0])

    return [row for _, row in sorted(enumerate(rows), key=key)[:k]]


def summary(results: TaskVectorResults, i: int, *, top_k: int) -> dict:
    """The figures of ``summary.json`` for model ``i`` (provenance fields are added on write)."""
    return {
        "model": results.models[i],
        "base": results.base,
        "global_l2": results.global_l2(i),
        "global_l1": results.global_l1(i),
        "n_params_considered": results.n_params(),
        "n_tensors_considered": len(results.names),
        "skipped_params": dict(results.skipped),
        "groups": results.groups(i),
        "tied_lm_head": results.tied_lm_head,
        "quantiles_percent": list(QUANTILES),
        "top_k": top_k,
        **({"spectra": {"ranks": list(results.spectra_options.ranks),
                        "mask_density": results.spectra_options.density,
                        "energy_at": dict(zip(map(str, results.spectra_options.ranks), results.spectra_energy(i),
                                              strict=True)),
                        "groups": results.spectra_groups(i)}} if results.spectra_options else {}),
    }


def group_l2_figure(groups: dict[str, dict], *, model: str, base: str, notes: dict[str, str] | None = None):
    """Bar chart of L2 per module group (left) and per layer (right); log scale for wide ranges.

    ``notes`` replaces the value label of a bar, e.g. ``{"lm_head": "tied"}``.
    """
    from matplotlib.figure import Figure

    modules = [g for g in GROUP_ORDER if g in groups]
    layers = [g for g in groups if g not in GROUP_ORDER]
    # the module panel keeps room for its six labels however many layers there are
    fig = Figure(figsize=(min(6.5 + 0.3 * max(len(layers), 10), 18) if layers else 6.5, 4.8),
                 layout="constrained")
    widths = [6.0, max(0.45 * len(layers), 3.0)] if layers else [1]
    axes = fig.subplots(1, len(widths), width_ratios=widths, squeeze=False)[0]
    _bars(axes[0], modules, [groups[g]["l2"] for g in modules], "module group", "#4C72B0", annotate=True,
          notes=notes)
    if layers:
        labels = [g.removeprefix("layer_") for g in layers]
        _bars(axes[1], labels, [groups[g]["l2"] for g in layers], "layer", "#55A868",
              annotate=len(layers) <= 12)
    axes[0].set_ylabel("L2 norm of the task vector Δ")
    fig.suptitle(f"Task vector L2 per group: {model} − {base}", fontsize=12)
    return fig


def _bars(ax, labels: Sequence[str], values: Sequence[float], xlabel: str, color: str, *,
          annotate: bool, notes: dict[str, str] | None = None) -> None:
    positive = [v for v in values if v > 0]
    log = bool(positive) and max(positive) / min(positive) > 50
    shown = [v if v > 0 or not log else 0 for v in values]
    bars = ax.bar(range(len(labels)), shown, color=color)
    ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 12 else 0,
                  fontsize=8 if len(labels) > 24 else 9)
    pad = max(4 - len(labels), 0) / 2  # a few bars stay bar-shaped, centred
    ax.set_xlim(-0.6 - pad, len(labels) - 0.4 + pad)
    ax.set_xlabel(xlabel + (" (log scale)" if log else ""))
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    if annotate:
        for label, bar, value in zip(labels, bars, values, strict=True):
            text = (notes or {}).get(label) or (f"{value:.3g}" if value > 0 else "0")
            y = bar.get_height() if value > 0 else (min(positive) if log and positive else 0)
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, y), ha="center", va="bottom",
                        fontsize=8, xytext=(0, 2), textcoords="offset points")


def output_paths(outdir: str | Path, model_names: Sequence[str]) -> list[Path]:
    """The folders and files a report for these models creates in ``outdir``."""
    outdir = Path(outdir)
    return [outdir / name for name in model_names] + [outdir / COSINES_FILE]


def check_report_outputs(outdir: str | Path, model_names: Sequence[str], *, overwrite: bool,
                         inputs: Sequence = ()) -> None:
    """Refuse (before any heavy work) an ``outdir`` that exists (unless ``overwrite``) or holds an input."""
    if Path(outdir).exists() and not Path(outdir).is_dir():
        raise PawError("--outdir exists and is not a folder", path=outdir)
    check_output(outdir, overwrite=overwrite, inputs=inputs)


def write_report(outdir: str | Path, results: TaskVectorResults, *, top_k: int = 50, command: str = "",
                 inputs: dict | None = None, overwrite: bool = False) -> list[Path]:
    """Write every report file for every model; returns the model folders and the cosine table.

    The whole report folder is built aside and renamed into place once: a run that is killed or
    fails leaves no half report (and no complete-looking model folder beside a missing one).
    """
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise PawError("--outdir exists and is not a folder", path=outdir)
    if inputs is None:
        inputs = {"base": describe_input(results.base_path),
                  "models": [describe_input(p) for p in results.model_paths]}
    with atomic_dir(outdir, overwrite=overwrite, inputs=[results.base_path, *results.model_paths]) as tmp:
        for i, name in enumerate(results.models):
            folder = tmp / name
            folder.mkdir()
            rows = param_rows(results, i)
            write_csv(folder / "per_param_stats.csv", rows, PER_PARAM_COLUMNS)
            write_csv(folder / f"top{top_k}_by_l2.csv", top_rows(rows, "l2", top_k), PER_PARAM_COLUMNS)
            write_csv(folder / f"top{top_k}_by_maxabs.csv", top_rows(rows, "maxabs", top_k), PER_PARAM_COLUMNS)
            info = summary(results, i, top_k=top_k)
            write_manifest(folder, "summary.json", command=command, inputs=json_safe(inputs), **json_safe(info))
            notes = {"lm_head": "tied (in embed)"} if results.tied_lm_head.get("tied") else None
            save_figure(group_l2_figure(info["groups"], model=name, base=results.base, notes=notes),
                        folder / "group_l2_bar.png")
            if results.spectra_options:
                _write_spectra(folder, results, i, info["spectra"]["groups"])
        _write_matrix(tmp / COSINES_FILE, results.models, results.cosines())
        if results.spectra_options and len(results.models) > 1:
            _write_matrix(tmp / PAIR_FILES["sign_agreement"], results.models, results.sign_agreement())
            _write_matrix(tmp / PAIR_FILES["mask_overlap"], results.models, results.mask_overlap())
            write_csv(tmp / INTERFERENCE_FILE, interference_rows(results), INTERFERENCE_COLUMNS)
    return output_paths(outdir, results.models)


def _write_spectra(folder: Path, results: TaskVectorResults, i: int, groups: dict) -> None:
    ranks = results.spectra_options.ranks
    write_csv(folder / "spectra.csv", spectra_rows(results, i), spectra_columns(ranks))
    write_csv(folder / "spectra_groups.csv", [{"group": g, **v} for g, v in groups.items()],
              spectra_group_columns(ranks))
    save_figure(energy_figure(groups, ranks, model=results.models[i], base=results.base),
                folder / "energy_by_rank.png")


def _write_matrix(path: Path, models: Sequence[str], matrix: list[list[float]]) -> None:
    write_csv(path, [[name, *row] for name, row in zip(models, matrix, strict=True)], ["model", *models])
