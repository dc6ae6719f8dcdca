"""Data-parallel training through ``torch.distributed``, as ``torchrun`` or ``accelerate launch`` start it.

PAW starts no process of its own. Both launchers start N copies of the same command and set
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; :func:`setup` reads
them, opens the process group (gloo on CPU, NCCL on CUDA, one GPU per local rank) and hands back
:class:`Ranks`. Without those variables everything here is a no-op and nothing imports torch.

How a step is split (``paw train-lora``, ``paw transfer-lora --method distill``): every rank draws
the same global batch from the seeded order and takes its contiguous share (:func:`shard`). Each
loss is a mean over some units (answer tokens, continuation tokens, aligned cuts, inputs with
choices); a rank scales its shard's mean by ``local units / global units`` (:func:`share`), so the
ranks' losses *sum* to the one-process loss of the whole batch, and :func:`sync_gradients` sums the
LoRA gradients over ranks in one flat all-reduce. Global batch size and learning rate therefore
mean the same whatever N, and the adapter equals the one-process run's up to float rounding.

Why not the ``DistributedDataParallel`` wrapper: it *averages* gradients (right only when every
rank's share weighs the same, which token-weighted losses on uneven shards are not), it expects one
forward per backward (a distillation step runs two: continuations and choices), and it hangs when a
rank has nothing to do in a step. The trainable parameters are only the LoRA factors (megabytes),
so overlapping their all-reduce with the backward pass would save nothing measurable.

Only rank 0 writes outputs, reports and progress (:func:`is_main`, read by :mod:`paw.progress`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from paw.errors import PawError

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Ranks:
    """Where this process sits: ``rank`` of ``world`` processes, ``local`` rank on its machine."""

    rank: int = 0
    world: int = 1
    local: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.world > 1


SINGLE = Ranks()


def ranks_from_env(env: dict | None = None) -> Ranks:
    """The launcher's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` (torchrun and accelerate set all three).

    >>> ranks_from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    Ranks(rank=1, world=2, local=1)
    >>> ranks_from_env({})
    Ranks(rank=0, world=1, local=0)
    """
    env = os.environ if env is None else env
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        local = int(env.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise PawError(f"RANK={env.get('RANK')!r}, WORLD_SIZE={env.get('WORLD_SIZE')!r}, "
                       f"LOCAL_RANK={env.get('LOCAL_RANK')!r}: expected integers (set by torchrun)") from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise PawError(f"RANK={rank}, WORLD_SIZE={world}: expected 0 <= RANK < WORLD_SIZE")
    return Ranks(rank, world, local)


def is_main() -> bool:
    """True in a single process and on rank 0 of a launched group: the one that writes and prints."""
    return ranks_from_env().main


def setup(device) -> tuple[Ranks, Any]:
    """``(ranks, device)``: the process group opened once (gloo on CPU, NCCL on CUDA) and this rank's device.

    On CUDA each rank takes GPU ``LOCAL_RANK`` (``--device cuda`` means "my GPU"); on CPU every
    rank uses the CPU. A single process gets ``(SINGLE, device)`` unchanged.
    """
    ranks = ranks_from_env()
    if not ranks.parallel:
        return SINGLE, device
    import torch
    import torch.distributed as dist

    if device.type == "cuda":
        if ranks.local >= torch.cuda.device_count():
            raise PawError(f"LOCAL_RANK={ranks.local}: only {torch.cuda.device_count()} GPU(s) visible; "
                           "start at most that many processes per machine")
        device = torch.device("cuda", ranks.local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo",
                                **({"device_id": device} if device.type == "cuda" else {}))
    return ranks, device


def shard(items: Sequence[T], ranks: Ranks) -> list[T]:
    """This rank's contiguous share of a global batch; shares differ in size by at most one.

    >>> shard([10, 11, 12, 13, 14], Ranks(0, 2)), shard([10, 11, 12, 13, 14], Ranks(1, 2))
    ([10, 11, 12], [13, 14])
    """
    n, world = len(items), ranks.world
    start = ranks.rank * (n // world) + min(ranks.rank, n % world)
    return list(items[start:start + n // world + (ranks.rank < n % world)])


def share(local_units: float, global_units: float) -> float:
    """The weight of a shard's mean loss so that the ranks' weighted means sum to the global mean.

    A mean over 3 tokens on rank 0 and over 1 token on rank 1 (4 in the batch) weigh 0.75 and 0.25.

    >>> share(3, 4), share(0, 4), share(0, 0)
    (0.75, 0.0, 0.0)
    """
    return local_units / global_units if global_units else 0.0


def sync_gradients(params: Sequence[Any], ranks: Ranks) -> None:
    """Sum the gradients of ``params`` over ranks in one flat all-reduce (a rank without a gradient adds zeros)."""
    import torch
    import torch.distributed as dist

    if not ranks.parallel or not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1).float() for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p, g in zip(params, grads, strict=True):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(g).to(g.dtype)
        offset += n


def all_sum(values: Sequence[float], ranks: Ranks, device=None) -> list[float]:
    """Element-wise sum of a few floats over ranks (the logged loss parts); unchanged in one process."""
    if not ranks.parallel:
        return list(values)
    import torch
    import torch.distributed as dist

    if device is None:  # NCCL reduces CUDA tensors only
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def map_chunks(run: Callable[[list[T]], list[R]], items: Sequence[T], chunk: int, ranks: Ranks) -> list[R]:
    """``run`` over ``items`` in chunks of ``chunk``, the chunks dealt round-robin to the ranks; every rank
    gets all results in order. The chunks are those one process would make, so batched work
    (padding, greedy ties) gives the same results whatever N.
    """
    chunks = [list(items[i:i + chunk]) for i in range(0, len(items), chunk)]
    mine = {i: run(c) for i, c in enumerate(chunks) if i % ranks.world == ranks.rank}
    if not ranks.parallel:
        return [r for i in range(len(chunks)) for r in mine[i]]
    import torch.distributed as dist

    gathered: list[Any] = [None] * ranks.world
    dist.all_gather_object(gathered, mine)
    merged = {i: r for part in gathered for i, r in part.items()}
    return [r for i in range(len(chunks)) for r in merged[i]]


def barrier(ranks: Ranks) -> None:
    if ranks.parallel:
        import torch.distributed as dist

        dist.barrier()
