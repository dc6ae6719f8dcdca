"""The ``--method distill`` options of ``paw transfer-lora`` and its handler (parse, one call, print).

Kept apart from :mod:`paw.cli.transfer` so that the data-free command reads as before; the options
are parameters of that one command (``paw transfer-lora --method distill --prompts FILE ...``).
"""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import SEED, choices
from paw.transfer.distill import DISTILL, INITS  # light: torch is imported inside the functions

DistillInit = choices("DistillInit", INITS)

PROMPTS = typer.Option(None, "--prompts", help="[distill] Task inputs: a file paw eval reads (answers ignored) "
                       "or text, one input per line; or 'generic'.")
SYNTHESIZE = typer.Option(0, "--synthesize", min=0, help="[distill] Let the teacher write N inputs from "
                          "--seed-examples.")
SEED_EXAMPLES = typer.Option(None, "--seed-examples", help="[distill] At most 5 task inputs for --synthesize.")
DISCRIMINATOR = typer.Option(False, "--discriminator", help="[distill] Keep only synthetic inputs the teacher "
                             "finds task-like (likelihood ratio vs generic text).")
EVAL_PROMPTS = typer.Option(None, "--eval-prompts", help="[distill] Held-out inputs for the agreement figures "
                            "[default: --holdout of the inputs].")
HOLDOUT = typer.Option(0.1, "--holdout", help="[distill] Fraction of inputs kept for agreement.")
INIT = typer.Option("auto", "--init", help="[distill] auto: start from the weight-space transfer when the target "
                    "is related; none: PEFT init.")
RANK = typer.Option(None, "--rank", min=1, help="[distill] LoRA rank [default: the source's].")
ALPHA = typer.Option(None, "--alpha", help="[distill] LoRA alpha [default: the source's].")
TARGET_MODULES = typer.Option(None, "--target-modules", help="[distill] Comma list [default: the source adapter's "
                              "module types that the target has].")
MAX_STEPS = typer.Option(200, "--max-steps", min=1, help="[distill] Optimiser steps.")
BATCH_SIZE = typer.Option(8, "--batch-size", min=1, help="[distill] Inputs per step.")
LR = typer.Option(1e-4, "--lr", help="[distill] AdamW learning rate.")
MAX_NEW_TOKENS = typer.Option(16, "--max-new-tokens", min=1, help="[distill] Teacher continuation length (it "
                              "also stops at a line break).")
DISTILL_SEED = SEED

_DEFAULTS = {"prompts": None, "synthesize": 0, "seed_examples": None, "discriminator": False, "eval_prompts": None,
             "holdout": 0.1, "init": "auto", "rank": None, "alpha": None, "target_modules": None, "max_steps": 200,
             "batch_size": 8, "lr": 1e-4, "max_new_tokens": 16, "seed": 0}


def handle(method: str, given: dict) -> bool:
    """Run ``--method distill`` and return True; for another method refuse distill options, return False."""
    if method != DISTILL:
        used = [k for k, v in _DEFAULTS.items() if getattr(given[k], "value", given[k]) != v]
        if used:
            from paw.errors import PawError

            raise PawError(f"--{used[0].replace('_', '-')} is a --method distill option")
        return False
    _distill(given)
    return True


def _distill(a: dict) -> None:
    from paw.cli._options import command_line, track_once
    from paw.io.tracking import check_kind
    from paw.transfer.distill_run import run_distill

    check_kind(a["track"])
    modules = [m.strip() for m in a["target_modules"].split(",") if m.strip()] if a["target_modules"] else None
    result = run_distill(
        a["adapter"], a["source_base"], a["target_base"], a["output"], prompts=a["prompts"],
        synthesize=a["synthesize"], seed_examples=a["seed_examples"], eval_prompts=a["eval_prompts"],
        discriminator=a["discriminator"], init=getattr(a["init"], "value", a["init"]), rank=a["rank"],
        alpha=a["alpha"], target_modules=modules, steps=a["max_steps"], batch_size=a["batch_size"], lr=a["lr"],
        max_new_tokens=a["max_new_tokens"], holdout=a["holdout"], seed=a["seed"], device=a["device"],
        overwrite=a["overwrite"])
    d = result.report["distill"]
    typer.echo(f"distilled {d['student']['modules']} LoRA modules on {d['inputs']['train']} {d['inputs']['source']} "
               f"inputs, {d['steps']} steps ({' + '.join(d['losses'])}; init: {d['init']['how']}) -> {result.output}")
    before, after = d["agreement"]["before"], d["agreement"]["after"]
    for key, label in (("top1_agreement", "top-1 agreement"), ("kl", "KL"), ("choice_agreement", "choice agreement")):
        if after[key] is not None:
            typer.echo(f"{label} with the teacher on {d['agreement']['measured_on']}: {before[key]} -> {after[key]}")
    track_once(a["track"], Path(result.output), {"command": command_line(), "method": DISTILL, **result.inputs},
               {"distill": {k: d[k] for k in ("loss_start", "loss_end")} | {"agreement": after}})
