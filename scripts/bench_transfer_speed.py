#!/usr/bin/env python
"""Benchmark the speed of ``paw transfer-lora`` against the same transfer done with full SVDs.

Builds, under ``--workdir`` (default /tmp/paw-bench-transfer, deleted afterwards unless ``--keep``),
a source base with the tensor shapes of Qwen2.5-1.5B or Llama-3.2-3B as random bfloat16 safetensors,
a target base (the source moved by 17% of each tensor's std, a stand-in for a continued-training
successor) and a rank-16 LoRA on all seven projections of every layer. Then, each in its own process
(so that peak resident memory, ``ru_maxrss``, belongs to one run):

- ``transfer_lora`` with every method (auto, copy, lora-x, cross-lora, embed-map, structural), using
  PAW's randomized truncated SVD (top R vectors only);
- the same ``auto`` transfer with full ``torch.linalg.svd`` in place of the truncated one. A full SVD of
  every weight of a 1.5B model takes about an hour on two cores, so by default it runs on the first
  ``--full-layers`` layers and is extrapolated linearly to the whole depth (the script says so).

Prints wall time and peak memory per method and the speed-up of ``auto`` over full SVD.

    python scripts/bench_transfer_speed.py --shape small
    python scripts/bench_transfer_speed.py --shape qwen2.5-1.5b --methods auto,copy
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {  # hidden, layers, heads, kv heads, head_dim, intermediate, vocab, tied
    "qwen2.5-1.5b": dict(hidden=1536, layers=28, heads=12, kv=2, head_dim=128, inter=8960, vocab=151936, tied=True),
    "llama-3.2-3b": dict(hidden=3072, layers=28, heads=24, kv=8, head_dim=128, inter=8192, vocab=128256, tied=True),
    "small": dict(hidden=1024, layers=8, heads=8, kv=2, head_dim=128, inter=2816, vocab=32000, tied=True),
    "tiny": dict(hidden=256, layers=4, heads=4, kv=2, head_dim=64, inter=704, vocab=4000, tied=True),
}
METHODS = ("auto", "copy", "lora-x", "cross-lora", "embed-map", "structural")
PROJ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
DRIFT = 0.17


def scaled(name: str, shrink: int, layers: int = 2, vocab: int = 256) -> dict:
    """A small version of a shape: widths divided by ``shrink`` (heads and KV heads kept), few layers."""
    s = SHAPES[name]
    return dict(s, hidden=s["hidden"] // shrink, inter=s["inter"] // shrink, head_dim=s["hidden"] // shrink // s["heads"],
                layers=layers, vocab=vocab)


def random_tensors(s: dict, seed: int, *, drift_of: int | None = None):
    """Random weights in the layout ``s`` (``(name, tensor)`` pairs, float32), deterministic in ``seed``.

    With ``drift_of``, the weights of seed ``drift_of`` moved by :data:`DRIFT` of each tensor's std
    (the continued-training stand-in); independent seeds give independent models.
    """
    import torch

    for i, (key, shape) in enumerate(tensor_shapes(s).items()):
        gen = torch.Generator().manual_seed(10_000 * (seed if drift_of is None else drift_of) + i)
        t = 1.0 + 0.1 * torch.randn(shape, generator=gen) if len(shape) == 1 else 0.02 * torch.randn(shape, generator=gen)
        if drift_of is not None:
            t = t + DRIFT * float(t.std()) * torch.randn(shape, generator=torch.Generator().manual_seed(10_000 * seed + i))
        yield key, t


def random_lora(s: dict, *, rank: int = 16, layers: int | None = None, base: str = "source"):
    """A rank-``rank`` LoRA on all seven projections of the first ``layers`` layers (default: all)."""
    import torch

    from paw.io.adapter import LoraAdapter, adapter_key, lora_config_dict

    shapes = tensor_shapes(s)
    gen, factors = torch.Generator().manual_seed(7), {}
    for i in range(s["layers"] if layers is None else layers):
        for p in PROJ:
            out_dim, in_dim = shapes[f"model.layers.{i}.{p}.weight"]
            module = f"model.layers.{i}.{p}"
            factors[adapter_key(module, "A")] = torch.randn(rank, in_dim, generator=gen) / in_dim**0.5
            factors[adapter_key(module, "B")] = 0.01 * torch.randn(out_dim, rank, generator=gen)
    config = lora_config_dict(r=rank, alpha=2 * rank, target_modules=[p.split(".")[-1] for p in PROJ], base_model=base)
    return LoraAdapter(config=config, tensors=factors)


def tensor_shapes(s: dict) -> dict[str, tuple[int, ...]]:
    h, hd = s["hidden"], s["head_dim"]
    shapes = {"model.embed_tokens.weight": (s["vocab"], h), "model.norm.weight": (h,)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (s["heads"] * hd, h), p + "self_attn.k_proj.weight": (s["kv"] * hd, h),
            p + "self_attn.v_proj.weight": (s["kv"] * hd, h), p + "self_attn.o_proj.weight": (h, s["heads"] * hd),
            p + "mlp.gate_proj.weight": (s["inter"], h), p + "mlp.up_proj.weight": (s["inter"], h),
            p + "mlp.down_proj.weight": (h, s["inter"]),
        })
    if not s["tied"]:
        shapes["lm_head.weight"] = (s["vocab"], h)
    return shapes


def config_of(name: str, s: dict) -> dict:
    return {"model_type": "qwen2" if name.startswith("qwen") else "llama", "hidden_size": s["hidden"],
            "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"],
            "head_dim": s["head_dim"], "intermediate_size": s["inter"], "vocab_size": s["vocab"],
            "tie_word_embeddings": s["tied"], "rms_norm_eps": 1e-6}


def build(workdir: Path, name: str) -> tuple[Path, Path, Path]:
    """Source, drifted target and rank-16 adapter on disk (bf16), deterministic."""
    import torch

    from paw.io.adapter import write_adapter
    from paw.io.writer import write_checkpoint

    s = SHAPES[name]

    def bf16(pairs):
        return ((k, t.to(torch.bfloat16)) for k, t in pairs)

    src, tgt = workdir / "source", workdir / "target"
    write_checkpoint(src, bf16(random_tensors(s, 0)), config=config_of(name, s), overwrite=True)
    write_checkpoint(tgt, bf16(random_tensors(s, 1, drift_of=0)), config=config_of(name, s), overwrite=True)
    adapter = random_lora(s, base=str(src))
    adapter.tensors.update({k: v.to(torch.bfloat16) for k, v in adapter.tensors.items()})
    lora = write_adapter(workdir / "lora", adapter, overwrite=True)
    return src, tgt, lora


def worker(args) -> None:
    """One transfer in this process; prints a JSON line with wall time and peak memory."""
    import torch

    from paw.io.adapter import LoraAdapter, read_adapter, write_adapter
    from paw.io.checkpoint import open_checkpoint
    from paw.transfer import linalg, transfer_lora

    torch.set_num_threads(args.threads or torch.get_num_threads())
    if args.full_svd:  # the reference: every singular basis from a full SVD
        linalg.top_singular = lambda W, rank, **_: linalg.full_singular(W, rank)
    work = Path(args.workdir)
    t0 = time.perf_counter()
    adapter = read_adapter(work / "lora")
    if args.full_layers is not None:
        keep = tuple(f"layers.{i}." for i in range(args.full_layers))
        adapter = LoraAdapter(adapter.config, {k: v for k, v in adapter.tensors.items() if any(x in k for x in keep)})
    moved, report = transfer_lora(adapter, open_checkpoint(work / "source"), open_checkpoint(work / "target"),
                                  method=args.worker, force=True, device=args.device)
    write_adapter(work / f"out-{args.worker}", moved, overwrite=True)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss / 1024**2  # KiB -> GiB
    print(json.dumps({"method": args.worker, "seconds": wall, "peak_gib": peak,
                      "cpu_seconds": usage.ru_utime + usage.ru_stime, "modules": len(report["modules"]),
                      "transferred": report["summary"]["transferred"], "methods": report["summary"]["methods"],
                      "median_similarity": report["summary"]["median_similarity"],
                      "median_null": report["summary"]["median_similarity_null"],
                      "related": report["summary"]["related"], "kept_share": report["summary"]["kept_share"]}))


def run_child(args, method: str, *extra: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--workdir", str(args.workdir), "--device", args.device,
           *extra]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PAW_PROGRESS": "0"})
    if res.returncode != 0:
        raise SystemExit(f"{method} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="small", choices=list(SHAPES))
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods to time")
    ap.add_argument("--full-layers", type=int, default=1,
                    help="layers the full-SVD reference runs on, extrapolated to the whole depth "
                         "(0: run it on every layer)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/paw-bench-transfer"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the generated checkpoints")
    ap.add_argument("--reuse", action="store_true", help="reuse checkpoints kept in --workdir by an earlier run")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--full-svd", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.full_layers = None if args.full_layers in (None, 0) or not args.full_svd else args.full_layers
        return worker(args)

    s = SHAPES[args.shape]
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        if not (args.reuse and (args.workdir / "lora" / "adapter_config.json").exists()):
            build(args.workdir, args.shape)
        n_params = sum(math.prod(v) for v in tensor_shapes(s).values())
        print(f"shape {args.shape}: {n_params / 1e9:.2f}B parameters, {s['layers']} layers, rank-16 LoRA on "
              f"{7 * s['layers']} modules; source+target+adapter ready in {time.perf_counter() - t0:.1f} s")
        print(f"\n{'method':<12}{'wall s':>10}{'CPU s':>10}{'peak GiB':>10}  chosen per module", flush=True)
        rows = []
        for m in args.methods.split(","):
            r = run_child(args, m)
            rows.append(r)
            print(f"{r['method']:<12}{r['seconds']:>10.1f}{r['cpu_seconds']:>10.1f}{r['peak_gib']:>10.2f}  "
                  f"{r['methods']}  (related {r['related']}, median similarity {r['median_similarity']} vs "
                  f"{r['median_null']} for other layers, kept {r['kept_share']}; "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
        full_layers = args.full_layers or s["layers"]
        ref = run_child(args, "auto", "--full-svd", "--full-layers", str(full_layers))
        scale = s["layers"] / full_layers
        ref_total = ref["seconds"] * scale
        note = "" if scale == 1 else f"  measured on {full_layers}/{s['layers']} layers ({ref['seconds']:.1f} s), " \
                                     f"extrapolated x{scale:.0f}"
        print(f"{'full-SVD':<12}{ref_total:>10.1f}{ref['cpu_seconds'] * scale:>10.1f}{ref['peak_gib']:>10.2f}"
              f"  auto with torch.linalg.svd{note}")
        auto = next((r for r in rows if r["method"] == "auto"), None)
        if auto:
            print(f"\nauto: {auto['seconds']:.1f} s wall, {auto['cpu_seconds']:.1f} CPU s for the whole adapter "
                  f"(target < 60 s); {ref_total / auto['seconds']:.1f}x faster than full SVD in wall time, "
                  f"{ref['cpu_seconds'] * scale / auto['cpu_seconds']:.1f}x in CPU time (target >= 20x)")
        print(f"machine load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
