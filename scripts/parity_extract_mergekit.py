#!/usr/bin/env python
"""``paw extract-lora`` against ``mergekit-extract-lora`` on the same base and fine-tune, same rank.

Builds a zoo base (``--hidden-size``, ``--layers``) and a fine-tune that is the base plus a merged
rank-``--signal-rank`` LoRA plus small Gaussian noise (a decaying spectrum with a noise floor, the
shape real fine-tunes have; a pure-noise fine-tune has a flat spectrum no rank summarises), then
runs, each in its own process:

- ``paw extract-lora --rank R`` (randomised SVD) and ``paw extract-lora --rank R --exact``,
- ``mergekit-extract-lora --max-rank R`` (full SVD, sqrt(S) on each factor), installed in its own
  virtualenv (``--mergekit-venv``; created with ``--install-mergekit``: torch==2.13.0 first so that
  pip keeps the CPU wheel, then mergekit).

For every projection both adapters carry, the relative reconstruction error ‖Δ − BA‖_F / ‖Δ‖_F is
measured the same way for both (the adapter read back with ``paw.io.adapter.read_adapter``, Δ from
the two checkpoints), and the script prints the largest difference PAW − mergekit, how many modules
are within 1e-3 or lower, and each tool's wall time and peak resident memory (``ru_maxrss`` of the
child). ``--markdown FILE`` also writes the figures as a page for ``docs/benchmarks/``.

    python scripts/parity_extract_mergekit.py --install-mergekit
    python scripts/parity_extract_mergekit.py --hidden-size 512 --rank 16 --markdown docs/benchmarks/extract-lora-mergekit.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ensure_mergekit(venv: Path, install: bool) -> tuple[Path | None, str]:
    exe = venv / "bin" / "mergekit-extract-lora"
    if exe.exists():
        return exe, ""
    if not install:
        return None, f"mergekit not found in {venv} (pass --install-mergekit to create that virtualenv)"
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv / "bin" / "pip"), "install", "-q", "torch==2.13.0"],  # CPU wheel first
             [str(venv / "bin" / "pip"), "install", "-q", "mergekit"]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"installing mergekit failed at {' '.join(step[-2:])}: {done.stderr.strip()[-300:]}"
    return (exe, "") if exe.exists() else (None, "mergekit installed but mergekit-extract-lora is missing")


def run_measured(cmd: list[str]) -> dict:
    """Run ``cmd``; wall seconds, peak RSS of the child (GiB), exit code and the end of its output."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    return {"seconds": time.perf_counter() - start, "gib": usage.ru_maxrss / 1024**2,
            "rc": os.waitstatus_to_exitcode(status), "tail": out[-1500:]}


def build_pair(work: Path, hidden: int, layers: int, signal_rank: int, noise: float) -> tuple[Path, Path]:
    """A zoo base and base + merged rank-``signal_rank`` LoRA + Gaussian noise (std ``noise`` x each tensor's std)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from paw import zoo

    base = zoo.tiny_model(work / "base", "llama", seed=0, hidden_size=hidden, num_layers=layers,
                          num_heads=max(4, hidden // 64), num_kv_heads=max(2, hidden // 256))
    lora = zoo.make_lora(base, work / "signal-lora", rank=signal_rank, alpha=signal_rank, seed=5, scale=0.05)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), lora).merge_and_unload()
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.ndim == 2:
                p.add_(torch.randn(p.shape, generator=gen) * noise * float(p.std()))
    return base, zoo.save_model(model, work / "finetune")


def errors(adapter: Path, base: Path, finetune: Path) -> dict[str, float]:
    """Relative error ‖Δ − ΔW_adapter‖ / ‖Δ‖ of every LoRA module of ``adapter``."""
    import torch

    from paw.io.adapter import read_adapter
    from paw.io.checkpoint import open_checkpoint

    b, f = open_checkpoint(base), open_checkpoint(finetune)
    out = {}
    for module, lm in read_adapter(adapter).modules().items():
        name = lm.base_key
        delta = f[name].float() - b[name].float()
        out[module] = float(torch.linalg.norm(delta - lm.delta()) / torch.linalg.norm(delta))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/paw-parity-extract"))
    ap.add_argument("--hidden-size", type=int, default=512, help="zoo model width (over 256: PAW's randomised path)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--signal-rank", type=int, default=8, help="rank of the LoRA merged into the fine-tune")
    ap.add_argument("--noise", type=float, default=0.002, help="Gaussian noise added to every matrix, x its std")
    ap.add_argument("--mergekit-venv", type=Path, default=None, help="default: WORKDIR/venv-mergekit")
    ap.add_argument("--install-mergekit", action="store_true")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the result as a Markdown page")
    args = ap.parse_args()

    work = args.workdir
    for sub in ("base", "signal-lora", "finetune", "paw", "paw-exact", "mergekit"):
        shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    base, finetune = build_pair(work, args.hidden_size, args.layers, args.signal_rank, args.noise)
    paw = [sys.executable, "-m", "paw", "extract-lora", "--base", str(base), "--finetune", str(finetune),
           "--rank", str(args.rank), "--device", "cpu"]
    runs = {"paw": run_measured(paw + ["--output", str(work / "paw")]),
            "paw --exact": run_measured(paw + ["--output", str(work / "paw-exact"), "--exact"])}
    exe, why = ensure_mergekit(args.mergekit_venv or work / "venv-mergekit", args.install_mergekit)
    if exe is not None:
        runs["mergekit"] = run_measured([str(exe), "--model", str(finetune), "--base-model", str(base),
                                         "--out-path", str(work / "mergekit"), "--max-rank", str(args.rank)])
    for name, run in runs.items():
        if run["rc"] != 0:
            print(f"{name} failed (exit {run['rc']}):\n{run['tail']}")
            return 1
    found = {"paw": errors(work / "paw", base, finetune), "paw --exact": errors(work / "paw-exact", base, finetune)}
    if exe is not None:
        found["mergekit"] = errors(work / "mergekit", base, finetune)
    lines = report(args, runs, found, why)
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(page(args, lines)) + "\n", encoding="utf-8")
    return 0


def report(args, runs: dict, found: dict, why: str) -> list[str]:
    lines = [f"zoo llama hidden {args.hidden_size}, {args.layers} layers; fine-tune = base + merged rank-"
             f"{args.signal_rank} LoRA + noise {args.noise:g} x std; rank {args.rank}"]
    for name, run in runs.items():
        lines.append(f"{name:12s} {run['seconds']:7.2f} s  peak RSS {run['gib']:.3f} GiB")
    if "mergekit" not in found:
        lines.append(f"mergekit: not run ({why})")
        return lines
    ref = found["mergekit"]
    for name in ("paw", "paw --exact"):
        common = sorted(set(found[name]) & set(ref))
        diffs = [found[name][m] - ref[m] for m in common]
        ok = sum(d <= 1e-3 for d in diffs)
        worst = max(range(len(common)), key=lambda i: diffs[i])
        lines.append(f"{name:12s} {len(common)} modules in common: error - mergekit's: max {max(diffs):+.2e} "
                     f"({common[worst]}), mean {sum(diffs) / len(diffs):+.2e}; within 1e-3 or lower: {ok}/{len(common)}")
    errs = [ref[m] for m in sorted(ref)]
    lines.append(f"mergekit     relative error per module: min {min(errs):.4f}, max {max(errs):.4f}")
    t = runs["mergekit"]["seconds"]
    lines.append(f"time ratio paw / mergekit: {runs['paw']['seconds'] / t:.2f} (randomised), "
                 f"{runs['paw --exact']['seconds'] / t:.2f} (exact); memory ratio "
                 f"{runs['paw']['gib'] / runs['mergekit']['gib']:.2f} / {runs['paw --exact']['gib'] / runs['mergekit']['gib']:.2f}")
    return lines


def page(args, lines: list[str]) -> list[str]:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    command = " ".join(["python scripts/parity_extract_mergekit.py", f"--hidden-size {args.hidden_size}",
                        f"--layers {args.layers}", f"--rank {args.rank}", f"--signal-rank {args.signal_rank}",
                        f"--noise {args.noise:g}"])
    return ["# `paw extract-lora` against `mergekit-extract-lora`", "",
            f"Date {time.strftime('%Y-%m-%d')}, commit {commit}, machine: {platform.machine()}, "
            f"{os.cpu_count()} CPU cores (shared), {platform.python_version()}, CPU only.", "",
            "<!-- not run: installs mergekit in its own virtualenv and takes minutes -->",
            "```bash", command, "```", "<!-- output not compared: timings and memory vary from run to run -->",
            "```text", *lines, "```"]


if __name__ == "__main__":
    sys.exit(main())
