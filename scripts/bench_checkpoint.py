#!/usr/bin/env python
"""Peak memory and throughput of iterating over a sharded checkpoint with PAW's lazy reader.

Writes a random bfloat16 model with a named shape as sharded safetensors, then, each in a fresh
process so that peak resident memory (VmHWM) is measured cleanly:
  paw        paw.io.checkpoint: one tensor at a time
  st-mmap    safetensors.safe_open (memory-mapped), one tensor at a time, handles kept open
  load-all   safetensors.torch.load_file of every shard (the naive whole-model load)
and prints peak memory above the interpreter baseline next to the largest tensor's size.

    python scripts/bench_checkpoint.py --shape 1b
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {  # hidden, intermediate, layers, vocab
    "tiny": (256, 688, 4, 32000),
    "0.5b": (896, 4864, 24, 151936),
    "1b": (2048, 8192, 16, 128256),
    "3b": (3072, 8192, 28, 128256),
}


def _vm(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def make_model(folder: Path, shape: str) -> None:
    import torch

    from paw.io.writer import write_checkpoint

    h, inter, layers, vocab = SHAPES[shape]
    gen = torch.Generator().manual_seed(0)

    def tensors():
        yield "model.embed_tokens.weight", torch.randn(vocab, h, generator=gen, dtype=torch.bfloat16)
        for i in range(layers):
            p = f"model.layers.{i}."
            for name, shp in (("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (h // 4, h)),
                              ("self_attn.v_proj", (h // 4, h)), ("self_attn.o_proj", (h, h)),
                              ("mlp.gate_proj", (inter, h)), ("mlp.up_proj", (inter, h)),
                              ("mlp.down_proj", (h, inter))):
                yield p + name + ".weight", torch.randn(*shp, generator=gen, dtype=torch.bfloat16) * 0.02
            yield p + "input_layernorm.weight", torch.ones(h, dtype=torch.bfloat16)
            yield p + "post_attention_layernorm.weight", torch.ones(h, dtype=torch.bfloat16)
        yield "model.norm.weight", torch.ones(h, dtype=torch.bfloat16)
        yield "lm_head.weight", torch.randn(vocab, h, generator=gen, dtype=torch.bfloat16)

    write_checkpoint(folder, tensors(), max_shard_size="1GB", overwrite=True)


def _touch(t) -> int:
    """Read every page of ``t`` (as any consumer doing arithmetic would) and return its size in bytes."""
    flat = t.reshape(-1).view(t.dtype)
    float(flat[:: max(1, 2048 // t.element_size())].float().sum())
    return t.numel() * t.element_size()


def run_one(kind: str, folder: str) -> dict:
    import torch  # noqa: F401  (baseline includes torch itself)

    base = _vm("VmRSS")
    t0 = time.perf_counter()
    total = largest = 0
    if kind == "paw":
        from paw.io.checkpoint import open_checkpoint

        ckpt = open_checkpoint(folder)
        for name in ckpt:
            t = ckpt[name]
            n = _touch(t)
            total, largest = total + n, max(largest, n)
            del t
    elif kind == "st-mmap":
        from safetensors import safe_open

        handles = [safe_open(str(f), "pt") for f in sorted(Path(folder).glob("*.safetensors"))]
        for h in handles:
            for name in h.keys():
                t = h.get_tensor(name)
                n = _touch(t)
                total, largest = total + n, max(largest, n)
                del t
    else:
        from safetensors.torch import load_file

        sd = {}
        for f in sorted(Path(folder).glob("*.safetensors")):
            sd.update(load_file(str(f)))
        for t in sd.values():
            n = _touch(t)
            total, largest = total + n, max(largest, n)
    return {"seconds": time.perf_counter() - t0, "peak_above_baseline": _vm("VmHWM") - base,
            "bytes": total, "largest": largest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--workdir", default="/tmp/paw-bench-checkpoint")
    ap.add_argument("--keep", action="store_true", help="keep the generated model")
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        print(json.dumps(run_one(*args._child)))
        return
    folder = Path(args.workdir) / args.shape
    if not (folder / "model.safetensors.index.json").exists():
        print(f"writing a random {args.shape} bfloat16 model to {folder} ...", flush=True)
        make_model(folder, args.shape)
    gib = 1024**3
    print(f"{'reader':10} {'seconds':>8} {'GB/s':>6} {'peak MB':>9} {'largest tensor MB':>18} {'peak/largest':>13}")
    results = {}
    for kind in ("paw", "st-mmap", "load-all"):
        out = subprocess.run([sys.executable, __file__, "--_child", kind, str(folder)],
                             capture_output=True, text=True, check=True).stdout
        r = results[kind] = json.loads(out.strip().splitlines()[-1])
        print(f"{kind:10} {r['seconds']:8.2f} {r['bytes'] / gib / r['seconds']:6.2f} "
              f"{r['peak_above_baseline'] / 2**20:9.0f} {r['largest'] / 2**20:18.0f} "
              f"{r['peak_above_baseline'] / r['largest']:13.2f}")
    paw, naive = results["paw"], results["load-all"]
    print(f"\nmodel: {paw['bytes'] / gib:.2f} GiB; PAW peak is {paw['peak_above_baseline'] / naive['peak_above_baseline']:.3f}x "
          f"the whole-model load's, {paw['peak_above_baseline'] / paw['largest']:.2f}x the largest tensor")
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
