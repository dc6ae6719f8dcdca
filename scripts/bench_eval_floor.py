"""``paw eval`` against its floor and against lm-evaluation-harness, at a real 100M model and a 1B shape.

The floor is the arithmetic the scoring cannot avoid, run as bare torch calls: every token of the items
goes once through every linear map of the model's body (a context shared by its choices counts once, as
``paw eval`` runs it; :func:`paw.evaluate.shared.plan`), one matrix product per map over all those tokens
at once, and the LM head with its log-softmax runs on the positions whose log-probabilities are read.
Attention's own products (scores and the weighted sum) are left out of the timing: they are counted in
FLOPs and printed as a share, below 2 % on these sets. The floor is measured in its own child process,
in the same script run as the tools, with the same thread count.

PAW (``paw eval``'s library calls, through ``scripts/parity_eval_lmeval.py``'s child) and lm-eval run as
whole processes in alternating pairs (PAW, lm-eval, PAW, lm-eval, ...); the table gives medians of CPU
seconds (user + system), PAW / floor for its whole process and for its scoring alone (the process less
start-up and loading the model), lm-eval / PAW, and whether the two tools pick the same choices.

    python scripts/bench_eval_floor.py --model ~/paw-models/smollm2-135m-instruct --venv VENV
    python scripts/bench_eval_floor.py --shape 1b --tokenizer-from ~/paw-models/smollm2-135m-instruct \\
        --venv VENV --workdir /tmp/eval-1b

``--shape 1b`` writes random weights of Llama-3.2-1B's shapes (hidden 2048, 16 layers, 32 heads, 8 key/value
heads, intermediate 8192, vocabulary 128,256, tied head: ``scripts/bench_merge.py``'s generator) into the
work folder once, with ``--tokenizer-from``'s tokenizer; accuracy there means nothing, the same picks do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import parity_eval_lmeval as parity  # noqa: E402  (a sibling script: data, tasks and both tools' runs)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "tokenizer.model", "chat_template.jinja", "generation_config.json")
CHUNK = 4096   # token rows per matrix product of the floor


def token_counts(encoded) -> dict:
    """``tokens``: token positions the cached-context scoring runs (each shared prefix once, each choice's
    rest, whole rows where nothing is shared); ``head``: positions whose logits are read; ``attended``: the
    sum over those positions of how many keys each attends to (for attention's FLOPs).

    >>> from paw.evaluate.encode import Encoded
    >>> token_counts([Encoded((1, 5, 6, 7), 1), Encoded((1, 5, 6, 8, 9), 2), Encoded((1, 3), 1)])
    {'tokens': 8, 'head': 4, 'attended': 22}
    """
    from paw.evaluate import shared

    groups, alone = shared.plan(encoded)
    tokens = head = attended = 0
    for group in groups:
        start = len(group.prefix.ids)
        tokens += start
        head += group.prefix.n_cont
        attended += start * (start + 1) // 2
        for row in group.rows:
            rest = len(encoded[row].ids) - start
            tokens += rest
            head += rest
            attended += sum(start + k + 1 for k in range(rest))
    for row in alone:
        n = len(encoded[row].ids)
        tokens += n
        head += encoded[row].n_cont
        attended += n * (n + 1) // 2
    return {"tokens": tokens, "head": head, "attended": attended}


def linear_maps(model) -> dict[tuple[int, int], int]:
    """``{(out, in): count}`` of the body's linear maps (every ``nn.Linear`` but the LM head)."""
    import torch

    head = model.get_output_embeddings()
    maps: dict[tuple[int, int], int] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            key = tuple(module.weight.shape)
            maps[key] = maps.get(key, 0) + 1
    return maps


def product_weights(maps: dict[tuple[int, int], int]) -> dict:
    """One random weight per shape of ``maps``: a product's cost does not depend on the values."""
    import torch

    return {shape: torch.randn(shape) * 0.02 for shape in maps}


def body_products(maps: dict[tuple[int, int], int], weights: dict, tokens: int, *, chunk: int = CHUNK) -> None:
    """Run ``tokens`` rows through every map of ``maps`` (``{(out, in): count}``) as bare matrix products,
    ``chunk`` rows at a time, with ``weights`` (:func:`product_weights`)."""
    import torch

    with torch.no_grad():
        for (o, i), n in maps.items():
            w = weights[(o, i)]
            for start in range(0, tokens, chunk):
                x = torch.randn(min(chunk, tokens - start), i)
                for _ in range(n):
                    x @ w.T


def head_products(head, positions: int, *, chunk: int = CHUNK // 8) -> None:
    """The LM head ``head`` (vocabulary, hidden) and its log-softmax on ``positions`` rows."""
    import torch

    with torch.no_grad():
        for start in range(0, positions, chunk):
            x = torch.randn(min(chunk, positions - start), head.shape[1])
            torch.log_softmax(x @ head.T, dim=-1)


def floor_child(model_dir: Path, path: Path, fmt: str, out: Path) -> None:
    """Time the floor of scoring ``path`` with ``model_dir``: bare matrix products, no PAW code on the way."""
    import torch

    from paw.evaluate.encode import encode_pair, max_length_of
    from paw.evaluate.formats import read_items
    from paw.io.lm import load_lm

    model, tokenizer = load_lm(model_dir, dtype="float32")
    items = read_items(path, format=fmt)
    encoded = [encode_pair(tokenizer, c, x, max_length=max_length_of(model), start="tokenizer")
               for item in items for c, x in item.pairs()]
    counts = token_counts(encoded)
    maps = linear_maps(model)
    head = model.get_output_embeddings().weight.detach()
    config = model.config
    layers, hidden = config.num_hidden_layers, config.hidden_size
    heads, head_dim = config.num_attention_heads, getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    flops_linear = 2 * counts["tokens"] * sum(o * i * n for (o, i), n in maps.items())
    flops_head = 2 * counts["head"] * head.numel()
    flops_attention = 4 * layers * heads * head_dim * counts["attended"]
    weights = product_weights(maps)
    wall, cpu = time.perf_counter(), time.process_time()
    body_products(maps, weights, counts["tokens"])
    head_products(head, counts["head"])
    result = {**counts, "flops_linear": flops_linear, "flops_head": flops_head, "flops_attention": flops_attention,
              "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
              "threads": torch.get_num_threads()}
    out.write_text(json.dumps(result), encoding="utf-8")


def one_b_folder(work: Path, tokenizer_from: Path) -> Path:
    """Random weights of Llama-3.2-1B's shapes with ``tokenizer_from``'s tokenizer, written once."""
    import bench_merge

    folder = work / "llama-3.2-1b-shape"
    if not (folder / "config.json").is_file():
        bench_merge.generate(folder, bench_merge.SHAPES["1b"], None)
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).is_file() and not (folder / name).is_file():
            shutil.copy(tokenizer_from / name, folder / name)
    return folder


def run_floor(model: Path, path: Path, fmt: str, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--floor-child", str(out), "--model", str(model), "--floor-data", str(path),
           "--floor-format", fmt]
    print("+ floor", path.name, flush=True)
    parity._timed(cmd, env={"PYTHONPATH": os.pathsep.join(filter(None, [str(parity.ROOT),
                                                                         os.environ.get("PYTHONPATH")]))})
    return json.loads(out.read_text(encoding="utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=parity.DEFAULT_MODEL, help="local model folder (not with --shape)")
    ap.add_argument("--shape", choices=["1b"], default=None, help="random weights of Llama-3.2-1B's shapes")
    ap.add_argument("--tokenizer-from", type=Path, default=parity.DEFAULT_MODEL, help="with --shape: its tokenizer")
    ap.add_argument("--data", type=Path, default=parity.DEFAULT_DATA, help="folder of the raw commonsense files")
    ap.add_argument("--sets", default="arc_easy,piqa", help="comma-separated, of arc_easy, piqa, boolq")
    ap.add_argument("--limit", type=int, default=100, help="first N items of each set (default 100)")
    ap.add_argument("--pairs", type=int, default=2, help="alternating PAW / lm-eval runs per set (default 2)")
    ap.add_argument("--batch-size", type=int, default=8, help="both tools (default 8)")
    ap.add_argument("--venv", type=Path, default=parity.DEFAULT_VENV, help="lm-eval's virtualenv")
    ap.add_argument("--workdir", type=Path, required=False, default=None, help="keep everything here (default: temp)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--floor-child", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--floor-data", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--floor-format", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor_child:
        return floor_child(args.model, args.floor_data, args.floor_format, args.floor_child)

    import tempfile

    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    if unknown := [s for s in sets if s not in parity.SETS]:
        sys.exit(f"--sets: unknown {unknown}; choose from {', '.join(parity.SETS)}")
    exe = parity.ensure_venv(args.venv, False)
    with tempfile.TemporaryDirectory(prefix="paw-eval-floor-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = one_b_folder(work, args.tokenizer_from) if args.shape else args.model.resolve()
        if not (model / "config.json").is_file():
            sys.exit(f"{model}: not a model folder")
        files = parity.write_data(args.data, sets, args.limit, work)
        tasks = parity.write_tasks(files, work)
        rows = []
        for name in sets:
            floor = run_floor(model, files[name], parity.SETS[name][1], work / f"floor-{name}.json")
            paw_cpu, lm_cpu, score_cpu = [], [], []
            for k in range(args.pairs):
                out = work / f"paw-{name}-{k}.json"
                paw_cpu.append(parity.run_paw(model, {name: files[name]}, args.batch_size, out)[1])
                paw = json.loads(out.read_text(encoding="utf-8"))[name]
                score_cpu.append(paw["score_cpu_s"])
                lm_out = work / f"lm-eval-{name}-{k}"
                lm_cpu.append(parity.run_lm_eval(exe, model, tasks, [name], args.batch_size, lm_out)[1])
            same = parity.compare(name, paw, parity.lm_eval_samples(lm_out, name),
                                  parity.lm_eval_metrics(lm_out, f"paw_{name}"))
            rows.append({"set": name, "floor": floor, "paw_cpu_s": paw_cpu, "paw_score_cpu_s": score_cpu,
                         "lm_eval_cpu_s": lm_cpu, "same": same})
    info = {"model": "Llama-3.2-1B shapes, random weights" if args.shape else str(args.model),
            "limit": args.limit, "pairs": args.pairs, "batch_size": args.batch_size, "cpu": parity.cpu_name(),
            "threads": os.environ.get("OMP_NUM_THREADS", "default"), **parity.versions(exe)}
    for key, value in info.items():
        print(f"{key}: {value}")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({**info, "rows": rows}, indent=2) + "\n", encoding="utf-8")


def table(rows: list[dict]) -> str:
    lines = ["| set | tokens run once | head positions | floor GFLOP (attention share) | floor CPU s | "
             "PAW CPU s (scoring) | PAW / floor, process (scoring) | lm-eval CPU s | lm-eval / PAW | same picks |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        f = r["floor"]
        flops = f["flops_linear"] + f["flops_head"]
        paw, score, lm = (statistics.median(r[k]) for k in ("paw_cpu_s", "paw_score_cpu_s", "lm_eval_cpu_s"))
        same = r["same"]
        lines.append(
            f"| {r['set']} | {f['tokens']:,} | {f['head']:,} | {flops / 1e9:,.0f} "
            f"({f['flops_attention'] / (flops + f['flops_attention']):.1%}) | {f['cpu_s']:.1f} | {paw:.1f} ({score:.1f}) | "
            f"{paw / f['cpu_s']:.2f} ({score / f['cpu_s']:.2f}) | {lm:.1f} | **{lm / paw:.2f}** | "
            f"{same['same']}/{same['n']}, {same['same_norm']}/{same['n']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
