"""Distillation at scale: the teacher's cached continuations, the data-parallel loss split, the teacher freed.

What :func:`paw.transfer.distill.lora.distill_lora` adds to the one-process loop of
:mod:`paw.transfer.distill.fit` when it runs big (docs/scale.md):

- **Resumable synthesis.** ``--synthesize`` keeps its inputs so far in ``OUT-work/synthesis.json``
  after each round of candidates (:func:`synthesized`), so a killed run loses at most one round.
- **Cached continuations.** The teacher continues the inputs in chunks of :data:`CHUNK` with its
  KV cache; each chunk is appended to ``OUT-work/continuations-rank{R}.jsonl`` as soon as it is
  made (:mod:`paw.io.train_state`), keyed by the teacher (its base and adapter bytes) and the
  generation settings, so a rerun after a kill or a change of steps continues no input twice.
  Under ``torchrun`` the chunks are dealt to the ranks round-robin (:func:`paw.distributed.map_chunks`).
  The teacher's choice scores and its per-token gains (with the adapter minus without) are kept
  there too once made (:func:`remembered`), so a resumed run does not score the inputs again.
- **Loss split.** Each rank computes the losses of its share of the global batch; each loss part
  is a mean over its own units (continuation tokens, aligned cuts, inputs with choices), so a rank
  weighs its part by its share of those units (:data:`UNITS`), and the summed gradients equal the
  one-process gradient of the whole batch.
- **Sharded student** (``fsdp``, :mod:`paw.fsdp`): FSDP sums the LoRA gradients in the backward
  pass, so :func:`sync` does nothing, and every rank runs the student's forward passes that any rank
  runs (:func:`work` lends an empty share a stand-in example, weighed 0 by :func:`weigh`).
- **Teacher offload.** With ``offload_teacher`` the teacher is dropped once every continuation and
  choice score is made, before the student trains; refused for the losses that read the teacher's
  next-token distributions at every step (token KL, byte-aligned KL).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paw import fsdp
from paw.distributed import SINGLE, Ranks, all_sum, map_chunks, shard, share, sync_gradients
from paw.errors import PawError
from paw.io.train_state import (
    append_continuations,
    read_continuations,
    read_synthesis,
    read_teacher_scores,
    write_synthesis,
    write_teacher_scores,
)
from paw.lora import tensors_digest
from paw.progress import status, track
from paw.train_state import Checkpoints
from paw.transfer.distill import generation, synthesis

CHUNK = 16   # inputs per generation batch: generation.generate's batch size, so chunks are its batches


@dataclass
class Scale:
    """How a distillation runs beyond one small process; the default is the plain one-process run."""

    ranks: Ranks = SINGLE
    work: Path | None = None            # OUT-work/: the continuation cache (None: no cache)
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    offload_teacher: bool = False       # drop the teacher after its continuations, before training
    gradient_checkpointing: bool = False
    fsdp: bool = False                  # the student sharded over the ranks (paw.fsdp); the teacher is not


def teacher_key(teacher_name: str, adapter, max_new_tokens: int) -> str:
    """A digest of what decides a continuation: the teacher's base, the adapter's tensors, the length."""
    return tensors_digest(adapter.tensors, f"{teacher_name}\0{max_new_tokens}\0".encode())


def student_key(student_name: str, model) -> str:
    """A digest of what decides the student base's scores: its name and its input embedding's values."""
    weight = model.get_input_embeddings().weight
    return tensors_digest({"embed": weight.detach()}, f"student\0{student_name}\0".encode())


def synthesis_key(teacher_name: str, adapter, seeds: list, n: int, seed: int, discriminator: bool) -> str:
    """A digest of what decides ``--synthesize``'s inputs: the teacher, its adapter's tensors, the seeds, the settings."""
    text = "\0".join([f"synthesis {synthesis.SYNTHESIS_VERSION}", teacher_name, str(n), str(seed), str(discriminator),
                      *(repr(s) for s in seeds)])
    return tensors_digest(adapter.tensors, text.encode("utf-8", "surrogatepass"))


def synthesized(scale: Scale | None, key: str, make):
    """``make(state, on_round)`` (:func:`paw.transfer.distill.synthesis.synthesize`), resumed from the state an
    earlier run with the same ``key`` left in the work folder; the main rank keeps each round's state there.

    Every rank reads the state (a prefix of the same seeded sequence, whichever round it is from) and
    synthesizes the rest itself, as in a run without a work folder.
    """
    if scale is None or scale.work is None:
        return make(None, None)
    state = read_synthesis(scale.work, key)
    if state is not None and not state.get("kept"):
        state = None   # rounds that kept nothing: a rerun tries afresh rather than resume a barren run
    if state is not None and scale.ranks.main:
        status(f"distill: the synthesis goes on from {Path(scale.work) / 'synthesis.json'} "
               f"({len(state.get('kept', []))} inputs kept in {state.get('stats', {}).get('rounds', '?')} rounds)")
    keep = (lambda st: write_synthesis(scale.work, key, st)) if scale.ranks.main else None
    return make(state, keep)


def continuations(teacher, texts: list[str], max_new_tokens: int, device, scale: Scale | None, key: str = "", *,
                  progress: bool = False) -> list[str]:
    """The teacher's continuation of each text: from the cache where made before, else generated and cached.

    A chunk is generated whole when any of its texts is missing, so its batch (and padding) is the
    one an uncached, single-process run would make. ``progress``: count this rank's chunks on stderr.
    """
    scale = scale or Scale()
    cached = read_continuations(scale.work, key) if scale.work is not None else {}
    mine = len(range(scale.ranks.rank, -(-len(texts) // CHUNK), scale.ranks.world))
    ticks = iter(track(range(mine), "teacher writing", total=mine, unit="batches") if progress else ())

    def run(chunk: list[str]) -> list[str]:
        next(ticks, None)
        if all(t in cached for t in chunk):
            return [cached[t] for t in chunk]
        made = generation.generate(teacher.model, teacher.tokenizer, chunk, max_new_tokens=max_new_tokens,
                                   batch_size=CHUNK, device=device)
        if scale.work is not None:
            append_continuations(scale.work, scale.ranks.rank, key, list(zip(chunk, made, strict=True)))
        return made

    made = map_chunks(run, texts, CHUNK, scale.ranks)
    next(ticks, None)   # the tracker's closing line
    return made


def remembered(scale: Scale | None, name: str, key: str, inputs: list, compute) -> list:
    """``compute()`` (a list, one entry per input of ``inputs``), or what an earlier run of the same teacher
    (``key``) on the same ``inputs`` kept in the work folder; the main rank keeps a fresh result there."""
    if scale is None or scale.work is None or not key:
        return compute()
    h = hashlib.sha256(key.encode())
    for part in inputs:
        h.update(repr(part).encode("utf-8", "surrogatepass") + b"\0")
    digest = h.hexdigest()[:32]
    kept = read_teacher_scores(scale.work, name, digest)
    if kept is not None and len(kept) == len(inputs):
        return kept
    values = compute()
    if scale.ranks.main:
        write_teacher_scores(scale.work, name, digest, values)
    return values


def refuse_offload(losses_at_step: list[str]) -> None:
    """``--offload-teacher`` cannot drop a teacher whose distributions a loss reads at every step."""
    if losses_at_step:
        raise PawError(f"--offload-teacher: the {' and '.join(losses_at_step)} loss reads the teacher's next-token "
                       "distributions at every training step, so the teacher must stay loaded; drop "
                       "--offload-teacher (or, across tokenizers, --byte-kl)")


def free_teacher(teacher) -> None:
    """Drop the teacher model (the caller's :class:`~paw.transfer.distill.train.LM` keeps no reference)."""
    import gc

    import torch

    teacher.model = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------ the loss split

def _tokens(examples) -> int:
    return sum(min(e.sequence.n_cont, len(e.sequence.ids) - 1) for e in examples if e.sequence is not None)


def _cuts(examples) -> int:
    return sum(len(e.aligned) for e in examples if e.sequence is not None)


def _with_choices(examples) -> int:
    return sum(bool(e.choices) for e in examples)


# what each loss part is a mean over (paw.transfer.distill.loss): its units in a list of examples
UNITS = {"sequence-nll": _tokens, "token-kl": _tokens, "aligned-kl": _cuts, "choice-kl": _with_choices}


def mine(chosen: list, scale: Scale | None) -> list:
    """This rank's share of the global batch ``chosen`` (all of it in one process)."""
    return shard(chosen, scale.ranks) if scale is not None and scale.ranks.parallel else chosen


def work(local: list, chosen: list, scale: Scale | None) -> tuple[list, list]:
    """``(examples with a sequence, examples with choices)`` of the share ``local``; under FSDP an empty side
    borrows one of the batch ``chosen`` when another rank has one (its loss part then weighs 0: :func:`weigh`
    counts ``local``'s units)."""
    if scale is not None and scale.fsdp:
        return (fsdp.stand_in(local, chosen, scale.ranks, lambda e: e.sequence is not None),
                fsdp.stand_in(local, chosen, scale.ranks, lambda e: bool(e.choices)))
    return [e for e in local if e.sequence is not None], [e for e in local if e.choices]


def weigh(parts: dict[str, Any], local: list, chosen: list, scale: Scale | None) -> dict[str, Any]:
    """Each loss part of the shard ``local`` times its share of the batch's units (unchanged in one process)."""
    if scale is None or not scale.ranks.parallel:
        return parts
    out = {}
    for key, value in parts.items():
        count = UNITS.get(key, lambda ex: sum(e.sequence is not None for e in ex))
        out[key] = value * share(count(local), count(chosen))
    return out


def reduce_parts(parts: dict[str, Any], keys: list[str], scale: Scale | None) -> dict[str, float]:
    """The batch's value of each loss part in ``keys`` (the sum over ranks of the weighted parts);
    a part no rank computed is absent."""
    if scale is None or not scale.ranks.parallel:
        return {k: float(v.detach()) for k, v in parts.items()}
    present = all_sum([1.0 if k in parts else 0.0 for k in keys], scale.ranks)
    values = all_sum([float(parts[k].detach()) if k in parts else 0.0 for k in keys], scale.ranks)
    return {k: v for k, v, n in zip(keys, values, present, strict=True) if n > 0}


def all_finite(params: list, scale: Scale | None) -> bool:
    """Whether every LoRA factor is finite on every rank (each rank checks the part it holds)."""
    import torch

    local = all(bool(torch.isfinite(fsdp.local_part(p.detach())).all()) for p in params)
    if scale is None or not scale.ranks.parallel:
        return local
    return all_sum([0.0 if local else 1.0], scale.ranks)[0] == 0


def sync(params: list, scale: Scale | None) -> None:
    """Sum the LoRA gradients over ranks (nothing in one process, nor under FSDP: its backward pass sums them)."""
    if scale is not None and scale.ranks.parallel and not scale.fsdp:
        sync_gradients(params, scale.ranks)
