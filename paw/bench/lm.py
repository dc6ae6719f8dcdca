"""Causal-LM pretraining and distillation loops for the benchmark's small models (device-agnostic).

The corpus is tokenised once into one stream (``<bos> text <eos> <bos> text <eos> ...``) and cut into
windows of ``seq_len`` tokens; each step draws ``batch_size`` random windows from a seeded generator,
so a run is reproducible on one device. AdamW with linear warm-up and cosine decay, as nanoGPT, on PAW's one
training loop (:func:`paw.train.run`).
Distillation (Hinton et al. 2015) replaces the next-token labels by the teacher's distribution:
``KL(p_teacher || p_student)`` per position at temperature 1, the way DistilBERT / Minitron's
distillation phase train a student of another shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from paw.train import Recipe, run

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class Schedule:
    """How long and how fast one training phase runs."""

    steps: int = 600          # optimizer steps
    batch_size: int = 16      # windows per step
    seq_len: int = 64         # tokens per window
    lr: float = 3e-3          # peak learning rate (tiny models like large rates)
    warmup: int = 30          # linear warm-up steps
    weight_decay: float = 0.01
    schedule: str = "cosine"  # paw.train.Recipe's: constant, warmup or cosine (to lr / 10)
    accumulation: int = 1     # micro-batches of ``batch_size`` windows per optimiser step
    clip: float | None = 1.0  # gradient-norm clip (None: off)

    def recipe(self, seed: int) -> Recipe:
        """This phase's optimiser steps for :func:`paw.train.run`."""
        return Recipe(steps=self.steps, lr=self.lr, schedule=self.schedule, warmup=self.warmup,
                      accumulation=self.accumulation, clip=self.clip, seed=seed).check()


def token_stream(tokenizer, texts: Sequence[str]) -> Tensor:
    """All texts as one 1-D LongTensor, each wrapped in BOS/EOS."""
    import torch

    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    ids: list[int] = []
    for encoded in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        ids.extend(bos + encoded + eos)
    return torch.tensor(ids, dtype=torch.long)


def _windows(stream: Tensor, schedule: Schedule, seed: int):
    """Yield ``(steps)`` batches (B, seq_len) of random windows, deterministic in ``seed``; B is ``batch_size``
    times ``accumulation`` (the step's micro-batches together)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    high = len(stream) - schedule.seq_len
    offsets = torch.arange(schedule.seq_len)
    for _ in range(schedule.steps):
        starts = torch.randint(0, max(high, 1), (schedule.batch_size * schedule.accumulation,), generator=gen)
        yield stream[(starts[:, None] + offsets[None, :]).clamp(max=len(stream) - 1)]


def train_lm(model, stream: Tensor, schedule: Schedule, *, seed: int, teacher=None, device=None,
             description: str = "pretraining", progress: bool = True) -> list[float]:
    """Train ``model`` in place on windows of ``stream``; with ``teacher``, by distillation. Returns losses.

    ``teacher`` must share the tokenizer (same ids); its logits are computed under ``no_grad``. The steps
    are :func:`paw.train.run`'s (``schedule.recipe``); a NaN or infinite loss stops it naming the step.
    """
    import torch

    device = device or next(model.parameters()).device
    model.to(device).train()
    if teacher is not None:
        teacher.to(device).eval()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": schedule.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=schedule.lr, betas=(0.9, 0.95))

    def step_loss(batch):
        if teacher is None:
            return model(input_ids=batch, labels=batch).loss
        with torch.no_grad():
            target = torch.log_softmax(teacher(input_ids=batch).logits.float(), -1)
        student = torch.log_softmax(model(input_ids=batch).logits.float(), -1)
        return torch.nn.functional.kl_div(student.flatten(0, 1), target.flatten(0, 1), log_target=True,
                                          reduction="batchmean")

    windows = _windows(stream, schedule, seed)
    done = run(schedule.recipe(seed), list(model.parameters()), opt, step_loss,
               lambda step: next(windows).to(device), progress=description if progress else None,
               hint="lower the schedule's lr")
    model.eval()
    return done.losses


def held_out_loss(model, stream: Tensor, *, seq_len: int, max_windows: int = 32) -> float:
    """Mean next-token cross-entropy over consecutive windows of ``stream`` (a validation loss)."""
    import torch

    device = next(model.parameters()).device
    n = min(max_windows, len(stream) // seq_len)
    if n == 0:
        return float("nan")
    batch = stream[: n * seq_len].reshape(n, seq_len).to(device)
    with torch.no_grad():
        return float(model(input_ids=batch, labels=batch).loss)
