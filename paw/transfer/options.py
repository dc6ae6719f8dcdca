"""What ``paw transfer-lora`` is asked to do, for every method: one frozen dataclass, checked before any work.

Field names are the CLI flags (``min_similarity`` is ``--min-similarity``) and the defaults here are
the only ones: :func:`paw.transfer.run.transfer_adapter` and the CLI read them from this class.
The distillation's own knobs are :class:`~paw.transfer.distill.options.DistillOptions`, held in
``distill``; given to any other method they are refused, naming the flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from paw.errors import PawError
from paw.transfer.distill.options import DISTILL, DistillOptions
from paw.validate import finite


@dataclass(frozen=True)
class TransferOptions:
    """The knobs of one transfer; :meth:`check` names the one flag at fault before a model is read."""

    method: str = "auto"                  # a name of paw.transfer.methods, 'auto', or 'distill' (trains a LoRA)
    subspace_rank: int | None = None      # lora-x / cross-lora subspace size (None: the method's default)
    min_similarity: float | None = None   # also skip modules whose subspace similarity is below this
    layer_map: str = "auto"               # a name of paw.transfer.layers.LAYER_MAPS
    vocab_map: str | Path | None = None   # paw-vocab-map JSON when the tokenizers differ
    ridge: float = 1e-2                   # ridge strength of least-squares maps, relative to the mean eigenvalue
    force: bool = False                   # transfer even when auto finds the target unrelated
    distill: DistillOptions = field(default_factory=DistillOptions)  # --method distill only
    check_data: str | Path | None = None  # labeled multiple-choice file for the gain gate (paw.transfer.gate)
    require_gain: bool = False            # with check_data: exit 3, writing nothing, when the gate finds no gain
    gain_z: float = 2.0                   # the gate passes when the paired gain exceeds gain_z stderrs (docs/transfer.md)

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
