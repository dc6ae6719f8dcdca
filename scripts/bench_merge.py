#!/usr/bin/env python
"""Benchmark ``paw merge`` against mergekit on the same three fine-tunes, in the same run.

Generates a base and three "fine-tunes" (base + Gaussian noise of growing size) with the tensor
shapes of a Llama model (``--shape 1b``: Llama-3.2-1B, 1.24B parameters, tied embeddings) as random
bfloat16 safetensors under ``--workdir``, then runs, each in its own process:

- ``paw merge --method task-arithmetic`` and ``--method ties`` (weights from ``--mode exp`` on the
  known L2 norms), and
- ``mergekit-yaml`` with the same method, weights and density (``task_arithmetic`` / ``ties``),
  installed in its own virtualenv (``--mergekit-venv``; created with ``--install-mergekit``: torch
  first so that pip keeps the CPU wheel, then mergekit),

and prints wall time, peak resident memory (``ru_maxrss`` of the child) and the largest absolute
difference between the two outputs. If mergekit cannot be installed or run, it says so and still
reports PAW's figures.

    python scripts/bench_merge.py --shape small --install-mergekit
    python scripts/bench_merge.py --shape 1b --keep
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {  # name: hidden, layers, heads, kv heads, intermediate, vocab
    "1b": dict(hidden=2048, layers=16, heads=32, kv=8, inter=8192, vocab=128256),
    "small": dict(hidden=1024, layers=8, heads=16, kv=4, inter=4096, vocab=32000),
    "tiny": dict(hidden=256, layers=4, heads=8, kv=2, inter=1024, vocab=8000),
}
NOISE = (0.001, 0.002, 0.004)  # std of each fine-tune's task vector (base std is 0.02)


def tensor_shapes(s: dict) -> dict[str, tuple[int, ...]]:
    h, hd = s["hidden"], s["hidden"] // s["heads"]
    shapes = {"model.embed_tokens.weight": (s["vocab"], h), "model.norm.weight": (h,)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (s["kv"] * hd, h),
            p + "self_attn.v_proj.weight": (s["kv"] * hd, h), p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (s["inter"], h), p + "mlp.up_proj.weight": (s["inter"], h),
            p + "mlp.down_proj.weight": (h, s["inter"]),
        })
    return shapes


def llama_config(s: dict) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s["hidden"],
            "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
            "num_key_value_heads": s["kv"], "intermediate_size": s["inter"], "vocab_size": s["vocab"],
            "head_dim": s["hidden"] // s["heads"], "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 2048, "hidden_act": "silu", "torch_dtype": "bfloat16",
            "dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1}


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), "little") >> 1


def generate(folder: Path, shape: dict, index: int | None) -> Path:
    """Write the base (index None) or fine-tune ``index`` tensor by tensor; never the whole model in memory."""
    import torch

    from paw.io.writer import write_checkpoint

    def tensors():
        for name, dims in tensor_shapes(shape).items():
            g = torch.Generator().manual_seed(_seed("base", name))
            t = torch.randn(dims, generator=g).mul_(0.02).add_(1.0 if name.endswith("norm.weight") else 0.0)
            if index is not None:
                g = torch.Generator().manual_seed(_seed("ft", index, name))
                t.add_(torch.randn(dims, generator=g), alpha=NOISE[index])
            yield name, t.to(torch.bfloat16)

    write_checkpoint(folder, tensors(), config=llama_config(shape), overwrite=True)
    return folder


def run_measured(cmd: list[str], env=None) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in GiB, exit code, output tail) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024**2, proc.returncode, out[-1500:]


def warm(folders: list[Path]) -> None:
    """Read every input once so that both tools start from the same (warm) page cache."""
    for folder in folders:
        for f in folder.glob("*.safetensors"):
            with open(f, "rb") as fh:
                while fh.read(64 << 20):
                    pass


def mergekit_config(method: str, base: Path, models: list[Path], weights: list[float], density: float) -> str:
    lines = [f"merge_method: {'ties' if method == 'ties' else 'task_arithmetic'}", f"base_model: {base}",
             "dtype: float32", "out_dtype: bfloat16", "parameters:",
             f"  normalize: {'true' if method == 'ties' else 'false'}", "models:"]
    for m, w in zip(models, weights, strict=True):
        lines += [f"  - model: {m}", "    parameters:", f"      weight: {w!r}"]
        if method == "ties":
            lines.append(f"      density: {density!r}")
    return "\n".join(lines) + "\n"


def ensure_mergekit(venv: Path, install: bool) -> tuple[Path | None, str]:
    exe = venv / "bin" / "mergekit-yaml"
    if exe.exists():
        return exe, "found"
    if not install:
        return None, f"mergekit not found in {venv} (pass --install-mergekit to create that virtualenv)"
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv / "bin" / "pip"), "install", "-q", "torch==2.13.0"],  # CPU wheel first
             [str(venv / "bin" / "pip"), "install", "-q", "mergekit"]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"could not install mergekit ({' '.join(step[:3])}...): {done.stderr.strip()[-300:]}"
    return (exe, "installed") if exe.exists() else (None, "mergekit installed but mergekit-yaml missing")


def max_abs_diff(a: Path, b: Path) -> tuple[float, float, int]:
    """(max |a - b|, max |a|, entries that differ) over the tensors both outputs have."""

    from paw.io.checkpoint import open_checkpoint

    ca, cb = open_checkpoint(a), open_checkpoint(b)
    worst, scale, differ = 0.0, 0.0, 0
    for name in ca:
        if name not in cb:
            continue
        x, y = ca[name].float(), cb[name].float()
        d = (x - y).abs()
        worst, scale = max(worst, float(d.max())), max(scale, float(x.abs().max()))
        differ += int((d > 0).sum())
    return worst, scale, differ


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=SHAPES, default="1b", help="model shape (1b = Llama-3.2-1B)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/paw-bench-merge"))
    ap.add_argument("--mergekit-venv", type=Path, default=None,
                    help="virtualenv holding mergekit (default: WORKDIR/venv-mergekit)")
    ap.add_argument("--install-mergekit", action="store_true", help="create that virtualenv if missing")
    ap.add_argument("--methods", nargs="+", default=["task-arithmetic", "ties"],
                    choices=["task-arithmetic", "ties"])
    ap.add_argument("--density", type=float, default=0.2)
    ap.add_argument("--device", default="cpu", help="paw --device (mergekit runs with --no-cuda)")
    ap.add_argument("--skip-mergekit", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the generated models and outputs")
    args = ap.parse_args()

    shape = SHAPES[args.shape]
    data = args.workdir / f"models-{args.shape}"
    base, models = data / "base", [data / f"ft{i}" for i in range(3)]
    n_params = sum(_numel(d) for d in tensor_shapes(shape).values())
    print(f"shape {args.shape}: {n_params / 1e9:.3f}B parameters, bfloat16, 3 fine-tunes, in {data}")
    t0 = time.perf_counter()
    for folder, index in [(base, None), *((m, i) for i, m in enumerate(models))]:
        if not (folder / "config.json").exists():
            generate(folder, shape, index)
    print(f"inputs ready in {time.perf_counter() - t0:.1f} s")

    # task-vector norms are known from the generation: sqrt(n_params) * noise std
    norms = [(n_params ** 0.5) * s for s in NOISE]
    mk_exe, mk_status = (None, "skipped (--skip-mergekit)") if args.skip_mergekit else \
        ensure_mergekit(args.mergekit_venv or args.workdir / "venv-mergekit", args.install_mergekit)
    if mk_exe is None:
        print(f"MERGEKIT NOT RUN: {mk_status}. Only PAW's figures follow.")
    paw = [sys.executable, "-c", "import sys; from paw.cli import main; sys.exit(main())"]
    rows = []
    for method in args.methods:
        out_paw, out_mk = args.workdir / f"out-paw-{method}", args.workdir / f"out-mergekit-{method}"
        cmd = [*paw, "merge", "--base", str(base), "--models", *map(str, models), "--output", str(out_paw),
               "--method", method, "--mode", "exp", "--l2-norms", *map(str, norms), "--density",
               str(args.density), "--device", args.device, "--overwrite"]
        warm([base, *models])
        wall, rss, rc, tail = run_measured(cmd)
        if rc != 0:
            print(f"paw merge failed ({rc}):\n{tail}")
            return 1
        weights = json.loads((out_paw / "paw_merge.json").read_text())["weights"]
        row = {"method": method, "paw_s": wall, "paw_gib": rss}
        if mk_exe is not None:
            cfg = args.workdir / f"mergekit-{method}.yml"
            cfg.write_text(mergekit_config(method, base, models, weights, args.density))
            shutil.rmtree(out_mk, ignore_errors=True)
            warm([base, *models])
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            mk_wall, mk_rss, mk_rc, mk_tail = run_measured(
                [str(mk_exe), str(cfg), str(out_mk), "--no-cuda", "--quiet", "--no-copy-tokenizer",
                 "--no-write-model-card", "--out-shard-size", "5B"], env=env)
            if mk_rc != 0:
                print(f"MERGEKIT FAILED on {method} (exit {mk_rc}); PAW's figures still follow:\n{mk_tail}")
            else:
                diff, scale, differ = max_abs_diff(out_paw, out_mk)
                row.update(mk_s=mk_wall, mk_gib=mk_rss, diff=diff, scale=scale, differ=differ)
        rows.append(row)
        print(json.dumps(row))
    _report(rows, n_params)
    if not args.keep:
        for p in [data, *args.workdir.glob("out-*"), *args.workdir.glob("mergekit-*.yml")]:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return 0


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _report(rows: list[dict], n_params: int) -> None:
    print(f"\n{'method':<16}{'paw s':>9}{'paw GiB':>9}{'mergekit s':>12}{'mergekit GiB':>14}"
          f"{'speed-up':>10}{'max |diff|':>12}{'entries differing':>24}")
    for r in rows:
        cells = ["n/a"] * 5
        if "mk_s" in r:
            cells = [f"{r['mk_s']:.1f}", f"{r['mk_gib']:.2f}", f"{r['mk_s'] / r['paw_s']:.2f}x",
                     f"{r['diff']:.3g}", f"{r['differ']} / {n_params}"]
        print(f"{r['method']:<16}{r['paw_s']:>9.1f}{r['paw_gib']:>9.2f}{cells[0]:>12}{cells[1]:>14}"
              f"{cells[2]:>10}{cells[3]:>12}{cells[4]:>24}")


if __name__ == "__main__":
    sys.exit(main())
