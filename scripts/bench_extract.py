#!/usr/bin/env python
"""Benchmark ``paw extract-lora`` against its I/O floor and against ``mergekit-extract-lora``, in one run.

Per shape (``--shapes small 1b``: ``bench_merge.py``'s 154M shape and Llama-3.2-1B's, random
bfloat16 weights, tied embeddings), writes a base (the same tensors as ``bench_merge.py``'s) and a
fine-tune = base + a rank-``SIGNAL_RANK`` change with falling singular values + Gaussian noise on
every matrix (embedding included; norm gains unchanged), so that a spectrum falls and then meets a
noise floor as real fine-tunes' do. Then, each in a fresh child process with the same thread
settings and from the same warm page cache:

- ``paw extract-lora --rank R --embed-energy 1`` (default randomised SVD);
- the floor (``scripts/bench_floor.py``): read every tensor of both checkpoints once with PAW's
  reader and write as many bytes as PAW's adapter file, nothing else;
- ``mergekit-extract-lora --max-rank R --skip-undecomposable`` (full SVD), installed in its own
  virtualenv (``--mergekit-venv``, as ``parity_extract_mergekit.py`` makes it).

Same modules on both sides: every projection of every layer gets a rank-R LoRA; the embedding
(and the tied head) is saved whole in ``modules_to_save`` by both: mergekit does so by default, and
PAW, which decides by ``--embed-energy`` (a LoRA when rank R holds that share of the delta), is given
1, which no rank-R truncation of a noisy delta reaches (it still computes the embedding's top-R
spectrum to decide). ``--skip-undecomposable`` keeps mergekit from saving the (unchanged) norm
gains whole; PAW lists changed norms as not carried and finds these unchanged.

Prints each child's CPU seconds (user + sys), wall seconds and peak RSS (its own ``VmHWM``), for
the whole process and after its imports, PAW / floor and mergekit / PAW, and per LoRA module the
relative error ‖Δ − BA‖_F / ‖Δ‖_F of both adapters (read back with ``paw.io.adapter``), as the
parity script does. ``--mergekit-layers N`` runs mergekit on the first N layers only (its
``--include-regex``; the embedding is still saved), for a shape where all of them would not fit
the time or memory at hand; the script then says so and compares per-module time, not totals. ``--phases`` then runs
``extract_lora`` once more in this process with a CPU timer around each step of the pipeline
(pre-pass reads and NaN/Inf check, extraction reads, Δ, SVDs, error measure, figure, write): where
PAW's time goes beside the floor's.

    python scripts/bench_extract.py --shapes small 1b --rank 16 --threads 1
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

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path[:0] = [str(SCRIPTS), str(ROOT)]

from bench_merge import (  # noqa: E402  (beside this script)
    SHAPES,
    _available_gib,
    _machine,
    _numel,
    _seed,
    llama_config,
    measure_floor,
    run_measured,
    startup_cmd,
    tensor_shapes,
    warm,
)
from parity_extract_mergekit import errors  # noqa: E402

SIGNAL_RANK = 8      # rank of the fine-tune's low-rank change
SIGNAL_RMS = 1e-3    # its entry RMS (the base's std is 0.02: a 5 % change)
NOISE_RMS = 4e-5     # Gaussian noise on every matrix, 0.002 x the base's std
DECAY = 0.7          # singular value i of the change is DECAY**i of the first


def generate(folder: Path, shape: dict, finetune: bool) -> Path:
    """Write the base, or base + low-rank change + noise on every matrix, tensor by tensor, bfloat16."""
    import torch

    from paw.io.writer import write_checkpoint

    def tensors():
        for name, dims in tensor_shapes(shape).items():
            g = torch.Generator().manual_seed(_seed("base", name))
            t = torch.randn(dims, generator=g).mul_(0.02).add_(1.0 if name.endswith("norm.weight") else 0.0)
            if finetune and len(dims) == 2:
                g = torch.Generator().manual_seed(_seed("extract-ft", name))
                left = torch.randn(dims[0], SIGNAL_RANK, generator=g)
                right = torch.randn(SIGNAL_RANK, dims[1], generator=g)
                weights = DECAY ** torch.arange(SIGNAL_RANK, dtype=torch.float32)
                # E[(left diag(w) right)_ij^2] = sum w_i^2: scale to the wanted entry RMS
                scale = SIGNAL_RMS / float(weights.square().sum().sqrt())
                t.addmm_(left * weights, right, alpha=scale)
                t.add_(torch.randn(dims, generator=g), alpha=NOISE_RMS)
            yield name, t.to(torch.bfloat16)

    write_checkpoint(folder, tensors(), config=llama_config(shape), overwrite=True)
    return folder


def adapter_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def held(folder: Path) -> dict:
    """What an adapter folder holds: LoRA modules and modules_to_save (from adapter_config.json)."""
    from paw.io.adapter import read_adapter

    cfg = json.loads((folder / "adapter_config.json").read_text())
    return {"lora": len(read_adapter(folder).modules()), "modules_to_save": sorted(cfg.get("modules_to_save") or []),
            "bytes": adapter_bytes(folder)}


def run_shape(args, name: str, env: dict, mk_python: Path | None) -> dict:
    shape = SHAPES[name]
    data = args.workdir / f"models-{name}"
    base, ft = data / "base", data / "finetune"
    n_params = sum(_numel(d) for d in tensor_shapes(shape).values())
    t0 = time.perf_counter()
    for folder, is_ft in ((base, False), (ft, True)):
        if not (folder / "config.json").exists():
            generate(folder, shape, is_ft)
    print(f"\n== shape {name}: {n_params / 1e6:.0f}M parameters (hidden {shape['hidden']}, {shape['layers']} layers, "
          f"vocabulary {shape['vocab']}), inputs ready in {time.perf_counter() - t0:.0f} s; {_machine()}", flush=True)
    record = args.workdir / "startup-rss.txt"
    out_paw, out_mk = args.workdir / f"out-paw-{name}", args.workdir / f"out-mergekit-{name}"
    shutil.rmtree(out_paw, ignore_errors=True)
    shutil.rmtree(out_mk, ignore_errors=True)
    row = {"shape": name, "params": n_params}

    warm([base, ft])
    record.unlink(missing_ok=True)
    row["paw"] = run_measured(startup_cmd(
        sys.executable, record, ["torch", "safetensors.torch", "paw.cli", "paw.extract", "paw.io.adapter"],
        "paw.cli:main", ["extract-lora", "--base", str(base), "--finetune", str(ft), "--output", str(out_paw),
                         "--rank", str(args.rank), "--embed-energy", "1", "--device", "cpu"]), env=env, record=record)
    _show("paw", row["paw"])
    if row["paw"]["rc"] != 0:
        sys.exit(f"paw extract-lora failed ({row['paw']['rc']}):\n{row['paw']['tail']}")
    row["paw_holds"] = held(out_paw)
    row["floor"] = measure_floor([base, ft], args.workdir, env, record, nbytes=row["paw_holds"]["bytes"])
    _show("floor", row["floor"])

    layers = shape["layers"] if args.mergekit_layers is None else min(args.mergekit_layers, shape["layers"])
    row["mk_layers"] = layers
    if mk_python is not None and not args.skip_mergekit:
        include = [] if layers == shape["layers"] else \
            ["--include-regex", r"model\.layers\.(" + "|".join(map(str, range(layers))) + r")\."]
        warm([base, ft])
        record.unlink(missing_ok=True)
        row["mk"] = run_measured(startup_cmd(
            str(mk_python), record, ["torch", "mergekit.scripts.extract_lora"], "mergekit.scripts.extract_lora:main",
            ["--model", str(ft), "--base-model", str(base), "--out-path", str(out_mk), "--max-rank", str(args.rank),
             "--skip-undecomposable", "--no-cuda", "--quiet", "--no-copy-tokenizer", *include]), env=env, record=record)
        _show("mergekit", row["mk"])
        if row["mk"]["rc"] != 0:
            print(f"MERGEKIT FAILED (exit {row['mk']['rc']}); PAW's figures still follow:\n{row['mk']['tail']}")
            row.pop("mk")
        else:
            row["mk_holds"] = held(out_mk)
    if args.phases:
        row["phases"] = phases(base, ft, args.workdir / f"out-phases-{name}", args.rank, args.threads)
        print("  paw in-process CPU s by step: " + ", ".join(f"{k} {v:.2f}" for k, v in row["phases"].items()),
              flush=True)
    e_paw = errors(out_paw, base, ft)
    row["errors"] = {"paw": e_paw}
    if "mk" in row:
        row["errors"]["mergekit"] = errors(out_mk, base, ft)
    if not args.keep:
        shutil.rmtree(out_paw, ignore_errors=True)
        shutil.rmtree(out_mk, ignore_errors=True)
    return row


class Phases:
    """CPU seconds per named step, each step's own time only (nested steps are subtracted)."""

    def __init__(self):
        self.cpu: dict[str, float] = {}
        self.stack: list[list] = []  # [name, CPU seconds of the steps nested in it]

    def wrap(self, name: str, fn, *, by_caller: bool = False):
        def timed(*args, **kwargs):
            label = f"{name} ({self.stack[-1][0] if self.stack else 'top'})" if by_caller else name
            start = time.process_time()
            self.stack.append([label, 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.process_time() - start
                nested = self.stack.pop()[1]
                self.cpu[label] = self.cpu.get(label, 0.0) + spent - nested
                if self.stack:
                    self.stack[-1][1] += spent
        return timed


def phases(base: Path, ft: Path, out: Path, rank: int, threads: int) -> dict[str, float]:
    """``extract_lora`` in this process with :class:`Phases` around each step (run under the same threads)."""
    import torch

    import paw.extract.pipeline as pl
    import paw.io.lazy_checkpoint as lc

    torch.set_num_threads(threads)
    ph = Phases()
    saved = {k: getattr(pl, k) for k in ("_refuse_nonfinite", "_extract_all", "spectrum", "relative_error",
                                          "squared_norm", "lora_factors", "energy_figure", "write_adapter")}
    names = {"_refuse_nonfinite": "NaN/Inf pre-pass", "_extract_all": "extraction loop: delta F - B, clones",
             "spectrum": "SVD", "relative_error": "error measure", "squared_norm": "sums of squares",
             "lora_factors": "factors", "energy_figure": "figure (matplotlib import + plot)",
             "write_adapter": "write the adapter"}
    getitem = lc.Checkpoint.__getitem__
    try:
        for k, fn in saved.items():
            setattr(pl, k, ph.wrap(names[k], fn))
        lc.Checkpoint.__getitem__ = ph.wrap("read", getitem, by_caller=True)
        shutil.rmtree(out, ignore_errors=True)
        start = time.process_time()
        pl.extract_lora(base, ft, out, pl.ExtractOptions(rank=rank, embed_energy=1.0))
        total = time.process_time() - start
    finally:
        for k, fn in saved.items():
            setattr(pl, k, fn)
        lc.Checkpoint.__getitem__ = getitem
        shutil.rmtree(out, ignore_errors=True)
    ph.cpu["rest of extract_lora (report, card, config)"] = total - sum(ph.cpu.values())
    ph.cpu["total"] = total
    return ph.cpu


def _show(what: str, res: dict) -> None:
    print(f"  {what:9s} CPU {res['cpu']:7.1f} s  wall {res['wall']:7.1f} s  peak {res['gib']:.2f} GiB  "
          f"(after imports: CPU {res.get('work_cpu', float('nan')):.1f} s, above {res.get('above_gib', float('nan')):.2f}"
          f" GiB)  exit {res['rc']}; load {os.getloadavg()[0]:.1f}", flush=True)


def report(rows: list[dict], args) -> list[str]:
    lines = [f"threads {args.threads}; rank {args.rank}; fine-tune = base + rank-{SIGNAL_RANK} change (entry RMS "
             f"{SIGNAL_RMS:g}, singular values x{DECAY:g} each) + noise {NOISE_RMS:g} on every matrix; {_machine()}",
             "shape | floor CPU / wall s | PAW CPU / wall s | mergekit CPU / wall s | PAW / floor CPU (wall) | "
             "after imports | mergekit / PAW CPU (wall) | after imports | peak GiB floor / PAW / mergekit"]
    for r in rows:
        f, p, k = r["floor"], r["paw"], r.get("mk")
        cells = [f"{r['shape']} ({r['params'] / 1e6:.0f}M)", _secs(f), _secs(p), _secs(k) if k else "not run",
                 _ratio(p, f, "cpu", "wall"), _ratio(p, f, "work_cpu", "work_wall"),
                 _ratio(k, p, "cpu", "wall") if k else "n/a", _ratio(k, p, "work_cpu", "work_wall") if k else "n/a",
                 f"{f['gib']:.2f} / {p['gib']:.2f} / " + (f"{k['gib']:.2f}" if k else "n/a")]
        lines.append(" | ".join(cells))
    for r in rows:
        lines.append(f"{r['shape']}: paw holds {r['paw_holds']['lora']} LoRA modules, modules_to_save "
                     f"{r['paw_holds']['modules_to_save']}, {r['paw_holds']['bytes'] / 1e6:.1f} MB")
        if "mk" in r:
            lines.append(f"{r['shape']}: mergekit holds {r['mk_holds']['lora']} LoRA modules, modules_to_save "
                         f"{r['mk_holds']['modules_to_save']}, {r['mk_holds']['bytes'] / 1e6:.1f} MB"
                         + ("" if r["mk_layers"] == SHAPES[r["shape"]]["layers"] else
                            f" (first {r['mk_layers']} of {SHAPES[r['shape']]['layers']} layers only)"))
        ep = r["errors"]["paw"]
        lines.append(f"{r['shape']}: paw relative error per module: min {min(ep.values()):.4f}, "
                     f"max {max(ep.values()):.4f}")
        if "mergekit" in r["errors"]:
            em = r["errors"]["mergekit"]
            common = sorted(set(ep) & set(em))
            diffs = {m: ep[m] - em[m] for m in common}
            worst = max(diffs, key=diffs.get)
            lines.append(f"{r['shape']}: {len(common)} modules in common: paw - mergekit error max "
                         f"{diffs[worst]:+.2e} ({worst}), mean {sum(diffs.values()) / len(diffs):+.2e}, min "
                         f"{min(diffs.values()):+.2e}; within 1e-3 or lower: {sum(d <= 1e-3 for d in diffs.values())}"
                         f"/{len(common)}")
    lines.append("floor: read both checkpoints once (PAW's reader), write PAW's adapter size once; 'after imports' "
                 "leaves out each child's imports; mergekit / PAW above 1: PAW is faster")
    return lines


def _secs(res: dict) -> str:
    return f"{res['cpu']:.1f} / {res['wall']:.1f}"


def _ratio(a: dict, b: dict, cpu: str, wall: str) -> str:
    if a.get(cpu) is None or b.get(cpu) is None or b[cpu] <= 0:
        return "n/a"
    return f"{a[cpu] / b[cpu]:.2f}x ({a[wall] / b[wall]:.2f}x)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["small", "1b"], choices=list(SHAPES))
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS and MKL_NUM_THREADS of every child")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/paw-bench-extract"))
    ap.add_argument("--mergekit-venv", type=Path, default=Path("/work/venv-mergekit"))
    ap.add_argument("--skip-mergekit", action="store_true")
    ap.add_argument("--mergekit-layers", type=int, default=None, help="mergekit on the first N layers only")
    ap.add_argument("--min-available-gib", type=float, default=0.0, help="refuse to start below this MemAvailable")
    ap.add_argument("--phases", action="store_true", help="also time each step of extract_lora in this process")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure here")
    ap.add_argument("--keep", action="store_true", help="keep the generated models and the outputs")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if _available_gib() < args.min_available_gib:
        sys.exit(f"MemAvailable {_available_gib():.1f} GiB < --min-available-gib {args.min_available_gib:g}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    mk_python = args.mergekit_venv / "bin" / "python"
    if not (args.mergekit_venv / "bin" / "mergekit-extract-lora").exists():
        print(f"MERGEKIT NOT RUN: no mergekit-extract-lora in {args.mergekit_venv}")
        mk_python = None
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"commit {commit}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; threads {args.threads}")
    rows = [run_shape(args, name, env, mk_python) for name in args.shapes]
    lines = report(rows, args)
    print("\n" + "\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"commit": commit, "rows": [
            {k: ({f: x for f, x in v.items() if f != "tail"} if isinstance(v, dict) and "tail" in v else v)
             for k, v in r.items()} for r in rows]}, indent=1))
    if not args.keep:
        for name in args.shapes:
            shutil.rmtree(args.workdir / f"models-{name}", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
