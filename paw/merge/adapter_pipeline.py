"""``merge_adapters``: PEFT LoRA folders of one base in, one PEFT LoRA folder out (``paw merge --adapters``).

    from paw.merge.adapter_pipeline import AdapterMergeOptions, merge_adapters
    merged = merge_adapters(AdapterMergeOptions(adapters=["./lora1", "./lora2"], output="./both", method="cat"))
    merged.ranks   # {'model.layers.0.mlp.down_proj': 12, ...}

Ranks, alphas and target modules may differ (the ``peft-*`` methods need one rank per module). A module
adapted by only some adapters is merged from those that adapt it (as PEFT does). The math is
:mod:`paw.merge.adapters`; the folder holds
``adapter_config.json`` + ``adapter_model.safetensors`` (scaling 1: ``lora_alpha = r`` per module),
``adapter_merge.json`` (per-module rank and, for the SVD methods, the relative truncation error)
and ``paw_merge.json`` (provenance).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from paw import __version__
from paw.device import check_device, resolve_device
from paw.errors import PawError
from paw.io.adapter import LoraAdapter, LoraModule, adapter_key, lora_config_dict, read_adapter, write_adapter
from paw.io.atomic import check_output
from paw.io.manifest import describe_input, records_call
from paw.io.model_card import Card
from paw.knobs import RunOptions, WriteOptions
from paw.merge.adapters import (
    ADAPTER_METHODS,
    SIGN_METHODS,
    AdapterMethod,
    combine_factors,
    concat_factors,
    lora_norm,
    svd_factors,
)
from paw.merge.methods import METHODS, tensor_seed
from paw.merge.options import MergeRun, MergeSpec
from paw.merge.weights import WEIGHT_MODES, weights_from_norms
from paw.validate import ALLOW_HINT, FLOAT32_MAX, NonFinite, finite, finite_all, nonfinite

REPORT = "adapter_merge.json"
# why an adapter-space merge cannot take a DoRA adapter (paw.io.adapter.read_adapter names the adapter)
DORA_REFUSAL = ("an adapter-space merge combines LoRA factors, and a DoRA magnitude vector rescales the rows of "
                "its own W + BA, which no factor of the merged adapter can carry; apply it to its base with "
                "'BASE+ADAPTER' as a model of a full merge instead")
MANIFEST = "paw_merge.json"


@dataclass
class AdapterMergeOptions:
    """What ``paw merge --adapters`` does; field names are the CLI flags, the shared defaults :class:`MergeSpec`'s."""

    adapters: list[str] = field(default_factory=list)  # PEFT LoRA folders (or cached IDs) of one base
    output: str | None = None            # folder to write (refused if it exists unless overwrite)
    method: str = "cat"                  # a name in paw.merge.adapters.ADAPTER_METHODS
    weights: list[float] | None = None   # one per adapter; None: from mode, or 1 each without one
    mode: str | None = None              # weights from the adapters' L2 norms (normalised); None: all 1
    beta: float = MergeSpec.beta         # exp mode sharpness
    alpha: float = MergeSpec.alpha       # power mode exponent
    scale: float = MergeSpec.scale       # the merged update is scale x the combination
    rank: int | None = None              # svd methods: output rank (None: the largest input rank)
    density: float | None = None         # PEFT's density: fraction kept (ties, magnitude-prune: by magnitude,
    #                                       default MergeSpec.density; dare: keep probability, 1 - drop_rate)
    drop_rate: float | None = None       # dare methods: probability of dropping an entry (default MergeSpec's)
    majority_sign_method: str = "total"  # ties methods: elect the sign of the sum (total) or of the sign count
    seed: int = MergeRun.seed            # dare methods: same seed, same output
    device: str = RunOptions.device      # where the SVDs run: auto, cpu, cuda, cuda:N
    overwrite: bool = RunOptions.overwrite  # replace an existing output folder
    allow_nonfinite: bool = WriteOptions.allow_nonfinite  # write NaN/Inf factors instead of refusing

    def check(self) -> None:
        """Judge everything the options alone decide, before any file is read; each message names its flag."""
        method = self._method()
        if not self.adapters:
            raise PawError("no adapters to merge: pass --adapters A1 [A2 ...]")
        if not self.output:
            raise PawError("no output folder: pass --output DIR")
        if self.mode is not None:
            WEIGHT_MODES.lookup(self.mode, what="--mode")
        if self.weights is not None and len(self.weights) != len(self.adapters):
            raise PawError(f"--weights has {len(self.weights)} value(s) but there are {len(self.adapters)} "
                           "adapter(s); give one per adapter, in the same order")
        finite_all("--weights", self.weights, limit=FLOAT32_MAX)
        for flag in ("beta", "alpha", "scale", "density", "drop_rate"):
            finite(f"--{flag.replace('_', '-')}", getattr(self, flag), limit=FLOAT32_MAX)
        if self.rank is not None and (isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1):
            raise PawError(f"--rank {self.rank!r} must be a positive integer")
        if self.rank is not None and not method.svd:
            kept = "the sum of the input ranks" if method.exact else "the adapters' common rank"
            raise PawError(f"--rank applies to the svd methods; {method.name}'s rank is {kept}")
        if self.density is not None and not 0.0 < self.density <= 1.0:
            raise PawError(f"--density {self.density} is outside (0, 1]")
        if self.drop_rate is not None and not 0.0 <= self.drop_rate < 1.0:
            raise PawError(f"--drop-rate {self.drop_rate} is outside [0, 1)")
        if self.majority_sign_method not in SIGN_METHODS:
            raise PawError(f"--majority-sign-method {self.majority_sign_method!r}: choose one of "
                           f"{', '.join(SIGN_METHODS)}")
        self.keep()
        check_device(self.device)

    def _method(self) -> AdapterMethod:
        """The registered method (``peft_dare_ties`` finds ``peft-dare-ties``). A full-model or unknown name is
        refused, naming PAW's method for PEFT's combination type of that name (``ties`` -> ``peft-ties``)."""
        found = ADAPTER_METHODS.canonical(self.method) if isinstance(self.method, str) else None
        if found is None:
            peft = ADAPTER_METHODS.canonical(f"peft-{self.method}") if isinstance(self.method, str) else None
            hint = (f"; PEFT's add_weighted_adapter combination_type {ADAPTER_METHODS[peft].peft_name!r} is "
                    f"--method {peft} here" if peft else "")
            what = ("merges full models" if isinstance(self.method, str) and METHODS.canonical(self.method)
                    else "is not an adapter merge method")
            raise PawError(f"--method {self.method} {what}{hint}; with --adapters choose one of: "
                           f"{', '.join(ADAPTER_METHODS)}")
        self.method = found  # ties_svd -> ties-svd
        return ADAPTER_METHODS[found]

    def keep(self) -> float:
        """The ``density`` the method reads, as PEFT names it: the fraction kept by magnitude (TIES, magnitude
        pruning) or, for DARE, the keep probability (``1 - drop_rate``)."""
        if not ADAPTER_METHODS[self.method].random:
            return MergeSpec.density if self.density is None else float(self.density)
        if self.density is not None and self.drop_rate is not None and \
                not math.isclose(self.density + self.drop_rate, 1.0, abs_tol=1e-9):
            raise PawError(f"--density {self.density} and --drop-rate {self.drop_rate} disagree: DARE keeps each "
                           "entry with probability density = 1 - drop-rate; give one of them")
        if self.density is not None:
            return float(self.density)
        return 1.0 - (MergeSpec.drop_rate if self.drop_rate is None else float(self.drop_rate))


FIELDS = tuple(f.name for f in fields(AdapterMergeOptions))  # the knobs an adapter merge reads


@dataclass(frozen=True)
class MergedAdapter:
    """What :func:`merge_adapters` wrote: the folder and its report (``adapter_merge.json``)."""

    output: Path
    report: dict[str, Any]

    @property
    def ranks(self) -> dict[str, int]:
        return {m: v["rank"] for m, v in self.report["modules"].items()}

    @property
    def max_relative_error(self) -> float | None:
        return self.report["max_relative_error"]


@records_call
def merge_adapters(options: AdapterMergeOptions, *, command: str | None = None) -> MergedAdapter:
    """Read the adapters, merge module by module, write one PEFT LoRA folder atomically. Raises PawError."""
    options.check()
    method = ADAPTER_METHODS[options.method]
    check_output(options.output, overwrite=options.overwrite, inputs=options.adapters)
    adapters = [read_adapter(a, dora=DORA_REFUSAL) for a in options.adapters]
    _refuse_nonfinite(adapters, options.adapters, allow=options.allow_nonfinite and method.exact)
    groups = _module_groups(adapters, options.adapters)
    if method.space == "factor":  # every module checked before any is merged
        for name, members in groups.items():
            _same_rank(method, name, members, options.adapters)
    weights = _weights(options, adapters)
    device = resolve_device(options.device)
    rank = options.rank or max(_max_rank(a) for a in adapters)
    tensors: dict[str, Any] = {}
    modules: dict[str, dict[str, Any]] = {}
    for name, members in groups.items():
        A, B, error = _merge_module(method, name, members, weights, options, rank, device)
        kind = members[0][1].kind
        tensors[adapter_key(name, "A", kind)], tensors[adapter_key(name, "B", kind)] = A, B
        modules[name] = {"rank": int(A.shape[0]), "adapters": [i for i, _ in members],
                         **({} if error is None else {"relative_error": error})}
    config = _config(adapters, modules)
    report = _report(options, method, adapters, weights, modules)
    manifest = {"paw_version": __version__, "command": command,
                "inputs": {"adapters": [describe_input(a) for a in options.adapters]},
                "options": {k: v for k, v in asdict(options).items() if k not in ("overwrite", "device")}}
    out = write_adapter(options.output, LoraAdapter(config=config, tensors=tensors), overwrite=options.overwrite,
                        extra_files={REPORT: report, MANIFEST: manifest}, allow_nonfinite=options.allow_nonfinite,
                        card=_card(options, adapters, report, command))
    return MergedAdapter(Path(out), report)


def _card(options: AdapterMergeOptions, adapters: list[LoraAdapter], report: dict[str, Any],
          command: str | None) -> Card:
    """The merged adapter's model card: the method, the adapters with their weights, the ranks."""
    bases = list(dict.fromkeys(a.base_model for a in adapters if a.base_model))
    rows = [f"| `{spec}` | {a.r} | {a.alpha:g} | {w:.4g} |"
            for spec, a, w in zip(options.adapters, adapters, report["weights"], strict=True)]
    ranks = sorted({m["rank"] for m in report["modules"].values()})
    method = [f"Merged with **{report['method']}** ({report['weight_source']} weights): {report['reference']}."]
    if report["max_relative_error"] is not None:
        method += ["", f"Largest relative truncation error of a module: {report['max_relative_error']:.4g}."]
    sections = (("Method", tuple(method)),
                ("Adapters merged", ("| adapter | r | alpha | weight |", "| --- | --- | --- | --- |", *rows)),
                ("Result", (f"- {len(report['modules'])} modules, rank {ranks[0] if len(ranks) == 1 else ranks}",
                            f"- {len(report['partial_modules'])} modules from some adapters only")))
    base = f" for `{bases[0]}`" if len(bases) == 1 else ""
    return Card(Path(options.output).name, "peft", inputs=tuple(bases), tags=("paw", "lora", "merge", options.method),
                intro=f"A LoRA adapter{base}: {len(adapters)} adapters merged into one by PAW's `paw merge --adapters`.",
                sections=sections, command=command)


def _refuse_nonfinite(adapters: list[LoraAdapter], specs: list[str], *, allow: bool) -> None:
    """Refuse an input factor holding NaN/Inf before any module is merged, naming the adapter and tensor.

    An SVD of a delta with NaN/Inf fails to converge, and the TIES sign election silently drops NaN
    (every comparison with it is false), so the ``*-svd`` methods refuse whatever ``allow`` says; only
    ``cat``, which stacks the factors as they are, lets ``--allow-nonfinite`` carry them through.
    """
    if allow:
        return
    for spec, adapter in zip(specs, adapters, strict=True):
        for key, tensor in sorted(adapter.tensors.items()):
            bad = nonfinite(tensor)
            if bad:
                raise NonFinite(f"tensor {key!r} holds {bad} NaN/Inf value(s) of {tensor.numel()}; nothing was "
                                f"merged or written (with --method cat, {ALLOW_HINT})", path=spec)


def _module_groups(adapters: list[LoraAdapter], specs: list[str]) -> dict[str, list[tuple[int, LoraModule]]]:
    """``module -> [(adapter index, LoraModule)]``, after refusing adapters that are not of one base."""
    bases = {a.base_model for a in adapters if a.base_model}
    if len(bases) > 1:
        shown = "; ".join(f"{s} is for {a.base_model}" for s, a in zip(specs, adapters, strict=True))
        raise PawError(f"the adapters are for different bases ({shown}); merge adapters of one base")
    if len({bool(a.config.get("fan_in_fan_out")) for a in adapters}) > 1:
        raise PawError("the adapters disagree on fan_in_fan_out; their factors are not in one layout")
    for spec, a in zip(specs, adapters, strict=True):
        if a.other_tensors():
            raise PawError(f"holds non-LoRA tensors ({', '.join(sorted(a.other_tensors())[:3])}, from "
                           "modules_to_save); an adapter-space merge combines LoRA factors only", path=spec)
    groups: dict[str, list[tuple[int, LoraModule]]] = {}
    for i, a in enumerate(adapters):
        for name, m in a.modules().items():
            groups.setdefault(name, []).append((i, m))
    for name, members in groups.items():
        shapes = {(m.kind, int(m.B.shape[0]), int(m.A.shape[1])) for _, m in members}
        if len(shapes) > 1:
            shown = ", ".join(f"{specs[i]}: {m.kind} {int(m.B.shape[0])}x{int(m.A.shape[1])}" for i, m in members)
            raise PawError(f"module {name!r} has different shapes ({shown}); the adapters are not of one base")
    return dict(sorted(groups.items()))


def _max_rank(adapter: LoraAdapter) -> int:
    """PEFT's rank for a merged adapter: ``r``, or the largest ``rank_pattern`` value if larger."""
    return max([adapter.r, *(adapter.config.get("rank_pattern") or {}).values()])


def _weights(options: AdapterMergeOptions, adapters: list[LoraAdapter]) -> list[float]:
    """Explicit weights, or normalised weights from the adapters' L2 norms, or 1 each (the plain sum)."""
    if options.weights is not None:
        return [float(w) for w in options.weights]
    if options.mode is None:
        return [1.0] * len(adapters)
    norms = [math.sqrt(sum(lora_norm(m.A, m.B, m.scaling) ** 2 for m in a.modules().values())) for a in adapters]
    return weights_from_norms(norms, options.mode, beta=options.beta, alpha=options.alpha)


def _merge_module(method: AdapterMethod, name: str, members, weights, options, rank, device):
    """One module's ``(A, B, relative error or None)`` from the adapters that adapt it."""
    ws = [weights[i] for i, _ in members]
    factors = [(m.A.to(device), m.B.to(device), m.scaling) for _, m in members]
    params = {"density": options.keep(), "majority_sign_method": options.majority_sign_method}
    if method.exact:
        A, B = concat_factors(factors, ws, scale=options.scale)
        return A, B, None
    if method.space == "factor":
        gens = tuple(_generators(options.seed, f"{name}.lora_{f}", members, device) for f in "AB")
        A, B = combine_factors(method, factors, ws, scale=options.scale, generators=gens, **params)
        return A, B, None
    deltas = [(b.float() @ a.float()).mul_(s) for a, b, s in factors]  # (out, in) in the factor layout
    D = method.combine(deltas, ws, generators=_generators(options.seed, name, members, device), **params)
    return svd_factors(D.mul_(options.scale), rank)


def _generators(seed: int, name: str, members, device) -> list:
    """One seeded generator per adapter of a module (``name``: the module, or its factor)."""
    import torch

    return [torch.Generator(device=device).manual_seed(tensor_seed(seed, name, i)) for i, _ in members]


def _same_rank(method: AdapterMethod, name: str, members, specs: list[str]) -> None:
    ranks = {m.rank for _, m in members}
    if len(ranks) > 1:
        shown = ", ".join(f"{m.rank} ({specs[i]})" for i, m in members)
        raise PawError(f"--method {method.name} combines the A and B factors entry by entry, so the adapters need "
                       f"one rank, but module {name!r} has ranks {shown}; use cat or an svd method")


def _config(adapters: list[LoraAdapter], modules: dict[str, dict[str, Any]]) -> dict:
    """PEFT config with scaling 1 everywhere: ``r = lora_alpha`` = the commonest rank, patterns for the rest.

    ``target_modules`` lists the merged module paths exactly, so no ``layers_to_transform`` of one
    input can hide a module another input adapts.
    """
    ranks = {m: v["rank"] for m, v in modules.items()}
    r = max(Counter(ranks.values()).most_common(), key=lambda rc: (rc[1], rc[0]))[0]
    pattern = {m: k for m, k in ranks.items() if k != r}
    first = adapters[0].config
    return lora_config_dict(r=r, alpha=r, target_modules=list(modules), base_model=adapters[0].base_model,
                            rank_pattern=pattern, alpha_pattern=dict(pattern),
                            task_type=first.get("task_type", "CAUSAL_LM"),
                            fan_in_fan_out=bool(first.get("fan_in_fan_out")))


def _report(options, method: AdapterMethod, adapters, weights, modules) -> dict[str, Any]:
    errors = [v["relative_error"] for v in modules.values() if "relative_error" in v]
    partial = {m: v["adapters"] for m, v in modules.items() if len(v["adapters"]) < len(adapters)}
    return {
        "method": method.name, "reference": method.reference,
        "parameters": {k: options.keep() if k == "density" else getattr(options, k) for k in method.params},
        "peft_combination_type": method.peft_name,
        "seed": options.seed if method.random else None,
        "scale": options.scale,
        "weights": weights,
        "weight_source": "given" if options.weights is not None else
                         f"mode {options.mode}" if options.mode else "1 each (sum)",
        "adapters": [{"path": str(a.path), "r": a.r, "lora_alpha": a.alpha, "modules": len(a.modules())}
                     for a in adapters],
        "modules": modules,
        "partial_modules": partial,   # module -> indices of the adapters it was merged from
        "max_relative_error": max(errors) if errors else None,
    }
