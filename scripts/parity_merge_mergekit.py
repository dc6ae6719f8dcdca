#!/usr/bin/env python
"""Parity of ``paw merge --config`` with ``mergekit-yaml`` on the same YAML files, method by method.

Generates a Llama-shaped base and three "fine-tunes" (base + Gaussian noise, bfloat16, shapes from
``scripts/bench_merge.py``; ``--shape l40`` has the 40 layers of the 13B models mergekit's examples
name, so their ``layer_range: [0, 40]`` stays as written), then feeds each YAML below to both tools,
each in its own process, and prints per config: the largest absolute difference between the two
outputs, wall and CPU seconds and peak resident memory of each tool (same run, same warm page cache).

The YAML texts are mergekit's own examples (``examples/gradient-slerp.yml``, ``ties.yml``,
``bio-merge.yml``, ``linear.yml``, ``orcamini-platy-44layer.yml``) with only the model names mapped
to the generated folders, plus one config per other method both tools have. Each runs twice: as
written (mostly ``dtype: float16``: mergekit then computes in float16, PAW in float32, so the
difference is mergekit's float16 rounding) and with ``dtype: float32`` (the parity figure, ≤ 1e-5).
DARE and DELLA draw random masks: their outputs differ by construction and are not compared.

mergekit runs from its own virtualenv (``--mergekit-venv``, default ``~/.cache/paw-parity/mergekit-venv``;
``--install-mergekit`` creates it: torch==2.13.0 first, then mergekit).

    python scripts/parity_merge_mergekit.py --shape tiny --only gradient-slerp ties
    OMP_NUM_THREADS=1 nice python scripts/parity_merge_mergekit.py --shape l40 --markdown docs/benchmarks/merge-parity.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_merge as bm  # noqa: E402  (the generator and the measured runner are shared with the speed benchmark)

SHAPES = {**bm.SHAPES, "l40": dict(hidden=512, layers=40, heads=8, kv=2, inter=1536, vocab=32000)}
NAMES = {  # model names in mergekit's examples -> generated folder
    "TheBloke/Llama-2-13B-fp16": "base", "mistralai/Mistral-7B-v0.1": "base",
    "psmathur/orca_mini_v3_13b": "ft0", "mistralai/Mistral-7B-Instruct-v0.2": "ft0",
    "garage-bAInd/Platypus2-13B": "ft1", "BioMistral/BioMistral-7B": "ft1",
    "WizardLM/WizardMath-13B-V1.0": "ft2", "WizardLM/WizardLM-13B-V1.2": "ft2",
}
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "docs" / "examples" / "mergekit"
EXAMPLES = {path.stem: path.read_text() for path in sorted(EXAMPLES_DIR.glob("*.yml"))}  # mergekit's examples/, as written
THREE = "models:\n" + "".join(f"  - model: {m}\n    parameters: {{weight: {w}{{extra}}}}\n" for m, w in
                              (("psmathur/orca_mini_v3_13b", 0.5), ("garage-bAInd/Platypus2-13B", 0.3),
                               ("WizardLM/WizardMath-13B-V1.0", 0.2)))
OTHERS = {  # one config per other method both tools have, written for this script
    "model_stock": "models:\n  - model: psmathur/orca_mini_v3_13b\n  - model: garage-bAInd/Platypus2-13B\n"
                   "  - model: WizardLM/WizardMath-13B-V1.0\nmerge_method: model_stock\n"
                   "base_model: TheBloke/Llama-2-13B-fp16\ndtype: float16\n",
    "task_arithmetic": THREE.replace("{extra}", "") + "merge_method: task_arithmetic\n"
                       "base_model: TheBloke/Llama-2-13B-fp16\nparameters: {lambda: 0.9}\n",
    "breadcrumbs": THREE.replace("{extra}", ", density: 0.8, gamma: 0.01") + "merge_method: breadcrumbs\n"
                   "base_model: TheBloke/Llama-2-13B-fp16\n",
    "breadcrumbs_ties": THREE.replace("{extra}", ", density: 0.8, gamma: 0.01") + "merge_method: breadcrumbs_ties\n"
                        "base_model: TheBloke/Llama-2-13B-fp16\n",
    "nuslerp": "models:\n  - model: psmathur/orca_mini_v3_13b\n    parameters: {weight: 0.4}\n"
               "  - model: garage-bAInd/Platypus2-13B\n    parameters: {weight: 0.6}\nmerge_method: nuslerp\n"
               "base_model: TheBloke/Llama-2-13B-fp16\n",
    "multislerp": THREE.replace("{extra}", "") + "merge_method: multislerp\nbase_model: TheBloke/Llama-2-13B-fp16\n",
    "karcher": "models:\n  - model: psmathur/orca_mini_v3_13b\n  - model: garage-bAInd/Platypus2-13B\n"
               "  - model: WizardLM/WizardMath-13B-V1.0\nmerge_method: karcher\n",
    "nearswap": "models:\n  - model: psmathur/orca_mini_v3_13b\nmerge_method: nearswap\n"
                "base_model: TheBloke/Llama-2-13B-fp16\nparameters: {t: 0.002}\n",
    "sce": "models:\n  - model: psmathur/orca_mini_v3_13b\n  - model: garage-bAInd/Platypus2-13B\n"
           "  - model: WizardLM/WizardMath-13B-V1.0\nmerge_method: sce\nbase_model: TheBloke/Llama-2-13B-fp16\n"
           "parameters: {select_topk: 0.5}\n",
    "dare_ties": THREE.replace("{extra}", ", density: 0.5") + "merge_method: dare_ties\n"
                 "base_model: TheBloke/Llama-2-13B-fp16\n",
    "della": THREE.replace("{extra}", ", density: 0.5, epsilon: 0.1") + "merge_method: della\n"
             "base_model: TheBloke/Llama-2-13B-fp16\n",
}
RANDOM = ("dare_ties", "della")
TRIMMED = ("ties", "bio-merge", "breadcrumbs", "breadcrumbs_ties")  # magnitude ranks: ties at the threshold


def localise(text: str, data: Path, layers: int) -> str:
    """Map the example's model names to the generated folders and its 40-layer ranges to ``layers``."""
    for name, folder in NAMES.items():
        text = text.replace(name, str(data / folder))
    if layers != 40:  # keep the examples' proportions on a shallower model
        text = re.sub(r"layer_range: \[(\d+), (\d+)\]",
                      lambda m: f"layer_range: [{int(m[1]) * layers // 40}, {int(m[2]) * layers // 40}]", text)
    return text


def as_float32(text: str) -> str:
    text = re.sub(r"^(out_)?dtype: .*\n", "", text, flags=re.M)
    return text + "dtype: float32\n"


def max_difference(a: Path, b: Path) -> tuple[float, str]:
    """Largest |a - b| over the tensors of both outputs and the tensor where it is; names must agree."""
    from paw.io.checkpoint import open_checkpoint

    ca, cb = open_checkpoint(a), open_checkpoint(b)
    if set(ca) != set(cb):
        only = sorted(set(ca) ^ set(cb))
        return float("inf"), f"tensor names differ ({len(only)}, first {only[0]})"
    worst, where = 0.0, ""
    for name in ca:
        d = float((ca[name].float() - cb[name].float()).abs().max())
        if d > worst:
            worst, where = d, name
    return worst, where


def tie_split(cfg: Path, a: Path, b: Path, folders: list[Path]) -> tuple[int, int, float]:
    """For magnitude-trimmed methods: (differing entries, of them at a magnitude tie, max |a - b| elsewhere).

    bfloat16 inputs give many task-vector entries of equal magnitude; when such a tie straddles a
    model's trim threshold, which tied entries survive is arbitrary (mergekit's argsort; flat index
    order in PAW). Per tensor and model the threshold comes from the config's own density (and
    gamma), resolved by PAW's reading of the same YAML.
    """
    import torch

    from paw.io.checkpoint import open_checkpoint
    from paw.io.yaml_file import read_yaml_mapping
    from paw.merge.mergekit import options_from_mergekit
    from paw.merge.methods import kth_largest

    options = options_from_mergekit(read_yaml_mapping(cfg))
    rules = options.rules
    ca, cb = open_checkpoint(a), open_checkpoint(b)
    base, models = open_checkpoint(options.base), [open_checkpoint(m) for m in options.models]
    rules.bind(max(int(n.split(".")[2]) for n in base if n.startswith("model.layers.")) + 1)
    differ = at_ties = 0
    elsewhere = 0.0
    for name in ca:
        d = (ca[name].float() - cb[name].float()).abs().reshape(-1)
        where = torch.nonzero(d > 0).reshape(-1)
        if where.numel() == 0:
            continue
        differ += where.numel()
        tp = rules.for_tensor(name)
        tied = torch.zeros(where.numel(), dtype=torch.bool)
        gammas = tp.params.get("gamma") or [0.0] * len(models)
        for m, density, gamma in zip(models, tp.params["density"], gammas, strict=True):
            mag = (m[name].float() - base[name].float()).abs().reshape(-1)
            n = mag.numel()
            n_keep = max(1, int(density * n)) if not gamma else int(density * n)
            n_top = min(int(gamma * n), n - n_keep)
            for k in {n_top + n_keep, n_top} - {0, n}:
                tied |= mag[where] == kth_largest(mag, k)
        at_ties += int(tied.sum())
        if (~tied).any():
            elsewhere = max(elsewhere, float(d[where[~tied]].max()))
    return differ, at_ties, elsewhere


UNION = """\
models:
  - model: {plain}
    parameters: {{weight: 0.5, density: 0.5}}
  - model: {chat}
    parameters: {{weight: 0.5, density: 0.5}}
merge_method: ties
base_model: {base}
tokenizer:
  source: union
  tokens:
    "<|im_end|>":
      source: {{kind: zero}}
      force: true
    "<|im_start|>":
      source: {{kind: model_token, model: {plain}, token: "<|eos|>"}}
  pad_to_multiple_of: 8
dtype: float32
"""


def union_check(workdir: Path, mk_exe: Path, env: dict) -> dict:
    """Two fine-tunes of a zoo model, one with two chat tokens added; a union merge through both tools."""
    import torch
    from transformers import AutoTokenizer

    from paw import zoo
    from paw.io.checkpoint import open_checkpoint
    from paw.io.writer import write_checkpoint

    root = workdir / "union"
    base = zoo.tiny_model(root / "base", "llama", seed=0, hidden_size=64, num_layers=2)
    plain, raw, chat = root / "ft0", root / "ft1-raw", root / "ft1"
    zoo.fine_tune(base, plain, seed=1, scale=0.01)
    zoo.fine_tune(base, raw, seed=2, scale=0.02)
    tok = AutoTokenizer.from_pretrained(raw)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    ckpt, gen = open_checkpoint(raw), torch.Generator().manual_seed(0)
    grow = {n: torch.cat([ckpt[n], torch.randn(len(tok) - ckpt.shape(n)[0], ckpt.shape(n)[1], generator=gen)
                          .mul_(0.02).to(ckpt[n].dtype)]) for n in ckpt if n.endswith(("embed_tokens.weight", "lm_head.weight"))}
    write_checkpoint(chat, {n: grow.get(n, ckpt[n]) for n in ckpt}, config={**ckpt.config, "vocab_size": len(tok)},
                     overwrite=True)
    tok.save_pretrained(chat)
    cfg = root / "union.yml"
    cfg.write_text(UNION.format(base=base, plain=plain, chat=chat))
    rows = {}
    for tool in ("paw", "mergekit"):
        out = root / f"out-{tool}"
        res = run_tool(tool, cfg, out, mk_exe, env, root / "rss.txt", [base, plain, chat])
        if res["rc"] != 0:
            return {"config": "union tokenizer", "error": f"{tool} failed: {res['tail'][-300:]}"}
        rows[tool] = res
    diff, where = max_difference(root / "out-paw", root / "out-mergekit")
    encoded = AutoTokenizer.from_pretrained(root / "out-paw").encode("<|im_start|>hi<|im_end|>", add_special_tokens=False)
    return {"config": "union tokenizer (ties, overrides, padding)", "dtype": "float32", "diff": diff, "where": where,
            "paw_s": rows["paw"]["wall"], "paw_cpu": rows["paw"]["cpu"], "paw_gib": rows["paw"]["gib"],
            "mk_s": rows["mergekit"]["wall"], "mk_cpu": rows["mergekit"]["cpu"], "mk_gib": rows["mergekit"]["gib"],
            "encoded": encoded}


def run_tool(tool: str, cfg: Path, out: Path, mk_exe: Path | None, env: dict, record: Path, inputs: list[Path]):
    shutil.rmtree(out, ignore_errors=True)
    if tool == "paw":
        cmd = bm.startup_cmd(sys.executable, record, ["torch", "safetensors.torch", "paw.cli", "paw.merge"],
                             "paw.cli:main", ["merge", "--config", str(cfg), "--output", str(out), "--device", "cpu",
                                              "--max-shard-size", str(bm.SHARD_BYTES)])
    else:
        cmd = bm.startup_cmd(str(mk_exe.parent / "python"), record,
                             ["torch", "mergekit.merge", "mergekit.scripts.run_yaml"], "mergekit.scripts.run_yaml:main",
                             [str(cfg), str(out), "--no-cuda", "--quiet", "--no-copy-tokenizer",
                              "--no-write-model-card", "--out-shard-size", str(bm.SHARD_BYTES)])
    bm.warm(inputs)
    record.unlink(missing_ok=True)
    return bm.run_measured(cmd, env=env, record=record)


def markdown(rows: list[dict], shape: str, n_params: float) -> str:
    lines = [f"Shape `{shape}` ({n_params / 1e6:.0f}M parameters per model, bfloat16 inputs). Peak RSS is each "
             "process's high-water mark; CPU is user + system seconds.", "",
             "| config | dtype | max abs diff | where | PAW s (CPU) | mergekit s (CPU) | speed-up | PAW GiB | mergekit GiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        diff = "random (not compared)" if r["config"] in RANDOM else f"{r['diff']:.3g}"
        if "at_ties" in r:
            diff += (f"; {r['differ']} entries differ, {r['at_ties']} at a magnitude tie, "
                     f"{r['diff_outside_ties']:.3g} elsewhere")
        if r["config"] in RANDOM:
            r["where"] = ""
        speed = r["mk_s"] / r["paw_s"] if r.get("mk_s") else float("nan")
        lines.append(f"| {r['config']} | {r['dtype']} | {diff} | {r.get('where', '')} | {r['paw_s']:.1f} "
                     f"({r['paw_cpu']:.1f}) | {r.get('mk_s', float('nan')):.1f} ({r.get('mk_cpu', float('nan')):.1f}) "
                     f"| {speed:.2f}x | {r['paw_gib']:.2f} | {r.get('mk_gib', float('nan')):.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=SHAPES, default="l40")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/paw-parity-merge"))
    ap.add_argument("--mergekit-venv", type=Path, default=Path.home() / ".cache/paw-parity/mergekit-venv")
    ap.add_argument("--install-mergekit", action="store_true")
    ap.add_argument("--only", nargs="+", default=None, help="config names to run (default: all)")
    ap.add_argument("--variants", nargs="+", default=["float32", "as-written"], choices=["float32", "as-written"])
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the table here")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--union", action="store_true", help="also the union-vocabulary check on zoo models")
    args = ap.parse_args()

    shape = SHAPES[args.shape]
    data = args.workdir / f"models-{args.shape}"
    folders = [data / n for n in ("base", "ft0", "ft1", "ft2")]
    t0 = time.perf_counter()
    for folder, index in zip(folders, (None, 0, 1, 2), strict=True):
        if not (folder / "config.json").exists():
            bm.generate(folder, shape, index)
    n_params = sum(bm._numel(d) for d in bm.tensor_shapes(shape).values())
    print(f"inputs ({args.shape}, {n_params / 1e6:.0f}M parameters each) ready in {time.perf_counter() - t0:.0f} s")
    mk_exe, status = bm.ensure_mergekit(args.mergekit_venv, args.install_mergekit)
    if mk_exe is None:
        print(f"MERGEKIT NOT RUN: {status}")
        return 1
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    record = args.workdir / "rss.txt"
    configs = {**EXAMPLES, **OTHERS}
    rows = []
    for name, text in configs.items():
        if args.only and name not in args.only:
            continue
        for variant in args.variants:
            body = localise(text, data, shape["layers"])
            body = as_float32(body) if variant == "float32" else body
            dtype = re.search(r"^dtype: (\S+)", body, flags=re.M)
            cfg = args.workdir / f"{name}-{variant}.yml"
            cfg.write_text(body)
            row = {"config": name, "dtype": dtype[1] if dtype else "(inputs')", "variant": variant}
            p = run_tool("paw", cfg, args.workdir / "out-paw", None, env, record, folders)
            if p["rc"] != 0:
                print(f"{name} {variant}: paw failed\n{p['tail']}")
                return 1
            row.update(paw_s=p["wall"], paw_cpu=p["cpu"], paw_gib=p["gib"])
            k = run_tool("mergekit", cfg, args.workdir / "out-mk", mk_exe, env, record, folders)
            if k["rc"] != 0:
                print(f"{name} {variant}: mergekit failed (exit {k['rc']})\n{k['tail'][-600:]}")
            else:
                row.update(mk_s=k["wall"], mk_cpu=k["cpu"], mk_gib=k["gib"])
                row["diff"], row["where"] = max_difference(args.workdir / "out-paw", args.workdir / "out-mk")
                if name in TRIMMED and row["diff"] > 0:
                    row["differ"], row["at_ties"], row["diff_outside_ties"] = tie_split(
                        cfg, args.workdir / "out-paw", args.workdir / "out-mk", folders)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.union:
        row = union_check(args.workdir, mk_exe, env)
        print(json.dumps(row), flush=True)
        if "error" not in row:
            rows.append(row)
    table = markdown(rows, args.shape, n_params)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.markdown:
        args.markdown.write_text(table)
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
