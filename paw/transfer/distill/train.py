"""What :func:`paw.transfer.distill.lora.distill_lora` trains on: inputs made into examples, the loss parts of a batch.

Teacher outputs that do not change during training (its continuations, its choice scores) are
computed once per input; so are its next-token distributions for the token KL with a shared vocabulary
(:mod:`paw.transfer.distill.targets`, while they fit its budget; past it they are recomputed per batch), while
the byte-aligned KL across tokenizers recomputes them per batch. On CUDA the forward passes run
under bf16 autocast and the LoRA factors stay float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from paw.errors import PawError
from paw.evaluate.encode import encode_pair, make_batch, max_length_of, pad_id_of, sliding_window_of
from paw.evaluate.mc import forward_logits, score_encoded
from paw.progress import track
from paw.transfer.distill import byte_align
from paw.transfer.distill import loss as distill_loss
from paw.transfer.distill import scale as distill_scale
from paw.transfer.distill import targets as distill_targets
from paw.transfer.distill.head import choice_sums
from paw.transfer.distill.prompts import START, Prompt
from paw.transfer.distill.targets import autocast as _autocast

PAD_ID = 0   # padded positions are masked out; any id inside the vocabulary does
TOKEN_KL, SEQUENCE, CHOICE = "token-kl", "sequence-nll", "choice-kl"   # the loss names of the report
ALIGNED_KL = "aligned-kl"
LOSSES = (TOKEN_KL, ALIGNED_KL, SEQUENCE, CHOICE)


@dataclass
class LM:
    """One side of the distillation: a loaded model, its tokenizer, and (optional) lazy views for ``init='auto'``.

    ``checkpoint``: :func:`paw.io.checkpoint.open_checkpoint` of the base folder (for the weight-space
    transfer); ``tokenizer_info``: :func:`paw.io.tokenizer.open_tokenizer` of it (for the vocabulary test);
    ``adapter_off``: for a teacher whose adapter is merged into ``model``, a context factory in which
    ``model`` runs without it (a PEFT model needs none: its ``disable_adapter`` is used).
    """

    model: Any
    tokenizer: Any
    name: str = ""
    checkpoint: Any = None
    tokenizer_info: Any = None
    adapter_off: Any = None


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


@dataclass(frozen=True)
class Shift:
    """The shift target (``--target shift``): the student learns ``its base + scale x (teacher - teacher base)``.

    ``teacher_off`` and ``student_off`` are context factories in which each model runs without its
    adapter (PEFT's ``disable_adapter``); the student's is set once its LoRA exists. Proxy-tuning
    (Liu et al. 2024, arXiv 2401.08565) adds the same shift at decoding time; here it is trained into
    the student's LoRA, so a target stronger than the teacher keeps what it knows.
    """

    scale: float = 1.0
    teacher_off: Any = None
    student_off: Any = None


@dataclass
class Example:
    """One input ready for training: the student's encodings and the teacher's fixed outputs."""

    prompt: Prompt
    continuation: str = ""
    sequence: Any = None           # paw.evaluate.encode.Encoded of prompt + continuation (student ids)
    choices: list = field(default_factory=list)   # Encoded per choice (student ids)
    teacher_choice_ll: list[float] = field(default_factory=list)
    teacher_base_choice_ll: list[float] = field(default_factory=list)   # --target shift: without its adapter
    student_base_choice_ll: list[float] = field(default_factory=list)   # --target shift: the student's base
    teacher_sequence: Any = None   # Encoded of prompt + continuation in the teacher's ids (byte-aligned KL)
    aligned: list = field(default_factory=list)   # (student position, teacher position) at shared cuts
    excess: list[float] | None = None   # per student continuation token: what the LoRA added to the teacher's log-prob
    token_target: Any = None       # (n_cont, V) the token KL's target, made once (paw.transfer.distill.targets)
    token_moved: Any = None        # (n_cont,) bool, --target shift: where the adapter moved the teacher


def examples(prompts: list[Prompt], teacher: LM, student: LM, max_new_tokens: int, device,
             vocab: Vocab = Vocab(), scale: distill_scale.Scale | None = None, key: str = "", *,
             progress: bool = False, shift: bool = False) -> list[Example]:
    """Teacher continuations, student encodings and the teacher's choice scores, once per input.

    ``scale`` (:mod:`paw.transfer.distill.scale`): continuations cached under ``key`` and shared out over ranks.
    ``shift``: the teacher's choice scores without its adapter too (:class:`Shift`).
    """
    texts = distill_scale.continuations(teacher, [p.text for p in prompts], max_new_tokens, device, scale, key,
                                        progress=progress)
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
    pairs = [(i, c, x) for i, ex in enumerate(out) for c, x in ex.prompt.pairs]

    def score() -> list[float]:
        encoded = [encode_pair(teacher.tokenizer, c, x, max_length=max_length_of(teacher.model), start=START)
                   for _, c, x in pairs]
        return [ll for ll, _ in score_encoded(teacher.model, encoded, pad_id=pad_id_of(teacher.tokenizer),
                                              device=device, progress=progress)]

    def score_base() -> list[float]:
        off = teacher_off(teacher)
        if off is None:
            raise PawError("--target shift needs the teacher with its adapter unmerged (a PEFT model), to score "
                           "it with and without the adapter")
        with off():
            return score()

    if pairs:
        which = [(c, x) for _, c, x in pairs]
        scores = distill_scale.remembered(scale, "choice-scores", key, which, score)
        base = (distill_scale.remembered(scale, "choice-scores-base", key, which, score_base) if shift
                else [None] * len(pairs))
        for (i, _, _), ll, b in zip(pairs, scores, base, strict=True):
            out[i].teacher_choice_ll.append(ll)
            if b is not None:
                out[i].teacher_base_choice_ll.append(b)
    return out


def teacher_off(teacher: LM):
    """The context factory that runs the teacher without its adapter, or None when it has none to disable."""
    return teacher.adapter_off or adapter_off(teacher.model)


def add_student_base(examples: list[Example], peft_model, device, *, progress: bool = False,
                     remember=None) -> None:
    """Fill each example's ``student_base_choice_ll``: the student with its adapter off scores every choice
    (once, before training; the target of :func:`_choice_loss` under :class:`Shift`). ``remember(inputs,
    compute)``: keeps the scores in the work folder (:func:`paw.transfer.distill.scale.remembered`), so a
    resumed run does not score every choice again (on a CPU, 20 minutes for Gemma-3-270M on PIQA's 838 inputs)."""
    flat = [enc for e in examples for enc in e.choices]
    if not flat:
        return

    def score() -> list[float]:
        was_training = peft_model.training
        peft_model.eval()
        with peft_model.disable_adapter(), _autocast(device):   # as the training passes run
            scores = score_encoded(peft_model, flat, pad_id=PAD_ID, device=device, progress=progress)
        peft_model.train(was_training)
        return [ll for ll, _ in scores]

    lls = remember([(tuple(enc.ids), enc.n_cont) for enc in flat], score) if remember else score()
    cursor = 0
    for e in examples:
        e.student_base_choice_ll = list(lls[cursor:cursor + len(e.choices)])
        cursor += len(e.choices)


def _align(ex: Example, teacher: LM, vocab: Vocab) -> None:
    """The teacher's encoding of the same text and the positions where both have read the same bytes."""
    seq = encode_pair(teacher.tokenizer, ex.prompt.text, ex.continuation, max_length=max_length_of(teacher.model),
                      start=START)
    pairs = byte_align.aligned_positions(
        byte_align.continuation_cuts(ex.sequence.ids, ex.sequence.n_cont, vocab.student_bytes),
        byte_align.continuation_cuts(seq.ids, seq.n_cont, vocab.teacher_bytes))
    if pairs:
        ex.teacher_sequence, ex.aligned = seq, pairs


# ---------------------------------------------------------------------------------- what the adapter changed

def token_logprobs(model, encoded: list, pad_id: int, device, *, batch_size: int = 16,
                   progress: str | None = None) -> list[list[float]]:
    """Per encoding, the log-probability of each continuation token, in order (``Encoded.n_cont`` values);
    ``progress``: a description, to show progress under it."""
    import torch

    out: list[list[float]] = []
    starts = range(0, len(encoded), batch_size)
    with torch.no_grad():
        for start in (track(starts, progress, total=len(starts), unit="batches") if progress else starts):
            batch = make_batch(encoded[start:start + batch_size], pad_id=pad_id, padding_side="left", window=sliding_window_of(model))
            with _autocast(device):
                logits, skip = forward_logits(model, batch, device)
            targets, mask = batch.targets[:, skip:].to(device), batch.target_mask[:, skip:].to(device)
            lp = torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None])[..., 0]
            out += [lp[r][mask[r]].tolist() for r in range(lp.shape[0])]
    return out


def add_excess(examples: list[Example], teacher: LM, student: LM, device, scale: distill_scale.Scale | None = None,
               key: str = "", *, progress: bool = False) -> bool:
    """Fill each example's ``excess``: how much the LoRA raised the teacher's log-probability of each
    token of its own continuation (with the adapter minus without it), on the student's tokens.

    This is TiTok's contrastive excess (Jung & Kim, ICLR 2026, arXiv 2510.04682): where the excess is large
    the adapter taught something, where it is near zero the base model would have written the same.
    Across tokenizers the teacher's per-token figures are shared out over the student's tokens by byte
    overlap (:func:`paw.transfer.distill.byte_align.spread`), or spread evenly when the two texts'
    bytes cannot be lined up. False (nothing filled) when the teacher offers no adapter-free view
    (:func:`adapter_off`). ``scale`` and ``key``: the gains are kept in the work folder
    (:func:`paw.transfer.distill.scale.remembered`).
    """
    off = teacher_off(teacher)
    rows = [e for e in examples if e.sequence is not None]
    if off is None or not rows:
        return off is not None
    limit = max_length_of(teacher.model)
    encoded = [e.teacher_sequence or encode_pair(teacher.tokenizer, e.prompt.text, e.continuation, max_length=limit,
                                                 start=START) for e in rows]
    pad = pad_id_of(teacher.tokenizer)

    def gains() -> list[list[float]]:
        with_lora = token_logprobs(teacher.model, encoded, pad, device,
                                   progress="teacher with its adapter" if progress else None)
        with off():
            without = token_logprobs(teacher.model, encoded, pad, device,
                                     progress="teacher without its adapter" if progress else None)
        return [[x - y for x, y in zip(a, b, strict=True)] for a, b in zip(with_lora, without, strict=True)]

    made = distill_scale.remembered(scale, "excess", key, [(e.prompt.text, e.continuation) for e in rows], gains)
    t_vocab = getattr(teacher.tokenizer_info, "vocab", None)
    s_vocab = getattr(student.tokenizer_info, "vocab", None)
    for e, enc, gain in zip(rows, encoded, made, strict=True):
        n = e.sequence.n_cont
        moved = None
        if t_vocab is not None and s_vocab is not None:
            moved = byte_align.spread(gain, _pieces(enc, t_vocab), _pieces(e.sequence, s_vocab))
        e.excess = moved if moved is not None else [sum(gain) / n] * n
    return True


def adapter_off(model):
    """A context factory running ``model`` without its LoRA (PEFT's ``disable_adapter``), or None
    when the adapter is merged into the weights."""
    return getattr(model, "disable_adapter", None)


def _pieces(encoded, vocab) -> list[bytes]:
    cont = encoded.ids[len(encoded.ids) - encoded.n_cont:]
    return [vocab[i] if 0 <= i < len(vocab) and vocab[i] is not None else b"" for i in cont]


def _excess_at(examples, mask, device, of):
    """A (B, K) tensor holding ``of(excess)`` at the continuation positions ``mask`` marks (the examples'
    excess in row order, as left-padded rows hold their continuation tokens), 0 elsewhere; None when an
    example has no excess."""
    import torch

    if any(e.excess is None for e in examples):
        return None
    values = torch.tensor([x for e in examples for x in e.excess], dtype=torch.float32, device=device)
    weights = torch.zeros(mask.shape, dtype=torch.float32, device=device)
    weights[mask] = of(values)
    return weights


def _focus_mask(examples, mask, fraction: float, device):
    """TiTok's token selection: a (B, K) float mask keeping the ``fraction`` of the batch's continuation
    tokens with the largest excess (ties kept), or None when an example has no excess."""
    def kept(values):
        threshold = values.topk(max(1, math.ceil(fraction * values.numel()))).values[-1]
        return (values >= threshold).float()

    return _excess_at(examples, mask, device, kept)


def _sequence_losses(peft_model, teacher_model, examples, vocab: Vocab, pad_id, device, focus: float = 0.0,
                     shift: Shift | None = None):
    """``({loss name: value}, logits, targets, mask, aligned positions)`` over the teacher's continuations.

    Always the sequence NLL of the teacher's tokens; with a shared vocabulary also the token KL to
    the teacher's distributions, across tokenizers the KL at the cuts both share: Hinton et al.'s
    soft and hard targets together, the hard one being the teacher's own output, not a label.
    Under ``shift`` the text is not a target (it is the teacher's, base knowledge and all): the KLs are
    taken to the student's base plus the adapter's shift (:func:`paw.transfer.distill.loss.shift_token_target`)
    at the positions where the adapter moved the teacher at all.
    """
    import torch

    # left padding: the continuations end every row, and only their positions go through the LM head
    batch = make_batch([e.sequence for e in examples], pad_id=pad_id, padding_side="left",
                       window=window_of(peft_model, teacher_model))
    with _autocast(device):
        logits, skip = forward_logits(peft_model, batch, device)
    mask, targets = batch.target_mask[:, skip:].to(device), batch.targets[:, skip:].to(device)
    weights = _focus_mask(examples, mask, focus, device) if focus else None  # token focus (TiTok)
    parts = {} if shift else {SEQUENCE: distill_loss.sequence_nll(logits, targets, mask, weights)}
    n_aligned = 0
    if vocab.shared:   # the target made once per input, or (over the cache's budget) now
        made = distill_targets.cached(examples, mask, device)
        target, moved = made or distill_targets.token_target(peft_model, teacher_model, batch, vocab, device, shift)
        if shift:
            weights = mask & moved
        parts[TOKEN_KL] = distill_loss.token_kl(logits, target, mask, weights)
    elif vocab.aligned and any(e.aligned for e in examples):
        rows = [(r, e) for r, e in enumerate(examples) if e.aligned]
        t_batch = make_batch([e.teacher_sequence for _, e in rows], pad_id=pad_id, padding_side="left", window=sliding_window_of(teacher_model))
        with torch.no_grad(), _autocast(device):
            t_logits, t_skip = forward_logits(teacher_model, t_batch, device)
        s_idx = [(r, _kept_column(batch, r, ps, skip)) for r, e in rows for ps, _ in e.aligned]
        t_idx = [(k, _kept_column(t_batch, k, pt, t_skip))
                 for k, (_, e) in enumerate(rows) for _, pt in e.aligned]
        s_rows, s_pos = (torch.tensor(x, device=device) for x in zip(*s_idx, strict=True))
        t_rows, t_pos = (torch.tensor(x, device=device) for x in zip(*t_idx, strict=True))
        if shift:
            parts[ALIGNED_KL] = _aligned_shift(peft_model, teacher_model, batch, t_batch, logits[s_rows, s_pos],
                                               t_logits[t_rows, t_pos], (s_rows, s_pos), (t_rows, t_pos), vocab,
                                               device, shift)
        else:
            parts[ALIGNED_KL] = distill_loss.aligned_kl(logits[s_rows, s_pos], t_logits[t_rows, t_pos], vocab.columns)
        n_aligned = len(s_idx)
    return {k: v for k, v in parts.items() if v is not None}, logits, targets, mask, n_aligned


def _aligned_shift(peft_model, teacher_model, batch, t_batch, student_at, teacher_at, s_at, t_at, vocab: Vocab,
                   device, shift: Shift):
    """The KL at the cuts both tokenizations share, to the student's base plus the adapter's shift, over the
    tokens both vocabularies hold; None where the adapter moved the teacher at no such cut."""
    import torch

    shared = vocab.columns >= 0
    with torch.no_grad(), _autocast(device):
        with shift.teacher_off():
            t_base = forward_logits(teacher_model, t_batch, device)[0][t_at]
        with shift.student_off():
            s_base = forward_logits(peft_model, batch, device)[0][s_at]
        t_lp = distill_loss.to_student_vocab(teacher_at, vocab.columns)
        tb_lp = distill_loss.to_student_vocab(t_base, vocab.columns)
        moved = (t_lp != tb_lp).any(-1)
        target = distill_loss.shift_token_target(s_base, t_lp, tb_lp, shift.scale, shared=shared)
    if not bool(moved.any()):
        return None
    return distill_loss.kl_rows(student_at[moved], target[moved], shared)


def window_of(*models) -> int | None:
    """The smallest sliding window of ``models`` (the teacher reads the student's batch when the
    vocabularies are shared), ``None`` when none slides."""
    windows = [w for w in map(sliding_window_of, models) if w is not None]
    return min(windows) if windows else None


def _kept_column(batch, row: int, position: int, skip: int) -> int:
    """Column of input ``position`` of ``row`` among the logits ``forward_logits`` keeps of ``batch``
    (its ``position``-th real column, whatever the layout ``make_batch`` chose; the first ``skip``
    columns are dropped)."""
    return int(batch.attention_mask[row].nonzero()[position, 0]) - skip


def _choice_loss(peft_model, examples, pad_id, device, shift: Shift | None = None):
    """``(choice KL, student (B, C) log-likelihoods, target's, valid mask)`` for inputs with choices.

    The target is the teacher's scores, or under ``shift`` the student's base plus the adapter's shift
    (:func:`paw.transfer.distill.loss.shift_choice_target`). Under ``shift`` a row on which the adapter
    moved none of the teacher's scores teaches nothing and carries no loss (None when no row moved): the
    student keeps its base there, and a source adapter that changes nothing leaves the student's LoRA as
    it started, exactly.
    """

    flat = [enc for e in examples for enc in e.choices]
    # left padding puts every choice at the end of its row: only those positions go through the LM
    # head, which is most of the cost with a 150k-262k vocabulary (paw eval scores the same way)
    batch = make_batch(flat, pad_id=pad_id, padding_side="left", window=sliding_window_of(peft_model))
    with _autocast(device):
        sums = choice_sums(peft_model, batch, device)   # the LM head in row chunks where its logits are large
    student, valid = _by_row(examples, lambda e: None, device, sums)
    teacher, _ = _by_row(examples, lambda e: e.teacher_choice_ll, device)
    if shift is None:
        return distill_loss.choice_kl(student, teacher, valid), student, teacher, valid
    t_base, _ = _by_row(examples, lambda e: e.teacher_base_choice_ll, device)
    s_base, _ = _by_row(examples, lambda e: e.student_base_choice_ll, device)
    target = distill_loss.shift_choice_target(s_base, teacher, t_base, shift.scale)
    moved = ((teacher != t_base) & valid).any(-1)
    loss = distill_loss.choice_kl(student[moved], target[moved], valid[moved]) if bool(moved.any()) else None
    return loss, student, target, valid


def _by_row(examples, values, device, flat=None):
    """``((B, C) tensor, valid mask)``: each example's per-choice ``values(e)`` in a row (0 past its choices);
    ``flat``, if given, is a tensor of every choice's value in order, taken instead (keeps its graph)."""
    import torch

    width = max(len(e.choices) for e in examples)
    out = torch.zeros(len(examples), width, device=device)
    valid = torch.zeros(len(examples), width, dtype=torch.bool, device=device)
    cursor = 0
    for row, e in enumerate(examples):
        k = len(e.choices)
        out[row, :k] = flat[cursor:cursor + k] if flat is not None else torch.tensor(values(e), device=device)
        valid[row, :k] = True
        cursor += k
    return out, valid
