"""Sharded training (``--fsdp``): the student's frozen base weights split over the launched processes.

Under ``torchrun --nproc-per-node N`` (or ``accelerate launch``), ``--fsdp`` wraps the student of
``paw train-lora`` and ``paw transfer-lora --method distill`` in torch's FSDP2 (``fully_shard``): one
unit per decoder layer plus the root (embeddings, final norm, head), so each rank keeps about 1/N of
the base weights and all-gathers one layer at a time in the forward and backward passes. The LoRA
factors sit in the same units, in float32, so they (their gradients and AdamW's moments) are sharded
too. The teacher of a distillation is not sharded: every rank holds all of it.

What stays as in :mod:`paw.distributed`: every rank takes its contiguous share of the global batch and
scales its loss by its share of the units, so the ranks' losses *sum* to the one-process loss. FSDP
then reduces the LoRA gradients itself (a reduce-scatter per unit in the backward pass), told to *sum*
(divide factor 1, on every unit) rather than average; PAW's own all-reduce does not run. Two rules
FSDP adds, both kept by the callers:

- every rank runs the same student forward passes in a step (each one all-gathers every layer), so a
  rank whose share has no sequence (or no choice) runs one borrowed example with weight 0
  (:func:`stand_in`); evaluation runs on every rank, rank 0 keeps the figures;
- the factors are gathered (:func:`full_lora_state`, every rank calls it) before rank 0 writes them.

Refused with one line: ``--fsdp`` in a single process (nothing to shard over), and with
``--save-every`` / ``--resume`` (checkpoints hold whole tensors; sharded ones are not written yet).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from paw import arch
from paw.distributed import Ranks, ranks_from_env, shard
from paw.errors import PawError

T = TypeVar("T")


def check(fsdp: bool, *, save_every: int | None = None, resume: bool = False, ranks: Ranks | None = None) -> None:
    """Refuse ``--fsdp`` where it cannot work, before any model is read (one line, exit 2 in the CLI).

    >>> check(False); check(True, ranks=Ranks(0, 2))
    >>> check(True, ranks=Ranks(0, 1))
    Traceback (most recent call last):
    ...
    paw.errors.PawError: --fsdp shards the student over the processes that torchrun or accelerate launch starts; this is one process: drop --fsdp, or run torchrun --nproc-per-node N -m paw ...
    """
    if not fsdp:
        return
    ranks = ranks or ranks_from_env()
    if not ranks.parallel:
        raise PawError("--fsdp shards the student over the processes that torchrun or accelerate launch starts; "
                       "this is one process: drop --fsdp, or run torchrun --nproc-per-node N -m paw ...")
    if save_every or resume:
        flag = "--save-every" if save_every else "--resume"
        raise PawError(f"--fsdp with {flag}: checkpoints of sharded training are not written yet; drop {flag} "
                       "(or --fsdp)")


def load_dtype(dtype: str, device, config: dict | None) -> str:
    """The dtype to load the student in on the CPU (FSDP moves each rank's shard to ``device``) so that it
    is the one :func:`paw.io.lm.load_lm` would pick on ``device``: ``auto`` on a GPU is the checkpoint's.

    >>> from types import SimpleNamespace as Device
    >>> load_dtype("auto", Device(type="cuda"), {"torch_dtype": "bfloat16"}), load_dtype("auto", Device(type="cpu"), {})
    ('bfloat16', 'auto')
    """
    if dtype != "auto" or device.type != "cuda":
        return dtype
    cfg = (config or {}).get("text_config") or config or {}
    name = str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32").removeprefix("torch.")
    return name if name in ("float32", "bfloat16", "float16") else "float32"


def decoder_layers(model) -> list:
    """The decoder layers of ``model`` (``...layers.0``, ``...h.3``: :func:`paw.arch.split_layer`'s names), in order."""
    out = []
    for name, module in model.named_modules():
        parts = arch.split_layer(f"{name}.weight")  # any tensor name inside the module
        if parts is not None and f"{parts[0]}.{parts[1]}" == name:
            out.append(module)
    return out


def shard_student(peft_model, ranks: Ranks, device) -> dict[str, int]:
    """Apply FSDP2 to ``peft_model`` in place: each decoder layer, then the root. Returns what the report
    keeps: ``processes``, ``units``, ``parameters`` (all of them) and ``parameters_on_rank`` (this rank's shards).

    Parameters move to ``device`` shard by shard (a base on the CPU never lands whole on the GPU);
    gradients are summed over ranks, not averaged (:mod:`paw.distributed` scales each rank's loss).
    """
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    layers = decoder_layers(peft_model)
    if not layers:
        raise PawError("--fsdp: no decoder layers found in the student (paw.arch.split_layer knows none of its module names)")
    device = torch.device(device)
    mesh = init_device_mesh(device.type, (ranks.world,))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(peft_model, mesh=mesh)
    for unit in (*layers, peft_model):
        unit.set_gradient_divide_factor(1.0)        # sum: the ranks' losses already sum to the batch's
        unit.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
    params = list(peft_model.parameters())
    return {"processes": ranks.world, "units": len(layers) + 1, "parameters": sum(p.numel() for p in params),
            "parameters_on_rank": sum(local_part(p).numel() for p in params)}


def local_part(tensor):
    """The part of ``tensor`` this rank holds: its shard of a sharded (DTensor) parameter, else itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def full_lora_state(peft_model) -> dict[str, Any]:
    """``{name: whole tensor on the CPU}`` of the trainable parameters; every rank must call it (an all-gather)."""
    out = {}
    for name, p in peft_model.named_parameters():
        if p.requires_grad:
            whole = p.full_tensor() if hasattr(p, "full_tensor") else p
            out[name] = whole.detach().to("cpu")
    return out


def stand_in(mine: list[T], batch: Sequence[T], ranks: Ranks, wanted=bool) -> list[T]:
    """The items of ``mine`` that ``wanted`` keeps, or, when none does but another rank's share has one, the
    batch's first such item as a stand-in (the caller gives it weight 0): under FSDP every rank must run
    the forward passes any rank runs.

    >>> stand_in([], [3, 0, 5], Ranks(1, 2)), stand_in([0], [3, 0], Ranks(1, 2)), stand_in([], [0, 0], Ranks(1, 2))
    ([3], [3], [])
    """
    kept = [x for x in mine if wanted(x)]
    if kept:
        return kept
    others = [x for r in range(ranks.world) for x in shard(batch, Ranks(r, ranks.world)) if wanted(x)]
    return others[:1]
