"""Task vectors of several fine-tunes against one base, streamed tensor by tensor.

:func:`compute_task_vectors` walks the tensors the base and every model share (``paw.io.stream``),
holds one tensor per model at a time, and returns per-tensor statistics (``stats.delta_stats``)
plus everything the report needs: groups, global norms and the pairwise cosines of the whole
flattened task vectors, from Gram matrices summed over tensors in float64 in a fixed order.

Work on several devices (``devices=[cuda:0, cuda:1]``) hands whole tensors to whichever device is
free; each tensor's numbers do not depend on which device (of one kind) computed them, and the
sums over tensors run in name order afterwards, so the results equal a one-device run.
"""

from __future__ import annotations

import math
import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from paw import arch
from paw.device import resolve_device, single_threaded_cpu
from paw.errors import PawError
from paw.io.checkpoint import Checkpoint
from paw.io.stream import iter_aligned
from paw.progress import track
from paw.taskvec.align import align
from paw.taskvec.groups import aggregate, module_group
from paw.taskvec.spectra import SpectraOptions, pair_matrix, spectra_groups, tensor_spectra
from paw.taskvec.stats import DeltaStats, TensorResult, delta_stats
from paw.validate import clamp_cosine, refuse_nonfinite


@dataclass
class TaskVectorResults:
    """What one streamed pass over ``base`` and ``models`` found.

    ``stats[i][j]`` describes model ``i`` on tensor ``names[j]``; ``gram[i][k]`` is the dot product
    of the whole task vectors of models ``i`` and ``k`` over the considered tensors.
    """

    base: str
    models: list[str]
    names: list[str]
    shapes: list[tuple[int, ...]]
    stats: list[list[DeltaStats]]
    gram: list[list[float]]
    skipped: dict[str, str]
    tied_lm_head: dict = field(default_factory=lambda: {"tied": False})
    base_path: str = ""
    model_paths: list[str] = field(default_factory=list)
    spectra_options: SpectraOptions | None = None  # set when spectra were computed
    spectra: list[list] = field(default_factory=list)  # [model][tensor]: SpectralStats, None unless 2-D
    pairs: list[dict] = field(default_factory=list)    # [tensor]: {(i, j): PairCounts | None}, i < j

    def spectra_groups(self, i: int) -> dict[str, dict]:
        """Spectra of model ``i`` per group (:func:`paw.taskvec.spectra.spectra_groups`); {} without them."""
        if self.spectra_options is None:
            return {}
        rows = zip(self.names, (s.sumsq for s in self.stats[i]), self.spectra[i], strict=True)
        return spectra_groups(rows, self.spectra_options.ranks)

    def spectra_energy(self, i: int) -> list[float]:
        """Energy held at each rank over all 2-D tensors of model ``i``, weighted by ‖Δ‖² (nan if none)."""
        rows = [(s.sumsq, sp) for s, sp in zip(self.stats[i], self.spectra[i], strict=True)
                if sp is not None and not math.isnan(sp.stable_rank)]
        total = math.fsum(w for w, _ in rows)
        return [math.fsum(w * sp.energies[r] for w, sp in rows) / total if total else math.nan
                for r in range(len(self.spectra_options.ranks))]

    def sign_agreement(self) -> list[list[float]]:
        """N x N share of entries (over all tensors) where two task vectors' signs agree."""
        return pair_matrix(self.pairs, len(self.models), "sign_agreement")

    def mask_overlap(self) -> list[list[float]]:
        """N x N Jaccard index of the top-``density`` magnitude masks, summed over all tensors."""
        return pair_matrix(self.pairs, len(self.models), "mask_overlap")

    def global_l2(self, i: int) -> float:
        return math.sqrt(math.fsum(s.sumsq for s in self.stats[i]))

    def global_l1(self, i: int) -> float:
        return math.fsum(s.l1 for s in self.stats[i])

    def n_params(self) -> int:
        return sum(s.numel for s in self.stats[0]) if self.stats else 0

    def groups(self, i: int) -> dict[str, dict]:
        rows = zip(self.names, self.stats[i], strict=True)
        return aggregate((name, s.numel, s.sumsq, s.l1) for name, s in rows)

    def cosines(self) -> list[list[float]]:
        """N x N cosine similarity of the flattened task vectors.

        NaN next to a Δ whose cosine is undefined: all zero, or holding NaN/Inf (never 1.0).
        """
        norms = [math.sqrt(self.gram[i][i]) for i in range(len(self.models))]
        defined = [0 < n < math.inf for n in norms]  # False for 0, inf and nan
        out = []
        for i, row in enumerate(self.gram):
            cells = []
            for k, dot in enumerate(row):
                if not (defined[i] and defined[k]):
                    cells.append(math.nan)
                elif i == k:
                    cells.append(1.0)
                else:
                    cells.append(clamp_cosine(dot / (norms[i] * norms[k])))
            out.append(cells)
        return out


def compute_task_vectors(base: Checkpoint, models: Sequence[Checkpoint], *, device="cpu",
                         devices: Sequence | None = None, include: str | None = None,
                         exclude: str | None = None, chunk_size: int | None = None,
                         description: str = "task vectors", allow_nonfinite: bool = False,
                         spectra: SpectraOptions | None = None) -> TaskVectorResults:
    """Stream Δ_i = models[i] − base over every tensor they share and return the statistics.

    ``device`` is a ``torch.device`` or a ``--device`` string; ``devices`` (several) overrides it
    and spreads tensors over them. ``include`` / ``exclude`` are regexes on tensor names.
    Raises :class:`PawError` for mismatched architectures or when no tensor is comparable, and
    :class:`~paw.validate.NonFinite` naming the model and the first tensor holding NaN/Inf unless
    ``allow_nonfinite`` (its statistics and cosines are then ``nan``). ``spectra`` adds the
    spectra of every 2-D Δ and the sign agreement and mask overlap of every pair
    (:mod:`paw.taskvec.spectra`), one tensor at a time like the rest.
    """
    import torch

    if not models:
        raise PawError("no fine-tuned model given (--models)")
    check_architectures(base, models)
    targets = list(devices) if devices else [device]
    targets = [d if isinstance(d, torch.device) else resolve_device(d) for d in targets]
    alignment = align(base, models, include=_regex(include, "--include"),
                      exclude=_regex(exclude, "--exclude"))
    names, skipped = list(alignment.names), dict(alignment.skipped)
    for name in [n for n in names if base.numel(n) == 0]:
        names.remove(name)
        skipped[name] = "empty tensor (no elements)"
    tied = _tied_lm_head(base, models, names, skipped)
    if not names:
        reasons = "; ".join(f"{k}: {v}" for k, v in list(skipped.items())[:3]) or "the filters kept none"
        raise PawError(f"no tensor in common between the base ({base.name}) and the models ({reasons})")
    ckpts = [base, *models]

    def work(name: str, dev) -> TensorResult:
        _, tensors = next(iter_aligned(ckpts, [name], device=dev))
        result = delta_stats(tensors[0], tensors[1:], chunk_size=chunk_size)
        # Σ |Δ| is finite exactly when every input entry is (NaN and ±inf reach Δ), so the inputs
        # are read again, to name the one at fault, only when it is not
        if not allow_nonfinite and not all(math.isfinite(s.l1) for s in result.stats):
            for i, (ckpt, tensor) in enumerate(zip(ckpts, tensors, strict=True)):  # the merge's policy, by name
                refuse_nonfinite(name, tensor, what=f"{'base' if i == 0 else 'model'} {ckpt.name} (its task-"
                                 "vector statistics would be nan)", path=ckpt.path)
        if spectra is None:
            return result
        per_model, pairs = tensor_spectra(tensors[0], tensors[1:], spectra)
        return replace(result, spectra=per_model, pairs=pairs)

    k = len(models)
    stats: list[list[DeltaStats]] = [[] for _ in range(k)]
    gram = [[0.0] * k for _ in range(k)]
    spectral: list[list] = [[] for _ in range(k)] if spectra is not None else []
    pairs: list[dict] = []
    with single_threaded_cpu(targets):
        results = _run(names, work, targets)
        for result in track(results, f"{description} ({k} model{'s' if k > 1 else ''})", total=len(names)):
            for i in range(k):
                stats[i].append(result.stats[i])
                for j in range(k):
                    gram[i][j] += result.gram[i][j]
                if spectra is not None:
                    spectral[i].append(result.spectra[i])
            if spectra is not None:
                pairs.append(result.pairs)
    return TaskVectorResults(
        base=base.name, models=unique_names([m.name for m in models]), names=names,
        shapes=[tuple(base.shape(n)) for n in names], stats=stats, gram=gram,
        skipped=dict(sorted(skipped.items())), tied_lm_head=tied, base_path=str(base.path),
        model_paths=[str(m.path) for m in models], spectra_options=spectra, spectra=spectral, pairs=pairs)


def cpu_workers(requested: int = 0) -> int:
    """Tensors processed in parallel on a CPU: ``requested`` if > 0, else one per core, at most 4.

    Each worker holds one tensor of every model, so memory grows with the count; chunks inside a
    tensor run on one intra-op thread (see ``paw.device.single_threaded_cpu``).
    """
    import os

    if requested > 0:
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 4))


def check_architectures(base: Checkpoint, models: Sequence[Checkpoint]) -> None:
    """Refuse models whose ``config.json`` names another architecture than the base's."""
    def arch(ckpt: Checkpoint):
        cfg = ckpt.config or {}
        return cfg.get("model_type"), tuple(cfg.get("architectures") or ())

    base_type, base_arch = arch(base)
    for model in models:
        m_type, m_arch = arch(model)
        if (base_type and m_type and base_type != m_type) or (base_arch and m_arch and base_arch != m_arch):
            raise PawError(f"architectures do not match: the base ({base.name}) is "
                           f"{base_type or '/'.join(base_arch)} but {model.name} is "
                           f"{m_type or '/'.join(m_arch)}", path=model.path)


def unique_names(names: Sequence[str]) -> list[str]:
    """Folder-safe, distinct model names: ``['ft', 'ft'] -> ['ft', 'ft-2']``."""
    out, seen = [], set()
    for name in names:
        clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".") or "model"  # never '..'
        candidate, n = clean, 1
        while candidate in seen:
            n += 1
            candidate = f"{clean}-{n}"
        seen.add(candidate)
        out.append(candidate)
    return out


def _tied_lm_head(base: Checkpoint, models: Sequence[Checkpoint], names: list[str],
                  skipped: dict[str, str]) -> dict:
    """Count a tied output head once: it is the embedding matrix, not a second parameter."""
    embed = next((n for n in names if module_group(n) == "embed" and len(base.shape(n)) == 2), None)
    if embed is None:
        return {"tied": False}
    head = arch.family(base.config).head
    if base.tied_embeddings:  # not stored at all: the embedding's row already covers it
        return {"tied": True, "lm_head": head, "embedding": embed,
                "note": f"lm_head is tied to {embed} (not stored); counted once, in the embed group"}
    if head in names and arch.tied(base.config) and base.shape(head) == base.shape(embed):
        import torch

        if all(torch.equal(c[head], c[embed]) for c in (base, *models)):
            names.remove(head)
            skipped[head] = f"tied to {embed} (same weights); counted once, as {embed}"
            return {"tied": True, "lm_head": head, "embedding": embed,
                    "note": f"lm_head is stored but equal to {embed}; counted once, in the embed group"}
    return {"tied": False}


def _regex(pattern: str | None, option: str) -> str | None:
    import re

    if pattern:
        try:
            re.compile(pattern)
        except re.error as err:
            raise PawError(f"{option} {pattern!r} is not a valid regular expression ({err})") from None
    return pattern


def _run(names: Sequence[str], work: Callable, devices: Sequence) -> Iterator[TensorResult]:
    """Results in name order; with several devices, tensors go to whichever device is free."""
    if len(devices) == 1:
        yield from (work(name, devices[0]) for name in names)
        return
    free: queue.Queue = queue.Queue()
    for dev in devices:
        free.put(dev)

    def job(name: str) -> TensorResult:
        dev = free.get()
        try:
            return work(name, dev)
        finally:
            free.put(dev)

    with ThreadPoolExecutor(max_workers=len(devices), thread_name_prefix="paw-taskvec") as pool:
        # submit in windows so a slow consumer does not let all tensors pile up in memory
        window = 2 * len(devices)
        pending = [pool.submit(job, n) for n in names[:window]]
        for i in range(len(names)):
            result = pending[i].result()
            if i + window < len(names):
                pending.append(pool.submit(job, names[i + window]))
            pending[i] = None
            yield result
