"""Task LoRAs on real benchmarks, moved across families by distillation (issue 26): ``paw bench real --parts tasks``.

The question the invented facts cannot answer: does ``distill`` move the kind of LoRA PAW was made
for, a task LoRA whose gain is real but modest, onto a target that may already be better than the
teacher? For each task and each direction (SmolLM2-135M -> Gemma-3-270M and back):

1. a LoRA is trained with labels on the task's training split on the source (the teacher's LoRA)
   and on the target (the ceiling of the recovered fraction), with one fixed recipe (:data:`RECIPE`);
2. ``distill_lora`` with its defaults except the step budget moves the source's LoRA to the target
   from the training inputs *without their answers* (their choices are kept: the choice KL);
3. every condition is scored item by item on the whole test split: source base, source + LoRA,
   target base, target + its own LoRA, target + moved LoRA; ``kept`` and ``recovered`` come with a
   paired bootstrap (:mod:`paw.bench.stats`), the source's own gain with its paired stderr and
   whether it reaches :data:`MIN_SOURCE_Z` stderrs (the bar for a task to say anything).

The tasks and their splits (:data:`paw.bench.real.task_sets.TASKS`) were fixed before any transfer result was seen, for the
reasons in docs/distill.md#real-tasks. Each scored condition is cached in the work folder as it is
made (:func:`paw.io.json_file`), so a killed run resumes where it stopped; the whole part takes hours
on a CPU and minutes on one GPU.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from paw.bench.real.cache import Cache, Failed
from paw.bench.real.task_sets import load_task
from paw.bench.stats import accuracy, kept, paired_difference, recovered
from paw.bench.testbed import (
    Base,
    adapter_deltas,
    applied,
    choice_lls,
    picked_right,
    score_items,
    train_adapter,
    without_adapter,
)
from paw.data import sample_texts
from paw.errors import PawError
from paw.io.adapter import LoraAdapter
from paw.io.tokenizer import open_tokenizer
from paw.io.train_state import load_train_state, read_synthesized, save_train_state
from paw.progress import status
from paw.train_state import Checkpoints
from paw.transfer.distill import LM, distill_lora
from paw.transfer.distill.prompts import Prompt
from paw.transfer.distill.scale import Scale
from paw.transfer.distill.synthesis import discriminator_passes
from paw.transfer.summary import DistillSummary

MIN_SOURCE_Z = 5.0    # the source's gain must reach this many paired stderrs for the task to count
SAVE_EVERY = 25       # distillation steps between checkpoints: a run killed mid-distillation resumes there


@dataclass(frozen=True)
class Recipe:
    """One LoRA recipe for every task, model and direction (the LoRAs with labels and the distillation)."""

    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_steps: int = 300          # 2,400 labelled examples: about one pass over a task's training inputs
    lora_batch: int = 8
    lora_lr: float = 2e-4
    train_inputs: int = 1000       # training inputs distillation sees (seeded subset; the LoRAs see all)
    distill_steps: int = 300       # a fixed budget (the automatic one may run 3,000 steps: hours per run on a CPU)
    # BoolQ's passages (~600 tokens) in batches of 8 through SmolLM2's 30 layers held 14 GB of activations
    gradient_checkpointing: bool = True
    # Trans-LoRA's setting: no task inputs at hand but a few seeds; the teacher writes the rest
    synth_inputs: int = 1000       # inputs the teacher writes (0: skip the synthesized condition)
    synth_seeds: int = 5           # the first of the seeded label-free inputs, fixed before any result
    token_focus: float = 0.5       # the token-focus variant's share of continuation tokens (the demo's best)


RECIPE = Recipe()


def work_folder(cache: Cache, key: str) -> Path:
    """The work folder of the distillation cached under ``key`` (its checkpoints, continuations, synthesis)."""
    return cache.folder / f"{key}-work"


def resumable(cache: Cache, key: str, recipe: Recipe, seed: int) -> Scale:
    """A distillation that checkpoints every :data:`SAVE_EVERY` steps into ``<key>-work`` beside its
    adapter, resumes from there, and caches the teacher's continuations there too (an hour of a CPU
    run is not lost to a killed session)."""
    work = work_folder(cache, key)
    settings = {"key": key, "steps": recipe.distill_steps, "batch_size": recipe.lora_batch, "seed": seed,
                "inputs": recipe.train_inputs, "token_focus": recipe.token_focus, "synth_inputs": recipe.synth_inputs}
    return Scale(work=work, checkpoints=_checkpoints(work, settings))


def _checkpoints(work: Path, settings: dict) -> Checkpoints:
    """Every :data:`SAVE_EVERY` steps into ``work``, resumed from what is there when ``settings`` match."""
    return Checkpoints(SAVE_EVERY, save=partial(save_train_state, work), state=load_train_state(work),
                       settings=settings, where=str(work))


def _scored(model, tokenizer, items, adapter: LoraAdapter | None = None, *, what: str = "") -> list[int]:
    status(f"tasks: scoring {what} on {len(items)} test items")
    if adapter is None:
        return score_items(model, tokenizer, items, progress=True)
    with applied(model, adapter_deltas(adapter)):
        return score_items(model, tokenizer, items, progress=True)


def _trained(base, items, recipe: Recipe, seed: int, cache: Cache):
    """``base``'s labelled LoRA, checkpointed every :data:`SAVE_EVERY` steps into ``lora-NAME-work`` and resumed
    from there (byte-identical to a run that was never stopped)."""
    status(f"tasks: training the LoRA of {base.name} ({recipe.lora_steps} steps of {recipe.lora_batch})")
    key = f"lora-{base.name}"
    checkpoints = _checkpoints(work_folder(cache, key), {
        "key": key, "steps": recipe.lora_steps, "batch_size": recipe.lora_batch, "lr": recipe.lora_lr,
        "rank": recipe.lora_rank, "alpha": recipe.lora_alpha, "seed": seed, "items": len(items)})
    return train_adapter(base, items, recipe, seed, gradient_checkpointing=recipe.gradient_checkpointing,
                         progress=True, checkpoints=checkpoints)


def _side(base, adapter: LoraAdapter | None = None) -> LM:
    """A distillation side from a bench ``Base``; with ``adapter`` (merged in place by the caller), the
    context that takes it out again, so the teacher's excess can be measured."""
    off = without_adapter(base.model, adapter) if adapter is not None else None
    return LM(base.model, base.tokenizer, base.name, tokenizer_info=open_tokenizer(base.folder), adapter_off=off)


def _four_conditions(source, target, lora_s, lora_t, test_items, cache: Cache, seconds: dict) -> dict[str, list[int]]:
    """Per-item outcomes of the source and the target, each bare and with its own LoRA (cached). ``lora_t``
    None: the target LoRA's score is cached and the adapter is not (:func:`_reference_lora`)."""
    out: dict[str, list[int]] = {}
    for key, side, kind, adapter in (("source base", source, "base", None), ("source + LoRA", source, "lora", lora_s),
                                     ("target base", target, "base", None), ("target + own LoRA", target, "lora", lora_t)):
        name = f"score-{side.name}-{kind}"
        if kind == "lora" and adapter is None:
            out[key], seconds[name] = cache.found(name), 0.0
            continue
        out[key], seconds[name] = cache.scores(name, lambda b=side, a=adapter, w=f"{key} ({side.name})":
                                               _scored(b.model, b.tokenizer, test_items, a, what=w), adapter)
    return out


def _reference_lora(target, train_items: list, cache: Cache, recipe: Recipe, seed: int) -> tuple[LoraAdapter | None, float]:
    """The target's own LoRA and its training seconds, or ``(None, 0.0)`` where its score is cached but the
    adapter is not: it gives the directions nothing but the "target + own LoRA" reference score, so a work
    folder that travelled without adapters (a new machine, a GPU lease) does not train it again for a score
    it has (4,604 s on CPU for Gemma-3's ARC-Easy LoRA)."""
    if cache.found(f"score-{target.name}-lora") is not None and not (cache.folder / f"lora-{target.name}.meta.json").is_file():
        return None, 0.0
    adapter, seconds, _ = own_lora(target, train_items, cache, recipe=recipe, seed=seed)
    return adapter, seconds


def own_lora(side, train_items: list, cache: Cache, *, recipe: Recipe = RECIPE, seed: int = 0
             ) -> tuple[LoraAdapter, float, dict]:
    """``side``'s LoRA trained with labels on ``train_items`` (cached as ``lora-NAME``): adapter, seconds, report."""
    return cache.adapter(f"lora-{side.name}", lambda: _trained(side, train_items, recipe, seed, cache))


def run_direction(source, target, train_items: list, test_items: list, cache: Cache, *, recipe: Recipe = RECIPE,
                  seed: int = 0, n_boot: int = 1000, device: str = "cpu") -> dict:
    """One task moved ``source`` -> ``target`` (bench ``Base`` s): every condition scored on ``test_items``."""
    s, t = source.name, target.name
    seconds: dict[str, float] = {}
    lora_s, seconds[f"train {s}"], _ = own_lora(source, train_items, cache, recipe=recipe, seed=seed)
    lora_t, seconds[f"train {t}"] = _reference_lora(target, train_items, cache, recipe, seed)
    out = _four_conditions(source, target, lora_s, lora_t, test_items, cache, seconds)
    prompts = label_free_inputs(train_items, recipe, seed)

    def distill():
        status(f"tasks: distill {s} -> {t} ({recipe.distill_steps} steps, {len(prompts)} label-free inputs)")
        with applied(source.model, adapter_deltas(lora_s)):
            moved, report = distill_lora(lora_s, _side(source, lora_s), _side(target), prompts=prompts,
                                         steps=recipe.distill_steps, batch_size=recipe.lora_batch, seed=seed,
                                         device=device, target_name=t, progress=True,
                                         scale=resumable(cache, f"distilled-{s}-to-{t}", recipe, seed))
        d = DistillSummary.from_report(report)
        return moved, {"losses": d.losses, "agreement_before": d.agreement_before, "agreement_after": d.agreement_after,
                       "loss_tail_drop": d.loss_tail_drop, "warnings": report["warnings"],
                       **_diverged(report)}

    try:
        moved, seconds[f"distill {s} -> {t}"], report = cache.adapter(f"distilled-{s}-to-{t}", distill)
    except Failed as e:
        return _base_conditions(out, seconds, n_boot=n_boot, seed=seed) | {"failed": str(e)}
    out["target + moved LoRA"], seconds[f"score-{t}-moved"] = cache.scores(
        f"score-{t}-moved-from-{s}", lambda: _scored(target.model, target.tokenizer, test_items, moved,
                                                     what=f"{t} + the LoRA moved from {s}"), moved, source=lora_s)
    return summarise(out, seconds, report, n_boot=n_boot, seed=seed)


def label_free_inputs(train_items: list, recipe: Recipe, seed: int) -> list[Prompt]:
    """The seeded subset of the training items distillation sees, answers dropped (their choices stay)."""
    inputs = random.Random(f"paw-real-task-inputs-{seed}").sample(train_items, min(recipe.train_inputs,
                                                                                     len(train_items)))
    return [Prompt.of(item) for item in inputs]


VARIANTS = {  # other moves of the same LoRA, after both directions' main results
    # the control (added 2026-11-26 after the first main result, before its own): the same move with the
    # source *without* its LoRA as teacher, so the main move's gain splits into what the LoRA taught and
    # what any better teacher would have (a student weaker than its teacher's base gains from the base alone)
    "base-teacher": "control: the source base as teacher",
    # fixed before any result:
    "synthesized": "from the teacher's own inputs",   # Trans-LoRA: 1,000 inputs written from 5 seeds
    "token-focus": "with --token-focus 0.5",         # TiTok's token selection on the same label-free inputs
    # issue 51, fixed 2026-11-29 before any result: the student learns its base + the adapter's shift (scale 1)
    "shift": "with --target shift",
    # and its ceiling, no training: the target base scored with the source's shift added per choice
    "proxy": "proxy-tuning (no training)",
}


def run_variant(source, target, train_items: list, test_items: list, cache: Cache, variant: str, *,
                recipe: Recipe = RECIPE, seed: int = 0, n_boot: int = 1000, device: str = "cpu") -> dict:
    """Another move of the same LoRA (:data:`VARIANTS`), after :func:`run_direction`, whose cached
    adapters and scores it reuses: ``synthesized`` distils from ``recipe.synth_inputs`` inputs the
    teacher writes from ``recipe.synth_seeds`` seeds (a synthesis that yields nothing is a result too:
    ``{"failed": why}``); ``token-focus`` from the main run's inputs with ``recipe.token_focus``;
    ``base-teacher`` from the main run's inputs with the source's base, its LoRA left out, as teacher
    (its ``vs_main`` is the main move's accuracy minus this one's, paired: what the LoRA itself carried)."""
    s, t = source.name, target.name
    seconds: dict[str, float] = {}
    lora_s, _, _ = own_lora(source, train_items, cache, recipe=recipe, seed=seed)
    lora_t, _ = _reference_lora(target, train_items, cache, recipe, seed)
    inputs = label_free_inputs(train_items, recipe, seed)
    taught = lora_s   # the adapter in the teacher (the LoRA also gives the new adapter its shape: rank, modules)
    if variant == "synthesized":
        seeds = inputs[:recipe.synth_seeds]
        key, how = "synth", dict(synthesize=recipe.synth_inputs, seed_examples=seeds)
        says = f"from {recipe.synth_inputs} inputs {s} writes from {len(seeds)} seeds"
        extra = {"seeds": [p.text for p in seeds]}
    elif variant == "base-teacher":
        key, how, taught = "base-teacher", dict(prompts=inputs), None
        says = f"with {s} alone as teacher, its LoRA left out (the control; {len(inputs)} label-free inputs)"
        extra = {}
    elif variant == "token-focus":
        key, how = "focus", dict(prompts=inputs, token_focus=recipe.token_focus)
        says = f"with token focus {recipe.token_focus} ({len(inputs)} label-free inputs)"
        extra = {}
    elif variant == "shift":
        key, how = "shift", dict(prompts=inputs, target="shift")
        says = f"with the shift target ({len(inputs)} label-free inputs)"
        extra = {}
    elif variant == "proxy":
        return proxy_reference(source, target, lora_s, lora_t, test_items, cache, n_boot=n_boot, seed=seed)
    else:
        raise PawError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")

    def distill():
        status(f"tasks: distill {s} -> {t} {says}")
        with contextlib.nullcontext() if taught is None else applied(source.model, adapter_deltas(taught)):
            moved, report = distill_lora(lora_s, _side(source, taught), _side(target), steps=recipe.distill_steps,
                                         batch_size=recipe.lora_batch, seed=seed, device=device, target_name=t,
                                         progress=True, scale=resumable(cache, f"distilled-{key}-{s}-to-{t}",
                                                                         recipe, seed), **how)
        return moved, {"inputs": report["distill"]["inputs"], "target": report["distill"].get("target"),
                       **_diverged(report)}

    try:
        moved, seconds[f"distill {s} -> {t}"], report = cache.adapter(f"distilled-{key}-{s}-to-{t}", distill)
    except PawError as e:  # a synthesis that yields nothing, a diverged run (Failed)
        return {"failed": str(e)} | extra
    out = _four_conditions(source, target, lora_s, lora_t, test_items, cache, {})
    out["target + moved LoRA"], seconds[f"score-{t}-moved-{key}"] = cache.scores(
        f"score-{t}-moved-{key}-from-{s}", lambda: _scored(target.model, target.tokenizer, test_items, moved,
                                                           what=f"{t} + the LoRA moved from {s} {VARIANTS[variant]}"),
        moved, source=lora_s)
    summary = summarise(out, seconds, report, n_boot=n_boot, seed=seed)
    inputs_report = report.get("inputs", report.get("synthesis"))   # runs before 2026-11-26 13:00 cached "synthesis"
    if variant == "synthesized":
        extra["discriminator"] = discriminator_check(source, lora_s, inputs, recipe, cache,
                                                     work_folder(cache, f"distilled-{key}-{s}-to-{t}"),
                                                     seed=seed, target=t)
    if variant == "base-teacher":
        main = cache.found(f"score-{t}-moved-from-{s}")   # absent where the main move failed
        extra = {"vs_main": None if main is None else paired_difference(main, out["target + moved LoRA"])}
    elif variant == "shift":
        extra = _vs_main(cache, s, t, out["target + moved LoRA"]) | {"target": report.get("target")}
    return {k: summary[k] for k in ("accuracy", "moved_gain", "kept", "recovered", "seconds")} | {
        "inputs": inputs_report} | extra


def _vs_main(cache: Cache, s: str, t: str, moved: list[int]) -> dict:
    """This move minus the main move, paired on the items (``vs_main``: positive when this one is better)."""
    main = cache.found(f"score-{t}-moved-from-{s}")   # absent where the main move failed
    return {"vs_main": None if main is None else paired_difference(moved, main)}


def proxy_reference(source, target, lora_s: LoraAdapter, lora_t: LoraAdapter | None, test_items: list, cache: Cache,
                    *, n_boot: int, seed: int) -> dict:
    """The shift target's ceiling, with no training: every test item scored as the target base plus what the
    source's LoRA changes in the source, per choice (proxy-tuning, :mod:`paw.evaluate.proxy`). Each model's
    per-choice log-likelihoods are cached (``choice-ll-NAME-KIND``); the outcomes go to
    ``score-T-moved-proxy-from-S`` beside the moves, so the table reads it as one of them."""
    from paw.evaluate.proxy import proxy_scores

    s, t = source.name, target.name

    def lls(side, adapter, what):
        def make():
            status(f"tasks: per-choice log-likelihoods of {what} on {len(test_items)} test items")
            if adapter is None:
                return choice_lls(side.model, side.tokenizer, test_items, progress=True)
            with applied(side.model, adapter_deltas(adapter)):
                return choice_lls(side.model, side.tokenizer, test_items, progress=True)
        return cache.scores(f"choice-ll-{side.name}-{'lora' if adapter else 'base'}", make, adapter,
                            field="choice_ll")[0]

    t_ll, e_ll, a_ll = lls(target, None, f"{t} base"), lls(source, lora_s, f"{s} + LoRA"), lls(source, None, f"{s} base")
    combined = [[ll for ll, _ in proxy_scores([(x, 0) for x in tr], [(x, 0) for x in er], [(x, 0) for x in ar])]
                for tr, er, ar in zip(t_ll, e_ll, a_ll, strict=True)]
    moved, _ = cache.scores(f"score-{t}-moved-proxy-from-{s}", lambda: picked_right(combined, test_items), lora_s)
    out = _four_conditions(source, target, lora_s, lora_t, test_items, cache, {})
    out["target + moved LoRA"] = moved
    summary = summarise(out, {}, {}, n_boot=n_boot, seed=seed)
    return {k: summary[k] for k in ("accuracy", "moved_gain", "kept", "recovered")} | _vs_main(cache, s, t, moved) | {
        "base_picks_agree": sum(int(r == picked) for r, picked in zip(picked_right(t_ll, test_items),
                                                                      out["target base"], strict=True)) / len(moved)}


DISCRIMINATOR_SAMPLE = 100   # synthesized inputs, and real ones, that the discriminator check judges


def discriminator_check(source, lora_s: LoraAdapter, inputs: list[Prompt], recipe: Recipe, cache: Cache, work: Path,
                        *, seed: int, target: str) -> dict:
    """What ``--discriminator`` would say of the inputs the teacher wrote, beside what it says of real ones.

    The synthesized move trains on every usable input the teacher writes (the setting fixed before any
    result); this only measures: of :data:`DISCRIMINATOR_SAMPLE` synthesized inputs and as many real
    label-free inputs (the seeds left out), drawn seeded, the fraction the teacher (source + LoRA) finds
    at least as task-like as its least task-like seed (:func:`paw.transfer.distill.synthesis.discriminator_passes`).
    The real inputs' fraction is the yardstick: a discriminator that passes half the real inputs says less of
    a synthetic one it drops. ``{"unavailable": why}`` where the synthesized inputs were not kept.
    """
    written = read_synthesized(work)
    if not written:
        return {"unavailable": f"no synthesized inputs kept in {work} (a run before synthesis states were kept)"}
    seeds, real = inputs[:recipe.synth_seeds], [p.text for p in inputs[recipe.synth_seeds:]]
    rng = random.Random(f"paw-discriminator-check-{seed}")
    picked = {"synthesized": rng.sample(written, min(DISCRIMINATOR_SAMPLE, len(written))),
              "real": rng.sample(real, min(DISCRIMINATOR_SAMPLE, len(real)))}
    out: dict[str, Any] = {"sampled": {k: len(v) for k, v in picked.items()}}
    for kind, texts in picked.items():
        def judge(texts=texts, kind=kind):
            status(f"tasks: discriminator on {len(texts)} {kind} inputs of {source.name}")
            with applied(source.model, adapter_deltas(lora_s)):
                return discriminator_passes(source.model, source.tokenizer, texts, seeds, sample_texts("en"))
        name = f"discriminator-{kind}-{source.name}" + (f"-to-{target}" if kind == "synthesized" else "")
        passes, seconds = cache.scores(name, judge, lora_s)
        out[kind] = accuracy([passes]) | {"seconds": seconds}
    a, b = out["synthesized"], out["real"]
    out["difference"] = {"difference": a["mean"] - b["mean"], "stderr": (a["stderr"] ** 2 + b["stderr"] ** 2) ** 0.5}
    return out


def _diverged(report: dict) -> dict:
    """``{"diverged_at_step": N}`` where distillation stopped at a NaN/Inf loss (its adapter is unusable)."""
    at = report.get("distill", {}).get("diverged_at_step")
    return {} if at is None else {"diverged_at_step": at}


def _base_conditions(out: dict[str, list[int]], seconds: dict[str, float], *, n_boot: int, seed: int) -> dict:
    """The four conditions without a moved adapter: accuracies and the source's gain."""
    gain = paired_difference(out["source + LoRA"], out["source base"])
    z = gain["difference"] / gain["stderr"] if gain["stderr"] > 0 else float("inf") * (gain["difference"] > 0)
    return {"items": len(out["target base"]), "accuracy": {k: accuracy([v]) for k, v in out.items()},
            "source_gain": {**gain, "z": z, "counts": z >= MIN_SOURCE_Z}, "seconds": seconds}


def summarise(out: dict[str, list[int]], seconds: dict[str, float], report: dict, *, n_boot: int, seed: int) -> dict:
    """Accuracies, the source's gain in paired stderrs, the moved adapter's gain over the target base,
    and the kept and recovered fractions, from the per-item outcomes of one direction."""
    moved = paired_difference(out["target + moved LoRA"], out["target base"])
    return _base_conditions(out, seconds, n_boot=n_boot, seed=seed) | {
            "moved_gain": moved,
            "kept": kept([out["target + moved LoRA"]], [out["target base"]], [out["source + LoRA"]],
                         [out["source base"]], n_boot=n_boot, seed=seed),
            "recovered": recovered([out["target + moved LoRA"]], [out["target base"]], [out["target + own LoRA"]],
                                   n_boot=n_boot, seed=seed),
            "distill": report, "seconds": seconds}


def part_tasks(opts, models: dict[str, Path], load, workdir: Path) -> dict[str, Any]:
    """Every task of ``opts.real_tasks`` in both directions between the two real models."""
    names = list(models)
    sides = {}
    for name in names:
        lm, tok = load(models[name], opts.device)
        sides[name] = Base(name, lm, tok, models[name])
    out: dict[str, Any] = {"recipe": RECIPE.__dict__, "min_source_z": MIN_SOURCE_Z, "tasks": {}}
    pairs = (names, names[::-1])
    work = {}
    for task in opts.real_tasks:   # every task's two main directions first: they are what the part is for
        train_items, test_items = load_task(opts.data, task, opts.seed)
        status(f"tasks: {task} ({len(train_items)} training items, {len(test_items)} test items)")
        work[task] = (train_items, test_items, Cache(workdir / "tasks" / task))
        directions = {f"{a} -> {b}": run_direction(sides[a], sides[b], *work[task], seed=opts.seed, n_boot=opts.n_boot,
                                                   device=opts.device) for a, b in pairs}
        out["tasks"][task] = {"train": len(train_items), "test": len(test_items), "directions": directions}
    for task in opts.real_tasks:   # then the variants, which reuse the main runs' cached work
        for variant in VARIANTS:
            for a, b in pairs:
                out["tasks"][task]["directions"][f"{a} -> {b}"][variant] = run_variant(
                    sides[a], sides[b], *work[task], variant, seed=opts.seed, n_boot=opts.n_boot, device=opts.device)
    return out
