#!/usr/bin/env python
"""Benchmark ``paw task-vectors`` against its I/O floor, on a base/fine-tune pair with real shapes.

Builds two checkpoints of random bfloat16 weights on disk (shapes of Llama-3.2-3B by default;
``--shape 1b`` (Llama-3.2-1B), ``small`` (154M, as ``bench_merge.py``), ``0.5b`` or ``tiny`` for
quicker runs), then measures, each in a fresh process with the same thread settings
(``--threads``, one intra-op thread by default):

- ``paw``:   the streamed computation plus the report files (``compute_task_vectors`` +
  ``write_report``), with the command's default workers (one per core, up to 4);
- ``floor``: reading every tensor of both checkpoints once with the same lazy reader and writing
  as many bytes as PAW's report (``scripts/bench_floor.py``), run twice, the faster run kept;
- ``naive``: loading both models whole, then per tensor Δ in float32, stats in float64 and a full
  sort for the quantiles (what a simple script does). On big shapes it runs on a slice of the
  tensors (``--naive-slice``) and the time is extrapolated by parameter count, as printed.

Prints wall and CPU seconds of each phase (from the phase's start: the imports of torch and of the
reader come before), the same for the whole process, PAW / floor and naive / PAW side by side, peak
memory (peak anonymous RSS, sampled; mapped checkpoint pages are page cache, not counted; and the
process's ``VmHWM``) and parameters per second. Files go to ``--workdir`` (default
/tmp/paw-bench-taskvec), deleted at the end unless ``--keep``.

Example: python scripts/bench_task_vectors.py --shape small
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

PROCESS_START = time.time()  # a phase's process figures count from here (after the interpreter's start)
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]  # bench_floor beside this script; paw from this checkout

# name: (hidden, intermediate, layers, heads, kv_heads, vocab, tied)
SHAPES = {
    "3b": (3072, 8192, 28, 24, 8, 128256, True),     # Llama-3.2-3B
    "1b": (2048, 8192, 16, 32, 8, 128256, True),     # Llama-3.2-1B
    "0.5b": (896, 4864, 24, 14, 2, 151936, True),    # Qwen2.5-0.5B proportions, Llama layout
    "small": (1024, 4096, 8, 16, 4, 32000, True),     # bench_merge.py's small shape, 154M
    "tiny": (256, 688, 2, 4, 2, 32000, True),
}


def llama_shapes(shape: str) -> tuple[list[tuple[str, tuple[int, ...]]], dict]:
    """Tensor names and shapes of a Llama checkpoint, and its config.json."""
    hidden, inter, layers, heads, kv, vocab, tied = SHAPES[shape]
    head_dim = hidden // heads
    out = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (hidden,)),
                (p + "self_attn.q_proj.weight", (heads * head_dim, hidden)),
                (p + "self_attn.k_proj.weight", (kv * head_dim, hidden)),
                (p + "self_attn.v_proj.weight", (kv * head_dim, hidden)),
                (p + "self_attn.o_proj.weight", (hidden, heads * head_dim)),
                (p + "post_attention_layernorm.weight", (hidden,)),
                (p + "mlp.gate_proj.weight", (inter, hidden)),
                (p + "mlp.up_proj.weight", (inter, hidden)),
                (p + "mlp.down_proj.weight", (hidden, inter))]
    out.append(("model.norm.weight", (hidden,)))
    if not tied:
        out.append(("lm_head.weight", (vocab, hidden)))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv, "vocab_size": vocab, "tie_word_embeddings": tied,
              "torch_dtype": "bfloat16"}
    return out, config


def build_pair(workdir: Path, shape: str, seed: int = 0) -> tuple[Path, Path]:
    """Write ``base`` and ``finetune`` (base + 1% Gaussian noise) in bf16, streamed to disk.

    Values are windows of two pools of 2^24 Gaussian numbers at random offsets: drawing 6 billion
    fresh normals would take longer than the benchmark, and the statistics' cost does not depend
    on which normal values they are.
    """
    import torch

    from paw.io.writer import write_checkpoint

    names, config = llama_shapes(shape)
    gen = torch.Generator().manual_seed(seed)
    pools = [torch.randn(1 << 24, generator=gen) * 0.02, torch.randn(1 << 24, generator=gen) * 2e-4]

    def window(pool, numel: int, offset: int):
        reps = -(-(numel + offset) // pool.numel())
        return torch.cat([pool] * reps)[offset:offset + numel] if reps > 1 else pool[offset:offset + numel]

    def tensors(finetune: bool):
        offsets = torch.Generator().manual_seed(seed + 1)
        for name, shp in names:
            numel = math.prod(shp)
            off = [int(torch.randint(0, 1 << 24, (1,), generator=offsets)) for _ in range(2)]
            w = window(pools[0], numel, off[0])
            if finetune:
                w = w + window(pools[1], numel, off[1])
            yield name, w.reshape(shp).bfloat16()

    base, ft = workdir / "base", workdir / "finetune"
    for folder, is_ft in ((base, False), (ft, True)):
        if not folder.exists():
            write_checkpoint(folder, tensors(is_ft), config=config, max_shard_size="2GB")
    return base, ft


class PeakMemory:
    """Sample this process's anonymous RSS (``RssAnon`` in /proc/self/status) every 20 ms."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def read(field: str = "RssAnon") -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read())
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read())


def child(phase: str, base: str, ft: str, out: str, include: str | None, workers: int,
          threads: int, nbytes: int | None = None) -> dict:
    """Run one measured phase in this (fresh) process; returns its figures."""
    import resource

    import torch

    from paw.io.checkpoint import open_checkpoint

    torch.set_num_threads(threads)
    b, m = open_checkpoint(base), open_checkpoint(ft)
    names = [n for n in b if include is None or __import__("re").search(include, n)]
    params = sum(b.numel(n) for n in names)
    cpu0 = _cpu(resource.getrusage(resource.RUSAGE_SELF))
    with PeakMemory() as mem:
        start = time.perf_counter()
        if phase == "floor":
            from bench_floor import floor

            floor([Path(base), Path(ft)], Path(out), nbytes)
        elif phase == "paw":
            from paw.taskvec import compute_task_vectors, write_report
            from paw.taskvec.compute import cpu_workers

            results = compute_task_vectors(b, [m], devices=["cpu"] * cpu_workers(workers), include=include)
            write_report(out, results, top_k=50, command="bench", overwrite=True)
        else:
            naive(b, m, names)
        wall = time.perf_counter() - start
    cpu = _cpu(resource.getrusage(resource.RUSAGE_SELF))
    return {"phase": phase, "wall_s": wall, "cpu_s": cpu - cpu0, "process_cpu_s": cpu,
            "process_wall_s": time.time() - PROCESS_START, "params": params,
            "peak_anon_bytes": mem.peak, "vm_hwm_bytes": PeakMemory.read("VmHWM")}


def _cpu(use) -> float:
    return use.ru_utime + use.ru_stime


def naive(b, m, names) -> list:
    """Load both models whole, then per tensor: Δ, float64 moments, full sort for quantiles."""
    import torch
    from safetensors.torch import load_file

    keep = set(names)
    whole_b, whole_m = {}, {}
    for ckpt, whole in ((b, whole_b), (m, whole_m)):
        for f in ckpt.files:
            whole.update({k: v for k, v in load_file(str(f)).items() if k in keep})
    qs = torch.tensor([0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 100], dtype=torch.float64) / 100
    rows = []
    for n in names:
        d = whole_m[n].float() - whole_b[n].float()
        x = d.double().reshape(-1)
        mean = x.mean()
        c = x - mean
        m2, m3, m4 = (c ** 2).mean(), (c ** 3).mean(), (c ** 4).mean()
        s = torch.sort(d.reshape(-1)).values.double()
        pos = qs * (s.numel() - 1)
        lo = pos.floor().long()
        hi = torch.clamp(lo + 1, max=s.numel() - 1)
        quant = s[lo] + (s[hi] - s[lo]) * (pos - lo)
        rows.append((float(x.norm()), float(x.abs().sum()), float(x.abs().max()), float(mean),
                     float(m2.sqrt()), float(m3 / m2 ** 1.5), float(m4 / m2 ** 2 - 3), quant.tolist()))
    return rows


def run_child(args, phase: str, base: Path, ft: Path, include: str | None, nbytes: int | None = None) -> dict:
    out = Path(args.workdir) / ("floor-output.bin" if phase == "floor" else "out")
    cmd = [sys.executable, __file__, "--child", phase, "--base", str(base), "--ft", str(ft),
           "--out", str(out), "--workers", str(args.workers), "--threads", str(args.threads)]
    if include:
        cmd += ["--include", include]
    if nbytes is not None:
        cmd += ["--bytes", str(nbytes)]
    for folder in (base, ft):  # every phase starts from the same warm page cache
        for f in folder.glob("*.safetensors"):
            with open(f, "rb") as fh:
                while fh.read(64 << 20):
                    pass
    env = {**os.environ, "PAW_PROGRESS": "0", "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if phase == "floor":
        out.unlink(missing_ok=True)
    if proc.returncode != 0:
        sys.exit(f"{phase} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="3b", help="model shape (default 3b)")
    parser.add_argument("--workdir", default="/tmp/paw-bench-taskvec", help="where the checkpoints go")
    parser.add_argument("--naive-slice", default=None,
                        help="regex of tensors the naive baseline runs on (default: all for tiny/0.5b, "
                             "layers 0-1 otherwise); its time is extrapolated by parameter count")
    parser.add_argument("--workers", type=int, default=0,
                        help="CPU workers for paw (tensors in parallel; 0: one per core, up to 4, as the CLI)")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (OMP_NUM_THREADS) of every phase's process (default 1)")
    parser.add_argument("--skip-naive", action="store_true", help="do not run the naive baseline")
    parser.add_argument("--keep", action="store_true", help="keep the generated checkpoints")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    parser.add_argument("--ft", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--include", help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.base, args.ft, args.out, args.include, args.workers,
                               args.threads, args.bytes)))
        return

    workdir = Path(args.workdir) / args.shape
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        base, ft = build_pair(workdir, args.shape)
        names, _ = llama_shapes(args.shape)
        total = sum(math.prod(s) for _, s in names)
        largest = max(math.prod(s) for _, s in names)
        print(f"shape {args.shape}: {total / 1e9:.3f}B parameters per model, largest tensor "
              f"{largest / 1e6:.1f}M ({largest * 4 / 2**30:.2f} GiB in float32); built in "
              f"{time.perf_counter() - t:.0f}s under {workdir}")
        print(f"threads {args.threads}, paw workers {args.workers or 'default'}; {_machine()}")
        paw = run_child(args, "paw", base, ft, None)
        report = sum(f.stat().st_size for f in (Path(args.workdir) / "out").rglob("*") if f.is_file())
        floors = [run_child(args, "floor", base, ft, None, nbytes=report) for _ in range(2)]
        floor = min(floors, key=lambda r: r["cpu_s"])
        _report("floor", floor, total, extra=f"(runs: {floors[0]['cpu_s']:.1f}s, {floors[1]['cpu_s']:.1f}s CPU; "
                                              f"report of {report} bytes written)")
        _report("paw", paw, total)
        print(f"  paw / floor: {paw['cpu_s'] / floor['cpu_s']:.2f}x CPU, {paw['wall_s'] / floor['wall_s']:.2f}x wall "
              f"(whole processes: {paw['process_cpu_s'] / floor['process_cpu_s']:.2f}x CPU, "
              f"{paw['process_wall_s'] / floor['process_wall_s']:.2f}x wall)   "
              f"peak above the largest float32 tensor: {(paw['peak_anon_bytes'] - largest * 4) / 2**30:+.2f} GiB")
        if not args.skip_naive:
            sl = args.naive_slice or (None if args.shape in ("tiny", "0.5b", "small") else
                                      r"layers\.[01]\.")
            nv = run_child(args, "naive", base, ft, sl)
            est = nv["wall_s"] * total / nv["params"]
            est_cpu = nv["cpu_s"] * total / nv["params"]
            note = "" if sl is None else (f" (ran on {nv['params'] / 1e6:.0f}M params matching {sl!r}, "
                                          f"{nv['wall_s']:.1f}s; time extrapolated to the whole model)")
            _report("naive", {**nv, "wall_s": est, "cpu_s": est_cpu}, total, extra=note)
            print(f"  naive / paw: {est_cpu / paw['cpu_s']:.2f}x CPU, {est / paw['wall_s']:.2f}x wall")
        print(f"  load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        shutil.rmtree(Path(args.workdir) / "out", ignore_errors=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _report(label: str, r: dict, total: int, extra: str = "") -> None:
    process = (f" (process {r['process_wall_s']:.1f} s wall, {r['process_cpu_s']:.1f} s CPU)"
               if "process_cpu_s" in r else "")
    print(f"{label:>10}: {r['wall_s']:7.1f} s wall, {r['cpu_s']:7.1f} s CPU (all threads){process}   "
          f"{total / r['wall_s'] / 1e6:8.1f} M params/s   "
          f"peak anon RSS {r['peak_anon_bytes'] / 2**30:5.2f} GiB (VmHWM {r['vm_hwm_bytes'] / 2**30:5.2f} GiB) {extra}")


def _machine() -> str:
    available = next((int(line.split()[1]) / 1024**2 for line in open("/proc/meminfo")
                      if line.startswith("MemAvailable:")), float("nan"))
    return f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, MemAvailable {available:.1f} GiB"


if __name__ == "__main__":
    main()
