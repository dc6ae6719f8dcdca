"""Every knob of a merge in one flat dataclass, with its default; a YAML config maps onto it 1:1.

The YAML keys are the flag names with ``_`` for ``-`` (``drop_rate`` for ``--drop-rate``); see
``configs/merge/*.yaml``. :func:`options_from_mapping` checks a parsed config and names the bad key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from paw.device import check_device
from paw.errors import PawError
from paw.io.writer import parse_size
from paw.merge.knobs import check_della, check_knob, check_weight_sum
from paw.merge.methods import METHODS
from paw.merge.weights import WEIGHT_MODES
from paw.validate import finite_all

DTYPES = ("auto", "float32", "bfloat16", "float16")
VOCAB_POLICIES = ("refuse", "base", "union")


@dataclass
class MergeOptions:
    """What ``paw merge`` does; field names are the CLI flags (``drop_rate`` is ``--drop-rate``)."""

    models: list[str] = field(default_factory=list)  # fine-tunes of the base (folders, files, cached IDs)
    output: str | None = None            # folder to write (refused if it exists unless overwrite)
    base: str | None = None              # the common base; optional for method 'linear'
    method: str = "task-arithmetic"      # a name in paw.merge.METHODS
    mode: str = "exp"                    # weights from L2 norms: exp, linear, power, equal
    l2_norms: list[float] | None = None  # task-vector L2 norms, one per model (skips computing them)
    stats_dir: str | None = None         # `paw task-vectors` output: <dir>/<model name>/summary.json
    weights: list[float] | None = None   # explicit weights, one per model (overrides mode)
    beta: float = 1.0                    # exp mode: w ∝ exp(-beta L / mean L)
    alpha: float = 1.5                   # power mode: w ∝ L^-alpha
    scale: float = 1.0                   # result = base + scale * merged task vector
    density: float = 0.2                 # ties / breadcrumbs: fraction of entries kept per tensor
    drop_rate: float = 0.9               # dare-*: probability of dropping an entry
    gamma: float = 0.01                  # breadcrumbs: fraction of largest entries dropped
    seed: int = 0                        # dare-*: seed; same seed, same output bytes
    dtype: str = "auto"                  # output dtype; auto = the base's dtype per tensor
    device: str = "auto"                 # where the arithmetic runs: auto, cpu, cuda, cuda:N
    vocab_policy: str = "refuse"         # embed/lm_head rows of different vocabularies: refuse, base or union
    overwrite: bool = False              # replace an existing output folder
    max_shard_size: str = "2GB"          # safetensors shard size
    allow_nonfinite: bool = False        # write NaN/Inf values the merge produces instead of refusing
    t: float = 0.5                       # slerp, nearswap: interpolation factor (0 = base, 1 = the model)
    epsilon: float = 0.15                # della*: keep probabilities span density ± epsilon by magnitude rank
    select_topk: float = 1.0             # sce: fraction of entries kept by variance across models
    normalize: bool | None = None        # divide by the weights' sum (None: the method's own default)
    rescale: bool = True                 # dare-*, della*: rescale survivors (1/(1-p) for dare, L1 for della)
    filter_wise: bool = False            # model-stock: one ratio per row instead of per tensor
    max_iter: int = 10                   # karcher: iterations at most
    tol: float = 1e-5                    # karcher: stop when the step is shorter than this
    row_wise: bool = False               # nuslerp: interpolate column vectors separately (dim 0)
    flatten: bool = True                 # nuslerp: interpolate whole tensors (default) instead of rows
    tokenizer_from: str | None = None    # copy the tokenizer from this model instead of the base
    chat_template: str | None = None     # Jinja chat template written into tokenizer_config.json
    token_overrides: Any = None          # union: token -> paw.merge.union.TokenOverride (mergekit tokenizer.tokens)
    pad_to_multiple_of: int | None = None  # union: pad the vocabulary rows to a multiple of this
    rules: Any = None                    # mergekit config: per-tensor, per-model parameters (paw.merge.mergekit)
    slices: Any = None                   # mergekit config: output layers stacked from layer ranges

    def check(self) -> None:
        """Refuse values no merge can use, before any file is opened: each message names its key.

        Everything that can be judged from the options alone is judged here (names in the registries,
        ranges, list lengths, the device string), so a bad config fails at once, not after a pass
        over the models.
        """
        method = METHODS.lookup(self.method)
        self.method = method.name  # dare_ties -> dare-ties: one spelling in the record and below
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


# the numeric and boolean fields judged by paw.merge.knobs (the same table judges mergekit's YAML)
_CHECKED = ("beta", "alpha", "scale", "density", "drop_rate", "gamma", "t", "select_topk", "epsilon", "tol",
            "max_iter", "rescale", "filter_wise", "row_wise", "flatten")


_KIND = {"normalize": bool}  # fields whose default None does not tell their type


def _coerce(key: str, value: Any, default: Any) -> Any:
    kind = _KIND.get(key.replace("-", "_"), str if default is None else type(default))
    if kind is bool and not isinstance(value, bool):
        raise PawError(f"{key!r} must be true or false, got {value!r}")
    if kind in (int, float) and isinstance(value, bool):
        raise PawError(f"{key!r} must be a {kind.__name__}, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise PawError(f"{key!r} must be a {kind.__name__}, got {value!r}") from None


FIELDS = {f.name: f for f in dataclasses.fields(MergeOptions)}


def options_from_mapping(data: Mapping[str, Any], *, source: str = "config") -> dict[str, Any]:
    """Check a parsed YAML config: known keys only (``-`` or ``_`` both accepted), lists where lists go.

    Returns ``{field: value}`` to lay under the command-line flags.
    """
    out: dict[str, Any] = {}
    method = data.get("method") if isinstance(data.get("method"), str) else None
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in FIELDS:
            raise PawError(f"unknown key {key!r}; valid keys: {', '.join(FIELDS)}", path=source)
        if name in ("rules", "slices", "token_overrides"):
            raise PawError(f"unknown key {key!r} (set by a mergekit config, not a key of its own)", path=source)
        try:
            out[name] = _value(str(key), name, value, method)
        except PawError as err:
            raise PawError(str(err), path=source) from None
    return out


def _value(key: str, name: str, value: Any, method: str | None) -> Any:
    """One YAML value as its field's type; numbers and switches judged by :mod:`paw.merge.knobs`."""
    if name in ("models", "l2_norms", "weights"):
        if isinstance(value, (str, int, float)):
            value = [value]
        if not isinstance(value, list):
            raise PawError(f"{key!r} must be a list")
        if name == "models":
            return [str(v) for v in value]
        knob = "weight" if name == "weights" else "l2_norm"
        return [check_knob(f"{key}[{i}]", knob, v) for i, v in enumerate(value)]
    if value is None:
        return None
    if name in _CHECKED:
        return check_knob(key, name, value, method=method)
    return _coerce(key, value, FIELDS[name].default)
