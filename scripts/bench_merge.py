#!/usr/bin/env python
"""Benchmark ``paw merge`` against its I/O floor and against mergekit, in the same run.

Generates a base and three "fine-tunes" (base + Gaussian noise of growing size) with the tensor
shapes of a Llama model (``--shape 1b``: Llama-3.2-1B, 1.24B parameters, tied embeddings;
``--shape small``: 154M) as random bfloat16 safetensors under ``--workdir``, then runs, each in its
own process with the same thread settings:

- the floor (``scripts/bench_floor.py``): read every input tensor once with PAW's reader and write
  the output's bytes once (same size, same dtype, same disk), nothing else;
- ``paw merge`` with each method of ``--methods`` (task-arithmetic, ties, dare-ties, linear, slerp,
  della; weights from ``--mode exp`` on the known L2 norms; slerp merges the first fine-tune);
- ``mergekit-yaml`` with the same method, weights, density and t, installed in its own virtualenv
  (``--mergekit-venv``; created with ``--install-mergekit``: torch first so that pip keeps the CPU
  wheel, then mergekit),

and prints, side by side, wall and CPU seconds (user + system of the child), PAW / floor and
mergekit / PAW, the peak resident memory of each (the child's own ``VmHWM``) and the peak above
start-up (after the tool's imports) as a multiple of the largest float32 tensor, the same ratios on
the time after start-up, and the largest absolute difference between the two outputs
(deterministic methods). If mergekit cannot be installed or run, it says so and still reports PAW's
figures against the floor.

    python scripts/bench_merge.py --shape small --install-mergekit --threads 1
    python scripts/bench_merge.py --shape 1b --threads 1 --keep
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
SHARD_BYTES = 1_000_000_000  # both tools buffer one output shard in memory: give them the same size
METHODS = ("task-arithmetic", "ties", "dare-ties", "linear", "slerp", "della")
RANDOM = ("dare-ties", "della")  # seeded random masks: the two tools' outputs are not compared
MERGEKIT_NAMES = {"task-arithmetic": "task_arithmetic", "ties": "ties", "dare-ties": "dare_ties",
                  "linear": "linear", "slerp": "slerp", "della": "della"}
EPSILON = 0.15  # della: keep probabilities span density +- epsilon (PAW's default)
T = 0.5         # slerp
SCRIPTS = Path(__file__).resolve().parent


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


# Runs a tool's entry point and records its peak RSS, CPU seconds and clock after the imports
# (start-up) and its peak RSS at the end. VmHWM of /proc/self/status is the high-water mark of this
# process image alone: ru_maxrss would also carry the RSS the parent had when it forked (Linux keeps
# it across exec).
STARTUP = """
import atexit, importlib, resource, sys, time
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return line.split()[1]
for name in sys.argv[2].split(","):
    importlib.import_module(name)
use = resource.getrusage(resource.RUSAGE_SELF)
start = f"{hwm()} {use.ru_utime + use.ru_stime} {time.time()}"
record = sys.argv[1]
atexit.register(lambda: open(record, "w").write(start + " " + hwm()))
module, _, attr = sys.argv[3].partition(":")
sys.argv = [sys.argv[3]] + sys.argv[4:]
sys.exit(getattr(importlib.import_module(module), attr)())
"""


def startup_cmd(python: str, record: Path, imports: list[str], entry: str, args: list[str]) -> list[str]:
    return [python, "-c", STARTUP, str(record), ",".join(imports), entry, *args]


def run_measured(cmd: list[str], env=None, record: Path | None = None) -> dict:
    """Wall seconds, CPU seconds (user + sys), peak RSS in GiB, exit code and output tail of one child.

    Peak RSS is the child's ``ru_maxrss``, or with ``record`` the high-water mark of its own image.

    CPU seconds are reported beside wall time because on a shared machine wall time mostly measures
    the other tenants; CPU time measures the work. With ``record`` (written by :data:`STARTUP`),
    also the RSS, CPU seconds and wall seconds at the end of the imports, and the peak and the
    seconds after them (``above_gib``, ``work_cpu``, ``work_wall``).
    """
    start, clock = time.perf_counter(), time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    res = {"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime,
           "gib": usage.ru_maxrss / 1024**2, "rc": os.waitstatus_to_exitcode(status), "tail": out[-1500:]}
    if record is not None and record.exists():
        fields = record.read_text().split()
        start_kib, start_cpu, start_clock, peak_kib = int(fields[0]), float(fields[1]), float(fields[2]), int(fields[3])
        res.update(gib=peak_kib / 1024**2, startup_gib=start_kib / 1024**2, above_gib=(peak_kib - start_kib) / 1024**2,
                   startup_cpu=start_cpu, startup_wall=start_clock - clock,
                   work_cpu=res["cpu"] - start_cpu, work_wall=res["wall"] - (start_clock - clock))
    return res


def warm(folders: list[Path]) -> None:
    """Read every input once so that both tools start from the same (warm) page cache."""
    for folder in folders:
        for f in folder.glob("*.safetensors"):
            with open(f, "rb") as fh:
                while fh.read(64 << 20):
                    pass


def mergekit_config(method: str, base: Path, models: list[Path], weights: list[float], density: float) -> str:
    """mergekit's YAML for the job ``paw merge --method METHOD`` does with these weights and knobs.

    TIES, DARE-TIES and DELLA normalise by the weights that take part, as PAW's do; DARE keeps a
    ``density`` share (PAW: ``--drop-rate 1 - density``) and rescales the survivors (mergekit to the
    L1 norm, PAW by ``1 / (1 - p)``: random masks either way, not compared); linear averages the
    fine-tunes; SLERP goes from the base to the first fine-tune at ``t``.
    """
    lines = [f"merge_method: {MERGEKIT_NAMES[method]}", "dtype: float32", "out_dtype: bfloat16", "parameters:"]
    if method != "linear":  # mergekit's linear averages every model it is given, a base_model included
        lines.insert(1, f"base_model: {base}")
    if method == "slerp":
        lines += [f"  t: {T!r}", "models:", f"  - model: {base}", f"  - model: {models[0]}"]
        return "\n".join(lines) + "\n"
    lines += [f"  normalize: {'false' if method == 'task-arithmetic' else 'true'}", "models:"]
    for m, w in zip(models, weights, strict=True):
        lines += [f"  - model: {m}", "    parameters:", f"      weight: {w!r}"]
        if method in ("ties", "dare-ties", "della"):
            lines.append(f"      density: {density!r}")
        if method == "della":
            lines.append(f"      epsilon: {EPSILON!r}")
    return "\n".join(lines) + "\n"


def paw_flags(method: str, density: float) -> list[str]:
    """The ``paw merge`` knobs of METHOD that match :func:`mergekit_config`."""
    if method == "dare-ties":
        return ["--drop-rate", repr(1.0 - density)]
    if method in ("ties", "della"):
        return ["--density", repr(density)] + (["--epsilon", repr(EPSILON)] if method == "della" else [])
    if method == "slerp":
        return ["--t", repr(T)]
    return []


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


def compare(a: Path, b: Path, inputs: list[Path] | None = None, density: float = 1.0) -> dict:
    """Largest |a - b| and the count of differing entries over the tensors both outputs have.

    With ``inputs`` (base, then models) for a TIES merge, also split the differing entries into those
    where some model's |Δ| equals its own trim threshold (a magnitude tie: which of the tied entries
    survive the trim is an arbitrary choice in mergekit's argsort, by index in PAW) and the rest.
    """
    import torch

    from paw.io.checkpoint import open_checkpoint
    from paw.merge.methods import kth_largest

    ca, cb = open_checkpoint(a), open_checkpoint(b)
    ins = [open_checkpoint(p) for p in inputs] if inputs else None
    res = {"diff": 0.0, "diff_outside_ties": 0.0, "differ": 0, "differ_at_ties": 0}
    for name in ca:
        if name not in cb:
            continue
        d = (ca[name].float() - cb[name].float()).abs().reshape(-1)
        res["diff"] = max(res["diff"], float(d.max()))
        where = torch.nonzero(d > 0).reshape(-1)
        res["differ"] += where.numel()
        if ins is None or where.numel() == 0:
            continue
        base = ins[0][name].float().reshape(-1)
        tied = torch.zeros(where.numel(), dtype=torch.bool)
        for m in ins[1:]:
            mag = (m[name].float().reshape(-1) - base).abs()
            threshold = kth_largest(mag, max(1, int(density * mag.numel())))
            tied |= mag[where] == threshold
        res["differ_at_ties"] += int(tied.sum())
        if (~tied).any():
            res["diff_outside_ties"] = max(res["diff_outside_ties"], float(d[where[~tied]].max()))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=SHAPES, default="1b", help="model shape (1b = Llama-3.2-1B)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/paw-bench-merge"))
    ap.add_argument("--mergekit-venv", type=Path, default=None,
                    help="virtualenv holding mergekit (default: WORKDIR/venv-mergekit)")
    ap.add_argument("--install-mergekit", action="store_true", help="create that virtualenv if missing")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--density", type=float, default=0.2, help="ties, dare-ties (1 - drop rate), della")
    ap.add_argument("--device", default="cpu", help="paw --device (mergekit runs with --no-cuda)")
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP_NUM_THREADS for every child (default: torch's own choice); on a shared, "
                         "oversubscribed machine 1 is faster for both tools")
    ap.add_argument("--skip-mergekit", action="store_true")
    ap.add_argument("--skip-mergekit-for", nargs="*", default=[], choices=METHODS, metavar="METHOD",
                    help="run mergekit on the other methods only (e.g. where it would not fit in memory)")
    ap.add_argument("--min-available-gib", type=float, default=0.0,
                    help="skip a child (floor, paw or mergekit) when MemAvailable is below this when it would start; "
                         "on a shared machine, so that no run is killed for memory")
    ap.add_argument("--keep", action="store_true", help="keep the generated models and outputs")
    ap.add_argument("--norms", choices=["given", "computed"], default="given",
                    help="given: pass the known norms (--l2-norms); computed: let paw run its norm pass")
    ap.add_argument("--shard-bytes", type=int, default=SHARD_BYTES, help="output shard size for both tools")
    ap.add_argument("--linear-without-base", action="store_true",
                    help="run paw's linear without --base, as mergekit's (the floor of linear reads the models only either way)")
    args = ap.parse_args()

    shape = SHAPES[args.shape]
    data = args.workdir / f"models-{args.shape}"
    base, models = data / "base", [data / f"ft{i}" for i in range(3)]
    n_params = sum(_numel(d) for d in tensor_shapes(shape).values())
    largest = max(_numel(d) for d in tensor_shapes(shape).values()) * 4 / 1024**3
    print(f"shape {args.shape}: {n_params / 1e9:.3f}B parameters, bfloat16, 3 fine-tunes, in {data}; "
          f"largest tensor {largest:.3f} GiB in float32")
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
    record = args.workdir / "startup-rss.txt"
    paw_imports = ["torch", "safetensors.torch", "paw.cli", "paw.merge", "paw.io.writer", "rich.table"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    print(f"threads: {args.threads or 'default'}; output shards of {args.shard_bytes / 1e9:g} GB for both tools; "
          f"{_machine()}")
    floors: dict[tuple, dict] = {}
    rows = []
    for method in args.methods:
        used = models[:1] if method == "slerp" else models
        if not _room(args.min_available_gib, f"floor and paw merge --method {method}"):
            continue
        with_base = not (method == "linear" and args.linear_without_base)
        # linear at scale 1 needs no base (PAW does not read it when given): its floor reads the models only
        inputs = used if method == "linear" else [base, *used]
        if tuple(inputs) not in floors:  # one floor per set of inputs, measured before the first method using it
            floors[tuple(inputs)] = measure_floor(inputs, args.workdir, env, record)
        out_paw, out_mk = args.workdir / f"out-paw-{method}", args.workdir / f"out-mergekit-{method}"
        given = ["--l2-norms", *map(str, norms[:len(used)])] if args.norms == "given" else []
        weighting = [] if method == "slerp" else ["--mode", "exp", *given]
        cmd = startup_cmd(sys.executable, record, paw_imports, "paw.cli:main", [
            "merge", *(["--base", str(base)] if with_base else []), "--models", *map(str, used),
            "--output", str(out_paw),
            "--method", method, *weighting, *paw_flags(method, args.density), "--device", args.device,
            "--overwrite", "--max-shard-size", str(args.shard_bytes)])
        warm(inputs)
        record.unlink(missing_ok=True)
        p = run_measured(cmd, env=env, record=record)
        if p["rc"] != 0:
            print(f"paw merge failed ({p['rc']}):\n{p['tail']}")
            return 1
        weights = json.loads((out_paw / "paw_merge.json").read_text())["weights"]
        row = {"method": method, "paw": p, "floor": floors[tuple(inputs)], "largest_f32_gib": largest,
               "norms": args.norms}
        if mk_exe is not None and method not in args.skip_mergekit_for and \
                _room(args.min_available_gib, f"mergekit {method}"):
            cfg = args.workdir / f"mergekit-{method}.yml"
            cfg.write_text(mergekit_config(method, base, used, weights, args.density))
            shutil.rmtree(out_mk, ignore_errors=True)
            warm([base, *used])
            record.unlink(missing_ok=True)
            k = run_measured(startup_cmd(
                str(mk_exe.parent / "python"), record, ["torch", "mergekit.merge", "mergekit.scripts.run_yaml"],
                "mergekit.scripts.run_yaml:main",
                [str(cfg), str(out_mk), "--no-cuda", "--quiet", "--no-copy-tokenizer",
                 "--no-write-model-card", "--out-shard-size", str(args.shard_bytes)]), env=env, record=record)
            if k["rc"] != 0:
                print(f"MERGEKIT FAILED on {method} (exit {k['rc']}); PAW's figures still follow:\n{k['tail']}")
            else:
                row["mk"] = k
                if method not in RANDOM:
                    row.update(compare(out_paw, out_mk, [base, *used] if method == "ties" else None, args.density))
            shutil.rmtree(out_mk, ignore_errors=True)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("paw", "floor", "mk")} |
                         {k: {f: v for f, v in row[k].items() if f != "tail"} for k in ("paw", "floor", "mk") if k in row}))
    _report(rows, n_params, args.threads)
    if not args.keep:
        for p in [data, *args.workdir.glob("out-*"), *args.workdir.glob("mergekit-*.yml")]:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return 0


def measure_floor(inputs: list[Path], workdir: Path, env: dict, record: Path, nbytes: int | None = None) -> dict:
    """The floor (:mod:`bench_floor`) on ``inputs`` in its own child, from a warm page cache; it writes
    ``nbytes`` bytes (default: as many as the first input's tensors)."""
    out = workdir / "floor-output.bin"
    warm(inputs)
    record.unlink(missing_ok=True)
    size = [] if nbytes is None else ["--bytes", str(nbytes)]
    res = run_measured(startup_cmd(sys.executable, record, ["torch", "paw.io.checkpoint"], "bench_floor:main",
                                   ["--inputs", *map(str, inputs), "--out", str(out), *size]),
                       env={**env, "PYTHONPATH": os.pathsep.join([str(SCRIPTS), env.get("PYTHONPATH", "")])},
                       record=record)
    out.unlink(missing_ok=True)
    if res["rc"] != 0:
        sys.exit(f"the floor failed ({res['rc']}):\n{res['tail']}")
    return res


def _available_gib() -> float:
    return next((int(line.split()[1]) / 1024**2 for line in open("/proc/meminfo")
                 if line.startswith("MemAvailable:")), float("nan"))


def _room(min_gib: float, what: str) -> bool:
    """Whether MemAvailable allows starting ``what`` now (``--min-available-gib``); says so when not."""
    if min_gib <= 0 or _available_gib() >= min_gib:
        return True
    print(f"SKIPPED {what}: MemAvailable {_available_gib():.1f} GiB < --min-available-gib {min_gib:g}")
    return False


def _machine() -> str:
    """Cores, load average and available memory now: the loan under which these numbers were taken."""
    return (f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
            f"MemAvailable {_available_gib():.1f} GiB")


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _report(rows: list[dict], n_params: int, threads: int | None) -> None:
    """One table: each tool's wall / CPU seconds and peak, PAW / floor and mergekit / PAW side by side."""
    head = ("method", "floor wall / CPU s", "paw wall / CPU s", "mergekit wall / CPU s", "paw / floor CPU (wall)",
            "paw / floor after start-up CPU (wall)", "mergekit / paw CPU (wall)", "peak GiB floor / paw / mergekit",
            "paw / mergekit above start-up GiB", "max |diff|, entries differing")
    print(f"\nthreads {threads or 'default'}; {_machine()}\n" + " | ".join(head))
    for r in rows:
        f, p, k = r["floor"], r["paw"], r.get("mk")
        cells = [r["method"], _secs(f), _secs(p), _secs(k) if k else "n/a",
                 _ratio(p["cpu"], f["cpu"], p["wall"], f["wall"]),
                 _ratio(p.get("work_cpu"), f.get("work_cpu"), p.get("work_wall"), f.get("work_wall")),
                 _ratio(k["cpu"], p["cpu"], k["wall"], p["wall"]) if k else "n/a",
                 f"{f['gib']:.2f} / {p['gib']:.2f} / " + (f"{k['gib']:.2f}" if k else "n/a"),
                 _above(p, r) + " / " + (_above(k, r) if k else "n/a")]
        if k and r["method"] in RANDOM:
            cells.append("random masks, not compared")
        elif k and "diff" in r:
            differing = f"{r['differ']} of {n_params}"
            if r["method"] == "ties":
                differing += (f" ({r['differ_at_ties']} at a trim-threshold tie; max |diff| elsewhere "
                              f"{r['diff_outside_ties']:.3g})")
            cells.append(f"{r['diff']:.3g}, {differing}")
        else:
            cells.append("n/a")
        print(" | ".join(cells))
    print("floor: read every input tensor once, write the output's bytes once (scripts/bench_floor.py); "
          "'after start-up' leaves out each child's imports; mergekit / paw above 1 means paw is faster; "
          "'above start-up' is the peak RSS minus the RSS after the imports, as a multiple of the largest "
          "float32 tensor in brackets")


def _secs(res: dict) -> str:
    return f"{res['wall']:.1f} / {res['cpu']:.1f}"


def _ratio(cpu_a, cpu_b, wall_a, wall_b) -> str:
    if None in (cpu_a, cpu_b, wall_a, wall_b) or cpu_b <= 0 or wall_b <= 0:
        return "n/a"
    return f"{cpu_a / cpu_b:.2f}x ({wall_a / wall_b:.2f}x)"


def _above(res: dict, row: dict) -> str:
    gib = res.get("above_gib")
    return "n/a" if gib is None else f"{gib:.2f} ({gib / row['largest_f32_gib']:.2f}x)"


if __name__ == "__main__":
    sys.exit(main())
