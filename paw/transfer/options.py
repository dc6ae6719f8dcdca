"""What ``paw transfer-lora`` is asked to do, for every method: one frozen dataclass, checked before any work.

Field names are the CLI flags (``min_similarity`` is ``--min-similarity``) and the defaults here are
the only ones: :func:`paw.transfer.folder_pipeline.transfer_adapter` and the CLI read them from this class.
The distillation's own knobs are :class:`~paw.transfer.distill.options.DistillOptions`, held in
``distill``; given to any other method they are refused, naming the flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from paw.errors import PawError
from paw.knobs import knob, require
from paw.transfer.distill.options import DISTILL, DistillOptions
from paw.validate import finite


@dataclass(frozen=True)
class TransferFiles:
    """What ``paw transfer-lora`` reads and writes: the adapter (or a fine-tune to extract one from), both bases,
    the output folder."""

    adapter: str | Path | None = knob(None, "PEFT LoRA adapter folder trained on the source base.", cli=Path)
    finetune: str | Path | None = knob(None, "Or a full fine-tune: extract a LoRA, move it.", cli=Path)
    energy: float | None = knob(None, "With --finetune: extract at this energy share.")
    source_base: str | None = knob(None, "The adapter's base model (folder, .gguf or cached ID).")
    target_base: str | None = knob(None, "The model to move the adapter to.")
    output: str | Path | None = knob(None, "Output adapter folder (with its report).", short="-o", cli=Path)

    def check(self) -> None:
        """Every file the command needs is named (by flag or by ``--config``)."""
        require(self, "source_base", "target_base", "output")


def _methods() -> tuple[str, ...]:
    from paw.transfer.training_free import method_names  # light: torch is imported inside the methods

    return (*method_names(), DISTILL)


def _layer_maps() -> tuple[str, ...]:
    from paw.transfer.layers import LAYER_MAPS

    return tuple(LAYER_MAPS)


@dataclass(frozen=True)
class TransferOptions:
    """The knobs of one transfer; :meth:`check` names the one flag at fault before a model is read."""

    method: str = knob("auto", "How factors are mapped; auto picks per module and refuses unrelated targets.",
                       choices=_methods)
    subspace_rank: int | None = knob(None, "Subspace size of lora-x and cross-lora [default: lora-x "
                                           "min(32, min(out,in)/4), cross-lora 320].", min=1)
    min_similarity: float | None = knob(None, "Also skip modules whose subspace similarity is below this.",
                                        min=0.0, max=1.0)
    layer_map: str = knob("auto", "How layers pair up; auto: by name when depths and weights agree, else by "
                                  "similarity.", choices=_layer_maps)
    vocab_map: str | Path | None = knob(None, "paw-vocab-map JSON when tokenizers differ.", cli=Path)
    ridge: float = knob(1e-2, "Ridge strength of least-squares maps, relative to the mean eigenvalue.")
    force: bool = knob(False, "Transfer even when auto finds the target unrelated.")
    distill: DistillOptions = field(default_factory=DistillOptions)  # --method distill only
    check_data: str | Path | None = knob(None, "Labeled MC file never trained on: the moved adapter's paired gain.",
                                         cli=Path)
    require_gain: bool = knob(False, "With --check-data: no gain: exit 3, write nothing.")
    gain_z: float = knob(2.0, "With --check-data: stderrs the gain must exceed (by 'group').")

    def check(self) -> None:
        """Refuse what no transfer can use: distill knobs without ``--method distill``, a knob out of range."""
        if self.require_gain and self.check_data is None:
            raise PawError("--require-gain needs --check-data FILE (the labeled items the gain is measured on)")
        finite("--gain-z", self.gain_z)
        if self.gain_z != 2.0 and self.check_data is None:
            raise PawError("--gain-z needs --check-data FILE (the labeled items the gain is measured on)")
        if not 0 <= self.gain_z <= 10:
            raise PawError(f"--gain-z {self.gain_z}: must be in [0, 10] (stderrs the gain must exceed; 2: the default)")
        if self.method == DISTILL:
            self.distill.check()
            return
        used = self.distill.given()
        if used:
            one = len(used) == 1
            raise PawError(f"{', '.join(used)} {'is a' if one else 'are'} --method distill option{'' if one else 's'}; "
                           f"add --method distill or drop {'it' if one else 'them'}")
        finite("--ridge", self.ridge, positive=True)
        finite("--min-similarity", self.min_similarity)
