"""One variant of one direction of `paw bench real --parts tasks`, on its own: for a work folder that holds the
main run's score files but not its adapters (a new machine, a GPU lease that gets only what travels).

    python scripts/run_variant.py MODELS DATA WORK TASK SOURCE TARGET VARIANT [--device cuda] [--stand-in-loras]

It calls the bench's own ``run_variant`` (or, for VARIANT ``main``, ``run_direction``: the main move again, from
whatever source LoRA the cache holds; for ``lora``, ``own_lora``: the source's LoRA alone) on the bench's cache in ``WORK/tasks/TASK`` (reusing whatever is there,
writing what it makes) and writes the summary to ``WORK/variant-TASK-VARIANT-SOURCE-to-TARGET.json``, with
``vs_main`` (the main move minus this one, paired) where the main move's scores are cached. The target's own
LoRA is trained only where its score is not cached (it gives nothing else). Several may run at once on one
work folder if no two of them train the same LoRA: ``lora`` for each model first, the rest once both LoRAs'
``lora-NAME.meta.json`` are there (``gpu_real_tasks.sh cells`` does).

``--stand-in-loras`` is for the ``base-teacher`` control only: its teacher is the source base without the
LoRA and its student starts from a fresh adapter (the two tokenizers differ, so no weight-space start), so
the source LoRA gives the moved adapter nothing but its shape (rank, alpha, modules). Where the cache holds
no LoRA, one training step stands in for the 300 of the recipe; the four conditions' scores must then be in
the cache (they were computed with the real LoRAs), or the script refuses before it trains anything.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from paw.bench.real import tasks as real_tasks
from paw.bench.testbed import Base
from paw.bench.testbed import load_model as _load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", type=Path)
    p.add_argument("data")
    p.add_argument("work", type=Path)
    p.add_argument("task")
    p.add_argument("source")
    p.add_argument("target")
    p.add_argument("variant", choices=["lora", "main", *sorted(real_tasks.VARIANTS)])
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stand-in-loras", action="store_true")
    args = p.parse_args()
    # stand-in LoRAs are not the ones the cached scores scored: those scores are kept as they are
    cache = real_tasks.Cache(args.work / "tasks" / args.task, keep_scores=args.stand_in_loras)
    recipe = real_tasks.RECIPE
    if args.stand_in_loras:
        if args.variant != "base-teacher":
            sys.exit("error: --stand-in-loras applies to the base-teacher control only (the others' teachers use the LoRA)")
        needed = [f"score-{side}-{kind}" for side in (args.source, args.target) for kind in ("base", "lora")]
        missing = [k for k in needed if cache.found(k) is None]
        if missing:
            sys.exit(f"error: --stand-in-loras needs the cached scores {', '.join(missing)} in {cache.folder}")
        recipe = replace(recipe, lora_steps=1)
    stand_ins = [f"lora-{n}" for n in (args.source, args.target)
                 if args.stand_in_loras and not (cache.folder / f"lora-{n}.meta.json").is_file()]
    sides = {}
    for name in (args.source, args.target):
        lm, tok = _load(args.models / name, args.device)
        sides[name] = Base(name, lm, tok, args.models / name)
    train, test = real_tasks.load_task(args.data, args.task, args.seed)
    if args.variant == "lora":   # the source's LoRA alone (trained unless cached): what the others start from
        _, seconds, report = real_tasks.own_lora(sides[args.source], train, cache, recipe=recipe, seed=args.seed)
        out = {"seconds": seconds, "report": report}
    elif args.variant == "main":
        out = real_tasks.run_direction(sides[args.source], sides[args.target], train, test, cache, recipe=recipe,
                                       seed=args.seed, device=args.device)
    else:
        out = real_tasks.run_variant(sides[args.source], sides[args.target], train, test, cache, args.variant,
                                     recipe=recipe, seed=args.seed, device=args.device)
    for key in stand_ins:   # never left where the bench would take them for the real LoRAs
        shutil.rmtree(cache.folder / key, ignore_errors=True)
        (cache.folder / f"{key}.meta.json").unlink(missing_ok=True)
    out |= {"device": args.device, "stand_in_loras": args.stand_in_loras}
    path = args.work / f"variant-{args.task}-{args.variant}-{args.source}-to-{args.target}.json"
    path.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out.get(k) for k in ("accuracy", "moved_gain", "vs_main", "failed")}, indent=1))


if __name__ == "__main__":
    main()
