"""Read and write PEFT LoRA adapter folders (``adapter_config.json`` + weights).

PEFT saves keys such as ``base_model.model.model.layers.0.mlp.down_proj.lora_A.weight``; the base
weight it modifies is ``model.layers.0.mlp.down_proj.weight``. :func:`split_adapter_key` and
:func:`adapter_key` convert between the two for every decoder-only architecture whose PEFT wrapper
adds ``base_model.model.`` (Llama, Qwen2, Gemma, Mistral and the rest of the causal LMs).

DoRA adapters (``use_dora: true``) add one ``<module>.lora_magnitude_vector`` per module (factor
``m``: ``out`` entries for a linear module, ``hidden`` for an embedding; ``lora_B``'s row count in
both). :func:`read_adapter` refuses them unless its caller honours the magnitude (``dora=None``):
a command that uses only A and B would silently drop it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paw.errors import NotApplicable, PawError
from paw.io.adapter_config import CONFIG_NAME, portable_adapter_config
from paw.io.atomic import atomic_dir
from paw.io.finite import nonfinite_policy
from paw.io.hub import resolve_path
from paw.io.json_file import read_json
from paw.io.lazy_checkpoint import SafetensorsFile, load_pickle
from paw.io.manifest import write_json
from paw.io.model_card import Card, write_card
from paw.io.reports import save_figure
from paw.lora import apply_lora, lora_delta, lora_scaling
from paw.validate import NonFinite, nonfinite

PEFT_PREFIX = "base_model.model."
WEIGHTS_NAME = "adapter_model.safetensors"
# saved suffix -> (factor, module kind)
_SUFFIXES = {
    ".lora_A.weight": ("A", "linear"),
    ".lora_B.weight": ("B", "linear"),
    ".lora_embedding_A": ("A", "embedding"),
    ".lora_embedding_B": ("B", "embedding"),
}
MAGNITUDE = ".lora_magnitude_vector"   # DoRA's per-module magnitude, saved without ``.weight`` by PEFT
# segments PEFT puts between a module path and ".weight" in saved copies of whole layers
COPY_SEGMENTS = re.compile(r"\.(modules_to_save|original_module|base_layer)(?=\.weight$)")
DORA_UNSUPPORTED = ("this command uses only the LoRA factors A and B and would drop the magnitude vector "
                    "(lora_magnitude_vector)")


def split_adapter_key(key: str) -> tuple[str, str, str | None] | None:
    """``'base_model.model.model.layers.0.q_proj.lora_A.weight'`` -> ``('model.layers.0.q_proj', 'A', 'linear')``.

    Returns None for keys that are not LoRA factors (``modules_to_save`` copies, biases, ...).
    An adapter name left in the key by hand-made files (``lora_A.default.weight``) is accepted.
    A DoRA magnitude vector gives factor ``'m'`` and kind None (its module's A and B tell the kind):
    ``'...q_proj.lora_magnitude_vector'`` -> ``('...q_proj', 'm', None)``.
    """
    magnitude = re.sub(r"\.lora_magnitude_vector(\.[^.]+)?(\.weight)?$", MAGNITUDE, key)
    if magnitude.endswith(MAGNITUDE):
        return strip_prefix(magnitude[: -len(MAGNITUDE)]), "m", None
    key = re.sub(r"\.(lora_[AB])\.(?!weight$)[^.]+\.weight$", r".\1.weight", key)
    key = re.sub(r"\.(lora_embedding_[AB])\.[^.]+$", r".\1", key)
    for suffix, (factor, kind) in _SUFFIXES.items():
        if key.endswith(suffix):
            return strip_prefix(key[: -len(suffix)]), factor, kind
    return None


def strip_prefix(key: str) -> str:
    """``'base_model.model.lm_head.weight'`` -> ``'lm_head.weight'``."""
    return key[len(PEFT_PREFIX):] if key.startswith(PEFT_PREFIX) else key


def adapter_key(module: str, factor: str, kind: str = "linear") -> str:
    """Inverse of :func:`split_adapter_key`."""
    suffix = next(s for s, fk in _SUFFIXES.items() if fk == (factor, kind))
    return f"{PEFT_PREFIX}{module}{suffix}"


def _pattern_value(patterns: dict[str, Any], module: str, default):
    """PEFT's rule: a pattern applies when it matches the end of the module path at a dot boundary."""
    for pattern, value in patterns.items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


@dataclass
class LoraModule:
    """One adapted module: factors A (r, in) and B (out, r), its scaling and, for DoRA, its magnitude (out,)."""

    module: str
    A: Any
    B: Any
    scaling: float
    kind: str = "linear"
    magnitude: Any = None   # DoRA's lora_magnitude_vector, or None for plain LoRA

    @property
    def base_key(self) -> str:
        return f"{self.module}.weight"

    @property
    def rank(self) -> int:
        return int(self.A.shape[0])

    def delta(self):
        """ΔW in the base weight's layout (float32). A DoRA module has no delta without its base weight:
        :meth:`apply` it instead (asking for its delta is a programming error, refused)."""
        if self.magnitude is not None:
            raise PawError(f"module {self.module!r} is DoRA: its update depends on the base weight")
        return lora_delta(self.A, self.B, self.scaling, embedding=self.kind == "embedding")

    def apply(self, W, *, rows: tuple[int, int] | None = None):
        """The merged weight (float32) from the base weight ``W`` (or rows ``[start, stop)`` of it), as PEFT's
        ``merge_and_unload`` computes it: ``W + ΔW``, or DoRA's ``m ⊙ (W + ΔW) / ||W + ΔW||``
        (:func:`paw.lora.apply_lora`)."""
        return apply_lora(W, self.A, self.B, self.scaling, magnitude=self.magnitude,
                          embedding=self.kind == "embedding", rows=rows)


@dataclass
class LoraAdapter:
    """A PEFT LoRA adapter in memory: its config dict and its tensors under their saved keys."""

    config: dict
    tensors: dict[str, Any]
    path: Path | None = None
    _modules: dict[str, LoraModule] | None = field(default=None, repr=False)

    @property
    def r(self) -> int:
        return int(self.config.get("r", 8))

    @property
    def alpha(self) -> float:
        return float(self.config.get("lora_alpha", self.r))

    @property
    def target_modules(self) -> list[str] | str:
        tm = self.config.get("target_modules") or []
        return tm if isinstance(tm, str) else sorted(tm)

    @property
    def modules_to_save(self) -> list[str]:
        return list(self.config.get("modules_to_save") or [])

    @property
    def base_model(self) -> str | None:
        return self.config.get("base_model_name_or_path")

    @property
    def dora(self) -> bool:
        """True for a DoRA adapter (``use_dora``): every module carries a magnitude vector."""
        return bool(self.config.get("use_dora"))

    def rank_of(self, module: str) -> int:
        return int(_pattern_value(self.config.get("rank_pattern") or {}, module, self.r))

    def alpha_of(self, module: str) -> float:
        return float(_pattern_value(self.config.get("alpha_pattern") or {}, module, self.alpha))

    def scaling_of(self, module: str) -> float:
        return lora_scaling(self.rank_of(module), self.alpha_of(module),
                            rslora=bool(self.config.get("use_rslora")))

    def modules(self) -> dict[str, LoraModule]:
        """``module path -> LoraModule`` for every A/B pair, in key order."""
        if self._modules is None:
            parts: dict[str, dict[str, Any]] = {}
            kinds: dict[str, str] = {}
            for key, tensor in self.tensors.items():
                split = split_adapter_key(key)
                if split:
                    module, factor, kind = split
                    parts.setdefault(module, {})[factor] = tensor
                    if kind is not None:
                        kinds[module] = kind
            broken = [m for m, p in parts.items() if not {"A", "B"} <= set(p)]
            if broken:
                have = " and ".join(sorted(f for f in parts[broken[0]]))
                raise PawError(f"LoRA module {broken[0]!r} has only factor {have}", path=self.path)
            self._modules = {
                m: LoraModule(m, p["A"], p["B"], self.scaling_of(m), kinds[m], p.get("m"))
                for m, p in sorted(parts.items())
            }
        return self._modules

    def other_tensors(self) -> dict[str, Any]:
        """Saved tensors that are not LoRA factors (``modules_to_save`` copies, trainable tokens), base-keyed."""
        return {strip_prefix(k): v for k, v in self.tensors.items() if split_adapter_key(k) is None}


def read_adapter(spec: str | Path, *, dora: str | None = DORA_UNSUPPORTED) -> LoraAdapter:
    """Read a PEFT adapter folder (``adapter_model.safetensors`` or ``adapter_model.bin``).

    The config is checked against the tensors (:func:`check_adapter`), so an adapter PEFT would
    refuse to load is refused here too, with the module at fault named. A DoRA adapter is refused
    (:class:`~paw.errors.NotApplicable`, naming the adapter) with ``dora`` as the reason, unless the
    caller honours its magnitude vectors and passes ``dora=None``.
    """
    folder, config = read_adapter_config(spec)
    if config.get("use_dora") and dora is not None:
        raise NotApplicable(f"a DoRA adapter (use_dora: true): {dora}", path=folder)
    st, binf = folder / WEIGHTS_NAME, folder / "adapter_model.bin"
    if st.exists():
        source = SafetensorsFile(st)
        tensors = {k: source.get(k) for k in source.keys()}
    elif binf.exists():
        tensors = load_pickle(binf)
    else:
        raise PawError(f"no adapter weights ({WEIGHTS_NAME} or adapter_model.bin)", path=folder)
    check_adapter(config, {k: tuple(v.shape) for k, v in tensors.items()}, path=folder)
    adapter = LoraAdapter(config=config, tensors=dict(tensors), path=folder)
    adapter.modules()  # validate pairs now, with the folder in the message
    return adapter


def refuse_nonfinite_adapter(adapter: LoraAdapter, *, why: str) -> None:
    """Refuse an adapter whose saved tensors hold NaN/Inf, naming its weights file and the first such tensor.

    ``why`` says what cannot be done with it (``"the source adapter cannot teach"``).
    """
    folder = adapter.path or Path(".")
    weights = folder / WEIGHTS_NAME if (folder / WEIGHTS_NAME).exists() or not (folder / "adapter_model.bin").exists() \
        else folder / "adapter_model.bin"
    for key, tensor in sorted(adapter.tensors.items()):
        bad = nonfinite(tensor)
        if bad:
            raise NonFinite(f"tensor {key!r} holds {bad} NaN/Inf value(s) of {tensor.numel()}; {why}",
                            path=weights)


def read_adapter_config(spec: str | Path) -> tuple[Path, dict]:
    """The adapter folder and its checked ``adapter_config.json`` (a LoRA or DoRA, sane values)."""
    folder = resolve_path(spec, what="adapter")
    if folder.is_file():
        folder = folder.parent
    if not (folder / CONFIG_NAME).exists():
        raise PawError(f"not a PEFT adapter folder: {CONFIG_NAME} is missing", path=folder)
    config = read_json(folder / CONFIG_NAME)
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise PawError(f"adapter type {peft_type} is not supported (only LoRA)", path=folder / CONFIG_NAME)
    check_adapter_config(config, path=folder / CONFIG_NAME)
    return folder, config


def check_adapter_config(config: dict, *, path: Path | None = None) -> None:
    """Refuse values PEFT cannot use: ``r: "four"``, a NaN alpha, a number as target_modules."""
    def bad(key: str, want: str):
        raise PawError(f"{key!r} must be {want}, got {config.get(key)!r}", path=path)

    if not _positive_int(config.get("r", 8)):
        bad("r", "a positive integer")
    if not _finite_number(config.get("lora_alpha", 8)):
        bad("lora_alpha", "a finite number")
    for key in ("target_modules", "exclude_modules"):
        value = config.get(key)
        if not (value is None or isinstance(value, str) or _strings(value)):
            bad(key, "a list of module names or a regex string")
        if isinstance(value, str):
            try:
                re.compile(value)
            except re.error as err:
                raise PawError(f"{key} {value!r} is not a valid regex ({err})", path=path) from None
    if not (config.get("modules_to_save") is None or _strings(config["modules_to_save"])):
        bad("modules_to_save", "a list of module names or null")
    layers = config.get("layers_to_transform")
    if not (layers is None or _int(layers) or (isinstance(layers, list) and all(_int(v) for v in layers))):
        bad("layers_to_transform", "a layer index, a list of them or null")
    if config.get("bias", "none") not in ("none", "all", "lora_only"):
        bad("bias", "one of 'none', 'all', 'lora_only'")
    dropout = config.get("lora_dropout", 0.0)
    if not (_finite_number(dropout) and 0 <= dropout < 1):
        bad("lora_dropout", "a number in [0, 1)")
    if not isinstance(config.get("use_dora", False), bool):
        bad("use_dora", "true or false")
    for key, check, want in (("rank_pattern", _positive_int, "positive integers"),
                             ("alpha_pattern", _finite_number, "finite numbers")):
        pattern = config.get(key) or {}
        if not isinstance(pattern, dict) or not all(check(v) for v in pattern.values()):
            bad(key, f"a mapping of module patterns to {want}")
        for name in pattern:
            try:
                re.compile(name)
            except re.error:
                raise PawError(f"{key} holds {name!r}, which is not a valid pattern", path=path) from None


def check_adapter(config: dict, shapes: dict[str, tuple[int, ...]], *, path: Path | None = None) -> None:
    """Cross-check the config with the saved tensors' shapes, as PEFT does when it loads them.

    Each module's ``lora_A`` is (r, in) and ``lora_B`` (out, r) with r the config's rank for that
    module (``r`` or its ``rank_pattern``); every adapted module must be one ``target_modules``
    selects. A DoRA adapter has one magnitude vector per module, as long as ``lora_B`` has rows, and
    only a DoRA adapter has them. ``shapes`` maps saved keys to shapes (read from headers; no tensor
    is needed).
    """
    check_adapter_config(config, path=path)
    probe = LoraAdapter(config=config, tensors={})
    targets = config.get("target_modules")
    _check_magnitudes(config, shapes, path=path)
    for key, shape in sorted(shapes.items()):
        split = split_adapter_key(key)
        if split is None or split[1] == "m":
            continue
        module, factor, _kind = split
        if len(shape) != 2:
            raise PawError(f"tensor {key!r} has shape {list(shape)}; a LoRA factor is a matrix", path=path)
        rank = probe.rank_of(module)
        found = shape[0] if factor == "A" else shape[1]
        if found != rank:
            said = (f"has no 'r' (PEFT's default r={rank} assumed)"
                    if "r" not in config and not config.get("rank_pattern") else f"says r={rank}")
            raise PawError(f"module {module!r}: lora_{factor} has rank {found} but {CONFIG_NAME} {said} "
                           "(PEFT would refuse to load it: size mismatch)", path=path)
        if targets is not None and not _targets(targets, module):
            raise PawError(f"module {module!r} has LoRA weights but is not in target_modules {targets!r} "
                           "(PEFT would not create it, and its weights would be dropped)", path=path)


def _check_magnitudes(config: dict, shapes: dict[str, tuple[int, ...]], *, path: Path | None) -> None:
    """DoRA's magnitude vectors against ``use_dora`` and each module's ``lora_B`` (shapes only)."""
    rows: dict[str, int] = {}
    magnitudes: dict[str, tuple[str, tuple[int, ...]]] = {}
    for key, shape in shapes.items():
        split = split_adapter_key(key)
        if split and split[1] == "m":
            magnitudes[split[0]] = (key, tuple(shape))
        elif split and split[1] == "B" and len(shape) == 2:
            rows[split[0]] = shape[0]
    dora = bool(config.get("use_dora"))
    if magnitudes and not dora:
        raise PawError(f"holds DoRA magnitude vectors ({sorted(magnitudes)[0]} and others) but {CONFIG_NAME} does not "
                       "say use_dora: true (PEFT would load it as a plain LoRA and drop them)", path=path)
    for module in sorted(rows) if dora else ():
        if module not in magnitudes:
            raise PawError(f"module {module!r} has no lora_magnitude_vector though {CONFIG_NAME} says use_dora: true",
                           path=path)
        key, shape = magnitudes[module]
        if shape != (rows[module],):
            raise PawError(f"tensor {key!r} has shape {list(shape)}; DoRA's magnitude vector of this module has "
                           f"{rows[module]} entries, one per row of lora_B", path=path)


def _targets(targets: str | list[str], module: str) -> bool:
    """PEFT's rule: a string is a regex over the whole module path, a list matches path suffixes."""
    if isinstance(targets, str):
        return targets == "all-linear" or re.fullmatch(targets, module) is not None
    return any(module == t or module.endswith(f".{t}") for t in targets)


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _finite_number(value) -> bool:
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def write_adapter(output: str | Path, adapter: LoraAdapter, *, overwrite: bool = False,
                  extra_files: dict[str, Any] | None = None, figures: dict[str, Any] | None = None,
                  card: Card | None = None, allow_nonfinite: bool = False) -> Path:
    """Write ``adapter`` as a PEFT folder atomically; ``extra_files`` are JSON files beside it, ``figures``
    (name -> matplotlib figure) PNGs, and ``card`` the ``README.md``, written last.

    NaN/Inf factors are refused, naming the tensor (:mod:`paw.io.finite`, when the staged folder
    is committed), unless ``allow_nonfinite`` or an enclosing ``nonfinite_policy`` allows them.
    """
    # what PAW writes must load in PEFT: the same cross-check as on reading
    check_adapter(adapter.config, {k: tuple(v.shape) for k, v in adapter.tensors.items()}, path=output)
    with nonfinite_policy(allow_nonfinite), atomic_dir(output, overwrite=overwrite, inputs=[adapter.path]) as tmp:
        write_adapter_files(tmp, adapter)
        for name, obj in (extra_files or {}).items():
            write_json(tmp / name, obj)
        for name, figure in (figures or {}).items():
            save_figure(figure, tmp / name, dpi=figure.dpi)
        if card is not None:
            write_card(tmp, card)
    return Path(output)


def write_adapter_files(folder: Path, adapter: LoraAdapter) -> None:
    """The one writer of a PEFT adapter's two files, into an existing (staging) folder:
    ``adapter_model.safetensors`` (tensors on the CPU, sorted by key) and ``adapter_config.json``.

    Callers own the folder: :func:`write_adapter` and the transfer and distill writers stage it with
    :func:`paw.io.atomic.atomic_dir` and add their reports beside the adapter.
    """
    from safetensors.torch import save_file

    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in sorted(adapter.tensors.items())}
    save_file(tensors, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    write_json(folder / CONFIG_NAME, portable_adapter_config(adapter.config))  # PEFT 0.13 reads it too


def lora_config_dict(*, r: int, alpha: float, target_modules: list[str], base_model: str | None,
                     rank_pattern: dict | None = None, alpha_pattern: dict | None = None,
                     modules_to_save: list[str] | None = None, **extra: Any) -> dict:
    """A minimal ``adapter_config.json`` that current PEFT versions load."""
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha,
        "target_modules": sorted(target_modules), "base_model_name_or_path": base_model,
        "rank_pattern": rank_pattern or {}, "alpha_pattern": alpha_pattern or {},
        "modules_to_save": modules_to_save, "lora_dropout": 0.0, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
        "use_rslora": False, "use_dora": False, **extra,
    }
