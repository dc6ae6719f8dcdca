"""``transfer_adapter``: move a PEFT adapter folder to another base and write the result with its report.

The folder-to-folder pipeline ``paw transfer-lora`` runs for every method: it reads the adapter and
both bases, hands the in-memory work to :func:`paw.transfer.training_free.transfer_lora`
(training-free, rank-preserving) or, for ``method='distill'``, :func:`paw.transfer.distill.distill_lora`
(trains a new LoRA; :mod:`paw.transfer.distill.run`)::

    from paw.transfer.folder_pipeline import transfer_adapter
    moved = transfer_adapter("./tiny/lora", "./tiny/base", "./tiny/finetune", "./moved")
    moved.transfer.methods  # {'copy': 14}
    taught = transfer_adapter("./lora", "./a", "./b", "./taught", method="distill",
                              distill=DistillOptions(prompts="inputs.jsonl"))  # doctest: +SKIP

Raises :class:`~paw.errors.Refused` when ``auto`` finds the target unrelated (unless ``force``)
and :class:`~paw.errors.NotApplicable` when the method cannot map the adapter; nothing is written then.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw.device import resolve_device
from paw.errors import PawError
from paw.io.adapter import read_adapter
from paw.io.atomic import check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.finite import nonfinite_policy
from paw.io.manifest import describe_input, records_call
from paw.io.tokenizer import two_model_tokenizers
from paw.io.transfer_report import write_transfer
from paw.io.vocab_map import read_vocab_map
from paw.transfer.card import transfer_card
from paw.transfer.distill.options import DISTILL, DistillOptions
from paw.transfer.distill.run import distill_to_folder
from paw.transfer.gate import gain_gated
from paw.transfer.options import TransferOptions
from paw.transfer.plots import similarity_figure
from paw.transfer.summary import DistillSummary, LayerPairing, TransferSummary
from paw.transfer.training_free import DORA_REFUSAL, transfer_lora
from paw.validate import ALLOW_HINT, NonFinite, nonfinite, refuse_nonfinite_all
from paw.vocab.compare import id_difference

PathLike = str | Path
DEFAULTS = TransferOptions()


@dataclass(frozen=True)
class TransferredAdapter:
    """What ``transfer_adapter`` wrote: the adapter folder, its report (``transfer_report.json``) and
    the report's figures, typed (:mod:`paw.transfer.summary`)."""

    output: Path
    report: dict[str, Any]
    inputs: dict[str, Any]
    transfer: TransferSummary                       # the report's summary block
    layers: LayerPairing | None = None              # how layers were paired (weight-space methods)
    distill: DistillSummary | None = None           # the distillation's figures (method='distill')

    @classmethod
    def of(cls, output: PathLike, report: dict[str, Any], inputs: dict[str, Any]) -> TransferredAdapter:
        """The result of a run that wrote ``report`` into ``output``."""
        distilled = report["method"] == DISTILL
        return cls(Path(output), report, inputs, TransferSummary.from_report(report),
                   layers=None if distilled else LayerPairing.from_report(report),
                   distill=DistillSummary.from_report(report) if distilled else None)

    @property
    def summary(self) -> dict[str, Any]:
        """The summary block as JSON-ready data (what ``--track`` logs); :attr:`transfer` is it typed."""
        return self.report["summary"]

    @property
    def warnings(self) -> list[str]:
        """What the user should know about the result, one sentence each (also in the report)."""
        return self.report.get("warnings", [])


@records_call
@gain_gated  # check_data: staged, scored on labeled items, then published or refused (paw.transfer.gate)
def transfer_adapter(adapter: PathLike, source_base: PathLike, target_base: PathLike, output: PathLike, *,
                     method: str = DEFAULTS.method, subspace_rank: int | None = DEFAULTS.subspace_rank,
                     min_similarity: float | None = DEFAULTS.min_similarity, layer_map: str = DEFAULTS.layer_map,
                     vocab_map: PathLike | None = DEFAULTS.vocab_map, ridge: float = DEFAULTS.ridge,
                     force: bool = DEFAULTS.force, distill: DistillOptions | None = None, device: str = "cpu",
                     overwrite: bool = False, allow_nonfinite: bool = False, progress: bool = True,
                     check_data: PathLike | None = DEFAULTS.check_data, require_gain: bool = DEFAULTS.require_gain,
                     gain_z: float = DEFAULTS.gain_z, command: str | None = None) -> TransferredAdapter:
    """Read the adapter and both bases, transfer, write ``output`` atomically; every method, distill included.

    The knobs are :class:`~paw.transfer.options.TransferOptions` (``distill``: the
    :class:`~paw.transfer.distill.options.DistillOptions` of ``method='distill'``), checked before
    anything is read. An adapter with NaN/Inf values is never written unless ``allow_nonfinite``;
    the input holding them is named. ``check_data`` (a labeled multiple-choice file) adds the gain
    gate of :mod:`paw.transfer.gate` (``report['gate']``); ``require_gain`` makes a failed gate
    raise :class:`~paw.errors.NoGain` with nothing written.
    """
    options = TransferOptions(method=method, subspace_rank=subspace_rank, min_similarity=min_similarity,
                              layer_map=layer_map, vocab_map=vocab_map, ridge=ridge, force=force,
                              distill=distill or DistillOptions(), check_data=check_data, require_gain=require_gain,
                              gain_z=gain_z)
    options.check()
    if method == DISTILL:
        report, inputs = distill_to_folder(adapter, source_base, target_base, output, options.distill, device=device,
                                           command=command, overwrite=overwrite, allow_nonfinite=allow_nonfinite,
                                           progress=progress)
        return TransferredAdapter.of(output, report, inputs)
    return _weight_space(adapter, source_base, target_base, output, options, device=device, overwrite=overwrite,
                         allow_nonfinite=allow_nonfinite, command=command)


def run_distill(adapter: PathLike, source_base: PathLike, target_base: PathLike, output: PathLike, *,
                steps: int = DistillOptions.max_steps, device: str = "cpu", overwrite: bool = False,
                allow_nonfinite: bool = False, progress: bool = True, command: str | None = None,
                **knobs) -> TransferredAdapter:
    """``transfer_adapter(method='distill', distill=DistillOptions(max_steps=steps, **knobs))``, as a shortcut.

    ``knobs`` are the fields of :class:`~paw.transfer.distill.options.DistillOptions` (``prompts``,
    ``lr``, ``holdout`` ...); the call is recorded as the ``transfer_adapter`` call it makes.
    """
    return transfer_adapter(adapter, source_base, target_base, output, method=DISTILL,
                            distill=DistillOptions(max_steps=steps, **knobs), device=device, overwrite=overwrite,
                            allow_nonfinite=allow_nonfinite, progress=progress, command=command)


def _weight_space(adapter: PathLike, source_base: PathLike, target_base: PathLike, output: PathLike,
                  o: TransferOptions, *, device: str, overwrite: bool, allow_nonfinite: bool,
                  command: str) -> TransferredAdapter:
    """The training-free transfer (:func:`paw.transfer.transfer_lora`) from folders to ``output``."""
    import torch


    method, vocab_map = o.method, o.vocab_map
    dev = resolve_device(device)
    lora = read_adapter(adapter, dora=DORA_REFUSAL)
    source, target = open_checkpoint(source_base), open_checkpoint(target_base)
    check_output(output, overwrite=overwrite, inputs=[lora.path, source.path, target.path, vocab_map])
    mapping = None if vocab_map is None else read_vocab_map(vocab_map)
    tokenizers = two_model_tokenizers(source_base, target_base)  # None: no tokenizer.json, or the same file
    id_change = None if tokenizers is None else id_difference(*tokenizers)
    try:
        moved, report = transfer_lora(lora, source, target, method=method, subspace_rank=o.subspace_rank,
                                      min_similarity=o.min_similarity, layer_map=o.layer_map, vocab_map=mapping,
                                      ridge=o.ridge, force=o.force, device=dev, target_name=str(target_base),
                                      id_change=id_change)
    except torch.linalg.LinAlgError as err:  # an SVD or solve that did not converge (NaN inputs, mostly)
        _name_nonfinite(lora, source, target)
        raise PawError(f"the linear algebra of the transfer failed ({str(err).splitlines()[0][:200]})") from None
    bad = refuse_nonfinite_all(moved.tensors, what="transferred adapter", allow=True)
    if bad and not allow_nonfinite:
        _name_nonfinite(lora, source, target)
        raise NonFinite(f"the transferred adapter would hold NaN/Inf in {len(bad)} tensor(s) (first: "
                        f"{next(iter(bad))}); nothing was written; {ALLOW_HINT}", path=output)
    if bad:
        report = {**report, "nonfinite_written": bad}
    inputs = {"adapter": describe_input(adapter), "source_base": describe_input(source_base),
              "target_base": describe_input(target_base)}
    if vocab_map is not None:
        inputs["vocab_map"] = describe_input(vocab_map)
    with nonfinite_policy(allow_nonfinite):  # the writer's own guard honours the same flag
        write_transfer(output, moved, report, figure=similarity_figure(report), command=command, inputs=inputs,
                       overwrite=overwrite, card=transfer_card(output, report, source_base=source_base,
                                                               target_base=target_base, command=command))
    return TransferredAdapter.of(output, report, inputs)


def _name_nonfinite(lora, source, target) -> None:
    """Raise :class:`~paw.validate.NonFinite` naming the first input tensor with NaN/Inf the adapter touches."""

    for key, tensor in sorted(lora.tensors.items()):
        if nonfinite(tensor):
            raise NonFinite(f"tensor {key!r} holds {nonfinite(tensor)} NaN/Inf value(s); nothing was written; "
                            f"{ALLOW_HINT}", path=lora.path)
    for ckpt, role in ((source, "source base"), (target, "target base")):
        for module in lora.modules():
            name = f"{module}.weight"
            if name in ckpt and nonfinite(ckpt[name]):
                raise NonFinite(f"{role} {ckpt.name}: tensor {name!r} holds {nonfinite(ckpt[name])} NaN/Inf "
                                f"value(s); nothing was written; {ALLOW_HINT}", path=ckpt.path)
