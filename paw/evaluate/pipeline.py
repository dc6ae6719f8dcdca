"""``evaluate_model`` and ``train_lora_adapter``: what ``paw eval`` and ``paw train-lora`` run, from files.

Both read a multiple-choice JSON-lines file (:func:`paw.evaluate.formats.read_items`), load the model
through :mod:`paw.io.lm` and call the in-memory functions :func:`paw.evaluate.mc.evaluate` and
:func:`paw.evaluate.train.train_lora`::

    from paw.evaluate.options import EvalOptions
    from paw.evaluate.pipeline import evaluate_model
    evaluate_model(EvalOptions(model="./tiny/base", data="arc-easy_test.jsonl", limit=200)).metrics["accuracy"]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from paw import fsdp as fsdp_sharding
from paw.device import resolve_device
from paw.distributed import setup
from paw.errors import PawError
from paw.evaluate.cards import training_card
from paw.evaluate.chat import ChatFormat, pairs_of, prompt_of, renderer
from paw.evaluate.fewshot import with_examples
from paw.evaluate.formats import read_items
from paw.evaluate.gendata import read_gen_items
from paw.evaluate.generate import generate, score
from paw.evaluate.mc import evaluate
from paw.evaluate.options import EvalOptions
from paw.evaluate.perplexity import context_length, score_documents
from paw.evaluate.perplexity import summarize as perplexity_metrics
from paw.evaluate.train import train_lora
from paw.io.atomic import atomic_dir, atomic_outputs, check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.hub import quiet_transformers
from paw.io.lm import check_dtype, load_lm, write_adapter_into, write_results
from paw.io.manifest import describe_input, records_call, write_manifest
from paw.io.mcdata import write_records
from paw.io.model_card import write_card
from paw.io.textdata import read_documents
from paw.io.tracking import check_kind, log_once, make_tracker
from paw.io.train_state import (
    STATE_NAME,
    check_work_dir,
    load_train_state,
    remove_train_state,
    save_train_state,
    work_dir,
)
from paw.knobs import RunOptions
from paw.memory import plan, plan_line, with_measured, worth_saying
from paw.progress import status
from paw.train import Recipe
from paw.train_state import Checkpoints, every
from paw.validate import FLOAT32_MAX, finite

PathLike = str | Path


@dataclass(frozen=True)
class Evaluation:
    """Metrics of one model on one data file; ``output`` is the JSON written (None when not asked)."""

    metrics: dict[str, Any]
    output: Path | None
    tracking: Path | None          # where ``track`` logged, None for ``track='none'``


@records_call
def evaluate_model(options: EvalOptions, run: RunOptions = RunOptions(), *, progress: bool = True,
                   command: str | None = None) -> Evaluation:
    """Multiple-choice accuracy (raw and length-normalised) ± stderr, and the answers' loss and perplexity.

    ``run.track`` (none, csv, swanlab, wandb) logs to ``OUTPUT-tracking/`` (``./paw-runs/eval`` without ``output``).
    With ``proxy_base`` and ``proxy_adapter`` each choice is scored as the model's log-likelihood plus
    ``proxy_scale`` times what ``proxy_adapter`` changes in ``proxy_base``'s (:mod:`paw.evaluate.proxy`).
    ``num_fewshot`` puts solved examples of ``fewshot_data`` before each question (:mod:`paw.evaluate.fewshot`);
    ``text`` scores documents instead: word and byte perplexity, bits per byte (:mod:`paw.evaluate.perplexity`);
    ``generate`` generates greedily after prompts and scores exact matches (:mod:`paw.evaluate.generate`).
    ``apply_chat_template`` renders every context with the model's chat template (:mod:`paw.evaluate.chat`).
    """
    o = options
    o.check()
    quiet_transformers()
    check_kind(run.track)  # before any heavy work
    output = None if o.output is None else Path(o.output)
    run_dir = output.with_name(output.stem + "-tracking") if output else Path("paw-runs") / "eval"
    read = [o.model, o.data, o.text, o.fewshot_data, o.adapter, o.proxy_base, o.proxy_adapter]
    if output is not None:
        check_output(output, overwrite=run.overwrite, inputs=read)
        if run.track != "none":
            check_output(run_dir, overwrite=run.overwrite, inputs=read)
    if o.per_item is not None:
        check_output(o.per_item, overwrite=run.overwrite, inputs=read)

    metrics, records, settings = _scored(o, run.device, progress=progress)
    if o.per_item is not None:   # every item as lm-eval's --log_samples keeps it; the metrics file stays as it was
        write_records(o.per_item, records, overwrite=run.overwrite, inputs=read)
    inputs = describe_inputs(model=o.model, adapter=o.adapter, data=o.data, text=o.text, fewshot_data=o.fewshot_data,
                             proxy_base=o.proxy_base, proxy_adapter=o.proxy_adapter)
    config = {"command": command, **{k: v["path"] for k, v in inputs.items()}}
    tracking = run_dir if run.track != "none" else None
    if output is None:  # only the tracking log, in ./paw-runs/eval
        log_once(run.track, run_dir, config, {"test": metrics})
        return Evaluation(metrics, None, tracking)
    # the results and their tracking log appear together, or neither does
    with atomic_outputs([output, run_dir] if tracking else [output], overwrite=run.overwrite, inputs=read) as staging:
        write_results(staging / output.name, command=command, inputs=inputs, metrics=metrics, **settings)
        log_once(run.track, staging / run_dir.name, config, {"test": metrics}, shown=run_dir)
    return Evaluation(metrics, output, tracking)


PER_ITEM = ("correct", "correct_norm", "choice_logprobs")   # what summarize(per_item=True) adds


def _scored(o: EvalOptions, device: str, *, progress: bool) -> tuple[dict, list[dict], dict]:
    """``(metrics, per-item records, settings for the results file)`` of a multiple-choice or a perplexity run."""
    if o.text is not None:
        documents = read_documents(o.text, limit=o.limit)
        lm, tokenizer = load_lm(o.model, adapter=o.adapter, device=resolve_device(device), dtype=o.dtype)
        length = o.max_length or context_length(lm, tokenizer)
        rows = score_documents(lm, tokenizer, documents, max_length=length, batch_size=o.batch_size,
                               progress=progress)
        return perplexity_metrics(rows), rows, {"limit": o.limit, "max_length": length}
    if o.generate:
        return _generated(o, device, progress=progress)
    items = read_items(o.data, format=o.format, limit=o.limit)
    drawn = None
    if o.num_fewshot:
        pool = read_items(o.fewshot_data, format=o.format)
        items, drawn = with_examples(items, pool, o.num_fewshot, seed=o.seed)
    chat = None
    if o.proxy_base is None:
        lm, tokenizer = load_lm(o.model, adapter=o.adapter, device=resolve_device(device), dtype=o.dtype)
        chat = _chat(o, tokenizer)
        metrics = evaluate(lm, tokenizer, items, batch_size=o.batch_size, progress=progress, per_item=True,
                           max_length=o.max_length, chat=chat)
    else:
        metrics = _proxy_tuned(o, items, device=device, progress=progress)
    records = item_records(items, metrics, fewshot=drawn)
    if chat is not None:   # what was scored: the rendered contexts and the choices without their space
        for record, pairs in zip(records, pairs_of(items, chat), strict=True):
            record["pairs"] = [list(pair) for pair in pairs]
    settings = {"format": o.format, "limit": o.limit, **_shared_settings(o)}
    return {k: v for k, v in metrics.items() if k not in PER_ITEM}, records, settings


def _chat(o: EvalOptions, tokenizer) -> ChatFormat | None:
    """The chat format ``o`` asks for (None without ``apply_chat_template``); a tokenizer without a template is
    refused, naming the model."""
    if not o.apply_chat_template:
        return None
    return ChatFormat(renderer(tokenizer, model=o.model), system=o.system_instruction, multiturn=o.multiturn())


def _shared_settings(o: EvalOptions) -> dict:
    """What the results file records of the few-shot and chat flags, when they are set."""
    settings = {"num_fewshot": o.num_fewshot, "seed": o.seed} if o.num_fewshot else {}
    if o.apply_chat_template:
        settings |= {"apply_chat_template": True, "fewshot_as_multiturn": o.multiturn()}
        if o.system_instruction is not None:
            settings["system_instruction"] = o.system_instruction
    return settings


def _generated(o: EvalOptions, device: str, *, progress: bool) -> tuple[dict, list[dict], dict]:
    """``(metrics, per-item records, settings)`` of ``--generate``: greedy generation scored by exact match."""
    items = read_gen_items(o.data, limit=o.limit)
    drawn = None
    if o.num_fewshot:
        items, drawn = with_examples(items, read_gen_items(o.fewshot_data), o.num_fewshot, seed=o.seed)
    lm, tokenizer = load_lm(o.model, adapter=o.adapter, device=resolve_device(device), dtype=o.dtype)
    chat = _chat(o, tokenizer)
    prompts = [prompt_of(item, chat) for item in items]
    generated = generate(lm, tokenizer, prompts, max_new_tokens=o.max_gen_tokens, until=o.until,
                         batch_size=o.batch_size, max_length=o.max_length, progress=progress)
    metrics, hits = score(items, generated, o.rules())
    records = [{"index": k, "id": item.id, "prompt": prompt, "generated": g.text, "references": list(item.references),
                "match": hit, "tokens": g.tokens, "stop": g.stop}
               for k, (item, prompt, g, hit) in enumerate(zip(items, prompts, generated, hits, strict=True))]
    for record, picks in zip(records, drawn or (), strict=False):
        record["fewshot"] = picks
    settings = {"limit": o.limit, "max_gen_tokens": o.max_gen_tokens, "until": list(o.until),
                **o.rules().changes(), **_shared_settings(o)}
    return metrics, records, settings


def item_records(items, metrics: dict, *, fewshot: list[list[int]] | None = None) -> list[dict]:
    """One record per item: its question, choices, answer, every choice's summed log-likelihood, the pick and
    whether it (and the length-normalised pick) was right; with ``fewshot``, its examples' items in the
    few-shot source (0-based, as read) and the text they make before the question (``prefix``)."""
    from paw.evaluate.mc import argmax_choice

    records = [{"index": k, "id": item.id, "question": item.question, "choices": list(item.choices),
                "answer": item.answer, "choice_logprobs": lls, "pick": argmax_choice(lls), "correct": right,
                "correct_norm": right_norm}
               for k, (item, lls, right, right_norm) in enumerate(zip(items, metrics["choice_logprobs"],
                                                                       metrics["correct"], metrics["correct_norm"],
                                                                       strict=True))]
    for record, item, picks in zip(records, items, fewshot or (), strict=False):
        record |= {"fewshot": picks, "prefix": item.prefix}
    return records


def _proxy_tuned(o: EvalOptions, items, *, device, progress) -> dict:
    """Metrics of the model (+ its adapter) with the shift of ``o.proxy_adapter`` on ``o.proxy_base`` added per
    choice; one model in memory at a time (the target, then the proxy base with its adapter)."""
    from paw.evaluate.mc import choice_scores, summarize
    from paw.evaluate.proxy import proxy_scores

    dev = resolve_device(device)
    lm, tokenizer = load_lm(o.model, adapter=o.adapter, device=dev, dtype=o.dtype)
    scores = partial(choice_scores, items=items, batch_size=o.batch_size, progress=progress, max_length=o.max_length)
    target = scores(lm, tokenizer)
    del lm
    expert_lm, expert_tok = load_lm(o.proxy_base, adapter=o.proxy_adapter, device=dev, dtype=o.dtype)
    expert = scores(expert_lm, expert_tok)
    with expert_lm.disable_adapter():
        anti = scores(expert_lm, expert_tok)
    metrics = summarize(items, proxy_scores(target, expert, anti, o.proxy_scale), per_item=True)
    alone = summarize(items, target)
    return {**metrics, "proxy": {"scale": o.proxy_scale, "target_alone": {k: alone[k] for k in ("accuracy", "stderr")},
                                 "note": "per choice: target + scale x (proxy base with adapter - without); "
                                         "loss and perplexity are the target's own"},
            "loss": alone["loss"], "perplexity": alone["perplexity"]}


@dataclass(frozen=True)
class TrainedAdapter:
    """A LoRA written to ``output`` (PEFT folder with ``metrics.json``); ``metrics`` as in that file."""

    output: Path
    metrics: dict[str, Any]
    tracking: Path | None          # OUTPUT-tracking/ when ``track`` is not 'none'


@records_call
def train_lora_adapter(model: PathLike, data: PathLike, output: PathLike, *, rank: int = 16, alpha: float = 32,
                       target_modules: str = "all-linear", steps: int = 600, batch_size: int = 6, lr: float = 1.5e-5,
                       seed: int = 0, eval_data: PathLike | None = None, format: str = "auto",
                       limit: int | None = None, eval_limit: int | None = None, save_every: int | None = None,
                       resume: bool = False, gradient_checkpointing: bool = False, fsdp: bool = False,
                       device: str = "cpu", dtype: str = "auto", track: str = "none", overwrite: bool = False,
                       schedule: str = "constant", warmup: int = 0, accumulation: int = 1, clip: float | None = None,
                       command: str | None = None) -> TrainedAdapter:
    """Train a PEFT LoRA on the correct answers of a multiple-choice set (loss on answer tokens only).

    With ``eval_data`` the metrics hold the test scores before and after training; ``save_every``
    also writes ``OUTPUT/checkpoint-STEP`` adapters and a resumable ``OUTPUT-work/train-state.pt``
    that ``resume`` continues from. The folder appears atomically. Under ``torchrun`` every rank
    trains on its share of each batch and rank 0 alone writes (:mod:`paw.distributed`); with ``fsdp``
    the model's weights are also sharded over the ranks (:mod:`paw.fsdp`). ``schedule``, ``warmup``,
    ``accumulation`` and ``clip`` shape the optimiser steps (:class:`paw.train.Recipe`).
    """
    quiet_transformers()
    fsdp_sharding.check(fsdp, save_every=save_every, resume=resume)
    output = Path(output)
    check_output(output, overwrite=overwrite, inputs=[model, data, eval_data])
    finite("--lr", lr, positive=True, limit=FLOAT32_MAX)  # 1e39 is inf to float32 AdamW
    finite("--alpha", alpha, positive=True)  # LoRA scales by alpha / r: 0 is off, < 0 flips it
    recipe = Recipe(steps=steps, lr=lr, schedule=schedule, warmup=warmup, accumulation=accumulation,
                    clip=clip or None, seed=seed).check()
    check_dtype(dtype)
    if save_every or resume:
        check_work_dir(work_dir(output), flag="--save-every" if save_every else "--resume")
    items = read_items(data, format=format, limit=limit)
    eval_items = read_items(eval_data, format=format, limit=eval_limit) if eval_data else None
    ranks, dev = setup(resolve_device(device))
    predicted = _announce(model, items, rank=rank, target_modules=target_modules, batch_size=batch_size, steps=steps,
                          device=dev, world=ranks.world, dtype=dtype, fsdp=fsdp)
    if fsdp:  # loaded on the CPU; each rank's shard moves to its device
        lm, tokenizer = load_lm(model, dtype=fsdp_sharding.load_dtype(dtype, dev, _config(model)))
    else:
        lm, tokenizer = load_lm(model, device=dev, dtype=dtype)
    sharding = dict(fsdp=True, device=dev) if fsdp else {}
    settings = dict(rank=rank, alpha=alpha, target_modules=target_modules, steps=steps, batch_size=batch_size,
                    lr=lr, seed=seed, **recipe.changes())
    inputs = describe_inputs(model=model, data=data, eval_data=eval_data)
    work = work_dir(output)
    checkpoints = Checkpoints(save_every, save=partial(save_train_state, work) if ranks.main else None,
                              state=load_train_state(work) if resume else None, where=str(work / STATE_NAME),
                              settings={**settings, "data": inputs["data"], "limit": limit})
    if not ranks.main:  # the other ranks train their share and write nothing
        peft_model, _ = train_lora(lm, tokenizer, items, **settings, checkpoints=checkpoints,
                                   gradient_checkpointing=gradient_checkpointing, progress=False,
                                   eval_items=eval_items if fsdp else None, **sharding)
        if fsdp:
            fsdp_sharding.full_lora_state(peft_model)  # rank 0 gathers the factors: every rank takes part
        return TrainedAdapter(output, {}, None)
    run_dir = output.with_name(output.name + "-tracking")  # beside the adapter, which appears atomically
    tracker = make_tracker(track, run_dir, {"name": output.name, **settings, **{k: v["path"] for k, v in inputs.items()}})
    with atomic_dir(output, overwrite=overwrite, inputs=[model, data, eval_data]) as tmp:
        def checkpoint(step: int, peft_model) -> None:
            if every(save_every, step, steps):
                write_adapter_into(peft_model, tmp / f"checkpoint-{step}", base=model)

        try:
            peft_model, metrics = train_lora(lm, tokenizer, items, **settings, eval_items=eval_items, tracker=tracker,
                                             on_step=checkpoint, checkpoints=checkpoints,
                                             gradient_checkpointing=gradient_checkpointing, **sharding)
        finally:
            tracker.finish()
        metrics["memory"] = with_measured(predicted, dev)
        write_adapter_into(peft_model, tmp, base=model, extra_files={"metrics.json": metrics},
                           state_dict=fsdp_sharding.full_lora_state(peft_model) if fsdp else None)
        write_manifest(tmp, "paw_train_lora.json", command=command, inputs=inputs,
                       settings=settings)
        write_card(tmp, training_card(output, lora=True, model=model, data=data, eval_data=eval_data,
                                      settings=settings, metrics=metrics, command=command))
    remove_train_state(work)  # the output is complete: nothing left to resume
    return TrainedAdapter(output, metrics, run_dir if track != "none" else None)


def _config(model: PathLike) -> dict | None:
    try:
        return open_checkpoint(model).config
    except PawError:  # a GGUF file, or a Hub ID that cannot be fetched: load_lm names what is wrong with it
        return None


def _announce(model: PathLike, items, *, rank: int, target_modules: str, batch_size: int, steps: int, device, world: int,
              dtype: str, fsdp: bool = False) -> dict | None:
    """Predict peak memory per device and time from the model's config; say it before the model is loaded."""
    try:
        config = open_checkpoint(model).config or {}
    except PawError:  # a GGUF file or an unfetchable Hub ID: load_lm reports what is wrong with it, if anything
        return None
    sample = items[:256]
    words = sum(len(" ".join((it.question, *it.choices[:1])).split()) for it in sample)
    answer_words = sum(len(it.choices[0].split()) if it.choices else 1 for it in sample)
    seq = max(8, words * 4 // 3 // max(1, len(sample)))   # about 4 tokens per 3 words
    kept = max(1, answer_words * 4 // 3 // max(1, len(sample)) + 1)   # only the answers reach the LM head
    modules = None if target_modules == "all-linear" else [m.strip() for m in target_modules.split(",")]
    predicted = plan(config, lora_rank=rank, target_modules=modules, batch_size=batch_size, steps=steps,
                     max_new_tokens=0, n_inputs=0, prompt_tokens=seq, kept_tokens=kept, device_type=device.type,
                     world=world, dtype=dtype, fsdp=fsdp)
    if worth_saying(predicted):
        status(f"train-lora: {plan_line(predicted)}")
    return predicted


def describe_inputs(**paths) -> dict:
    """``{name: {'path': ..., 'bytes': ...}}`` for the paths given (None skipped), for provenance JSON."""
    return {name: describe_input(path) for name, path in paths.items() if path is not None}
