"""``transfer_adapter``: move a PEFT adapter folder to another base and write the result with its report.

What ``paw transfer-lora`` runs; the in-memory work is :func:`paw.transfer.transfer_lora`::

    from paw.transfer.run import transfer_adapter
    moved = transfer_adapter("./tiny/lora", "./tiny/base", "./tiny/finetune", "./moved")
    moved.summary["methods"]  # {'copy': 14}

Raises :class:`~paw.errors.Refused` when ``auto`` finds the target unrelated (unless ``force``)
and :class:`~paw.errors.NotApplicable` when the method cannot map the adapter; nothing is written then.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw.io.manifest import records_call

PathLike = str | Path


@dataclass(frozen=True)
class TransferredAdapter:
    """What ``transfer_adapter`` wrote: the adapter folder and its report (``transfer_report.json``)."""

    output: Path
    report: dict[str, Any]
    inputs: dict[str, Any]

    @property
    def summary(self) -> dict[str, Any]:
        return self.report["summary"]


@records_call
def transfer_adapter(adapter: PathLike, source_base: PathLike, target_base: PathLike, output: PathLike, *,
                     method: str = "auto", subspace_rank: int | None = None, min_similarity: float | None = None,
                     layer_map: str = "name", vocab_map: PathLike | None = None, ridge: float = 1e-2,
                     force: bool = False, device: str = "cpu", overwrite: bool = False,
                     command: str | None = None) -> TransferredAdapter:
    """Read the adapter and both bases, transfer (training-free, rank-preserving), write ``output`` atomically."""
    from paw.device import resolve_device
    from paw.io.adapter import read_adapter
    from paw.io.atomic import check_output
    from paw.io.checkpoint import open_checkpoint
    from paw.io.manifest import describe_input
    from paw.io.transfer_report import write_transfer
    from paw.transfer.pipeline import transfer_lora

    check_output(output, overwrite=overwrite)
    dev = resolve_device(device)
    lora = read_adapter(adapter)
    source, target = open_checkpoint(source_base), open_checkpoint(target_base)
    mapping = None
    if vocab_map is not None:
        from paw.io.vocab_map import read_vocab_map

        mapping = read_vocab_map(vocab_map)
    moved, report = transfer_lora(lora, source, target, method=method, subspace_rank=subspace_rank,
                                  min_similarity=min_similarity, layer_map=layer_map, vocab_map=mapping,
                                  ridge=ridge, force=force, device=dev, target_name=str(target_base))
    inputs = {"adapter": describe_input(adapter), "source_base": describe_input(source_base),
              "target_base": describe_input(target_base)}
    if vocab_map is not None:
        inputs["vocab_map"] = describe_input(vocab_map)
    write_transfer(output, moved, report, command=command, inputs=inputs, overwrite=overwrite)
    return TransferredAdapter(Path(output), report, inputs)
