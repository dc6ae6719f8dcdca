"""Small LoRA fine-tuning on the correct answers of a multiple-choice set.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") on PAW's one training
loop, :func:`paw.train.run`: ``W x + (alpha / r) B A x`` with ``A`` (r, in) random and ``B`` (out, r) zero at the start, so the
adapted model starts exactly at the base. The loss is the mean cross-entropy over the *answer*
tokens only (the context is masked with -100): the model learns to continue each question with its
right choice, the same (context, continuation) tokens that :func:`paw.evaluate.mc.evaluate` scores.

Reproducible: ``torch.manual_seed(seed)`` before the adapter is created and a seeded permutation
per epoch for the data order, so two CPU runs with one seed give identical adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from paw import arch
from paw import fsdp as fsdp_sharding
from paw.device import guard_cuda_attention
from paw.distributed import Ranks, all_sum, setup, shard, share, sync_gradients
from paw.errors import PawError
from paw.evaluate.encode import Encoded, encode_pair, make_batch, max_length_of, pad_id_of, sliding_window_of
from paw.evaluate.items import MCItem
from paw.evaluate.mc import evaluate, forward_logits
from paw.memory import prepare_student
from paw.train import Recipe, run
from paw.train.loop import mean_loss
from paw.train_state import Checkpoints
from paw.validate import lora_alpha, lora_rank


def batches_in_order(n: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """Deterministic data order: epochs of seeded permutations, cut into ``steps`` batches.

    >>> batches_in_order(4, 3, 2, seed=0)  # doctest: +SKIP
    [[2, 0, 1], [3, 1, 0]]
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    stream: list[int] = []
    while len(stream) < steps * batch_size:
        stream.extend(torch.randperm(n, generator=gen).tolist())
    return [stream[i * batch_size:(i + 1) * batch_size] for i in range(steps)]


def answer_loss(logits, targets, target_mask):
    """Mean cross-entropy over answer positions: ``logits`` (B, T, V), ``targets``/``target_mask`` (B, T)."""
    import torch

    labels = torch.where(target_mask, targets, torch.full_like(targets, -100))
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)


def batch_answer_loss(model, items: list[Encoded], pad_id: int, device):
    """:func:`answer_loss` of one batch of encoded question + answer sequences.

    Left-padded, so every answer sits at the end of its row and only the longest answer's positions go
    through the LM head (:func:`paw.evaluate.mc.forward_logits`): the same loss as full logits of a
    right-padded batch, without a (B, T, V) tensor that Gemma-3's 262k-token head makes the costliest
    part of a step.
    """
    batch = make_batch(items, pad_id=pad_id, padding_side="left", window=sliding_window_of(model))
    logits, skip = forward_logits(model, batch, device)
    return answer_loss(logits, batch.targets[:, skip:].to(device), batch.target_mask[:, skip:].to(device))


def _resolve_targets(target_modules: str | Sequence[str]) -> str | list[str]:
    if isinstance(target_modules, str):
        if target_modules == "all-linear":
            return "all-linear"
        names = [t.strip() for t in target_modules.split(",") if t.strip()]
    else:
        names = list(target_modules)
    if not names:
        example = ",".join(arch.GENERIC.proj(role).name for role in ("q", "v"))
        raise PawError(f"target modules: give all-linear or a comma-separated list such as {example}")
    return names


def wrap_lora(model, *, rank: int, alpha: float, target_modules: str | Sequence[str], seed: int):
    """``get_peft_model`` with a LoRA config; A initialised under ``torch.manual_seed(seed)``."""
    import torch
    from peft import LoraConfig, get_peft_model

    targets = _resolve_targets(target_modules)
    lora_rank("--rank", rank, model, targets)  # at most min(out, in) of the smallest adapted layer
    lora_alpha("--alpha", alpha)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets,
                        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    torch.manual_seed(seed)
    try:
        return get_peft_model(model, config)
    except ValueError as err:
        raise PawError(f"cannot attach LoRA: {err}") from None


def train_lora(model, tokenizer, items: Sequence[MCItem], *, rank: int = 16, alpha: float = 32,
               target_modules: str | Sequence[str] = "all-linear", steps: int = 600, batch_size: int = 6,
               lr: float = 1.5e-5, seed: int = 0, device=None, eval_items: Sequence[MCItem] | None = None,
               tracker=None, progress: bool = True, log_every: int = 10,
               on_step: Callable[[int, object], None] | None = None, checkpoints: Checkpoints | None = None,
               gradient_checkpointing: bool = False, fsdp: bool = False, schedule: str = "constant",
               warmup: int = 0, accumulation: int = 1, clip: float | None = None):
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

    The optimiser loop is :func:`paw.train.run`: ``schedule`` (constant, warmup, cosine) over ``warmup``
    steps, ``accumulation`` micro-batches of ``batch_size`` per step, gradient-norm ``clip``, and a stop
    naming the step when the loss becomes NaN or infinite. The defaults are the plain constant-rate loop.
    """
    import torch

    if not items:
        raise PawError("no training items")
    if steps < 1 or batch_size < 1:
        raise PawError(f"steps ({steps}) and batch size ({batch_size}) must be at least 1")
    recipe = Recipe(steps=steps, lr=lr, schedule=schedule, warmup=warmup, accumulation=accumulation,
                    clip=clip or None, seed=seed).check()
    if device is not None and not fsdp:
        model.to(device)
    guard_cuda_attention(model)
    ranks, device = setup(next(model.parameters()).device if not fsdp else torch.device(device or "cpu"))
    fsdp_sharding.check(fsdp, save_every=checkpoints and checkpoints.save_every,
                        resume=bool(checkpoints and checkpoints.state), ranks=ranks)
    evaluating = bool(eval_items) and (ranks.main or fsdp)   # under FSDP a forward pass needs every rank
    progress = progress and ranks.main
    checkpoints = checkpoints or Checkpoints()
    metrics: dict = {"steps": steps, "batch_size": batch_size, "lr": lr, "rank": rank, "alpha": alpha,
                     "seed": seed, "n_train": len(items), **recipe.changes()}
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
    losses: list[float] = list(checkpoints.extra("losses", []))
    peft_model.train()
    order = batches_in_order(len(encoded), batch_size * accumulation, steps, seed)
    base = {k: v for k, v in metrics.items() if k.startswith("base/")}
    run(recipe, params, optimizer, lambda batch: _step_loss(peft_model, [encoded[i] for i in batch], pad_id, device,
                                                             ranks, fsdp),
        order.__getitem__, checkpoints=checkpoints, losses=losses, main=ranks.main, tracker=tracker,
        log_every=log_every, progress="training LoRA" if progress else None,
        sync=None if fsdp else (lambda ps: sync_gradients(ps, ranks)),  # FSDP sums them in the backward pass
        record=lambda parts: all_sum([mean_loss(parts)], ranks)[0],
        after=(lambda step: on_step(step, peft_model)) if on_step is not None and ranks.main else None,
        extra=lambda: {"losses": losses, "base": base})
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


def _answer_tokens(items: list[Encoded]) -> int:
    return sum(min(e.n_cont, len(e.ids) - 1) for e in items)


def encode_answer(tokenizer, item: MCItem, max_length: int | None) -> Encoded:
    """The item's question and right answer, encoded as the sequence the answer loss trains on."""
    if not 0 <= item.answer < len(item.choices):
        raise PawError(f"item {item.id!r}: answer {item.answer} out of range for {len(item.choices)} choices")
    context, continuation = item.pairs()[item.answer]
    return encode_pair(tokenizer, context, continuation, max_length=max_length, start="tokenizer")


def evaluate_items(model, tokenizer, items, batch_size, progress) -> dict:
    """:func:`paw.evaluate.mc.evaluate` at a scoring batch of at least 8 (training batches can be smaller)."""
    return evaluate(model, tokenizer, items, batch_size=max(batch_size, 8), progress=progress)


def prefixed(prefix: str, values: dict) -> dict:
    """``{'accuracy': 0.5}`` -> ``{'base/accuracy': 0.5}``: metrics named by when they were taken."""
    return {f"{prefix}/{k}": v for k, v in values.items()}
