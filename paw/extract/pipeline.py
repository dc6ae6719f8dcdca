"""``extract_lora``: what ``paw extract-lora`` runs, from a base and a full fine-tune to a PEFT LoRA folder.

    from paw.extract import ExtractOptions, extract_lora
    out = extract_lora("./tiny/base", "./tiny/ft-math", "./ft-lora", ExtractOptions(rank=8))
    out.summary["energy_held"], out.report["modules"][0]["relative_error"]

Per tensor, streamed one at a time through :mod:`paw.io.checkpoint` (folders, sharded or single
safetensors, ``.bin``/``.pt``, ``.gguf``): Δ = F − B on ``--device``, its truncated SVD
(:mod:`paw.extract.svd`), the factors, and the measured error; memory holds one tensor of each
model plus the factors. The folder loads with ``PeftModel.from_pretrained(base_model, out)``.

What each tensor becomes (the rules are also written into the report):

- projection weights of the decoder layers: a LoRA of the chosen rank (``--rank``, or per module
  the smallest rank holding ``--energy`` of ‖Δ‖²_F, at most ``--max-rank``); unchanged ones are skipped;
- the embedding and the head: skipped when unchanged; a LoRA when the chosen rank holds at least
  ``embed_energy`` of their delta (low rank); otherwise ``modules_to_save`` (the whole fine-tuned
  table, exact). A tied head follows its embedding: the same LoRA on both, or both saved whole;
- norm gains, biases and any other tensor: not carried (a LoRA has no place for them); each
  changed one is listed in ``not_carried`` with its relative change ‖Δ‖ / ‖B‖.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from paw import __version__
from paw.device import resolve_device
from paw.errors import PawError
from paw.extract.plan import EMBED, HEAD, LINEAR, OTHER, check_pair, plan_tensor, tied_head_module
from paw.extract.plot import energy_figure
from paw.extract.svd import choose_rank, difference, lora_factors, relative_error, spectrum, squared_norm
from paw.io.adapter import PEFT_PREFIX, LoraAdapter, adapter_key, lora_config_dict, write_adapter
from paw.io.atomic import check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.manifest import describe_input, records_call
from paw.io.model_card import Card
from paw.knobs import knob, require
from paw.progress import track
from paw.validate import NonFinite, nonfinite

PathLike = str | Path
REPORT_JSON = "extract_report.json"
PLOT = "energy_vs_rank.png"
DEFAULT_RANK = 16          # neither --rank nor --energy given
DEFAULT_ENERGY_CAP = 128   # --energy without --max-rank: the most triplets computed per module
RULES = {
    "linear": "projection weights: a LoRA of the chosen rank; alpha = rank, so the scale alpha/r is 1; "
              "B = U_r sqrt(S_r), A = sqrt(S_r) V_r^T (balanced factors); unchanged modules are skipped",
    "vocab": "embedding and head: skipped when unchanged; a LoRA when the chosen rank holds at least "
             "embed_energy of the squared Frobenius norm of their delta; otherwise modules_to_save (the whole "
             "fine-tuned table, exact); a tied head follows its embedding (the same LoRA on both, or both saved)",
    "other": "norm gains, biases and other tensors: not carried by the adapter; changed ones are listed "
             "in not_carried",
}


@dataclass(frozen=True)
class ExtractFiles:
    """What ``paw extract-lora`` reads and writes."""

    base: str | None = knob(None, "Base model: folder, weight file, .gguf or Hub id (org/name[@rev]).")
    finetune: str | None = knob(None, "Full fine-tune of the base (same architecture and shapes).")
    output: str | Path | None = knob(None, "PEFT adapter folder to create (with extract_report.json).", cli=Path)

    def check(self) -> None:
        require(self, "base", "finetune", "output")


@dataclass(frozen=True)
class ExtractOptions:
    """Every knob of :func:`extract_lora`, defaults visible; :meth:`check` runs before any model is read."""

    rank: int | None = knob(None, "One LoRA rank for every module (16 when neither --rank nor --energy is given).")
    energy: float | None = knob(None, "Per module, the smallest rank holding this share of the delta's squared "
                                      "Frobenius norm, in (0, 1].")
    max_rank: int | None = knob(None, "Cap on any module's rank (default: --rank, or 128 with --energy).")
    exact: bool = knob(False, "Full SVD instead of the randomised one (slower on large matrices; small ones are "
                              "exact anyway).")
    embed_energy: float = knob(0.99, "Embedding and head: a LoRA when the chosen rank holds this share of their "
                                     "delta, else saved whole (modules_to_save).")
    seed: int = knob(0, "Random seed; same inputs and seed give byte-identical outputs.")
    device: str = "cpu"              # the run's --device (paw.knobs.RunOptions): where the SVDs run
    overwrite: bool = False          # the run's --overwrite

    def check(self) -> ExtractOptions:
        """Refuse bad values naming the flag (one line, exit 2 in the CLI)."""
        if self.rank is not None and self.energy is not None:
            raise PawError("give --rank or --energy, not both")
        for flag, value in (("--rank", self.rank), ("--max-rank", self.max_rank)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise PawError(f"{flag} must be an integer of at least 1, got {value!r}")
        for flag, value in (("--energy", self.energy), ("--embed-energy", self.embed_energy)):
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= 1):
                raise PawError(f"{flag} must lie in (0, 1], got {value!r}")
        if self.rank is not None and self.max_rank is not None and self.rank > self.max_rank:
            raise PawError(f"--rank {self.rank} is above --max-rank {self.max_rank}")
        return self

    @property
    def cap(self) -> int:
        """The largest rank any module may get."""
        if self.max_rank is not None:
            return self.max_rank
        return self.rank if self.rank is not None else (DEFAULT_ENERGY_CAP if self.energy else DEFAULT_RANK)

    def rank_rule(self) -> dict[str, Any]:
        """Keyword arguments of :func:`paw.extract.svd.choose_rank`."""
        if self.energy is not None:
            return {"energy": self.energy, "max_rank": self.cap}
        return {"rank": self.rank or DEFAULT_RANK, "max_rank": self.cap}


@dataclass(frozen=True)
class ExtractedLora:
    """What :func:`extract_lora` wrote: the adapter folder and its report (``extract_report.json``)."""

    output: Path
    report: dict[str, Any]

    @property
    def summary(self) -> dict[str, Any]:
        return self.report["summary"]


@records_call
def extract_lora(base: PathLike, finetune: PathLike, output: PathLike, options: ExtractOptions = ExtractOptions(),
                 *, command: str | None = None) -> ExtractedLora:
    """Write the PEFT LoRA that turns ``base`` into (the low-rank part of) ``finetune`` into ``output``.

    Raises :class:`~paw.errors.PawError` before anything is computed for bad options, a fine-tune of
    another architecture or shape, or an output inside an input; nothing is written then.
    """
    options.check()
    device = resolve_device(options.device)
    base_ckpt, ft_ckpt = open_checkpoint(base), open_checkpoint(finetune)
    fam = check_pair(base_ckpt, ft_ckpt)
    check_output(output, overwrite=options.overwrite, inputs=[base_ckpt.path, ft_ckpt.path])
    _refuse_nonfinite(base_ckpt, ft_ckpt)
    records, not_carried, tensors = _extract_all(base_ckpt, ft_ckpt, fam, options, device)
    lora = [r for r in records if r["how"] == "lora"]
    if not lora:
        raise PawError("no projection, embedding or head changed in a way a LoRA can hold (every delta is zero "
                       "or kept in modules_to_save); nothing written", path=finetune)
    config = _config(records, str(base))
    report = _report(records, not_carried, options, tensors)
    inputs = {"base": describe_input(base), "finetune": describe_input(finetune)}
    manifest = {"paw_version": __version__, "command": command, "inputs": inputs, **report}
    figure = energy_figure(report)  # built before anything is written: a plotting error leaves no folder
    write_adapter(output, LoraAdapter(config=config, tensors=tensors), overwrite=options.overwrite,
                  extra_files={REPORT_JSON: manifest}, figures={PLOT: figure},
                  card=_card(output, base, finetune, report, command))
    return ExtractedLora(Path(output), manifest)


def _card(output: PathLike, base: PathLike, finetune: PathLike, report: dict, command: str | None) -> Card:
    """The adapter's model card: what was extracted from what, the ranks and the energy held."""
    s = report["summary"]
    ranks = str(s["rank_min"]) if s["rank_min"] == s["rank_max"] else \
        f"{s['rank_min']}-{s['rank_max']} (median {s['rank_median']})"
    lines = [f"- {s['lora_modules']} LoRA modules, rank {ranks}: energy held {s['energy_held']:.4f}, relative "
             f"error {s['relative_error']:.4f}",
             f"- modules_to_save {s['modules_to_save']}, unchanged {s['unchanged']}, not carried {s['not_carried']}",
             *(f"- {note}" for note in report["notes"])]
    intro = (f"A LoRA adapter for `{base}`, extracted by PAW's `paw extract-lora` from the full fine-tune "
             f"`{finetune}`: per projection, the truncated SVD of fine-tune minus base. Load it on `{base}` with "
             "PEFT's `PeftModel.from_pretrained`.")
    return Card(Path(output).name, "peft", inputs=(str(base),), tags=("paw", "lora", "extract-lora"), intro=intro,
                sections=(("Extraction", tuple(lines)),), command=command)


def _extract_all(base, finetune, fam, options: ExtractOptions, device):
    """Stream every tensor once: (module records, not-carried records, adapter tensors by saved key)."""
    tied_head = tied_head_module(fam) if base.tied_embeddings else None
    records, not_carried, tensors = [], [], {}
    for name in track(list(base), "extracting", unit="tensors"):
        plan = plan_tensor(name, tuple(base.shape(name)), fam)
        b, f = base[name], finetune[name]
        delta = difference(f, b, dtype=_float(b), device=device)  # f stays the fine-tune's (modules_to_save)
        if plan.kind == OTHER:
            if moved := squared_norm(delta):  # 0 exactly when the tensor is unchanged
                change = math.sqrt(moved / max(squared_norm(b), 1e-300))
                not_carried.append({"tensor": name, "kind": plan.role, "relative_change": change})
            del b, f, delta
            continue
        del b  # not needed past Δ: on a 128256 x 2048 bf16 embedding, 0.5 GiB fewer held through its SVD
        records += _module(plan, delta, f, options, tensors, tied_head if plan.kind == EMBED else None)
        del f, delta
    return records, not_carried, tensors


def _refuse_nonfinite(base, finetune) -> None:
    """Refuse a base or fine-tune tensor holding NaN/Inf before any delta is decomposed: an SVD of it
    fails to converge (or returns NaN factors), and no flag can make its low-rank part meaningful.
    One read of each tensor (a sum, mostly), so a broken input is named in seconds, not after hours of SVDs."""
    for name in track(list(base), "checking for NaN/Inf", unit="tensors"):
        for ckpt in (base, finetune):
            tensor = ckpt[name]
            bad = nonfinite(tensor)
            if bad:
                raise NonFinite(f"tensor {name!r} holds {bad} NaN/Inf value(s) of {tensor.numel()}: no low-rank "
                                "part of it can be taken (SVD); nothing was written", path=ckpt.path)
            del tensor


def _float(tensor):
    """float32 for arithmetic, whatever the stored dtype (float64 kept as is)."""
    import torch

    return torch.float64 if tensor.dtype == torch.float64 else torch.float32


def _module(plan, delta, finetuned, options: ExtractOptions, tensors: dict, tied_head: str | None) -> list[dict]:
    """Decide and extract one module; returns its record(s) (two for an embedding with a tied head)."""
    modules = [plan.module] + ([tied_head] if tied_head else [])
    roles = [plan.role] + (["head"] if tied_head else [])

    def record(i: int, **fields) -> dict:
        return {"module": modules[i], "tensor": plan.tensor, "role": roles[i], "shape": list(delta.shape),
                "tied": bool(tied_head), **fields}

    total = squared_norm(delta)  # one pass: 0 exactly when unchanged, else the spectrum's and the error's ‖Δ‖²
    if total == 0.0:
        return [record(i, how="unchanged", rank=None, energy=None, relative_error=None, energies=[])
                for i in range(len(modules))]
    spec = spectrum(delta, limit=options.cap, exact=options.exact, seed=options.seed, total=total)
    energies = spec.energies()
    rank = choose_rank(spec, **options.rank_rule())
    held = energies[rank - 1]
    curve = [round(e, 6) for e in energies]
    if plan.kind != LINEAR and held < options.embed_energy:  # not low rank: save the whole table
        for m in modules:
            # the read tensor itself, once for both tied names: write_adapter copies each entry as it writes
            # (a clone here too held 1 GiB more on a tied 128256 x 2048 bf16 table)
            tensors[f"{PEFT_PREFIX}{m}.weight"] = finetuned.detach().to("cpu")
        return [record(i, how="modules_to_save", rank=None, energy=1.0, relative_error=0.0, rank_considered=rank,
                       energy_at_rank=held, energies=curve) for i in range(len(modules))]
    out = []
    for i, layout in enumerate((plan.kind, HEAD)[:len(modules)]):  # a tied head is a Linear over the same table
        embedding = layout == EMBED
        A, B = lora_factors(spec, rank, embedding=embedding)
        error = relative_error(delta, A, B, embedding=embedding, total=spec.total)
        kind = "embedding" if embedding else "linear"
        tensors[adapter_key(modules[i], "A", kind)], tensors[adapter_key(modules[i], "B", kind)] = A.cpu(), B.cpu()
        out.append(record(i, how="lora", rank=rank, energy=held, relative_error=error, energies=curve,
                          squared_norm=spec.total if i == 0 else 0.0))  # a tied table counts once
    return out


def _config(records: list[dict], base: str) -> dict:
    """``adapter_config.json``: alpha = r everywhere (scale 1); the commonest rank as ``r``, others as patterns."""
    lora = [r for r in records if r["how"] == "lora"]
    counts = Counter(r["rank"] for r in lora)
    r = max(counts, key=lambda k: (counts[k], k))
    pattern = {rec["module"]: rec["rank"] for rec in lora if rec["rank"] != r}
    saved = sorted(rec["module"] for rec in records if rec["how"] == "modules_to_save")
    return lora_config_dict(r=r, alpha=r, target_modules=[rec["module"] for rec in lora], base_model=base,
                            rank_pattern=pattern, alpha_pattern=dict(pattern), modules_to_save=saved or None)


def _report(records: list[dict], not_carried: list[dict], options: ExtractOptions, tensors: dict) -> dict:
    lora = [r for r in records if r["how"] == "lora"]
    total = sum(r["squared_norm"] for r in lora)
    held = sum(r["energy"] * r["squared_norm"] for r in lora) / total if total else 1.0
    error = math.sqrt(sum(r["relative_error"] ** 2 * r["squared_norm"] for r in lora) / total) if total else 0.0
    ranks = sorted(r["rank"] for r in lora)
    summary = {
        "lora_modules": len(lora), "modules_to_save": sum(r["how"] == "modules_to_save" for r in records),
        "unchanged": sum(r["how"] == "unchanged" for r in records), "not_carried": len(not_carried),
        "rank_min": ranks[0], "rank_median": ranks[len(ranks) // 2], "rank_max": ranks[-1],
        "energy_held": held, "relative_error": error,
        "adapter_parameters": sum(int(t.numel()) for t in tensors.values()),
    }
    modules = [{k: v for k, v in r.items() if k != "squared_norm"} for r in records]
    shown = {k: v for k, v in asdict(options).items() if k != "overwrite"}  # not a property of the result
    return {"options": shown, "rules": RULES, "summary": summary, "modules": modules,
            "not_carried": not_carried, "notes": _notes(records, not_carried, options)}


def _notes(records: list[dict], not_carried: list[dict], options: ExtractOptions) -> list[str]:
    notes = []
    for r in records:
        if r["role"] in ("embed", "head") and r["how"] == "unchanged":
            notes.append(f"{r['module']}: unchanged by the fine-tune; skipped")
        elif r["how"] == "modules_to_save":
            notes.append(f"{r['module']}: rank {r['rank_considered']} holds {r['energy_at_rank']:.4g} of its delta "
                         f"(< --embed-energy {options.embed_energy:g}); saved whole in modules_to_save")
        elif r["role"] in ("embed", "head"):
            notes.append(f"{r['module']}: low rank (rank {r['rank']} holds {r['energy']:.4g}); a LoRA")
    if not_carried:
        kinds = Counter(r["kind"] for r in not_carried)
        notes.append(f"{len(not_carried)} changed tensor(s) not carried (a LoRA holds linear maps only): "
                     + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    return notes
