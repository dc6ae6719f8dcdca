"""Loss and agreement functions of LoRA distillation: tensors in, tensors out, no model, no I/O.

The teacher is the source base with its LoRA, the student the target base with a new LoRA
(Trans-LoRA, Wang et al. 2024, arXiv 2405.17258; knowledge distillation, Hinton et al. 2015).
Which loss applies depends on what the two models share:

- same vocabulary: :func:`token_kl`, ``KL(p_teacher || p_student)`` of the next-token distributions
  at every position of the teacher's continuation, the teacher's columns first put in the
  student's id order by :func:`to_student_vocab`;
- different tokenizers: :func:`sequence_nll`, the student's cross-entropy on the teacher's
  continuation, re-tokenised (sequence-level distillation, Kim & Rush 2016), and :func:`aligned_kl`
  at the cuts both tokenizations share (:mod:`paw.transfer.distill.byte_align`), over the tokens both
  vocabularies hold;
- inputs with answer choices, whatever the tokenizers: :func:`choice_kl` between the teacher's and
  the student's distributions over the choices, each choice scored by the summed log-likelihood
  of its tokens (the scoring of :mod:`paw.evaluate.mc`), so no label is ever needed.

Shapes: ``B`` rows, ``T`` positions, ``V`` vocabulary columns, ``C`` choices.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def to_student_vocab(teacher_logits: Tensor, columns: Tensor) -> Tensor:
    """Teacher log-probabilities laid out in the student's vocabulary order.

    ``teacher_logits`` (B, T, Vs); ``columns`` (Vt,) holds, for each student id, the teacher id of
    the same token or -1 where the teacher has none (those get probability 0). The result (B, T, Vt)
    is renormalised over the mapped columns, in float32.

    >>> to_student_vocab(torch.tensor([[[0.0, 1.0, 2.0]]]), torch.tensor([2, 0, -1])).exp()  # doctest: +SKIP
    tensor([[[0.8808, 0.1192, 0.0000]]])
    """
    import torch

    picked = teacher_logits.float().index_select(-1, columns.clamp(min=0).to(teacher_logits.device))
    picked = picked.masked_fill((columns < 0).to(picked.device), float("-inf"))
    return torch.log_softmax(picked, dim=-1)


def token_kl(student_logits: Tensor, teacher_logprobs: Tensor, mask: Tensor, weights: Tensor | None = None) -> Tensor:
    """Mean over masked positions of ``sum_v p_t(v) (log p_t(v) - log p_s(v))``.

    ``student_logits`` (B, T, V); ``teacher_logprobs`` (B, T, V), may hold -inf (probability 0);
    ``mask`` (B, T) bool; ``weights`` (B, T), if given, weigh the positions (:func:`weighted_mean`).
    Teacher p = [0.5, 0.5] against student p = [0.25, 0.75] gives ``0.5 ln 2 + 0.5 ln(2/3) = 0.1438``.
    """
    import torch

    log_q = torch.log_softmax(student_logits.float(), dim=-1)
    p = teacher_logprobs.exp()
    terms = torch.where(p > 0, p * (teacher_logprobs - log_q), torch.zeros_like(log_q))
    return weighted_mean(terms.sum(-1), mask, weights)


def weighted_mean(values: Tensor, mask: Tensor, weights: Tensor | None = None) -> Tensor:
    """``sum(w * values) / sum(w)`` over the masked positions, ``w`` = ``weights`` (default 1); 0 when
    nothing is weighed.

    >>> weighted_mean(torch.tensor([[1.0, 3.0, 5.0]]), torch.tensor([[True, True, False]]),
    ...               torch.tensor([[1.0, 3.0, 9.0]]))  # doctest: +SKIP
    tensor(2.5000)
    """
    w = mask.to(values.dtype) if weights is None else weights.to(values.dtype) * mask.to(values.dtype)
    return (values * w).sum() / w.sum().clamp(min=1e-12) if bool(w.sum() > 0) else (values * w).sum()


def aligned_kl(student_logits: Tensor, teacher_logits: Tensor, columns: Tensor) -> Tensor:
    """Mean over rows of ``KL(p_t || p_s)``, both restricted to the tokens the two vocabularies share.

    ``student_logits`` (N, Vs) and ``teacher_logits`` (N, Vt) at N positions where both models have
    read the same bytes; ``columns`` (Vs,) the teacher id of each student token, -1 where the teacher
    has none. Both distributions are renormalised over the shared tokens. Teacher logits [0, 0, 5]
    with columns [1, 0, -1] (the teacher's third token is not shared) give p_t = [0.5, 0.5]; student
    logits [0, ln 3, 9] give p_s = [0.25, 0.75], so 0.1438 as for :func:`token_kl`.
    """
    import torch

    log_p = to_student_vocab(teacher_logits, columns)
    shared = (columns >= 0).to(student_logits.device)
    log_q = torch.log_softmax(student_logits.float().masked_fill(~shared, float("-inf")), dim=-1)
    p = log_p.exp()
    terms = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(log_q))
    return terms.sum(-1).mean()


def sequence_nll(student_logits: Tensor, targets: Tensor, mask: Tensor, weights: Tensor | None = None) -> Tensor:
    """Mean cross-entropy of ``targets`` (B, T) at the masked positions (the teacher's text, re-tokenised),
    each position weighed by ``weights`` (B, T) when given (token focus)."""
    import torch

    labels = torch.where(mask, targets, torch.full_like(targets, -100))
    if weights is None:
        return torch.nn.functional.cross_entropy(student_logits.float().flatten(0, 1), labels.flatten(),
                                                 ignore_index=-100)
    per_position = torch.nn.functional.cross_entropy(student_logits.float().flatten(0, 1), labels.flatten(),
                                                     ignore_index=-100, reduction="none").view(targets.shape)
    return weighted_mean(per_position, mask, weights)


def choice_logprobs(choice_ll: Tensor, valid: Tensor) -> Tensor:
    """``log softmax`` over the valid choices of each row: ``choice_ll`` (B, C) summed log-likelihoods."""
    import torch

    return torch.log_softmax(choice_ll.float().masked_fill(~valid, float("-inf")), dim=-1)


def choice_kl(student_ll: Tensor, teacher_ll: Tensor, valid: Tensor) -> Tensor:
    """Mean over rows of ``KL(p_t || p_s)``, ``p = softmax`` of the choices' summed log-likelihoods.

    ``student_ll``, ``teacher_ll`` (B, C); ``valid`` (B, C) bool marks real choices (rows may have
    fewer). Teacher log-likelihoods [0, 0] (p = [0.5, 0.5]) against student [0, ln 3]
    (p = [0.25, 0.75]) give 0.1438, as for :func:`token_kl`.
    """
    import torch

    log_p, log_q = choice_logprobs(teacher_ll, valid), choice_logprobs(student_ll, valid)
    terms = torch.where(valid, log_p.exp() * (log_p - log_q), torch.zeros_like(log_p))
    return terms.sum(-1).mean()


def shift_choice_target(student_base_ll: Tensor, teacher_ll: Tensor, teacher_base_ll: Tensor,
                        scale: float = 1.0) -> Tensor:
    """The shift target over choices: ``student_base + scale * (teacher_with_adapter - teacher_base)``.

    All (B, C) summed log-likelihoods of each choice under each model's own tokens; the shift of a
    choice is a difference of two log-likelihoods of the same text under one tokenizer, so it needs
    no vocabulary alignment (proxy-tuning, Liu et al. 2024, arXiv 2401.08565; emulated fine-tuning,
    Mitchell et al. 2023, arXiv 2310.12962). :func:`choice_kl` softmaxes the result over the valid
    choices. Student base [0, 0], teacher [-1, -2] over its base [-2, -2] (the adapter raised choice 0
    by 1 nat) give [1, 0]: p = [0.731, 0.269].
    """
    return student_base_ll.float() + scale * (teacher_ll.float() - teacher_base_ll.float())


def shift_token_target(student_base_logits: Tensor, teacher_lp: Tensor, teacher_base_lp: Tensor,
                       scale: float = 1.0, shared: Tensor | None = None) -> Tensor:
    """Next-token log-probabilities of the shift target: ``log_softmax(log p_sb + scale * (log p_t - log p_tb))``.

    ``student_base_logits`` (..., V) are the student's with its adapter off; ``teacher_lp`` and
    ``teacher_base_lp`` (..., V) the teacher's with and without its adapter, in the student's columns
    (:func:`to_student_vocab`), -inf where the teacher has no such token. Where the teacher has none
    the shift is 0 (the student's base keeps its say); ``shared`` (V,) bool, if given, restricts the
    target to those tokens and renormalises over them (the byte-aligned case, as :func:`aligned_kl`).
    A student base p = [0.5, 0.5] and a teacher that the adapter moved from [0.5, 0.5] to
    [0.8, 0.2] give the teacher's [0.8, 0.2] (scale 1): ``log 0.5 + log 1.6`` against ``log 0.5 + log 0.4``.
    """
    import torch

    base = torch.log_softmax(student_base_logits.float(), dim=-1)
    known = torch.isfinite(teacher_lp) & torch.isfinite(teacher_base_lp)
    shift = torch.where(known, teacher_lp.float() - teacher_base_lp.float(), torch.zeros_like(base))
    target = base + scale * shift
    if shared is not None:
        target = target.masked_fill(~shared.to(target.device), float("-inf"))
    return torch.log_softmax(target, dim=-1)


def kl_rows(student_logits: Tensor, target_lp: Tensor, shared: Tensor | None = None) -> Tensor:
    """Mean over rows of ``KL(p || q)``: ``target_lp`` (N, V) log-probabilities (-inf: 0), ``q`` the softmax
    of ``student_logits`` (N, V), over the ``shared`` (V,) tokens only when given."""
    import torch

    logits = student_logits.float()
    if shared is not None:
        logits = logits.masked_fill(~shared.to(logits.device), float("-inf"))
    log_q = torch.log_softmax(logits, dim=-1)
    p = target_lp.exp()
    terms = torch.where(p > 0, p * (target_lp - log_q), torch.zeros_like(log_q))
    return terms.sum(-1).mean()


def top1_agreement(student_logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[int, int]:
    """``(agreeing positions, positions)``: the student's argmax equals the teacher's token at masked positions."""
    hits = (student_logits.argmax(-1) == targets) & mask
    return int(hits.sum()), int(mask.sum())


def choice_agreement(student_ll: Tensor, teacher_ll: Tensor, valid: Tensor) -> tuple[int, int]:
    """``(rows whose best choice is the teacher's best choice, rows)``; ties go to the earlier choice."""
    s = student_ll.float().masked_fill(~valid, float("-inf"))
    t = teacher_ll.float().masked_fill(~valid, float("-inf"))
    return int((_first_argmax(s) == _first_argmax(t)).sum()), int(s.shape[0])


def _first_argmax(x: Tensor) -> Tensor:
    """Index of the first maximum per row (``torch.argmax`` does not promise which tie it returns)."""
    import torch

    top = x.max(-1, keepdim=True).values
    positions = torch.arange(x.shape[-1], device=x.device).expand_as(x)
    return torch.where(x == top, positions, torch.full_like(positions, x.shape[-1])).min(-1).values


def tail_drop(losses: list[float], fraction: float = 0.1) -> float | None:
    """Relative fall of the loss over the last ``fraction`` of training: ``1 - mean(last) / mean(the one before)``.

    Computed on the finite values; None when that fraction holds fewer than two of them. A loss
    that has levelled off gives about 0; ``[4, 4, 2, 2]`` in halves (``fraction=0.5``) gives 0.5.
    """
    fall = tail_fall(losses, fraction)
    return None if fall is None else fall[0]


def tail_fall(losses: list[float], fraction: float = 0.1) -> tuple[float, float] | None:
    """``(relative, absolute)`` fall of the loss over the last ``fraction`` of training: ``1 - last / before``
    and ``before - last``, of the mean losses of the last fraction and the one before it (:func:`tail_drop`).

    >>> tail_fall([4.0, 4.0, 2.0, 2.0], 0.5)
    (0.5, 2.0)
    """
    finite = [x for x in losses if math.isfinite(x)]
    k = int(len(finite) * fraction)
    if k < 2 or 2 * k > len(finite):
        return None
    last, before = sum(finite[-k:]) / k, sum(finite[-2 * k:-k]) / k
    return (1.0 - last / before, before - last) if before > 0 else None
