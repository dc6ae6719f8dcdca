#!/usr/bin/env python
"""Transfer quality benchmark: does a LoRA moved to another base keep its gain? (issue 10)

Pretrains a small Llama on CPU, builds seven kinds of target (mild and harsh version upgrades, pruned,
grown, distilled, new tokenizer, unrelated), trains LoRAs for three tasks no base can do (invented
facts asked with the training prompt, the same kind of facts asked in a new phrasing, a rule on
unseen words), moves them with every ``paw transfer-lora`` method and scores, on the same held-out
items: the target base, each transfer, a random adapter with the same per-module norms (the naive
peer) and a LoRA trained directly on the target (the ceiling). Source->source runs separate what a
method loses by itself from what model drift costs. Prints and writes accuracy ± stderr, the kept
fraction (transfer - target base) / (source + LoRA - source base) and the recovered fraction
(transfer - base) / (direct - base), with a paired cluster-bootstrap stderr and per-seed values.

    python scripts/bench_transfer_quality.py --output /tmp/paw-bench-transfer/out          # default (~15 min on 2 idle cores)
    python scripts/bench_transfer_quality.py --output out --quick                          # smoke test, about a minute
    python scripts/bench_transfer_quality.py --output out --targets upgrade,unrelated --seeds 0,1,2

Same code as ``paw bench transfer``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, type=Path, help="results folder (results.json/.md, recovered.png, kept.png)")
    parser.add_argument("--seeds", default="0,1", help="task-data and LoRA seeds, comma-separated")
    parser.add_argument("--tasks", default="", help="facts,rule (default: all)")
    parser.add_argument("--targets", default="", help="upgrade,pruned,grown,distilled,tokenizer,unrelated (default: all)")
    parser.add_argument("--methods", default="", help="transfer methods (default: auto and all)")
    parser.add_argument("--distill", default="inputs,synth,generic", help="distill rows: inputs,synth,generic or none")
    parser.add_argument("--items", type=int, default=300, help="held-out items per task and seed")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--pretrain-steps", type=int, default=400)
    parser.add_argument("--lora-steps", type=int, default=300)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--model-seed", type=int, default=0,
                        help="initialisation/corpus-order seed of the models (pool runs of several with --merge "
                             "to see the spread between model builds)")
    parser.add_argument("--data", type=Path, default=None,
                        help="commonsense *_formatted.jsonl folder for the corpus (absent: embedded fallback text, "
                        "said in the output and in results.json)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the models here (default: temporary)")
    parser.add_argument("--quick", action="store_true", help="tiny smoke configuration")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="pool finished result folders of other --seeds/--tasks runs instead of running")
    args = parser.parse_args(argv)
    if args.merge:
        return _merge(args)

    import torch

    from paw.bench.options import options_from
    from paw.bench.quality import benchmark_to_folder
    from paw.bench.report import markdown
    from paw.bench.tasks import FALLBACK_WARNING
    from paw.errors import PawError
    from paw.io.atomic import check_output

    if args.data is None:
        print(FALLBACK_WARNING, file=sys.stderr)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        check_output(args.output, overwrite=args.overwrite)
        opts = options_from(seeds=args.seeds, tasks=args.tasks, targets=args.targets, methods=args.methods,
                            items=args.items, hidden_size=args.hidden_size, num_layers=args.num_layers,
                            pretrain_steps=args.pretrain_steps, lora_steps=args.lora_steps,
                            lora_rank=args.lora_rank, data=args.data, device=args.device, quick=args.quick,
                            distill=args.distill)
        opts = replace(opts, model_seed=args.model_seed)
        opts.check()
        results = benchmark_to_folder(opts, args.output, workdir=args.workdir, overwrite=args.overwrite,
                                      command=" ".join(["python", *sys.argv]))
    except PawError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(markdown(results))
    if results["notes"].get("corpus_fallback"):
        print(FALLBACK_WARNING)
    seconds = results["notes"]["seconds"]
    print(f"time: {seconds['total']:.0f} s in all ("
          + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items() if k != "total") + ")")
    print(f"wrote {args.output}/results.json, results.md, recovered.png, kept.png")
    return 0


def _merge(args) -> int:
    from paw.bench.report import markdown, write_results
    from paw.bench.results import merge_results
    from paw.errors import PawError
    from paw.io.atomic import check_output
    from paw.io.checkpoint import read_json

    try:
        check_output(args.output, overwrite=args.overwrite)
        results = merge_results([read_json(folder / "results.json") for folder in args.merge])
        write_results(args.output, results, overwrite=args.overwrite, command=" ".join(["python", *sys.argv]))
    except PawError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
