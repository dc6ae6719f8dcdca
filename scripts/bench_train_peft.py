"""``paw train-lora``'s training loop against a plain PEFT + transformers loop: same model, data, order and settings.

Each side runs in its own child process (so neither inherits the other's memory or warm caches)
on the same base folder, the same multiple-choice items, the same seeded batches
(:func:`paw.evaluate.train.batches_in_order`), LoRA rank/alpha on all linear layers, AdamW at the
same learning rate, and the loss on the answer tokens only. The PEFT side is what a user would
write: ``get_peft_model``, tokenise question + answer, labels -100 on the question, right padding,
``model(..., labels=...).loss``. Timed: attaching the LoRA and the ``--steps`` optimiser steps
(not loading the model). Prints one JSON object with both sides' seconds, items/s, peak RSS and
the ratio (PAW items/s over PEFT items/s; > 1 means PAW is faster).

    nice -n 10 python scripts/bench_train_peft.py --model /tmp/paw-scale-1b/base --data DATA.jsonl --steps 6

The 1B shape: ``scripts/bench_scale_memory.py`` builds a Llama-3.2-1B-shaped base with random weights.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def _items(data: Path, limit: int):
    from paw.evaluate.formats import read_items

    return read_items(data, limit=limit)


def run_paw(args) -> dict:
    import peft  # noqa: F401  (imported before the clock starts, as on the PEFT side)

    from paw.evaluate.train import train_lora
    from paw.io.lm import load_lm

    model, tokenizer = load_lm(args.model, device="cpu", dtype=args.dtype)
    items = _items(args.data, args.limit)
    start = time.perf_counter()
    _, metrics = train_lora(model, tokenizer, items, rank=args.rank, alpha=2 * args.rank, target_modules="all-linear",
                            steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=0, progress=False)
    return {"seconds": time.perf_counter() - start, "loss_first": metrics["train_losses"][0],
            "loss_last": metrics["train_losses"][-1]}


def run_peft(args) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paw.evaluate.train import batches_in_order

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype))
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    items = _items(args.data, args.limit)
    start = time.perf_counter()
    torch.manual_seed(0)  # as paw seeds the LoRA's A: both sides start from the same factors
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules="all-linear",
                                             lora_dropout=0.0, task_type="CAUSAL_LM"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    model.train()
    losses = []
    for batch in batches_in_order(len(items), args.batch_size, args.steps, 0):
        rows = []
        for i in batch:
            question, answer = items[i].pairs()[items[i].answer]
            context = tokenizer(question)["input_ids"]
            full = tokenizer(question + answer)["input_ids"]
            rows.append((full, [-100] * len(context) + full[len(context):]))
        width = max(len(f) for f, _ in rows)
        ids = torch.tensor([f + [pad] * (width - len(f)) for f, _ in rows])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
        mask = torch.tensor([[1] * len(f) + [0] * (width - len(f)) for f, _ in rows])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return {"seconds": time.perf_counter() - start, "loss_first": losses[0], "loss_last": losses[-1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--limit", type=int, default=256)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="weights of the frozen base on both sides (the LoRA factors are float32 on both)")
    parser.add_argument("--side", choices=("paw", "peft"), help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args(argv)
    if args.side:
        result = (run_paw if args.side == "paw" else run_peft)(args)
        result["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
        print(json.dumps(result))
        return 0
    sides = {}
    for side in ("peft", "paw"):
        child = subprocess.run([sys.executable, __file__, *(argv or sys.argv[1:]), "--side", side],
                               capture_output=True, text=True, env=os.environ)
        if child.returncode != 0:  # -9: killed, most often for memory
            print(child.stderr[-4000:] + f"\nthe {side} side exited with {child.returncode}", file=sys.stderr)
            return child.returncode
        sides[side] = json.loads(child.stdout.strip().splitlines()[-1])
        sides[side]["items_per_s"] = round(args.steps * args.batch_size / sides[side]["seconds"], 3)
    print(json.dumps({"model": str(args.model), "data": str(args.data), "steps": args.steps,
                      "batch_size": args.batch_size, "rank": args.rank, "dtype": args.dtype, "threads": os.environ.get("OMP_NUM_THREADS"),
                      **sides, "paw_over_peft_items_per_s": round(sides["paw"]["items_per_s"]
                                                                  / sides["peft"]["items_per_s"], 3)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
