#!/usr/bin/env python
"""Peak memory of reading a GGUF file with PAW, one tensor at a time, against loading the whole model.

Each measurement runs in a fresh Python process and reports its peak resident memory above the
same process's memory after the imports (``ru_maxrss`` minus the post-import RSS), so the figures
compare the reading itself:

- ``paw-stream``: ``open_checkpoint(file.gguf)`` and every tensor dequantized in turn, none kept;
- ``whole-dict``: every tensor dequantized and kept in a dict (what a non-streaming reader holds);
- ``transformers``: ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)`` in float32.

The largest dequantized tensor (float32) is printed beside them: streaming should stay near it.

    python scripts/bench_gguf_memory.py ~/paw-models/gguf/gemma-3-270m-q4_k_m.gguf
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = r'''
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
import torch, transformers, gguf  # noqa: F401  (imports counted in the baseline)
from paw.io.checkpoint import open_checkpoint
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
base = rss_mb()
t = time.perf_counter()
largest = 0
if mode == "paw-stream":
    ckpt = open_checkpoint(path)
    for name in ckpt:
        largest = max(largest, ckpt[name].numel() * 4)
elif mode == "whole-dict":
    ckpt = open_checkpoint(path)
    kept = {name: ckpt[name] for name in ckpt}
    largest = max(t.numel() * 4 for t in kept.values())
else:
    from pathlib import Path
    from transformers import AutoModelForCausalLM
    transformers.utils.logging.disable_progress_bar()
    p = Path(path)
    model = AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name, dtype=torch.float32)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"mode": mode, "baseline_mb": base, "peak_mb": peak, "above_baseline_mb": peak - base,
                  "largest_tensor_mb": largest / 2**20, "seconds": time.perf_counter() - t}))
'''


def measure(mode: str, path: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{mode} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", help="a .gguf file (e.g. the assembled Gemma-3-270M)")
    parser.add_argument("--modes", default="paw-stream,whole-dict,transformers")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    rows = [measure(mode, args.gguf) for mode in args.modes.split(",")]
    largest = max(r["largest_tensor_mb"] for r in rows)
    print(f"{args.gguf}: largest dequantized tensor {largest:.0f} MB (float32)")
    print(f"{'mode':<14}{'peak above imports':>20}{'x largest':>11}{'seconds':>9}")
    for r in rows:
        print(f"{r['mode']:<14}{r['above_baseline_mb']:>17.0f} MB{r['above_baseline_mb'] / largest:>11.2f}"
              f"{r['seconds']:>9.1f}")
    stream = next((r for r in rows if r["mode"] == "paw-stream"), None)
    whole = next((r for r in rows if r["mode"] != "paw-stream"), None)
    if stream and whole:
        print(f"streaming needs {stream['above_baseline_mb'] / whole['above_baseline_mb']:.2f}x the memory of "
              f"'{whole['mode']}'")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"file": args.gguf, "largest_tensor_mb": largest, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
