#!/usr/bin/env python
"""How much of a real full fine-tune's accuracy gain a LoRA extracted from it keeps.

1. Fully fine-tunes ``--base`` on ``--train`` (:func:`paw.evaluate.finetune.finetune_model`, the
   loss of ``paw train-lora`` on every weight), float32, ``--steps`` of ``--batch-size`` at ``--lr``.
2. Scores the base and the fine-tune on ``--test`` (per item, for paired statistics).
3. For each ``--ranks`` R and ``--energies`` E, ``paw extract-lora`` (:func:`paw.extract.extract_lora`)
   and scores base + LoRA (loaded through PEFT, merged for speed).
4. Prints and saves (``OUT/results.json``, rewritten after every row) the fine-tune's gain, each
   extraction's kept fraction ``(base+LoRA − base) / (fine-tune − base)`` with a paired bootstrap
   standard error over test items (:func:`paw.bench.stats.gain_ratio`), the energy the report says
   it held, the adapter's size, and the process CPU seconds of every step.

    nice -n 10 env OMP_NUM_THREADS=1 python scripts/bench_extract_finetune.py \\
        --base ~/paw-models/smollm2-135m-instruct \\
        --train ../shared/data/commonsense/formatted/openbookqa_train_formatted.jsonl \\
        --test ../shared/data/commonsense/formatted/openbookqa_test_formatted.jsonl --out /tmp/extract-ft
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path


def _cpu() -> float:
    return time.process_time()


def score(model_path: Path, test: Path, limit: int | None, adapter: Path | None = None) -> dict:
    """Accuracy figures with per-item 0/1 outcomes; a LoRA is merged into the weights first (same
    numbers up to float rounding, and the unmerged PEFT forward is slower)."""
    from paw.evaluate.formats import read_items
    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm

    items = read_items(test, limit=limit)
    lm, tokenizer = load_lm(model_path, adapter=adapter)
    if adapter is not None:
        lm = lm.merge_and_unload()
    return evaluate(lm, tokenizer, items, batch_size=16, per_item=True, progress=False)


def cached(out: Path, label: str, work) -> dict:
    """``work()`` (a dict), saved as ``OUT/scores/LABEL.json`` and read back on a rerun, so that
    several processes can share the rows of one fine-tune and a last run only summarises."""
    path = out / "scores" / f"{label}.json"
    if path.exists():
        return json.loads(path.read_text())
    t = _cpu()
    result = {**work(), "cpu_s": _cpu() - t}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)
    return result


def kept(row: dict, base: dict, ft: dict, key: str) -> dict:
    from paw.bench.stats import gain_ratio

    r = gain_ratio([row[key]], [base[key]], [ft[key]], [base[key]], n_boot=2000, seed=0)
    return {"value": r["value"], "stderr": r["stderr"], "low": r["low"], "high": r["high"]}


def summary_of(metrics: dict) -> dict:
    return {k: metrics[k] for k in ("accuracy", "stderr", "accuracy_norm", "stderr_norm", "loss", "n")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, required=True)
    p.add_argument("--train", type=Path, required=True)
    p.add_argument("--test", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=None)
    p.add_argument("--ranks", type=int, nargs="*", default=[8, 32, 128])
    p.add_argument("--energies", type=float, nargs="*", default=[0.5, 0.9])
    p.add_argument("--max-rank", type=int, default=256, help="cap for the --energies runs")
    p.add_argument("--embed-energy", type=float, default=0.99, help="paw extract-lora --embed-energy: below it the "
                   "embedding and head are saved whole (modules_to_save)")
    p.add_argument("--rows-first", action="store_true", help="score the extractions before the base and the "
                   "fine-tune (a second process sharing OUT)")
    args = p.parse_args()

    from paw.evaluate.finetune import FinetuneOptions, finetune_model
    from paw.extract import ExtractOptions, extract_lora

    args.out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    results: dict = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                     "commit": commit, "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": []}

    def save() -> None:
        (args.out / "results.json").write_text(json.dumps(results, indent=1))

    ft_dir = args.out / "finetune"
    t = _cpu()
    if not (ft_dir / "metrics.json").exists():
        opts = FinetuneOptions(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
        finetune_model(args.base, args.train, ft_dir, opts)
    ft_metrics = json.loads((ft_dir / "metrics.json").read_text())
    results["finetune"] = {"cpu_s": _cpu() - t, "train_cpu_s": ft_metrics["train_seconds"],
                           "loss_start": ft_metrics["train_loss_start"], "loss_end": ft_metrics["train_loss_end"]}
    print(f"fine-tune: loss {ft_metrics['train_loss_start']:.3f} -> {ft_metrics['train_loss_end']:.3f}, "
          f"{ft_metrics['train_seconds']:.0f} CPU s", flush=True)
    save()

    def reference(label: str, model: Path) -> dict:
        return cached(args.out, label, lambda: score(model, args.test, args.test_limit))

    def extracted_row(kind: str, value, opts) -> dict:
        label = f"lora-{kind}-{value}" + ("" if args.embed_energy == 0.99 else f"-embed-{args.embed_energy}")
        lora_dir = args.out / label

        def work() -> dict:
            t = _cpu()
            if not lora_dir.exists():
                extract_lora(args.base, ft_dir, lora_dir, opts)
            extract_cpu = _cpu() - t
            report = json.loads((lora_dir / "extract_report.json").read_text())
            return {**score(args.base, args.test, args.test_limit, adapter=lora_dir), "extract_cpu_s": extract_cpu,
                    "summary": report["summary"], "notes": report["notes"]}

        return cached(args.out, label, work)

    runs = [("rank", r, ExtractOptions(rank=r, embed_energy=args.embed_energy)) for r in args.ranks]
    runs += [("energy", e, ExtractOptions(energy=e, max_rank=args.max_rank, embed_energy=args.embed_energy))
             for e in args.energies]
    if args.rows_first:  # a second process: the rows, while the first one scores the references
        for run in runs:
            extracted_row(*run)
    base, ft = reference("base", args.base), reference("finetune", ft_dir)
    results["base"] = summary_of(base) | {"cpu_s": base["cpu_s"]}
    results["finetune"].update(summary_of(ft), eval_cpu_s=ft["cpu_s"])
    for key, name in (("correct", "accuracy"), ("correct_norm", "accuracy_norm")):
        diff = [a - b for a, b in zip(ft[key], base[key], strict=True)]
        mean = sum(diff) / len(diff)
        se = (sum((d - mean) ** 2 for d in diff) / (len(diff) - 1) / len(diff)) ** 0.5
        results["finetune"][f"gain_{name}"] = {"value": mean, "stderr": se}
    print(f"base {base['accuracy']:.4f} / {base['accuracy_norm']:.4f}; fine-tune {ft['accuracy']:.4f} / "
          f"{ft['accuracy_norm']:.4f}", flush=True)
    save()
    for kind, value, opts in runs:
        scored = extracted_row(kind, value, opts)
        s = scored["summary"]
        row = {"kind": kind, "value": value, "extract_cpu_s": scored["extract_cpu_s"], "eval_cpu_s": scored["cpu_s"],
               **summary_of(scored), "summary": s, "notes": scored["notes"],
               "kept_accuracy": kept(scored, base, ft, "correct"),
               "kept_accuracy_norm": kept(scored, base, ft, "correct_norm")}
        results["rows"].append(row)
        k = row["kept_accuracy"]
        print(f"{kind} {value}: acc {scored['accuracy']:.4f}, kept {k['value']} ± {k['stderr']}, "
              f"energy {s['energy_held']:.3f}, ranks {s['rank_min']}-{s['rank_max']}", flush=True)
        save()


if __name__ == "__main__":
    main()
