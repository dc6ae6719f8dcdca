"""The training loop of :func:`paw.transfer.distill.lora.distill_lora`: inputs made into examples, losses, agreement.

Teacher outputs that do not change during training (its continuations, its choice scores) are
computed once per input; its next-token distributions (token KL with a shared vocabulary, the
byte-aligned KL across tokenizers) are recomputed per batch so that nothing of vocabulary size is
stored. On CUDA the forward passes run
under bf16 autocast and the LoRA factors stay float32.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace
from typing import Any

from paw.evaluate.encode import encode_pair, make_batch, max_length_of, pad_id_of
from paw.evaluate.mc import continuation_logprobs, forward_logits, score_encoded
from paw.evaluate.train import batches_in_order
from paw.progress import track
from paw.transfer.distill import byte_align, data
from paw.transfer.distill import loss as L
from paw.transfer.distill.data import START, Prompt

PAD_ID = 0   # padded positions are masked out; any id inside the vocabulary does
TOKEN_KL, SEQUENCE, CHOICE = "token-kl", "sequence-nll", "choice-kl"   # the loss names of the report
ALIGNED_KL = "aligned-kl"
LOSSES = (TOKEN_KL, ALIGNED_KL, SEQUENCE, CHOICE)


@dataclass
class LM:
    """One side of the distillation: a loaded model, its tokenizer, and (optional) lazy views for ``init='auto'``.

    ``checkpoint``: :func:`paw.io.checkpoint.open_checkpoint` of the base folder (for the weight-space
    transfer); ``tokenizer_info``: :func:`paw.io.tokenizer.open_tokenizer` of it (for the vocabulary test).
    """

    model: Any
    tokenizer: Any
    name: str = ""
    checkpoint: Any = None
    tokenizer_info: Any = None


@dataclass(frozen=True)
class Vocab:
    """How the student's ids relate to the teacher's.

    ``columns`` (Vs,) holds the teacher id of each student token with the same bytes, -1 where none
    (None: nothing is matched). ``shared``: every student token has one and both encode text alike,
    so the teacher reads the student's ids (token KL). Otherwise, with ``student_bytes`` and
    ``teacher_bytes`` (canonical bytes per id), the distributions are matched at shared cuts.
    """

    columns: Any = None
    shared: bool = False
    student_bytes: Any = None
    teacher_bytes: Any = None
    why: str = ""                  # why nothing is matched, for the report

    @property
    def aligned(self) -> bool:
        return self.columns is not None and not self.shared and self.student_bytes is not None


@dataclass
class Example:
    """One input ready for training: the student's encodings and the teacher's fixed outputs."""

    prompt: Prompt
    continuation: str = ""
    sequence: Any = None           # paw.evaluate.encode.Encoded of prompt + continuation (student ids)
    choices: list = field(default_factory=list)   # Encoded per choice (student ids)
    teacher_choice_ll: list[float] = field(default_factory=list)
    teacher_sequence: Any = None   # Encoded of prompt + continuation in the teacher's ids (byte-aligned KL)
    aligned: list = field(default_factory=list)   # (student position, teacher position) at shared cuts


def examples(prompts: list[Prompt], teacher: LM, student: LM, max_new_tokens: int, device,
             vocab: Vocab = Vocab()) -> list[Example]:
    """Teacher continuations, student encodings and the teacher's choice scores, once per input."""
    texts = data.generate(teacher.model, teacher.tokenizer, [p.text for p in prompts],
                          max_new_tokens=max_new_tokens, device=device)
    limit = max_length_of(student.model)
    out = []
    for prompt, text in zip(prompts, texts, strict=True):
        ex = Example(prompt, text)
        if text.strip():
            ex.sequence = encode_pair(student.tokenizer, prompt.text, text, max_length=limit, start=START)
            if vocab.aligned:
                _align(ex, teacher, vocab)
        if prompt.pairs:
            ex.choices = [encode_pair(student.tokenizer, c, x, max_length=limit, start=START)
                          for c, x in prompt.pairs]
        out.append(ex)
    pairs = [(i, encode_pair(teacher.tokenizer, c, x, max_length=max_length_of(teacher.model), start=START))
             for i, ex in enumerate(out) for c, x in ex.prompt.pairs]
    if pairs:
        scores = score_encoded(teacher.model, [e for _, e in pairs], pad_id=pad_id_of(teacher.tokenizer),
                               device=device, progress=False)
        for (i, _), (ll, _) in zip(pairs, scores, strict=True):
            out[i].teacher_choice_ll.append(ll)
    return out


def _align(ex: Example, teacher: LM, vocab: Vocab) -> None:
    """The teacher's encoding of the same text and the positions where both have read the same bytes."""
    seq = encode_pair(teacher.tokenizer, ex.prompt.text, ex.continuation, max_length=max_length_of(teacher.model),
                      start=START)
    pairs = byte_align.aligned_positions(
        byte_align.continuation_cuts(ex.sequence.ids, ex.sequence.n_cont, vocab.student_bytes),
        byte_align.continuation_cuts(seq.ids, seq.n_cont, vocab.teacher_bytes))
    if pairs:
        ex.teacher_sequence, ex.aligned = seq, pairs


def _autocast(device):
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _sequence_losses(peft_model, teacher_model, examples, vocab: Vocab, pad_id, device):
    """``({loss name: value}, logits, targets, mask, aligned positions)`` over the teacher's continuations.

    Always the sequence NLL of the teacher's tokens; with a shared vocabulary also the token KL to
    the teacher's distributions, across tokenizers the KL at the cuts both share: Hinton et al.'s
    soft and hard targets together, the hard one being the teacher's own output, not a label.
    """
    import torch

    # left padding: the continuations end every row, and only their positions go through the LM head
    batch = make_batch([e.sequence for e in examples], pad_id=pad_id, padding_side="left")
    with _autocast(device):
        logits, skip = forward_logits(peft_model, batch, device)
    mask, targets = batch.target_mask[:, skip:].to(device), batch.targets[:, skip:].to(device)
    parts = {SEQUENCE: L.sequence_nll(logits, targets, mask)}
    n_aligned = 0
    if vocab.shared:
        columns = vocab.columns
        teacher_batch = replace(batch, input_ids=columns.clamp(min=0)[batch.input_ids])
        with torch.no_grad(), _autocast(device):
            teacher_lp = L.to_student_vocab(forward_logits(teacher_model, teacher_batch, device)[0], columns)
        parts[TOKEN_KL] = L.token_kl(logits, teacher_lp, mask)
    elif vocab.aligned and any(e.aligned for e in examples):
        rows = [(r, e) for r, e in enumerate(examples) if e.aligned]
        t_batch = make_batch([e.teacher_sequence for _, e in rows], pad_id=pad_id, padding_side="left")
        with torch.no_grad(), _autocast(device):
            t_logits, t_skip = forward_logits(teacher_model, t_batch, device)
        s_idx = [(r, _kept_column(batch, e.sequence, ps, skip)) for r, e in rows for ps, _ in e.aligned]
        t_idx = [(k, _kept_column(t_batch, e.teacher_sequence, pt, t_skip))
                 for k, (_, e) in enumerate(rows) for _, pt in e.aligned]
        s_rows, s_pos = (torch.tensor(x, device=device) for x in zip(*s_idx, strict=True))
        t_rows, t_pos = (torch.tensor(x, device=device) for x in zip(*t_idx, strict=True))
        parts[ALIGNED_KL] = L.aligned_kl(logits[s_rows, s_pos], t_logits[t_rows, t_pos], vocab.columns)
        n_aligned = len(s_idx)
    return parts, logits, targets, mask, n_aligned


def _kept_column(batch, encoded, position: int, skip: int) -> int:
    """Column of ``encoded``'s ``position`` among the logits ``forward_logits`` keeps of a left-padded ``batch``
    (``make_batch`` puts the ``len(ids) - 1`` inputs of a row at its end; the first ``skip`` columns are dropped)."""
    return batch.input_ids.shape[1] - (len(encoded.ids) - 1) + position - skip


def _choice_loss(peft_model, examples, pad_id, device):
    """``(choice KL, student (B, C) log-likelihoods, teacher's, valid mask)`` for inputs with choices."""
    import torch

    flat = [enc for e in examples for enc in e.choices]
    # left padding puts every choice at the end of its row: only those positions go through the LM
    # head, which is most of the cost with a 150k-262k vocabulary (paw eval scores the same way)
    batch = make_batch(flat, pad_id=pad_id, padding_side="left")
    with _autocast(device):
        logits, skip = forward_logits(peft_model, batch, device)
    sums, _ = continuation_logprobs(logits, batch.targets[:, skip:].to(device), batch.target_mask[:, skip:].to(device))
    width = max(len(e.choices) for e in examples)
    student = torch.zeros(len(examples), width, device=device)
    teacher = torch.zeros(len(examples), width, device=device)
    valid = torch.zeros(len(examples), width, dtype=torch.bool, device=device)
    cursor = 0
    for row, e in enumerate(examples):
        k = len(e.choices)
        student[row, :k] = sums[cursor:cursor + k]
        teacher[row, :k] = torch.tensor(e.teacher_choice_ll, device=device)
        valid[row, :k] = True
        cursor += k
    return L.choice_kl(student, teacher, valid), student, teacher, valid


def train(peft_model, teacher_model, examples, vocab: Vocab, *, steps, batch_size, lr, seed, device, progress) -> dict:
    import torch

    pad_id = PAD_ID
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    order = batches_in_order(len(examples), batch_size, steps, seed)
    curve: dict[str, list[float]] = {"loss": [], **{k: [] for k in LOSSES}}
    peft_model.train()
    for step in (track(range(steps), "distilling", total=steps, unit="steps") if progress else range(steps)):
        chosen = [examples[i] for i in order[step]]
        parts = {}
        with_seq = [e for e in chosen if e.sequence is not None]
        with_choices = [e for e in chosen if e.choices]
        if with_seq:
            parts.update(_sequence_losses(peft_model, teacher_model, with_seq, vocab, pad_id, device)[0])
        if with_choices:
            parts[CHOICE] = _choice_loss(peft_model, with_choices, pad_id, device)[0]
        if not parts:
            continue
        loss = sum(parts.values())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        curve["loss"].append(float(loss.detach()))
        for key in LOSSES:
            curve[key].append(float(parts[key].detach()) if key in parts else math.nan)
    peft_model.eval()
    return {k: v for k, v in curve.items() if any(math.isfinite(x) for x in v)}


def agreement(peft_model, teacher_model, examples, vocab: Vocab, device) -> dict:
    """Teacher-student agreement on ``examples``: top-1 on the continuation tokens, KL, best choice.

    ``kl`` is per continuation position with a shared vocabulary, per shared cut across tokenizers
    (``kl_positions`` counts those), None when nothing is matched.
    """
    import torch

    hits = positions = choice_hits = rows = kl_positions = 0
    kl_sum = choice_kl_sum = 0.0
    was_training = peft_model.training
    peft_model.eval()
    with torch.no_grad():
        for start in range(0, len(examples), 16):
            chunk = examples[start:start + 16]
            seqs = [e for e in chunk if e.sequence is not None]
            if seqs:
                parts, logits, targets, mask, n_aligned = _sequence_losses(peft_model, teacher_model, seqs, vocab,
                                                                           PAD_ID, device)
                h, n = L.top1_agreement(logits, targets, mask)
                hits, positions = hits + h, positions + n
                if TOKEN_KL in parts:
                    kl_sum, kl_positions = kl_sum + float(parts[TOKEN_KL]) * n, kl_positions + n
                elif ALIGNED_KL in parts:
                    kl_sum, kl_positions = kl_sum + float(parts[ALIGNED_KL]) * n_aligned, kl_positions + n_aligned
            with_choices = [e for e in chunk if e.choices]
            if with_choices:
                loss, s, t, v = _choice_loss(peft_model, with_choices, PAD_ID, device)
                h, n = L.choice_agreement(s, t, v)
                choice_hits, rows, choice_kl_sum = choice_hits + h, rows + n, choice_kl_sum + float(loss) * n
    peft_model.train(was_training)
    return {"prompts": len(examples), "positions": positions,
            "top1_agreement": _ratio(hits, positions), "kl": _ratio(kl_sum, kl_positions), "kl_positions": kl_positions,
            "choice_items": rows, "choice_agreement": _ratio(choice_hits, rows), "choice_kl": _ratio(choice_kl_sum, rows)}


def _ratio(a: float, b: int) -> float | None:
    return round(a / b, 6) if b else None


