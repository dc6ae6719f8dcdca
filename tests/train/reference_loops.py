"""Frozen copies of the optimiser loops as they were before ``paw.train`` (issue 52), kept verbatim.

Used only by ``tests/train/test_pinned.py``: each trainer, now on the shared loop, must write the same
bytes as its old loop did with the old defaults, run in the same process (not stored hashes: another
CPU or BLAS gives other bits). Do not edit these functions; delete one when its pin is no longer wanted.
"""
# ruff: noqa

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any

from paw import fsdp as fsdp_sharding
from paw.device import guard_cuda_attention, resolve_device
from paw.distributed import Ranks, all_sum, setup, shard, share, sync_gradients
from paw.errors import PawError
from paw.evaluate.finetune import FinetuneOptions
from paw.evaluate.encode import Encoded, max_length_of, pad_id_of
from paw.evaluate.items import MCItem
from paw.evaluate.train import (_answer_tokens, batch_answer_loss, batches_in_order, encode_answer, evaluate_items,
                                prefixed, wrap_lora)
from paw.memory import prepare_student
from paw.progress import track
from paw.train_state import Checkpoints
from paw.transfer.distill import scale as distill_scale
from paw.vocab.heal import HealPlan, trainable_matrices
from paw.bench.lm import Schedule
from paw.transfer.distill.fit import Stop, probe_score, text_carries
from paw.transfer.distill.train import CHOICE, LOSSES, PAD_ID, Shift, Vocab, _choice_loss, _sequence_losses


# ---------------------------------------------------------------- paw/evaluate/train.py at b84fcb3

def train_lora(model, tokenizer, items: Sequence[MCItem], *, rank: int = 16, alpha: float = 32,
               target_modules: str | Sequence[str] = "all-linear", steps: int = 600, batch_size: int = 6,
               lr: float = 1.5e-5, seed: int = 0, device=None, eval_items: Sequence[MCItem] | None = None,
               tracker=None, progress: bool = True, log_every: int = 10,
               on_step: Callable[[int, object], None] | None = None, checkpoints: Checkpoints | None = None,
               gradient_checkpointing: bool = False, fsdp: bool = False):
    """Fine-tune a LoRA on the right answers of ``items``; returns ``(peft_model, metrics)``.

    ``metrics``: ``train_loss_start`` / ``train_loss_end`` (mean of the first / last ``log_every``
    steps), ``train_losses`` (every step), ``trainable_parameters``, the settings, and with
    ``eval_items`` the :func:`~paw.evaluate.mc.evaluate` figures before (``base/...``) and after
    (``test/...``) training. ``tracker.log`` receives ``train/loss`` every ``log_every`` steps;
    ``on_step(step, peft_model)`` runs after every optimiser step (the CLI saves checkpoints there).
    PEFT injects the LoRA layers into ``model`` itself: pass ``copy.deepcopy(model)`` to keep the base.

    Under ``torchrun`` each rank trains on its share of every global batch (:mod:`paw.distributed`),
    so ``batch_size`` and ``lr`` mean the same whatever the number of processes; only rank 0 logs,
    evaluates and shows progress. ``checkpoints`` (:class:`~paw.train_state.Checkpoints`) writes
    resumable states every K steps and puts a resumed run back where it stopped;
    ``gradient_checkpointing`` recomputes the base's activations in the backward pass (less memory).
    ``fsdp`` (under a launcher) shards the base and the factors over the ranks (:mod:`paw.fsdp`): give
    ``model`` on the CPU and ``device`` the rank's; every rank then evaluates, and the base figures are
    taken on the wrapped model (LoRA B starts at zero, so it is the base) once it is sharded.
    """
    import torch

    if not items:
        raise PawError("no training items")
    if steps < 1 or batch_size < 1:
        raise PawError(f"steps ({steps}) and batch size ({batch_size}) must be at least 1")
    if device is not None and not fsdp:
        model.to(device)
    guard_cuda_attention(model)
    ranks, device = setup(next(model.parameters()).device if not fsdp else torch.device(device or "cpu"))
    fsdp_sharding.check(fsdp, save_every=checkpoints and checkpoints.save_every, resume=bool(checkpoints and checkpoints.state),
            ranks=ranks)
    evaluating = bool(eval_items) and (ranks.main or fsdp)   # under FSDP a forward pass needs every rank
    progress = progress and ranks.main
    checkpoints = checkpoints or Checkpoints()
    metrics: dict = {"steps": steps, "batch_size": batch_size, "lr": lr, "rank": rank, "alpha": alpha,
                     "seed": seed, "n_train": len(items)}
    if evaluating and not fsdp:
        base = checkpoints.extra("base") or prefixed("base", evaluate_items(model, tokenizer, eval_items, batch_size,
                                                                         progress))
        metrics.update(base)
    peft_model = wrap_lora(model, rank=rank, alpha=alpha, target_modules=target_modules, seed=seed)
    prepare_student(peft_model, gradient_checkpointing=gradient_checkpointing)
    if fsdp:
        metrics["fsdp"] = fsdp_sharding.shard_student(peft_model, ranks, device)
        if evaluating:
            metrics.update(prefixed("base", evaluate_items(peft_model, tokenizer, eval_items, batch_size, progress)))
    device = next(peft_model.parameters()).device
    max_length = max_length_of(model)
    encoded = [encode_answer(tokenizer, item, max_length) for item in items]
    params = [p for p in peft_model.parameters() if p.requires_grad]
    metrics["trainable_parameters"] = sum(p.numel() for p in params)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    pad_id = pad_id_of(tokenizer)
    start = checkpoints.resume(params, optimizer, steps=steps)
    losses: list[float] = list(checkpoints.extra("losses", []))
    peft_model.train()
    order = batches_in_order(len(encoded), batch_size, steps, seed)
    steps_iter = track(range(start, steps), "training LoRA", total=steps, unit="steps", start=start) if progress else range(start, steps)
    for step in steps_iter:
        loss = _step_loss(peft_model, [encoded[i] for i in order[step]], pad_id, device, ranks, fsdp)
        optimizer.zero_grad(set_to_none=True)
        if loss is not None:
            loss.backward()
        if not fsdp:  # FSDP has summed them in the backward pass
            sync_gradients(params, ranks)
        optimizer.step()
        losses.append(all_sum([float(loss.detach()) if loss is not None else 0.0], ranks)[0])
        if tracker is not None and ranks.main and ((step + 1) % log_every == 0 or step + 1 == steps):
            tracker.log({"train/loss": sum(losses[-log_every:]) / len(losses[-log_every:])}, step=step + 1)
        if ranks.main:
            checkpoints.after(step + 1, steps, params, optimizer, losses=losses,
                              base={k: v for k, v in metrics.items() if k.startswith("base/")})
        if on_step is not None and ranks.main:
            on_step(step + 1, peft_model)
    peft_model.eval()
    window = max(1, min(log_every, steps))
    metrics.update(train_loss_start=sum(losses[:window]) / window, train_loss_end=sum(losses[-window:]) / window,
                   train_losses=losses)
    if evaluating:
        after = prefixed("test", evaluate_items(peft_model, tokenizer, eval_items, batch_size, progress))
        metrics.update(after)
        if tracker is not None and ranks.main:
            tracker.log({k: v for k, v in after.items() if isinstance(v, float)}, step=steps)
    return peft_model, metrics


def _step_loss(peft_model, batch_items: list[Encoded], pad_id: int, device, ranks: Ranks, fsdp: bool = False):
    """The answer loss of this rank's share of one global batch, weighted by its share of the answer
    tokens, so that the ranks' losses sum to the loss of the whole batch; None for an empty share
    (under FSDP an empty share runs a stand-in item at weight 0: every rank must run the forward pass)."""
    mine = shard(batch_items, ranks) if ranks.parallel else batch_items
    run = fsdp_sharding.stand_in(mine, batch_items, ranks) if fsdp else mine
    if not run:
        return None
    loss = batch_answer_loss(peft_model, run, pad_id, device)
    if ranks.parallel:
        loss = loss * share(_answer_tokens(mine), _answer_tokens(batch_items))
    return loss


# ---------------------------------------------------------------- paw/evaluate/finetune.py at b84fcb3

def finetune(model, tokenizer, items: Sequence[MCItem], options: FinetuneOptions = FinetuneOptions(), *,
             eval_items: Sequence[MCItem] | None = None, progress: bool = True) -> dict[str, Any]:
    """Train every weight of ``model`` (in place) on the right answers of ``items``; returns the metrics.

    ``metrics``: the options, ``n_train``, ``trainable_parameters``, ``train_losses`` (every step),
    ``train_loss_start`` / ``train_loss_end`` (mean of the first / last 10 steps), ``train_seconds``
    (process CPU time), and with ``eval_items`` the :func:`~paw.evaluate.mc.evaluate` figures before
    (``base/...``) and after (``test/...``) training.
    """
    import time

    import torch

    options.check()
    if not items:
        raise PawError("no training items")
    model.to(resolve_device(options.device))
    metrics: dict[str, Any] = {**asdict(options), "n_train": len(items)}
    if eval_items:
        metrics.update(prefixed("base", evaluate_items(model, tokenizer, eval_items, options.batch_size, progress)))
    torch.manual_seed(options.seed)
    params = _trainable(model, options.freeze_embeddings)
    metrics["trainable_parameters"] = sum(p.numel() for p in params)
    start = time.process_time()
    losses = _train(model, tokenizer, items, params, options, progress)
    window = max(1, min(10, options.steps))
    metrics.update(train_seconds=time.process_time() - start, train_losses=losses,
                   train_loss_start=sum(losses[:window]) / window, train_loss_end=sum(losses[-window:]) / window)
    if eval_items:
        metrics.update(prefixed("test", evaluate_items(model, tokenizer, eval_items, options.batch_size, progress)))
    return metrics


def _trainable(model, freeze_embeddings: bool) -> list:
    """The parameters AdamW updates: all of them, less the input embedding when asked (a tied head is
    the same tensor, so it stays fixed too)."""
    frozen = {id(model.get_input_embeddings().weight)} if freeze_embeddings else set()
    params = []
    for p in model.parameters():
        p.requires_grad_(id(p) not in frozen)
        if id(p) not in frozen:
            params.append(p)
    return params


def _train(model, tokenizer, items, params, options: FinetuneOptions, progress: bool) -> list[float]:
    import torch

    device = next(model.parameters()).device
    max_length = max_length_of(model)
    encoded = [encode_answer(tokenizer, item, max_length) for item in items]
    optimizer = torch.optim.AdamW(params, lr=options.lr, weight_decay=options.weight_decay)
    pad_id = pad_id_of(tokenizer)
    order = batches_in_order(len(encoded), options.batch_size, options.steps, options.seed)
    losses: list[float] = []
    model.train()
    steps = range(options.steps)
    for step in track(steps, "fine-tuning", total=options.steps) if progress else steps:
        loss = batch_answer_loss(model, [encoded[i] for i in order[step]], pad_id, device)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if options.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, options.max_grad_norm)
        optimizer.step()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise PawError(f"the training loss became {value} at step {step + 1}; lower --lr")
        losses.append(value)
    model.eval()
    return losses


# ---------------------------------------------------------------- paw/transfer/distill/train.py at b84fcb3

def distill_train(peft_model, teacher_model, examples, vocab: Vocab, *, steps, batch_size, lr, seed, device, progress,
          scale: distill_scale.Scale | None = None, extra: dict | None = None, focus: float = 0.0,
          stop: Stop | None = None, shift: Shift | None = None) -> dict:
    """The loss curve of at most ``steps`` AdamW steps; under ``scale`` each rank trains its share of every
    batch and checkpoints (with ``extra`` beside the curve) let a killed run resume. ``focus`` > 0 keeps
    that fraction of each batch's continuation tokens, those the adapter changed most (TiTok's token
    selection); ``stop`` ends training early (the curve's ``probe`` holds its measurements); ``shift`` trains
    toward the student's base plus the adapter's shift (:class:`Shift`). A loss that is
    NaN or Inf ends it at once (the curve's ``diverged_at`` holds the step): the factors are lost by then,
    and :func:`paw.transfer.distill.run` refuses them. The last update can break the factors with no
    loss left to show it, so they are checked once after the loop too."""
    import torch

    pad_id = PAD_ID
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    order = batches_in_order(len(examples), batch_size, steps, seed)
    checkpoints = scale.checkpoints if scale is not None else None
    start = checkpoints.resume(params, optimizer, steps=steps) if checkpoints else 0
    curve: dict[str, list[float]] = (checkpoints.extra("curve") if checkpoints else None) or \
        {"loss": [], **{k: [] for k in LOSSES}}
    peft_model.train()
    todo = range(start, steps)
    done = start
    for step in (track(todo, "distilling", total=steps, unit="steps", start=start) if progress else todo):
        chosen = [examples[i] for i in order[step]]
        if not any(e.sequence is not None or e.choices for e in chosen):
            continue
        local = distill_scale.mine(chosen, scale)
        parts = {}
        with_seq, with_choices = distill_scale.work(local, chosen, scale)
        if with_seq and text_carries(vocab, shift):
            parts.update(_sequence_losses(peft_model, teacher_model, with_seq, vocab, pad_id, device, focus,
                                          shift)[0])
        if with_choices:
            choice = _choice_loss(peft_model, with_choices, pad_id, device, shift)[0]
            if choice is not None:
                parts[CHOICE] = choice
        parts = distill_scale.weigh(parts, local, chosen, scale)
        loss = sum(parts.values()) if parts else None
        optimizer.zero_grad(set_to_none=True)
        if loss is not None:
            loss.backward()
        distill_scale.sync(params, scale)
        optimizer.step()
        done = step + 1
        values = distill_scale.reduce_parts(parts, list(LOSSES), scale)
        own = 0.0 if loss is None else float(loss.detach())   # None: nothing in the batch to learn (shift 0)
        curve["loss"].append(own if scale is None or not scale.ranks.parallel else sum(values.values()))
        for key in LOSSES:
            curve[key].append(values.get(key, math.nan))
        if not math.isfinite(curve["loss"][-1]):  # the step just taken made the factors NaN: the rest is waste
            curve["diverged_at"] = [float(step + 1)]
            break
        stopping = False
        if stop is not None and (step + 1) % stop.every == 0:  # the same weights on every rank: the same decision
            curve.setdefault("probe", []).append(probe_score(peft_model, teacher_model, stop.probe, vocab, device,
                                                                shift))
            stopping = stop.done(curve["probe"])
        if checkpoints and scale.ranks.main:
            checkpoints.after(step + 1, steps, params, optimizer, curve=curve, **(extra or {}))
        if stopping:
            break
    if "diverged_at" not in curve and done > start and not distill_scale.all_finite(params, scale):
        curve["diverged_at"] = [float(done)]   # the last update broke the factors
    peft_model.eval()
    return {k: v for k, v in curve.items() if any(math.isfinite(x) for x in v)}


# ---------------------------------------------------------------- paw/vocab/heal.py at b84fcb3

def heal_rows(model, rows: Sequence[int], stream: Sequence[int], plan: HealPlan, *,
              evaluate: Callable[[], float], prefix: Sequence[int] = (), device: Any = "cpu",
              track: Callable[[Iterable[int]], Iterable[int]] = iter) -> list[dict[str, float]]:
    """Train ``rows`` of the embedding (and untied head) for ``plan.steps`` steps; return the curve.

    Each step draws ``plan.batch`` random windows of ``plan.seq_len`` ids from ``stream``, puts
    ``prefix`` (the BOS, as at scoring) before each, and minimises next-token cross-entropy; Adam (no weight decay), linear warm-up over
    ``plan.warmup`` steps, gradient norm clipped to 1. ``evaluate()`` (bits per byte on held-out
    text) runs at step 0, every ``plan.eval_every`` steps and at the end. The curve is a list of
    ``{'step', 'train_loss', 'bpb'}`` (``train_loss`` is the mean since the previous point).
    """
    import torch

    for p in model.parameters():
        p.requires_grad_(False)
    mats = trainable_matrices(model)
    mask = torch.zeros(mats[0].shape[0], 1, device=device, dtype=mats[0].dtype)
    mask[torch.tensor(list(rows), dtype=torch.long, device=device)] = 1.0
    for m in mats:
        m.requires_grad_(True)
        m.register_hook(lambda g: g * mask)
    opt = torch.optim.Adam(mats, lr=plan.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(plan.warmup, 1)))
    data = torch.tensor(list(stream), dtype=torch.long)
    head = torch.tensor(list(prefix), dtype=torch.long)
    gen = torch.Generator().manual_seed(plan.seed)
    curve = [{"step": 0, "train_loss": float("nan"), "bpb": evaluate()}]
    losses: list[float] = []
    model.train()
    for step in track(range(1, plan.steps + 1)):
        starts = torch.randint(0, len(data) - plan.seq_len, (plan.batch,), generator=gen)
        xb = torch.stack([torch.cat([head, data[s:s + plan.seq_len]]) for s in starts.tolist()]).to(device)
        loss = model(xb, labels=xb).loss  # transformers shifts the labels: position i predicts xb[i + 1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mats, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if step % plan.eval_every == 0 or step == plan.steps:
            curve.append({"step": step, "train_loss": sum(losses) / len(losses), "bpb": evaluate()})
            losses = []
    model.eval()
    for m in mats:
        m.requires_grad_(False)
    return curve


# ---------------------------------------------------------------- paw/bench/lm.py at b84fcb3

def _windows(stream: Tensor, schedule: Schedule, seed: int):
    """Yield ``(steps)`` batches (B, seq_len) of random windows, deterministic in ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    high = len(stream) - schedule.seq_len
    offsets = torch.arange(schedule.seq_len)
    for _ in range(schedule.steps):
        starts = torch.randint(0, max(high, 1), (schedule.batch_size,), generator=gen)
        yield stream[(starts[:, None] + offsets[None, :]).clamp(max=len(stream) - 1)]


def _lr_at(step: int, schedule: Schedule) -> float:
    if step < schedule.warmup:
        return schedule.lr * (step + 1) / schedule.warmup
    progress = (step - schedule.warmup) / max(1, schedule.steps - schedule.warmup)
    return schedule.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def bench_train_lm(model, stream: Tensor, schedule: Schedule, *, seed: int, teacher=None, device=None,
             description: str = "pretraining", progress: bool = True) -> list[float]:
    """Train ``model`` in place on windows of ``stream``; with ``teacher``, by distillation. Returns losses.

    ``teacher`` must share the tokenizer (same ids); its logits are computed under ``no_grad``.
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
    losses: list[float] = []
    steps = enumerate(_windows(stream, schedule, seed))
    if progress:
        steps = track(steps, description, total=schedule.steps, unit="steps")
    for step, batch in steps:
        batch = batch.to(device)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, schedule)
        if teacher is None:
            loss = model(input_ids=batch, labels=batch).loss
        else:
            with torch.no_grad():
                target = torch.log_softmax(teacher(input_ids=batch).logits.float(), -1)
            student = torch.log_softmax(model(input_ids=batch).logits.float(), -1)
            loss = torch.nn.functional.kl_div(student.flatten(0, 1), target.flatten(0, 1), log_target=True,
                                              reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
