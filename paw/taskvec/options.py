"""What ``paw task-vectors`` is asked to do: one frozen dataclass, the source of its flags and its ``--config`` keys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.knobs import knob, require
from paw.taskvec.spectra import DEFAULT_DENSITY, DEFAULT_RANKS, SpectraOptions

SPECTRA_ONLY = ("spectra_ranks", "spectra_exact", "mask_density")   # knobs that mean something with --spectra only


def ranks(text: str) -> tuple[int, ...]:
    """``'8,16,64'`` -> ``(8, 16, 64)``, as ``--spectra-ranks`` is typed."""
    try:
        return tuple(int(r) for r in text.split(","))
    except ValueError:
        raise PawError(f"--spectra-ranks {text!r}: give integers separated by commas, e.g. 8,16,64") from None


@dataclass(frozen=True)
class TaskVectorOptions:
    """The task vectors Δ = model − base of one base and its fine-tunes, and what the report holds."""

    base: str | None = knob(None, "Base model: folder, weight file, .gguf or Hub id (org/name[@rev]).")
    models: tuple[str, ...] | None = knob(None, "Fine-tuned model(s) of the same architecture: --models A B C (or "
                                                "--models A --models B).")
    outdir: str | Path = knob("tv_stats", "Report folder.", cli=Path)
    multi_gpu: bool = knob(False, "Spread tensors over all visible GPUs.")
    top_k: int = knob(50, "Rows in the top-k tables (names follow it).", min=1)
    include: str | None = knob(None, "Only tensors whose name matches this regex.")
    exclude: str | None = knob(None, "Skip tensors whose name matches this regex.")
    workers: int = knob(0, "CPU only: tensors processed in parallel (0: one per core, up to 4).", min=0)
    allow_nonfinite: bool = knob(False, "Report models holding NaN or Inf (their statistics read nan) instead of "
                                        "refusing them.")
    spectra: bool = knob(False, "Also the stable rank, effective rank and energy at --spectra-ranks of every 2-D Δ, "
                                "and per pair of models the sign agreement and top-k mask overlap (writes "
                                "spectra*.csv, energy_by_rank.png, pairwise_*).")
    spectra_ranks: tuple[int, ...] = knob(DEFAULT_RANKS, "With --spectra: ranks k at which the energy held is "
                                                         "reported.", cli=str, parse=ranks)
    spectra_exact: bool = knob(False, "With --spectra: the full SVD of every matrix (exact figures; slow on large "
                                      "ones).")
    mask_density: float = knob(DEFAULT_DENSITY, "With --spectra: share of entries with the largest |Δ| in each "
                                                "model's top-k mask (TIES keeps 0.2).")

    def check(self, given: set[str] = frozenset()) -> None:
        """Refuse what no report can come from, naming the flags, before a model is read; ``given``: the knobs the
        user set (a --spectra option set without --spectra would change nothing, so it is refused)."""
        require(self, "base", "models")
        if not self.models:
            raise PawError("--models: give at least one fine-tuned model of the base")
        unused = [] if self.spectra else [n for n in SPECTRA_ONLY if n in given]
        if unused:
            flags = ", ".join("--" + name.replace("_", "-") for name in sorted(unused))
            one = len(unused) == 1
            raise PawError(f"{flags} {'is a' if one else 'are'} --spectra option{'' if one else 's'}; add --spectra "
                           f"or drop {'it' if one else 'them'}")

    def spectra_options(self) -> SpectraOptions | None:
        """What ``--spectra`` computes, or None without it."""
        if not self.spectra:
            return None
        return SpectraOptions(ranks=self.spectra_ranks, density=self.mask_density, exact=self.spectra_exact)
