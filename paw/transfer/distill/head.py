"""The choices' summed log-likelihoods of a training batch, with the LM head run in row chunks.

A batch of choices through a 262k-token head holds rows x positions x vocabulary float32 logits, and
autograd keeps their log-softmax and, in the backward pass, a gradient of each: about four copies.
On PIQA (answers up to 210 tokens) a batch of 8 items, 16 choice rows, through Gemma-3's head asked
for over 12 GiB and the kernel killed the run on a 24 GiB machine. Where the logits would exceed
:data:`paw.evaluate.mc.LOGITS_BUDGET`, the model runs with its head bypassed (its output is the head's
input, rows x positions x hidden), and the head, log-softmax and gather run on row chunks under
activation checkpointing (Chen et al. 2016, arXiv 1604.06174): only one chunk's logits exist at a
time, in the forward pass and again when the backward pass recomputes them. The sums are those of
:func:`paw.evaluate.mc.continuation_logprobs`, up to the rounding of a matrix product over fewer rows.

Batches within the budget, models that transform the head's output (a final logit soft-cap) and
sharded (FSDP) models take the plain path, unchanged.
"""

from __future__ import annotations

import contextlib

from paw.evaluate.forward import LOGITS_BUDGET, continuation_logprobs, forward_logits


def choice_sums(model, batch, device, budget: int = LOGITS_BUDGET):
    """``(B,)`` summed log-likelihoods of each row's target tokens (``batch`` left-padded), differentiable."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    rows, width = batch.target_mask.shape
    columns = batch.target_mask.any(0).nonzero()
    keep = width - (int(columns[0]) if len(columns) else 0)
    vocab = int(getattr(getattr(head, "weight", None), "shape", (0,))[0])
    per_row = max(1, keep * vocab * 4)
    if head is None or rows * per_row <= budget or not _plain_head(model):
        logits, skip = forward_logits(model, batch, device)
        return continuation_logprobs(logits, batch.targets[:, skip:].to(device),
                                     batch.target_mask[:, skip:].to(device))[0]
    import torch
    from torch.utils.checkpoint import checkpoint

    with _bypassed(head) as head_forward:
        hidden, skip = forward_logits(model, batch, device)
    targets, mask = batch.targets[:, skip:].to(device), batch.target_mask[:, skip:].to(device)
    step = max(1, budget // per_row)

    def chunk(h, t, m):
        return continuation_logprobs(head_forward(h), t, m)[0]

    return torch.cat([checkpoint(chunk, hidden[i:i + step], targets[i:i + step], mask[i:i + step], use_reentrant=False)
                      for i in range(0, rows, step)])


def _plain_head(model) -> bool:
    """The model's logits are its head's output as they are: no soft-cap after it, no sharded wrapper."""
    config = getattr(model, "config", None)
    configs = [config, getattr(config, "text_config", None)]
    if any(getattr(c, "final_logit_softcapping", None) for c in configs if c is not None):
        return False
    return not any(type(m).__name__.startswith("FullyShardedDataParallel") for m in model.modules())


@contextlib.contextmanager
def _bypassed(head):
    """The head returns its input while the block runs; yields its own forward, to call on chunks."""
    own = head.__dict__.get("forward")   # a wrapper (accelerate's hooks) may have set one on the instance
    forward = head.forward
    head.forward = lambda hidden, *args, **kwargs: hidden
    try:
        yield forward
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own
