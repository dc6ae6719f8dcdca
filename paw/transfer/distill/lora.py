"""``distill_lora``: move a LoRA to any base model by teaching a new LoRA to imitate the old one.

Every weight-space map keeps nothing across a tokenizer change or an unrelated model (PAW's transfer
benchmark); what survives is the behaviour. So, as in Trans-LoRA (Wang et al. 2024, arXiv
2405.17258): the **teacher** is the source base with its LoRA, the **student** the target base with
a new LoRA of the same rank, alpha and module types, trained on label-free task inputs
(:mod:`paw.transfer.distill.prompts`) to match the teacher (:mod:`paw.transfer.distill.loss`):

1. the teacher continues every input greedily (up to a line break);
2. the student learns that continuation as text (sequence-level distillation, Kim & Rush 2016);
   with a shared vocabulary (every target token is a source token with the same bytes and both
   encode text alike, :func:`shared_vocabulary`) it also matches the teacher's next-token
   distributions over it (token KL; soft and hard targets together, as Hinton et al. 2015);
   inputs with answer choices add the KL between the two models' distributions over the choices;
3. agreement with the teacher is measured before and after, on held-out inputs where there are any
   (at most :data:`AGREEMENT_INPUTS` of them, a seeded sample).

``init='auto'`` starts the student from the data-free ``auto`` transfer when the target shares the
source's tokenizer and ``auto`` finds it related, else from PEFT's initialisation (B = 0).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from functools import partial
from typing import Any

from paw import fsdp as fsdp_sharding
from paw.data import sample_texts
from paw.device import guard_cuda_attention, resolve_device
from paw.errors import PawError
from paw.evaluate import shared as shared_context
from paw.evaluate.items import MCItem
from paw.evaluate.train import batches_in_order
from paw.memory import prepare_student
from paw.progress import status
from paw.train import Recipe
from paw.transfer.distill import cost as distill_cost
from paw.transfer.distill import fit, generation, synthesis
from paw.transfer.distill import report as distill_report
from paw.transfer.distill import scale as distill_scale
from paw.transfer.distill import targets as distill_targets
from paw.transfer.distill import timing as distill_timing
from paw.transfer.distill import train as distill_train
from paw.transfer.distill.options import GENERIC, DistillOptions
from paw.transfer.distill.prompts import Prompt, generic_prompts, prompts_from, split_holdout
from paw.transfer.distill.student import adapter_of as _adapter_of
from paw.transfer.distill.student import init_adapter as _init_adapter
from paw.transfer.distill.student import student as _student
from paw.transfer.distill.student import target_modules_of as _target_modules
from paw.transfer.distill.train import LM
from paw.transfer.distill.vocabulary import vocabulary as _vocabulary
from paw.validate import lora_rank

# the automatic budget (no --max-steps): at most AUTO_EPOCHS passes over the inputs, within these bounds,
# stopped earlier when the agreement on what the adapter changed stops improving (fit.Stop)
AUTO_MIN_STEPS, AUTO_EPOCHS, AUTO_MAX_STEPS = 200, 30, 3000
PROBE_INPUTS = 64           # training inputs whose loss decides when to stop
# the before/after agreement is measured on at most this many inputs (a seeded sample): on 1,000 inputs each
# measurement cost about a fifth of the distillation's time on a CPU, and 256 inputs give thousands of positions
AGREEMENT_INPUTS = 256


def distill_lora(adapter, teacher: LM, student: LM, *, prompts: Sequence[str | MCItem | Prompt] | str | None = None,
                 synthesize: int = 0, seed_examples: Sequence[str | MCItem | Prompt] | None = None,
                 discriminator: bool = False, init: str = "auto", rank: int | None = None,
                 alpha: float | None = None, target_modules: Sequence[str] | None = None, steps: int | None = None,
                 batch_size: int = 8, lr: float = 1e-3, max_new_tokens: int = 16, holdout: float = 0.0,
                 eval_prompts: Sequence[str | MCItem | Prompt] | None = None, byte_kl: bool = False,
                 next_words: int = 0, token_focus: float = 0.0, target: str = "teacher", shift_scale: float = 1.0,
                 seed: int = 0, device="cpu", target_name: str | None = None, progress: bool = True,
                 scale: distill_scale.Scale | None = None, schedule: str = "constant", warmup: int = 0,
                 accumulation: int = 1, clip: float | None = None) -> tuple[Any, dict]:
    """Train a LoRA on ``student.model`` that imitates ``teacher.model`` (the source base with ``adapter`` applied).

    Inputs, all label-free: ``prompts`` (inputs; answers of MC items are dropped) or ``'generic'``
    (embedded sample text), or ``synthesize=N`` inputs written by the teacher from at most five
    ``seed_examples`` (``discriminator`` filters them). ``holdout`` of the inputs (or
    ``eval_prompts``) measure agreement and are never trained on. Across tokenizers ``byte_kl`` adds
    the KL at the cuts both tokenizations share (needs both ``tokenizer_info``), and inputs without
    choices get the teacher's ``next_words`` likeliest next words as choices (0: none). ``steps=None`` (the
    default) sets the budget from the inputs (:func:`auto_steps`) and stops once the student's loss on
    the tokens the adapter changed levels off (:class:`~paw.transfer.distill.fit.Stop`); a number runs
    exactly that many steps. ``token_focus`` > 0 trains on that fraction of each batch's continuation
    tokens, those the adapter changed most (TiTok). ``target='shift'`` teaches the student its own base plus
    ``shift_scale`` times what the adapter changed in the teacher (:class:`~paw.transfer.distill.train.Shift`),
    not the teacher itself. Returns ``(LoraAdapter for the
    target, report)``; the student's model is left as it was given. Same seed, same bytes on CPU.
    ``scale`` (:class:`~paw.transfer.distill.scale.Scale`): ranks, cached continuations, checkpoints,
    teacher offload and gradient checkpointing (docs/scale.md). ``schedule``, ``warmup``, ``accumulation``
    and ``clip`` shape the optimiser steps (:class:`paw.train.Recipe`; the defaults: constant rate, plain steps).
    """
    DistillOptions(prompts=prompts, synthesize=synthesize, seed_examples=seed_examples, init=init, alpha=alpha,
                   max_steps=steps, batch_size=batch_size, lr=lr, max_new_tokens=max_new_tokens, holdout=holdout,
                   next_words=next_words, token_focus=token_focus, target=target, shift_scale=shift_scale,
                   schedule=schedule, warmup=warmup, accumulation=accumulation, clip=clip).check()  # the one check of knobs and of which inputs go together
    if rank is not None:  # before the teacher works: at most min(out, in) of the smallest adapted layer
        lora_rank("--rank", rank, student.model, _target_modules(adapter, student.model, target_modules))
    device = resolve_device(device) if isinstance(device, str) else device
    main = scale is None or scale.ranks.main   # the other ranks train their share and report nothing
    shown = progress and main
    teacher.model.to(device).eval()   # where it writes: synthesised inputs, continuations
    guard_cuda_attention(teacher.model)
    inputs, held, info = _inputs(teacher, prompts, synthesize, seed_examples, discriminator, holdout,
                                 eval_prompts, seed, device, progress=shown, adapter=adapter, scale=scale)
    auto = steps is None
    per_step = batch_size * accumulation   # inputs per optimiser step
    steps = auto_steps(len(inputs), per_step) if auto else steps
    recipe = Recipe(steps=steps, lr=lr, schedule=schedule, warmup=warmup, accumulation=accumulation,
                    clip=clip or None, seed=seed).check()
    inputs = _visited(inputs, steps, per_step, seed)
    info["train_used"] = len(inputs)
    vocab = _vocabulary(teacher, student, byte_kl)
    if scale is not None and scale.offload_teacher:
        distill_scale.refuse_offload([distill_train.TOKEN_KL] if vocab.shared
                                     else [distill_train.ALIGNED_KL] if vocab.aligned else [])
    if next_words and not vocab.shared:  # a shared vocabulary already gives the whole distribution (token KL)
        inputs, n_train = generation.next_words(teacher.model, teacher.tokenizer, inputs, next_words, device=device)
        held, n_held = generation.next_words(teacher.model, teacher.tokenizer, held, next_words, device=device)
        info.update(next_words={"k": next_words, "inputs": n_train, "held_out": n_held},
                    with_choices=sum(bool(p.pairs) for p in inputs))
    init_adapter, init_note = _init_adapter(adapter, teacher, student, init, vocab.columns if vocab.shared else None,
                                            rank, alpha, target_modules, device)
    sharded = scale is not None and scale.fsdp   # the student stays on the CPU until FSDP moves its shards
    work, first = _work(inputs, held, teacher, student, vocab, steps=steps, batch_size=batch_size,
                        accumulation=accumulation, seed=seed, new=max_new_tokens, auto=auto, target=target, scale=scale)
    probe = (partial(_student, adapter, student.model, init_adapter, rank, alpha, target_modules, seed, device)
             if main and not sharded else None)
    predicted = _estimate(teacher, student, work, first, device=device, probe=probe, shown=shown,
                          earliest=fit.Stop([], work.check_every).earliest() if auto else None)
    watch = distill_timing.Stopwatch()
    shift = distill_train.Shift(shift_scale, teacher_off=distill_train.teacher_off(teacher)) if target == "shift" else None
    if shift is not None:
        _check_shift(shift, vocab, inputs)
    key = distill_scale.teacher_key(teacher.name, adapter, max_new_tokens) if scale is not None and scale.work else ""
    with watch("generation"):
        train = distill_train.examples(inputs, teacher, student, max_new_tokens, device, vocab, scale=scale, key=key,
                                       progress=shown, shift=shift is not None)
        tests = (distill_train.examples(held, teacher, student, max_new_tokens, device, vocab, scale=scale, key=key,
                                        progress=shown, shift=shift is not None) if held else [])
    with watch("excess"):   # what the adapter changed, per token
        excess = distill_train.add_excess(train + tests, teacher, student, device, scale, key, progress=shown)
    if token_focus and not excess:
        raise PawError("--token-focus needs the teacher with its adapter unmerged (a PEFT model), to compare "
                       "it with and without the adapter")
    if scale is not None and scale.offload_teacher:
        distill_scale.free_teacher(teacher)  # every continuation and choice score is made: training needs no teacher
    losses_used = distill_report.losses_used(vocab, train, shift)
    if not any(e.sequence is not None or e.choices for e in train):
        raise PawError("the teacher continued no input with any text and no input has answer choices: "
                       "nothing to distill")
    grads = {n: p.requires_grad for n, p in student.model.named_parameters()}
    peft_model = _student(adapter, student.model, init_adapter, rank, alpha, target_modules, seed,
                          "cpu" if sharded else device)
    prepare_student(peft_model, gradient_checkpointing=scale is not None and scale.gradient_checkpointing)
    fsdp = fsdp_sharding.shard_student(peft_model, scale.ranks, device) if sharded else None
    if shift is not None:   # the student's own base: the model with its new adapter off, as trained
        shift = distill_train.Shift(shift.scale, shift.teacher_off, peft_model.disable_adapter)
        remember = (partial(distill_scale.remembered, scale, "student-base-choice-scores",
                            distill_scale.student_key(student.name, student.model))
                    if key and not sharded else None)
        with watch("student_base"):
            distill_train.add_student_base(train + tests, peft_model, device, progress=shown, remember=remember)
    targets = {"cached": False, "why": "several ranks"}
    if distill_targets.made_once(vocab, scale):
        with watch("targets"):   # the token KL's target once per input, not on every batch
            targets = distill_targets.cache(train + tests, peft_model, teacher.model, vocab, device, shift,
                                            pad_id=distill_train.PAD_ID,
                                            window=distill_train.window_of(peft_model, teacher.model))
    measure = main or sharded                  # under FSDP every rank runs every student forward pass
    pool = tests or train
    measured = agreement_inputs(pool, seed)
    try:
        before = scale.checkpoints.extra("before") if scale is not None else None
        if before is not None and before.get("prompts") == len(pool):
            measured = pool   # checkpointed by a run that measured every input: after on the same ones
        with watch("agreement"):
            before = before or (fit.agreement(peft_model, teacher.model, measured, vocab, device, progress=shown,
                                              shift=shift) if measure else None)
        stop = fit.Stop(_probe(train), every=check_every(len(train), per_step)) if auto else None
        with watch("training"):
            curve = fit.train(peft_model, teacher.model, train, vocab, steps=steps, batch_size=batch_size, lr=lr,
                              seed=seed, device=device, progress=shown, scale=scale, extra={"before": before},
                              focus=token_focus, stop=stop, shift=shift, **recipe.changes())
        diverged = curve.pop("diverged_at", None)
        with watch("agreement"):
            after = (fit.agreement(peft_model, teacher.model, measured, vocab, device, progress=shown, shift=shift)
                     if measure else None)
        moved = _adapter_of(peft_model, adapter, target_name or student.name,
                            fsdp_sharding.full_lora_state(peft_model) if sharded else None)
    finally:
        if not sharded:  # a sharded student is left sharded: the caller's model is spent
            peft_model.unload()
        for n, p in student.model.named_parameters():
            p.requires_grad_(grads.get(n, p.requires_grad))
    cost = distill_timing.with_measured(predicted, watch, steps_run=len(curve.get("loss", [])))
    measured_on = distill_report.measured_on(len(measured), len(pool), bool(tests))
    report = distill_report.report(
        adapter, teacher, student, moved, info, losses_used, distill_report.vocabulary_note(vocab, train),
        init_note, curve, cost, {"before": before, "after": after, "measured_on": measured_on},
        steps=steps, batch_size=batch_size, lr=lr, seed=seed, max_new_tokens=max_new_tokens,
        token_focus=token_focus, target=distill_report.target_note(shift, vocab, train), **recipe.changes(),
        budget=distill_report.budget(auto, steps, curve, stop, excess))
    if diverged:
        report["distill"]["diverged_at_step"] = int(diverged[0])
    if fsdp:
        report["distill"]["fsdp"] = fsdp
    if vocab.shared:
        report["distill"]["token_targets"] = targets
    return moved, report


def _work(inputs: list[Prompt], held: list[Prompt], teacher: LM, student: LM, vocab: distill_train.Vocab, *,
          steps: int, batch_size: int, accumulation: int, seed: int, new: int, auto: bool, target: str,
          scale: distill_scale.Scale | None) -> tuple[distill_cost.Work, dict[str, list[tuple[int, int]]]]:
    """The work of this run (:func:`paw.transfer.distill.cost.work_of`) from the batches it will make, and the
    rows of its first training batch, continuations and choices (the probe's shape)."""
    share = tuple(shared_context.refusal(m.model) is None for m in (teacher, student))

    def rows(prompts: list[Prompt]) -> list[distill_cost.Rows]:
        return [distill_cost.Rows.of(p, student.tokenizer, teacher.tokenizer, new, shared=vocab.shared, share=share)
                for p in prompts]

    train, tests = rows(inputs), rows(held)
    order = batches_in_order(len(inputs), batch_size * accumulation, steps, seed)
    width = student.model.get_input_embeddings().weight.shape[0]   # continuations counted at ``new``
    cached = distill_targets.made_once(vocab, scale) and \
        distill_targets.cache_bytes(sum(r.text[1] for r in train + tests), width) <= distill_targets.CACHE_BYTES
    work = distill_cost.work_of(
        train, tests, order=order, accumulation=accumulation, measured=_indices(held or inputs, seed), new=new,
        checked=min(PROBE_INPUTS, len(inputs)), check_every=check_every(len(inputs), batch_size * accumulation)
        if auto else 0, teacher_per_step=vocab.shared or vocab.aligned, targets_cached=cached,
        text=target != "shift" or vocab.shared or vocab.aligned, shift=target == "shift",
        excess=distill_train.teacher_off(teacher) is not None,
        checkpointing=scale is not None and scale.gradient_checkpointing, world=1 if scale is None else scale.ranks.world)
    first = order[0][:batch_size]   # the first step's first micro-batch: the probe's shape
    return work, {"text": [train[i].text for i in first] if work.text else [],
                  "choices": [c for i in first for c in train[i].choices]}


def _indices(pool: list, seed: int) -> list[int]:
    """The positions in ``pool`` of :func:`agreement_inputs`'s sample."""
    return agreement_inputs(list(range(len(pool))), seed)


def _estimate(teacher: LM, student: LM, work: distill_cost.Work, first: dict[str, list[tuple[int, int]]], *, device,
              probe, shown: bool, earliest: int | None) -> dict:
    """The prediction of the work's cost (:mod:`paw.transfer.distill.cost`) at a rate measured on the student
    wrapped in a LoRA as it will train (``probe()`` wraps it; the LoRA is dropped after) over the rows of the
    first training batch, or without ``probe`` at :data:`paw.memory.RATES`; said in one line (``shown``)."""
    import torch

    size = distill_cost.Size.of(student.model)
    if probe is not None and any(first.values()):   # no rows carry a loss: the run stops before training
        with torch.random.fork_rng(devices=[]):   # the LoRA's random initialisation leaves the seed as it was
            wrapped = probe()
        try:
            rate = distill_timing.measure_rate(wrapped, batches=first, device=device, size=size)
        finally:
            wrapped.unload()
    else:
        rate = distill_cost.assumed_rate(device.type)
    predicted = distill_cost.estimate(size, distill_cost.Size.of(teacher.model), work, rate, device_type=device.type,
                                      on=distill_timing.where(device), earliest=earliest)
    if shown:
        status(f"distill: {distill_cost.line(predicted)}")
    return predicted


def auto_steps(n_inputs: int, batch_size: int) -> int:
    """The step cap when none is given: ``AUTO_EPOCHS`` passes over the inputs, within
    [``AUTO_MIN_STEPS``, ``AUTO_MAX_STEPS``]; training usually stops before it (:class:`fit.Stop`).

    >>> auto_steps(16, 8), auto_steps(300, 16), auto_steps(100_000, 8)
    (200, 563, 3000)
    """
    return min(AUTO_MAX_STEPS, max(AUTO_MIN_STEPS, math.ceil(AUTO_EPOCHS * n_inputs / batch_size)))


def check_every(n_inputs: int, batch_size: int) -> int:
    """Steps between two probe measurements: about one pass over the inputs, within [10, 100]."""
    return max(10, min(100, math.ceil(n_inputs / batch_size)))


def _probe(train: list) -> list:
    """The first ``PROBE_INPUTS`` training examples that carry a loss: the inputs whose agreement decides when to stop."""
    return [e for e in train if e.sequence is not None or e.choices][:PROBE_INPUTS]


# ---------------------------------------------------------------------------------- checks, inputs

def _inputs(teacher, prompts, synthesize, seed_examples, discriminator, holdout, eval_prompts, seed, device, *,
            progress: bool = False, adapter=None, scale: distill_scale.Scale | None = None):
    """``(training prompts, held-out prompts, report section)`` from the one source given (checked by
    :meth:`DistillOptions.check`); a synthesis with a work folder resumes there
    (:func:`paw.transfer.distill.scale.synthesized`)."""
    if synthesize:
        seeds = synthesis.check_seeds(prompts_from(seed_examples or [], what="seed examples"))
        cached = scale is not None and scale.work is not None
        key = distill_scale.synthesis_key(teacher.name, adapter, seeds, synthesize, seed, discriminator) if cached else ""
        made, stats = distill_scale.synthesized(
            scale if cached else None, key,
            lambda state, on_round: synthesis.synthesize(
                teacher.model, teacher.tokenizer, seeds, synthesize, seed=seed,
                filter_lines=sample_texts("en") if discriminator else None, device=device, progress=progress,
                state=state, on_round=on_round))
        info = {"source": "synthesized", "seed_examples": len(seeds), "discriminator": discriminator,
                "synthesis": stats}
        inputs = made
    elif isinstance(prompts, str):
        if prompts != GENERIC:
            raise PawError(f"prompts={prompts!r}: pass a list of inputs or 'generic'")
        inputs, info = generic_prompts(sample_texts("en")), {"source": "generic"}
    else:
        inputs, info = prompts_from(prompts), {"source": "prompts"}
    if eval_prompts is not None:  # taken as given; an overlap with the inputs is counted, not removed
        train, held = inputs, prompts_from(eval_prompts, what="evaluation prompts")
        info.update(held_out_from="eval_prompts",
                    held_out_also_inputs=len({h.text for h in held} & {p.text for p in train}))
    else:
        train, held = split_holdout(inputs, holdout, seed=seed)
        info["held_out_from"] = "inputs" if held else "none (fewer than 10 inputs or holdout 0)"
    info.update(count=len(inputs), train=len(train), held_out=len(held),
                with_choices=sum(bool(p.pairs) for p in train))
    return train, held, info


def agreement_inputs(examples: list, seed: int, most: int | None = None) -> list:
    """At most ``most`` of ``examples``, drawn by ``seed`` and kept in their order: what the agreement
    before and after training is measured on (the same ones both times, on every rank).

    >>> agreement_inputs(list(range(5)), 0, most=3) == agreement_inputs(list(range(5)), 0, most=3)
    True
    >>> agreement_inputs(list(range(5)), 0, most=9)
    [0, 1, 2, 3, 4]
    """
    most = AGREEMENT_INPUTS if most is None else most
    if len(examples) <= most:
        return list(examples)
    picked = sorted(random.Random(f"paw-agreement-{seed}").sample(range(len(examples)), most))
    return [examples[i] for i in picked]


def _visited(inputs: list[Prompt], steps: int, batch_size: int, seed: int) -> list[Prompt]:
    """The inputs that ``steps`` batches of ``batch_size`` reach, in their order; the teacher works on no other.

    With more inputs than ``steps * batch_size`` the rest would cost a continuation each and never
    be trained on.
    """
    reached = {i for batch in batches_in_order(len(inputs), batch_size, steps, seed) for i in batch}
    return inputs if len(reached) == len(inputs) else [p for i, p in enumerate(inputs) if i in reached]


def _check_shift(shift: distill_train.Shift, vocab: distill_train.Vocab, inputs: list[Prompt]) -> None:
    """Refuse the shift target where it cannot be carried: a teacher with no adapter to switch off, or
    inputs without choices across tokenizers with no shared cuts (the text alone is the teacher's)."""
    if shift.teacher_off is None:
        raise PawError("--target shift needs the teacher with its adapter unmerged (a PEFT model), to compare it "
                       "with and without the adapter")
    if not fit.text_carries(vocab, shift) and not any(p.pairs for p in inputs):
        raise PawError("--target shift cannot be carried on these inputs: they have no answer choices and the "
                       "tokenizers differ, so no next-token shift can be compared; add --byte-kl (the cuts both "
                       "tokenizations share) or --next-words K (the teacher's next words as choices), or use "
                       "--target teacher")
