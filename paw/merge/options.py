"""What ``paw merge`` merges and how it runs: frozen dataclasses whose fields are its flags and YAML keys.

:class:`MergeSpec` is what to merge (the models, the base, the method and its knobs, the weights), and
:class:`MergeRun` how this merge runs and writes (output folder, dtype, shard size, seed), beside the
:class:`paw.knobs.RunOptions` (device, overwrite) and :class:`paw.knobs.WriteOptions` every command shares.
:class:`MergeOptions` holds them all in one flat object, the input of :func:`paw.merge.merge`, with what only
a mergekit config sets (per-tensor rules, slices, token sources: :mod:`paw.merge.mergekit`).

A PAW config's keys are the flags without ``--`` (``drop_rate`` or ``drop-rate``; see ``configs/merge/*.yaml``)
and every number in it is judged by :mod:`paw.merge.knobs`, the table the flags are checked against, so a
value the flag refuses is refused from a file too, naming its key. :func:`options_from_mapping` reads one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from paw.device import check_device
from paw.errors import PawError
from paw.io.writer import parse_size
from paw.knobs import RunOptions, WriteOptions, from_mapping, knob
from paw.merge.adapters import ADAPTER_METHODS, SIGN_METHODS  # light, like METHODS
from paw.merge.knobs import check_della, check_knob, check_weight_sum
from paw.merge.methods import METHODS
from paw.merge.weights import WEIGHT_MODES
from paw.validate import finite_all

DTYPES = ("auto", "float32", "bfloat16", "float16")
VOCAB_POLICIES = ("refuse", "base", "union")


def _methods() -> tuple[str, ...]:
    return (*METHODS.names(), *ADAPTER_METHODS.names())   # full-model methods, then the --adapters ones


def _name(label: str, value: Any, data: Mapping) -> str:
    """A name from a file, as text: ``check()`` judges it and names the flag (and reads ``dare_ties``)."""
    if not isinstance(value, str):
        raise PawError(f"{label}: expected a name, not {value!r}")
    return value


def _judged(knob_name: str):
    """A file's value judged by :func:`paw.merge.knobs.check_knob`, against the file's own ``method``."""
    def judge(label: str, value: Any, data: Mapping) -> Any:
        method = data.get("method")
        return check_knob(label, knob_name, value,
                          method=METHODS.canonical(method) if isinstance(method, str) else None)

    return judge


@dataclass(frozen=True)
class MergeSpec:
    """What ``paw merge`` merges: the models, their base, the method, its knobs and the weights."""

    base: str | None = knob(None, "The common base model (folder, .safetensors or .gguf file, or Hub id org/name); "
                                  "optional for --method linear.")
    models: tuple[str, ...] = knob((), "Fine-tunes of the base, space separated: --models A B C.")
    method: str = knob("task-arithmetic", "A merge method (see docs/commands/merge.md for each one's paper); with "
                       "--adapters: cat (default, exact, ranks add), svd or a *-svd method, or PEFT's factor-wise "
                       "peft-linear, peft-ties, peft-dare-ties, ... (equal ranks).", choices=_methods, judge=_name)
    mode: str = knob("exp", "Weights from task-vector L2 norms: exp (w ∝ exp(-beta L/mean L)), linear (1/L), "
                            "power (L^-alpha) or equal.", choices=WEIGHT_MODES.names, judge=_name)
    l2_norms: tuple[float, ...] | None = knob(None, "Task-vector L2 norms, one per model (else --stats-dir, else "
                                                    "computed in a first pass).", judge=_judged("l2_norm"))
    stats_dir: str | None = knob(None, "Output folder of `paw task-vectors`: norms read from "
                                       "DIR/MODEL_NAME/summary.json.", cli=Path, parse=str)
    weights: tuple[float, ...] | None = knob(None, "Explicit weights, one per model (overrides --mode).",
                                             judge=_judged("weight"))
    beta: float = knob(1.0, "exp mode sharpness.", judge=_judged("beta"))
    alpha: float = knob(1.5, "power mode exponent.", judge=_judged("alpha"))
    scale: float = knob(1.0, "Result = base + scale x merged task vector.", judge=_judged("scale"))
    density: float = knob(0.2, "ties/breadcrumbs: fraction of entries kept per tensor (--adapters dare: the keep "
                               "probability, PEFT's density).", judge=_judged("density"))
    drop_rate: float = knob(0.9, "dare-*: probability of dropping each entry (survivors rescaled by 1/(1-p)).",
                            judge=_judged("drop_rate"))
    gamma: float = knob(0.01, "breadcrumbs: fraction of the largest entries dropped.", judge=_judged("gamma"))
    t: float = knob(0.5, "slerp/nearswap: interpolation factor, 0 = the base, 1 = the model.", judge=_judged("t"))
    epsilon: float = knob(0.15, "della/della-linear: keep probabilities span density ± epsilon by magnitude rank.",
                          judge=_judged("epsilon"))
    select_topk: float = knob(1.0, "sce: fraction of entries kept by their variance across the models.",
                              judge=_judged("select_topk"))
    normalize: bool | None = knob(None, "Divide by the weights that take part (default: the method's own: on for "
                                        "ties/della, off for task-arithmetic).", flag="--normalize/--no-normalize",
                                  judge=_judged("normalize"))
    rescale: bool = knob(True, "dare/della: rescale the entries that survive the random drop.",
                         flag="--rescale/--no-rescale", judge=_judged("rescale"))
    filter_wise: bool = knob(False, "model-stock: one interpolation ratio per row instead of per tensor.",
                             judge=_judged("filter_wise"))
    max_iter: int = knob(10, "karcher: iterations at most.", judge=_judged("max_iter"))
    tol: float = knob(1e-5, "karcher: convergence tolerance.", judge=_judged("tol"))
    row_wise: bool = knob(False, "nuslerp: interpolate the rows of a matrix separately.", judge=_judged("row_wise"))
    flatten: bool = knob(True, "nuslerp: interpolate whole tensors (--no-flatten: row by row).",
                         flag="--flatten/--no-flatten", judge=_judged("flatten"))
    vocab_policy: str = knob("refuse", "refuse (default); base: merge shared vocabulary rows, keep the base's for "
                                       "the rest; union: merge on the union vocabulary and write the merged "
                                       "tokenizer.", choices=VOCAB_POLICIES, judge=_name)
    pad_to_multiple_of: int | None = knob(None, "--vocab-policy union: pad the vocabulary rows to a multiple of N.",
                                          min=1)
    tokenizer_from: str | None = knob(None, "Copy the tokenizer files from this model instead of the base.")
    chat_template: str | None = knob(None, "Jinja chat template written into the output's tokenizer_config.json.")


@dataclass(frozen=True)
class MergeRun:
    """How one merge runs and writes, beside :class:`paw.knobs.RunOptions` and :class:`paw.knobs.WriteOptions`;
    the only knobs besides those that combine with a mergekit config."""

    output: str | None = knob(None, "Folder to write (sharded safetensors + config + tokenizer + paw_merge.json).",
                              short="-o", cli=Path, parse=str)
    dtype: str = knob("auto", "Output dtype: auto (the base's), float32, bfloat16 or float16.", choices=DTYPES,
                      judge=_name)
    max_shard_size: str = knob("2GB", "Largest safetensors shard, e.g. 2GB or 500MB.")
    seed: int = knob(0, "Random seed; same inputs and seed give byte-identical outputs.", judge=_judged("seed"))


@dataclass(frozen=True)
class AdapterInputs:
    """``paw merge --adapters``: LoRA folders merged in adapter space instead of models (the knobs they share with
    a model merge are :class:`MergeSpec`'s: method, weights, mode, beta, alpha, scale, density, drop_rate)."""

    adapters: tuple[str, ...] = knob((), "PEFT LoRA folders of one base, space separated, merged into one LoRA "
                                         "folder (instead of --base/--models); weights 1 each unless --weights or "
                                         "--mode.")
    rank: int | None = knob(None, "With --adapters and an svd method: the output rank (default: the largest input "
                                  "rank).")
    majority_sign_method: str = knob("total", "With --adapters and a ties method: elect each entry's sign from the "
                                              "sum (total) or the count of signs (frequency), as PEFT does.",
                                     choices=SIGN_METHODS, judge=_name)


@dataclass(frozen=True)
class MergeOptions(MergeRun, MergeSpec):
    """One merge, from Python: :class:`MergeSpec` and :class:`MergeRun` with the run's device, overwrite and NaN
    switch, and what a mergekit config adds. ``MergeOptions(base=..., models=[...], output=..., method=...)``."""

    device: str = RunOptions.device                # where the arithmetic runs: auto, cpu, cuda, cuda:N
    overwrite: bool = RunOptions.overwrite          # replace an existing output folder
    allow_nonfinite: bool = WriteOptions.allow_nonfinite  # write NaN/Inf values the merge produces
    token_overrides: Any = None  # union: token -> paw.merge.union.TokenOverride (mergekit tokenizer.tokens)
    rules: Any = None            # mergekit config: per-tensor, per-model parameters (paw.merge.mergekit)
    slices: Any = None           # mergekit config: output layers stacked from layer ranges

    def __post_init__(self) -> None:
        known = METHODS.canonical(self.method) if isinstance(self.method, str) else None
        if known is not None:   # dare_ties -> dare-ties: one spelling in the record and below
            object.__setattr__(self, "method", known)

    @classmethod
    def of(cls, spec: MergeSpec, run: MergeRun, common: RunOptions, write: WriteOptions, **more: Any) -> MergeOptions:
        """The flat options of a merge from the command's objects (``spec`` may be a whole :class:`MergeOptions`:
        its :class:`MergeSpec` fields are read); ``more``: what a mergekit config adds (``rules=...``)."""
        parts = {f.name: getattr(o, f.name) for o, cls in ((spec, MergeSpec), (run, MergeRun)) for f in fields(cls)}
        return cls(**parts, device=common.device, overwrite=common.overwrite, allow_nonfinite=write.allow_nonfinite,
                   **more)

    def check(self) -> None:
        """Refuse values no merge can use, before any file is opened: each message names its key.

        Everything that can be judged from the options alone is judged here (names in the registries,
        ranges, list lengths, the device string), so a bad config fails at once, not after a pass
        over the models.
        """
        method = METHODS.lookup(self.method)
        WEIGHT_MODES.lookup(self.mode, what="--mode")
        if self.base is None and method.needs_base:
            raise PawError(f"--base is required for method {method.name} (only 'linear' works without one)")
        if not self.models:
            raise PawError("no models to merge: pass --models M1 [M2 ...] (or 'models:' in the config)")
        least, most = method.n_models
        if len(self.models) < least or (most is not None and len(self.models) > most):
            wanted = f"exactly {least}" if least == most else f"at least {least}" if most is None else f"{least}-{most}"
            raise PawError(f"--method {method.name} merges {wanted} model(s) besides the base; "
                           f"--models has {len(self.models)}")
        if not self.output:
            raise PawError("no output folder: pass --output DIR (or 'output:' in the config)")
        for key, values in (("--l2-norms", self.l2_norms), ("--weights", self.weights)):
            if values is not None and len(values) != len(self.models):
                raise PawError(f"{key} has {len(values)} value(s) but there are {len(self.models)} "
                               f"model(s); give one per model, in the same order")
        for flag in _CHECKED:
            check_knob(f"--{flag.replace('_', '-')}", flag, getattr(self, flag), method=self.method)
        for w in self.weights or ():
            check_knob("--weights", "weight", w)
        finite_all("--l2-norms", self.l2_norms)
        if self.l2_norms is not None and any(n < 0 for n in self.l2_norms):
            raise PawError(f"--l2-norms {self.l2_norms}: an L2 norm is never negative")
        check_device(self.device)
        parse_size(self.max_shard_size)
        if self.method.startswith("della") and self.rules is None:
            check_della(self.density, self.epsilon)
        if self.weights is not None and self.rules is None:
            check_weight_sum(list(self.weights), self.method, {"normalize": self.normalize})
        if self.method.startswith("breadcrumbs") and self.gamma + self.density > 1.0:
            raise PawError(f"--gamma {self.gamma} + --density {self.density} exceeds 1: nothing is left "
                           "to keep after dropping the outliers")
        if self.dtype not in DTYPES:
            raise PawError(f"--dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        if self.vocab_policy not in VOCAB_POLICIES:
            raise PawError(f"--vocab-policy {self.vocab_policy!r}: choose one of {', '.join(VOCAB_POLICIES)}")




# the numeric and boolean knobs judged by paw.merge.knobs (the same table judges mergekit's YAML)
_CHECKED = ("beta", "alpha", "scale", "density", "drop_rate", "gamma", "t", "select_topk", "epsilon", "tol",
            "max_iter", "rescale", "filter_wise", "row_wise", "flatten")


def options_from_mapping(data: Mapping[str, Any], *, source: str = "config") -> MergeOptions:
    """A PAW merge config (a parsed YAML mapping) as :class:`MergeOptions`: known keys only, each value judged
    and named by its key (``config.yaml: density -0.5 is outside (0, 1]``), as ``paw merge --config`` reads it."""
    spec, run, common, write = from_mapping(data, MergeSpec, MergeRun, RunOptions, WriteOptions, where=source)
    return MergeOptions.of(spec, run, common, write)
