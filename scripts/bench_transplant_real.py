"""Real-model tokenizer transplant: PAW's methods beside mergekit-tokensurgeon's default, then heal.

For one pair (a source model, and a donor whose tokenizer it is given):

1. transplant with PAW's tokenizer-only methods (``exact,decompose``, ``exact,semantic``), with PAW's
   donor-aware OMP (``--donor``), and with ``mergekit-tokensurgeon`` (its default: OMP, k=64) from
   its own venv; each tool runs as a subprocess under ``/usr/bin/time -v`` (wall time, peak RSS);
2. heal PAW's donor-aware result for 100 steps, then 400 more (500 in all; Adam restarts at 100);
3. score every model as soon as it exists (the source on its own tokenizer first), on held-out text: bits per byte on the
   first records of a commonsense test split and on PAW's embedded sample text (BOS first where the
   tokenizer has one; normalised by bytes, so tokenizers compare), and multiple-choice accuracy on
   the first items of ARC-Easy validation.

It prints a markdown table and writes ``WORKDIR/results-NAME.json``. Nothing here is tuned: the heal
uses the CLI's default learning rate; the small heal batch is a CPU budget, stated in the table.

    python scripts/bench_transplant_real.py --source ~/paw-models/gemma-3-270m \\
        --donor ~/paw-models/smollm2-135m-instruct --name gemma-smoltok --workdir /tmp/tr

Install the peer once: ``python -m venv V && V/bin/pip install torch==2.13.0 mergekit==0.1.5``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

DATA = Path("/work/shared/data/commonsense/formatted")
PEER = Path.home() / ".cache/paw-parity/tokensurgeon-venv"
HEAL_FROM = {"default": "PAW exact+decompose", "semantic": "PAW exact+semantic", "donor": "PAW donor-aware OMP"}


def timed(cmd: list[str], log: Path, env_threads: int) -> dict:
    """Run ``cmd`` under /usr/bin/time -v; ``{'seconds', 'peak_rss_mib', 'rc'}`` (log kept beside)."""
    import os

    env = {**os.environ, "OMP_NUM_THREADS": str(env_threads), "PAW_PROGRESS": "1"}
    with log.open("w") as f:
        timer = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").is_file() else []  # absent: wall time only
        t = time.time()
        rc = subprocess.call(["nice", "-n", "10", *timer, *cmd], stdout=f, stderr=subprocess.STDOUT, env=env)
        if not timer:
            print(f"\tElapsed (wall clock) time (h:mm:ss or m:ss): 0:{time.time() - t:.2f}", file=f)
    return {"rc": rc, **parse_time_log(log)}


def parse_time_log(log: Path) -> dict:
    text = log.read_text(errors="replace")
    out = {}
    m = re.search(r"Elapsed \(wall clock\) time.*?: (?:(\d+):)?(\d+):(\d+(?:\.\d+)?)", text)
    if m:
        out["seconds"] = round(int(m[1] or 0) * 3600 + int(m[2]) * 60 + float(m[3]), 1)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        out["peak_rss_mib"] = round(int(m[1]) / 1024)
    return out


PARITY = """
import sys, torch
sys.path.insert(0, {root!r})
from paw.vocab.omp import batch_omp as paw_omp
from mergekit.tokensurgeon.omp import batch_omp as ts_omp
g = torch.Generator().manual_seed(0)
A = torch.randn(2000, 96, generator=g) * torch.rand(2000, 1, generator=g)  # anchors of unequal norms
X = torch.randn(64, 96, generator=g)
for k in (8, 32, 64):
    i1, c1 = paw_omp(X, A, k=k)
    i2, c2 = ts_omp(X, A, k)
    same = (i1 == i2).all(1).float().mean().item()
    r1 = (X - torch.einsum("bk,bkd->bd", c1, A[i1])).norm(dim=1).mean()
    r2 = (X - torch.einsum("bk,bkd->bd", c2, A[i2])).norm(dim=1).mean()
    print(f"k={{k}}: same anchors in the same order for {{same:.0%}} of 64 targets; max |coef diff| "
          f"{{(c1 - c2).abs().max():.1e}}; mean residual PAW {{r1:.5f}}, tokensurgeon {{r2:.5f}}")
"""


def omp_parity(peer: Path) -> None:
    """PAW's batch_omp against tokensurgeon's on one random dictionary, run in the peer's venv."""
    code = PARITY.format(root=str(Path(__file__).resolve().parents[1]))
    subprocess.run([peer_python(peer), "-c", code], check=True)


def peer_python(peer: Path) -> str:
    """The peer venv's python; a ``pip --target`` folder (the GPU lease's) has none, so this one, with it on PYTHONPATH."""
    venv = peer / "bin/python"
    return str(venv) if venv.is_file() else sys.executable


def build(args, work: Path):
    """Each transplanted model of the pair as it is made: ``(label, {'path', 'seconds', 'peak_rss_mib', ...})``."""
    paw = [sys.executable, "-m", "paw"]
    transplant = [*paw, "transplant-tokenizer", "--model", args.source, "--no-check", "--device", args.device]
    peer_cache = work / "tokensurgeon.batches"
    runs = {  # key: (label, output folder, command)
        "default": ("PAW exact+decompose (default)", work / "paw-default", [*transplant, "--tokenizer", args.donor]),
        "semantic": ("PAW exact+semantic (no donor)", work / "paw-semantic",
                     [*transplant, "--tokenizer", args.donor, "--method", "exact,semantic"]),
        "donor": (f"PAW donor-aware OMP (--donor, k={args.k})", work / "paw-donor",
                  [*transplant, "--donor", args.donor, "--omp-k", str(args.k), "--resume"]),  # a stopped fit goes on
        # tokensurgeon's own command through a wrapper that keeps each row it computes, so a run longer than a
        # session resumes (scripts/bench_transplant_real_peer.py; the values are tokensurgeon's)
        "peer": (f"tokensurgeon default (omp, k={args.k})", work / "tokensurgeon",
                 [peer_python(args.peer), str(Path(__file__).with_name("bench_transplant_real_peer.py")),
                  "--cache", str(peer_cache), "--", args.source, args.donor, str(work / "tokensurgeon"),
                  "--k", str(args.k), "--device", args.device]),
    }
    for key in args.build:
        label, folder, cmd = runs[key]
        if key != "peer":
            cmd = [*cmd, "-o", str(folder)]
        log = folder.with_name(folder.name + ".time.log")
        if folder.is_dir() and log.is_file():
            info = {"rc": 0, **parse_time_log(log), "reused": True}
        else:
            print(f"building {label} ...", flush=True)
            info = timed(cmd, log, args.threads)
        if info["rc"] != 0:
            print(f"  {label} failed (rc {info['rc']}); see {log}", flush=True)
            continue
        batches = peer_cache / "seconds.json"
        if key == "peer" and batches.is_file():   # its approximation, summed over every run that computed a part
            info["approximation_seconds_all_runs"] = round(sum(json.loads(batches.read_text()).values()), 1)
        print(f"  {label}: {info.get('seconds')} s, peak {info.get('peak_rss_mib')} MiB", flush=True)
        yield label, {"path": str(folder), **info}


def heal(args, work: Path, start: Path, label: str):
    """100 heal steps from one PAW transplant, then 400 more: each model and its curve as it is made."""
    prev, done = start, 0
    for steps in args.heal:
        more = steps - done
        folder = work / f"{start.name}-heal{steps}"
        log = folder.with_name(folder.name + ".time.log")
        if not (folder.is_dir() and log.is_file()):
            print(f"healing {more} steps -> {steps} ...", flush=True)
            cmd = [sys.executable, "-m", "paw", "heal-transplant", "--model", str(prev), "-o", str(folder),
                   "--steps", str(more), "--batch", str(args.heal_batch), "--seq-len", str(args.heal_seq_len),
                   "--eval-texts", str(args.heal_eval_texts), "--eval-every", str(max(1, more // 4)),
                   "--original", args.source, "--corpus", *map(str, args.heal_corpus), "--eval-corpus", str(args.bpb_data),
                   "--device", args.device]
            info = timed(cmd, log, args.threads)
            if info["rc"] != 0:
                print(f"  heal failed; see {log}", flush=True)
                break
        record = json.loads((folder / "paw_heal.json").read_text())
        yield f"{label} + heal {steps} steps", {"path": str(folder), **parse_time_log(log),
                                                "curve": record["curve"], "rows": record["rows_trained"]}
        prev, done = folder, steps


def score(folder: str, args, texts: dict[str, list[str]], items) -> dict:
    """Bits per byte on each text set and MC accuracy of one model folder."""
    import torch

    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm
    from paw.io.tokenizer import open_tokenizer
    from paw.vocab.heal import bits_per_byte, windows
    from paw.vocab.heal_pipeline import bos_prefix

    torch.set_num_threads(args.threads)
    tok = open_tokenizer(folder)
    lm, hf = load_lm(folder, dtype="float32", device=args.device)
    out = {}
    for name, tx in texts.items():
        wins = windows(tok.encode_batch(tx), 256)
        out[f"bpb_{name}"] = bits_per_byte(lm, wins, lambda i: len(tok.token_bytes(i)), prefix=bos_prefix(tok),
                                          device=args.device)
    norms = lm.get_input_embeddings().weight.detach().float().norm(dim=1)  # a fitted row far longer than the
    out["row_norms"] = {q: round(float(norms.quantile(v)), 4)            # model's own steals softmax mass
                        for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}  # where the head is tied
    m = evaluate(lm, hf, items, batch_size=8, progress=False, device=args.device)
    out.update({"accuracy": m["accuracy"], "accuracy_stderr": m["stderr"], "accuracy_norm": m["accuracy_norm"],
                "mc_n": m["n"]})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", help="model folder that receives the donor's tokenizer")
    p.add_argument("--donor", help="model folder whose tokenizer (and rows, for OMP) is used")
    p.add_argument("--name", help="label of the pair (file names)")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/paw-transplant-real"))
    p.add_argument("--k", type=int, default=64, help="OMP anchors per token, both tools (64: both defaults)")
    p.add_argument("--build", nargs="*", default=["default", "semantic", "donor", "peer"],
                   choices=["default", "semantic", "donor", "peer"],
                   help="which transplants: PAW default, PAW exact,semantic, PAW --donor, tokensurgeon")
    p.add_argument("--peer", type=Path, default=PEER, help="venv with mergekit installed")
    p.add_argument("--heal", type=int, nargs="*", default=[100, 500], help="cumulative heal step budgets")
    p.add_argument("--heal-from", choices=sorted(HEAL_FROM), default="donor", help="which PAW transplant to heal")
    p.add_argument("--heal-batch", type=int, default=2)
    p.add_argument("--heal-seq-len", type=int, default=64)
    p.add_argument("--heal-eval-texts", type=int, default=40)
    p.add_argument("--heal-corpus", type=Path, nargs="*",
                   default=[DATA / "arc-easy_train_formatted.jsonl", DATA / "openbookqa_train_formatted.jsonl"])
    p.add_argument("--bpb-data", type=Path, default=DATA / "openbookqa_test_formatted.jsonl")
    p.add_argument("--bpb-records", type=int, default=100)
    p.add_argument("--mc-data", type=Path, default=DATA / "arc-easy_validation_formatted.jsonl")
    p.add_argument("--mc-items", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="where every tool computes: cpu, or cuda (a GPU lease)")
    p.add_argument("--omp-parity", action="store_true", help="only compare the two OMP solvers on random data")
    args = p.parse_args()
    if args.omp_parity:
        omp_parity(args.peer)
        return

    if not (args.source and args.donor and args.name):
        p.error("--source, --donor and --name are required (except with --omp-parity)")
    from paw.data import sample_texts
    from paw.evaluate.formats import read_items
    from paw.io.tokenizer import read_corpus

    work = args.workdir / args.name
    work.mkdir(parents=True, exist_ok=True)
    texts = {"commonsense": read_corpus([args.bpb_data])[:args.bpb_records],
             "paw_sample": sample_texts("en") + sample_texts("multi")}
    items = read_items(args.mc_data, limit=args.mc_items)
    results_path = work.parent / f"results-{args.name}.json"
    done = json.loads(results_path.read_text()) if results_path.is_file() else {}
    models: dict[str, dict] = {}

    def scored(label: str, info: dict) -> None:
        """Score one model as soon as it exists and write the results file (a time limit keeps what is done)."""
        if label in done and done[label].get("path") == info["path"] and "accuracy" in done[label]:
            models[label] = done[label]
            return
        t = time.time()
        info.update(score(info["path"], args, texts, items))
        print(f"scored {label} in {time.time() - t:.0f} s: {json.dumps({k: v for k, v in info.items() if k != 'curve'})}",
              flush=True)
        models[label] = info
        results_path.write_text(json.dumps({**done, **models}, indent=1))

    scored("original (own tokenizer)", {"path": args.source})
    for label, info in build(args, work):
        scored(label, info)
    start = next((k for k in models if k.startswith(HEAL_FROM[args.heal_from])), None)
    if start and args.heal:
        for label, info in heal(args, work, Path(models[start]["path"]), start.split(" (")[0]):
            scored(label, info)
    table(models)


def table(models: dict) -> None:
    base = models["original (own tokenizer)"]
    print("| model | bpb commonsense | vs original | bpb PAW sample | ARC-Easy acc ± stderr | time | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, r in models.items():
        rel = r["bpb_commonsense"] / base["bpb_commonsense"] - 1
        cost = f"{r['seconds']:.0f} s" if r.get("seconds") is not None else ""
        mem = f"{r['peak_rss_mib']:,} MiB" if r.get("peak_rss_mib") is not None else ""
        print(f"| {label} | {r['bpb_commonsense']:.4f} | {rel:+.1%} | {r['bpb_paw_sample']:.4f} | "
              f"{r['accuracy']:.3f} ± {r['accuracy_stderr']:.3f} | {cost} | {mem} |")
    for label, r in models.items():
        if "curve" in r:
            pts = ", ".join(f"{c['step']}: {c['bpb']:.4f}" for c in r["curve"] if not math.isnan(c["bpb"] or math.nan))
            print(f"\n{label}: heal curve (step: bpb on {r['rows']:,} rows) {pts}")


if __name__ == "__main__":
    main()
