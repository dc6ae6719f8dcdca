#!/usr/bin/env python
"""Measure the relatedness lifts that set the thresholds in ``paw/transfer/relatedness.py``.

Wrong pairs (a transfer must *not* call them related), each lift taken against the null of the
other target layers exactly as ``transfer_lora`` computes it:

- ``same-model``: a trained model against itself, source layer i paired with target layer k != i,
  the true layer i left out of the null (as if the target had lost it);
- ``unrelated`` / ``distilled``: the benchmark's independently trained model and its distilled
  student, every candidate method ``auto`` tries;
- ``random-<shape>``: two independent random models with the speed benchmark's layouts (reduced width).

Right pairs (the benchmark's ``upgrade-mild``, ``upgrade``, ``grown``, ``pruned`` targets): the lifts of
the method ``auto`` chose. Prints, per group, the number of module lifts, the largest, the 99th
percentile and how many reach each threshold, and writes all values to ``--output``.

    python scripts/bench_relatedness.py --workdir /tmp/paw-rel --output relatedness.json
    python scripts/bench_relatedness.py --workdir /tmp/paw-rel --output r.json --quick   # tiny models
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "commonsense" / "formatted"
TARGETS = ("upgrade-mild", "upgrade", "pruned", "grown", "distilled", "unrelated")
RIGHT = ("upgrade-mild", "upgrade", "grown", "pruned")


def _models(workdir: Path, quick: bool) -> dict[str, Path]:
    """The benchmark's bases under ``workdir/models`` (built once, reused afterwards)."""
    folders = {name: workdir / "models" / name for name in ("source", *TARGETS)}
    if all((f / "config.json").exists() for f in folders.values()):
        return folders
    from paw.bench.options import BenchOptions, quick_options
    from paw.bench.quality import build_bases

    common = dict(targets=TARGETS, commonsense=str(DATA) if DATA.is_dir() else None)
    opts = quick_options(**common) if quick else BenchOptions(**common)
    build_bases(opts, workdir, progress=False)
    return folders


def _lifts(records: list[dict], *, chosen: bool) -> list[dict]:
    out = []
    for r in records:
        for c in ([r] if chosen else r.get("candidates", [])):
            if c.get("similarity_lift") is not None or c.get("residual_lift") is not None:
                out.append({"module": r["module"], "method": c["method"], "similarity_lift": c.get("similarity_lift"),
                            "residual_lift": c.get("residual_lift"), "similarity": c.get("similarity"),
                            "similarity_null": c.get("similarity_null")})
    return out


def _same_model(folder: Path) -> list[dict]:
    """Layer i against layer k != i of the same trained model, the true layer left out of the null."""
    import torch

    from paw.io.checkpoint import open_checkpoint
    from paw.transfer import linalg, relatedness
    from paw.transfer.context import Context
    from paw.transfer.evidence import _side
    from paw.transfer.vocab import VocabIndex

    ckpt = open_checkpoint(folder)
    rows = int(ckpt.shape("model.embed_tokens.weight")[0])
    ctx = Context(ckpt, ckpt, torch.device("cpu"), vocab=VocabIndex.from_mapping(None, rows, rows))
    n = ctx.n_layers[1]
    out = []
    for rest in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                 "mlp.up_proj", "mlp.down_proj"):
        def fp(side, j, rest=rest):
            module = f"model.layers.{j}.{rest}"
            return ctx.fingerprint(side, f"{module}.weight", module=module)

        for i in range(n):
            for k in range(n):
                if k == i:
                    continue
                nulls = [fp("t", j) for j in relatedness.null_layers(k, n) if j != i]
                s, t = fp("s", i), fp("t", k)
                sides = [_side(s.U, t.U, [f.U for f in nulls]), _side(s.V, t.V, [f.V for f in nulls])]
                res = linalg.scaled_residual(t.probe, s.probe)
                level = relatedness.null_level([linalg.scaled_residual(f.probe, s.probe) for f in nulls])
                out.append({"module": f"{i}->{k} {rest}", "method": "copy",
                            "similarity_lift": min(x["lift"] for x in sides),
                            "similarity": min(sides, key=lambda x: x["lift"])["similarity"],
                            "residual_lift": None if level is None else relatedness.residual_lift(res, level)})
    return out


def _random_pairs() -> dict[str, list[dict]]:
    spec = importlib.util.spec_from_file_location("bench_transfer_speed", HERE / "bench_transfer_speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    import tempfile

    from paw.io.checkpoint import open_checkpoint
    from paw.io.writer import write_checkpoint
    from paw.transfer import transfer_lora

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape, shrink in (("qwen2.5-1.5b", 4), ("llama-3.2-3b", 8), ("small", 4), ("tiny", 4)):
            s = speed.scaled(shape, shrink, layers=4)
            folders = [write_checkpoint(Path(tmp) / f"{shape}-{seed}", speed.random_tensors(s, seed),
                                        config=speed.config_of(shape, s), overwrite=True) for seed in (1, 2)]
            adapter = speed.random_lora(s, rank=4)
            _, report = transfer_lora(adapter, *map(open_checkpoint, folders), force=True)
            out[f"random-{shape}"] = _lifts(report["modules"], chosen=False)
    return out


def _summary(values: list[float | None], threshold: float) -> dict:
    import numpy as np

    v = np.array([x for x in values if x is not None], dtype=float)
    if not len(v):
        return {"n": 0}
    return {"n": int(len(v)), "min": round(float(v.min()), 3), "median": round(float(np.median(v)), 3),
            "p99": round(float(np.percentile(v, 99)), 3), "max": round(float(v.max()), 3),
            "at_or_above_threshold": int((v >= threshold).sum())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, required=True, help="benchmark models are built here once and reused")
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="tiny models (smoke run)")
    args = ap.parse_args()

    import torch

    from paw import zoo
    from paw.io.adapter import read_adapter
    from paw.io.checkpoint import open_checkpoint
    from paw.transfer import relatedness, transfer_lora

    torch.set_num_threads(1)
    folders = _models(args.workdir, args.quick)
    lora = zoo.make_lora(folders["source"], args.workdir / "measure-lora", rank=8, alpha=16, seed=3, scale=0.1)
    adapter, source = read_adapter(lora), open_checkpoint(folders["source"])
    groups: dict[str, list[dict]] = {"same-model": _same_model(folders["source"])}
    chosen = {}
    for name in TARGETS:
        _, report = transfer_lora(adapter, source, open_checkpoint(folders[name]), force=True)
        if name in RIGHT:
            groups[f"right-{name}"] = _lifts(report["modules"], chosen=True)
            chosen[name] = {"layers": report["layers"]["pairs"], "how": report["layers"]["how"],
                            "methods": report["summary"]["methods"], "related": report["summary"]["related"],
                            "judged": report["summary"]["judged"]}
        else:
            groups[f"wrong-{name}"] = _lifts(report["modules"], chosen=False)
    groups.update(_random_pairs())
    table = {}
    for group, values in groups.items():
        table[group] = {"similarity_lift": _summary([v["similarity_lift"] for v in values], relatedness.SIMILARITY_LIFT),
                        "residual_lift": _summary([v["residual_lift"] for v in values], relatedness.RESIDUAL_LIFT)}
    wrong = [v for g, vs in groups.items() if not g.startswith("right-") for v in vs]
    table["all-wrong"] = {
        "similarity_lift": _summary([v["similarity_lift"] for v in wrong], relatedness.SIMILARITY_LIFT),
        "residual_lift": _summary([v["residual_lift"] for v in wrong], relatedness.RESIDUAL_LIFT)}
    args.output.write_text(json.dumps({"thresholds": {"similarity_lift": relatedness.SIMILARITY_LIFT,
                                                      "residual_lift": relatedness.RESIDUAL_LIFT},
                                       "summary": table, "right_pairs": chosen, "values": groups}, indent=1))
    print(f"{'group':<24}{'similarity lift (n, median, p99, max, >=thr)':<48}residual lift (n, median, p99, max, >=thr)")
    for group, row in table.items():
        cells = []
        for key in ("similarity_lift", "residual_lift"):
            r = row[key]
            cells.append("–" if not r["n"] else f"{r['n']}, {r['median']}, {r['p99']}, {r['max']}, {r['at_or_above_threshold']}")
        print(f"{group:<24}{cells[0]:<48}{cells[1]}")
    print(json.dumps(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
