"""``paw transfer-lora --method distill`` against its floor and a naive loop, at a ~100M shape and a 1B shape.

One script run; per shape and per target (``--target teacher`` and ``--target shift``) three child
processes, each timed in CPU seconds (user + system) with the thread count the environment sets:

- **PAW**: ``distill_to_folder`` (what ``paw transfer-lora --method distill`` calls) for N steps on a fixed file
  of inputs: the distillation itself (``distill_lora``: the teacher's continuations and fixed outputs, the
  before/after agreement, the cost probe, the training; not start-up, loading or writing) and the whole process.
- **floor**: the arithmetic the distillation cannot avoid, as bare torch matrix products on the token counts of
  PAW's run: the teacher with its adapter over every input once (prompt and continuation: the greedy
  continuation and the next-token targets come out of the same pass), for ``--target shift`` also the teacher
  without its adapter and the student's base over every input once, and for every step the student with its
  LoRA forward over that step's rows and backward to the LoRA factors (each linear map's input gradient, the
  factors' own gradients). LM heads run on the continuation positions only. Steps are products of their own
  rows (a step needs the one before it); the once-per-input passes are products over all their tokens at once.
  Attention's own products are counted in FLOPs, not timed (as in ``scripts/bench_eval_floor.py``, whose
  helpers run the products).
- **naive**: the loop a user would write with transformers and PEFT: greedy continuations with ``generate``
  once, then per step the teacher's forward pass over the batch (and for shift the teacher's and the student's
  bases'), the student's forward pass with full logits, the KL on the continuation positions, backward, AdamW.

The teacher is a Llama-style ~113M model (hidden 768, 12 layers) with a rank-8 LoRA on every linear map; the
student at ``100m`` is the same shape (other weights), at ``1b`` Llama-3.2-1B's shapes (random weights):
teacher and student of 1B in float32 would not fit the 7 GiB a process may take here. Both use
``--tokenizer-from``'s tokenizer, so the loss is the token KL (the teacher reads the student's ids).

    OMP_NUM_THREADS=1 python scripts/bench_distill_floor.py --shapes 100m 1b --workdir /tmp/paw-bench-distill
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_eval_floor as eval_floor  # noqa: E402  (a sibling script: the bare products, the 1B folder)
import bench_merge  # noqa: E402  (a sibling script: the random-weight checkpoint writer)

ROOT = Path(__file__).resolve().parent.parent
SHAPE_100M = dict(hidden=768, layers=12, heads=12, kv=4, inter=2048, vocab=49152)
RUNS = {"100m": dict(inputs=48, batch=8, steps=24), "1b": dict(inputs=4, batch=2, steps=4)}  # 4 and 2 epochs
RANK, ALPHA, NEW_TOKENS, LR, SEED = 8, 16.0, 16, 1e-3, 0
TARGETS = ("teacher", "shift")
KINDS = ("paw", "floor", "naive")
MEMORY_GIB = 6.8   # a child whose anonymous memory passes this is stopped (the machine's rule: under 7 GiB)


# ---------------------------------------------------------------------------------- models and inputs

def setup(work: Path, tokenizer_from: Path, shapes: list[str]) -> None:
    """The teacher (100M shape) and its LoRA, the students, the inputs; each written once."""
    from paw import zoo
    from paw.data import sample_texts
    from paw.transfer.distill.prompts import generic_prompts

    teacher = _model(work / "teacher-100m", SHAPE_100M, None, tokenizer_from)
    if not (work / "teacher-lora" / "adapter_config.json").is_file():
        zoo.make_lora(teacher, work / "teacher-lora", rank=RANK, alpha=ALPHA, seed=SEED, scale=0.1)
    if "100m" in shapes:
        _model(work / "student-100m", SHAPE_100M, 0, tokenizer_from)   # the teacher's base plus small noise
    if "1b" in shapes:
        eval_floor.one_b_folder(work, tokenizer_from)
    prompts = [p.text for p in generic_prompts(sample_texts("en"))][:max(RUNS[s]["inputs"] for s in RUNS)]
    (work / "prompts.txt").write_text("".join(p + "\n" for p in prompts), encoding="utf-8")


def _model(folder: Path, shape: dict, index: int | None, tokenizer_from: Path) -> Path:
    if not (folder / "config.json").is_file():
        bench_merge.generate(folder, shape, index)
    for name in eval_floor.TOKENIZER_FILES:
        if (tokenizer_from / name).is_file() and not (folder / name).is_file():
            shutil.copy(tokenizer_from / name, folder / name)
    return folder


def student_of(work: Path, shape: str) -> Path:
    return work / "llama-3.2-1b-shape" if shape == "1b" else work / "student-100m"


def prompts_of(work: Path, n: int) -> Path:
    path = work / f"prompts-{n}.txt"
    path.write_text("".join(work.joinpath("prompts.txt").read_text(encoding="utf-8").splitlines(True)[:n]),
                    encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------- PAW

def paw_child(work: Path, shape: str, target: str, out: Path) -> None:
    """PAW's distillation through ``distill_to_folder``, the distillation call timed apart from loading."""
    import torch

    from paw.transfer.distill import run as distill_run
    from paw.transfer.distill import train as distill_train
    from paw.transfer.distill.options import DistillOptions

    run = RUNS[shape]
    timed, rows = {}, []
    inner_distill, inner_examples = distill_run.distill_lora, distill_train.examples

    def distill(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return inner_distill(*args, **kwargs)
        finally:
            timed.update(wall_s=time.perf_counter() - wall, cpu_s=time.process_time() - cpu)

    def examples(*args, **kwargs):   # the training inputs' token counts, for the floor
        made = inner_examples(*args, **kwargs)
        rows.extend([len(e.sequence.ids), e.sequence.n_cont] if e.sequence is not None else None for e in made)
        return made

    distill_run.distill_lora, distill_train.examples = distill, examples
    options = DistillOptions(prompts=str(prompts_of(work, run["inputs"])), max_steps=run["steps"],
                             batch_size=run["batch"], lr=LR, max_new_tokens=NEW_TOKENS, init="none", target=target,
                             seed=SEED, dtype="float32")
    report, _ = distill_run.distill_to_folder(work / "teacher-lora", work / "teacher-100m", student_of(work, shape),
                                              work / f"paw-out-{shape}-{target}", options, device="cpu",
                                              command="bench_distill_floor", overwrite=True, progress=False)
    section = report["distill"]
    out.write_text(json.dumps({**timed, "rows": rows, "threads": torch.get_num_threads(),
                               "losses": section.get("losses"), "cost": section.get("cost", {}).get("measured")}),
                   encoding="utf-8")


# ---------------------------------------------------------------------------------- the floor

def floor_child(work: Path, shape: str, target: str, rows_from: Path, out: Path) -> None:
    """Time the floor of PAW's run (``rows_from``: its training inputs' lengths) as bare matrix products."""
    import torch

    from paw.evaluate.train import batches_in_order

    run = RUNS[shape]
    rows = json.loads(rows_from.read_text(encoding="utf-8"))["rows"]
    order = batches_in_order(len(rows), run["batch"], run["steps"], SEED)
    teacher, student = _skeleton(work / "teacher-100m"), _skeleton(student_of(work, shape))
    kept = [r for r in rows if r is not None]
    once = {"tokens": sum(n for n, _ in kept), "head": sum(k for _, k in kept),
            "attended": sum(n * (n + 1) // 2 for n, _ in kept)}
    steps = [[rows[i] for i in batch if rows[i] is not None] for batch in order]
    per_step = [{"tokens": sum(n for n, _ in s), "head": sum(k for _, k in s),
                 "attended": sum(n * (n + 1) // 2 for n, _ in s)} for s in steps]
    shift = target == "shift"
    flops = {"teacher": _flops(teacher, once, lora=True)}
    if shift:
        flops["teacher_base"] = _flops(teacher, once, lora=False)
        flops["student_base"] = _flops(student, once, lora=False)
    flops["student_steps"] = [0, 0, 0]
    for counts in per_step:   # forward, then backward: the same products again, and the LoRA factors' gradients
        f = _flops(student, counts, lora=True)
        lora = 2 * counts["tokens"] * student["lora"]
        flops["student_steps"] = [a + b for a, b in zip(flops["student_steps"],
                                                         [2 * f[0] + lora, 2 * f[1], 3 * f[2]], strict=True)]
    weights = {id(m): eval_floor.product_weights(m["products"]) for m in (teacher, student)}
    backward = {id(m): eval_floor.product_weights(m["backward"]) for m in (student,)}
    heads = {id(m): torch.randn(m["head"]) * 0.02 for m in (teacher, student)}
    wall, cpu = time.perf_counter(), time.process_time()
    _forward(teacher, weights[id(teacher)], heads[id(teacher)], once, lora=True)
    if shift:
        _forward(teacher, weights[id(teacher)], heads[id(teacher)], once, lora=False)
        _forward(student, weights[id(student)], heads[id(student)], once, lora=False)
    for counts in per_step:
        _forward(student, weights[id(student)], heads[id(student)], counts, lora=True, chunk=counts["tokens"])
        _backward(student, backward[id(student)], heads[id(student)], counts)
    total = {k: sum(v) for k, v in flops.items()}
    out.write_text(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                               "flops": total, "flops_attention": sum(v[2] for v in flops.values()),
                               "once": once, "steps_tokens": sum(c["tokens"] for c in per_step),
                               "steps_head": sum(c["head"] for c in per_step), "threads": torch.get_num_threads()}),
                   encoding="utf-8")


def _skeleton(folder: Path) -> dict:
    """A model's linear maps (``{(out, in): count}``), its LoRA maps of rank :data:`RANK` on every one of them,
    the transposed maps of the backward pass, its head's shape and its attention's size, from its config alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    maps = eval_floor.linear_maps(model)
    lora: dict[tuple[int, int], int] = {}
    for (o, i), n in maps.items():   # x A^T (rank, in), then h B^T (out, rank)
        lora[(RANK, i)] = lora.get((RANK, i), 0) + n
        lora[(o, RANK)] = lora.get((o, RANK), 0) + n
    products = {**maps}
    for shape, n in lora.items():
        products[shape] = products.get(shape, 0) + n
    backward: dict[tuple[int, int], int] = {}
    for (o, i), n in products.items():   # the input gradient g W: a product with the transposed weight
        backward[(i, o)] = backward.get((i, o), 0) + n
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return {"maps": maps, "lora_maps": lora, "products": products, "backward": backward,
            "body": sum(o * i * n for (o, i), n in maps.items()), "lora": sum(o * i * n for (o, i), n in lora.items()),
            "head": tuple(model.get_output_embeddings().weight.shape),
            "attention": 4 * config.num_hidden_layers * config.num_attention_heads * head_dim}


def _flops(model: dict, counts: dict, *, lora: bool) -> list[int]:
    """``[linear, head, attention]`` FLOPs of one forward pass over ``counts``."""
    body = model["body"] + (model["lora"] if lora else 0)
    return [2 * counts["tokens"] * body, 2 * counts["head"] * model["head"][0] * model["head"][1],
            model["attention"] * counts["attended"]]


def _forward(model: dict, weights: dict, head, counts: dict, *, lora: bool, chunk: int = eval_floor.CHUNK) -> None:
    maps = model["products"] if lora else model["maps"]
    eval_floor.body_products(maps, weights, counts["tokens"], chunk=max(1, chunk))
    eval_floor.head_products(head, counts["head"])


def _backward(model: dict, weights: dict, head, counts: dict) -> None:
    """Every map's input gradient over the step's tokens, the LoRA factors' gradients, the head's input gradient."""
    import torch

    eval_floor.body_products(model["backward"], weights, counts["tokens"], chunk=max(1, counts["tokens"]))
    t = counts["tokens"]
    with torch.no_grad():
        for (o, i), n in model["lora_maps"].items():   # dW = g^T x: (out, T) (T, in)
            g, x = torch.randn(t, o), torch.randn(t, i)
            for _ in range(n):
                g.T @ x
        g = torch.randn(counts["head"], head.shape[0])
        g @ head


# ---------------------------------------------------------------------------------- the naive loop

def naive_child(work: Path, shape: str, target: str, out: Path) -> None:
    """transformers and PEFT as a user would write the loop: continuations once, then every step the teacher."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paw.zoo import ALL_LINEAR

    run = RUNS[shape]
    prompts = prompts_of(work, run["inputs"]).read_text(encoding="utf-8").splitlines()
    tokenizer = AutoTokenizer.from_pretrained(work / "teacher-100m")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    teacher = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(work / "teacher-100m",
                                                                             dtype=torch.float32),
                                        work / "teacher-lora").eval()
    torch.manual_seed(SEED)
    student = get_peft_model(AutoModelForCausalLM.from_pretrained(student_of(work, shape), dtype=torch.float32),
                             LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=ALL_LINEAR, lora_dropout=0.0,
                                        task_type="CAUSAL_LM"))
    wall, cpu = time.perf_counter(), time.process_time()
    sequences = []
    with torch.no_grad():   # the teacher's greedy continuations, once
        for start in range(0, len(prompts), run["batch"]):
            chunk = [tokenizer(p).input_ids for p in prompts[start:start + run["batch"]]]
            ids, mask = _padded(chunk, pad, left=True)
            made = teacher.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                    pad_token_id=pad)
            sequences += [(p + made[r, ids.shape[1]:].tolist(), made.shape[1] - ids.shape[1])
                          for r, p in enumerate(chunk)]
    optimizer = torch.optim.AdamW([p for p in student.parameters() if p.requires_grad], lr=LR)
    generator = torch.Generator().manual_seed(SEED)
    order = torch.cat([torch.randperm(len(sequences), generator=generator)
                       for _ in range(-(-run["steps"] * run["batch"] // len(sequences)))]).tolist()
    student.train()
    for step in range(run["steps"]):
        rows = [sequences[i] for i in order[step * run["batch"]:(step + 1) * run["batch"]]]
        ids, mask = _padded([s for s, _ in rows], pad, left=False)
        where = torch.zeros_like(mask, dtype=torch.bool)   # the positions that predict a continuation token
        for r, (s, k) in enumerate(rows):
            where[r, len(s) - k - 1:len(s) - 1] = True
        with torch.no_grad():
            teacher_lp = teacher(input_ids=ids, attention_mask=mask).logits.log_softmax(-1)
            vocab = teacher_lp.shape[-1]
            if target == "shift":
                with teacher.disable_adapter():
                    teacher_base = teacher(input_ids=ids, attention_mask=mask).logits.log_softmax(-1)
                with student.disable_adapter():
                    student_base = student(input_ids=ids, attention_mask=mask).logits[..., :vocab].log_softmax(-1)
                teacher_lp = (student_base + teacher_lp - teacher_base).log_softmax(-1)
        student_lp = student(input_ids=ids, attention_mask=mask).logits[..., :vocab].log_softmax(-1)
        kl = (teacher_lp.exp() * (teacher_lp - student_lp)).sum(-1)
        kl[where].mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    out.write_text(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                               "tokens": sum(len(s) for s, _ in sequences), "threads": torch.get_num_threads()}),
                   encoding="utf-8")


def _padded(rows: list[list[int]], pad: int, *, left: bool):
    import torch

    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[r, span], mask[r, span] = torch.tensor(row), 1
    return ids, mask


# ---------------------------------------------------------------------------------- the parent

def child(args: list[str], label: str) -> dict:
    """Run this script as a child; ``{cpu_s, wall_s, peak_gib, status}`` of its whole process. Stopped when its
    anonymous memory passes :data:`MEMORY_GIB`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    print(f"+ {label}", flush=True)
    wall = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, *args], env=env)
    peak, stopped = 0.0, False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        anon = _anon_gib(proc.pid)
        peak = max(peak, anon)
        if anon > MEMORY_GIB and not stopped:
            os.kill(proc.pid, signal.SIGKILL)
            stopped = True
        time.sleep(0.5)
    result = {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": time.perf_counter() - wall,
              "peak_gib": max(peak, usage.ru_maxrss / 2**20), "status": os.waitstatus_to_exitcode(status)}
    if stopped:
        result["status"] = f"stopped at {MEMORY_GIB} GiB"
    print(f"  {label}: {result}", flush=True)
    return result


def _anon_gib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def measure(work: Path, shape: str, target: str, kinds: list[str]) -> dict:
    tag = f"{shape}-{target}"
    row = {"shape": shape, "target": target, **RUNS[shape]}
    for kind in kinds:
        out = work / f"{kind}-{tag}.json"
        out.unlink(missing_ok=True)
        extra = ["--rows-from", str(work / f"paw-{tag}.json")] if kind == "floor" else []
        if kind == "paw":   # PAW keeps continuations across restarts there: a rerun would not generate them
            shutil.rmtree(work / f"paw-out-{tag}-work", ignore_errors=True)
        proc = child(["--child", kind, "--workdir", str(work), "--shape", shape, "--target", target,
                      "--out", str(out), *extra], f"{kind} {tag}")
        row[kind] = {"process": proc, **(json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {})}
        if kind == "paw" and not out.is_file():
            break
    return row


def table(rows: list[dict]) -> str:
    lines = ["| shape | target | steps x batch (inputs) | floor GFLOP (attention share) | floor CPU s | "
             "PAW distill CPU s (process) | PAW / floor | naive loop CPU s (process) | naive / PAW |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        paw, floor, naive = r.get("paw", {"process": {"cpu_s": float("nan")}}), r.get("floor", {}), r.get("naive", {})
        flops = sum(floor.get("flops", {}).values()) if floor else 0
        att = floor.get("flops_attention", 0)
        ratio = f"**{paw['cpu_s'] / floor['cpu_s']:.2f}**" if "cpu_s" in floor and "cpu_s" in paw else "n/a"
        vs = f"**{naive['cpu_s'] / paw['cpu_s']:.2f}**" if "cpu_s" in naive and "cpu_s" in paw else "n/a"
        lines.append(
            f"| {r['shape']} | {r['target']} | {r['steps']} x {r['batch']} ({r['inputs']}) | "
            f"{flops / 1e9:,.0f} ({att / max(flops, 1):.1%}) | {floor.get('cpu_s', float('nan')):.1f} | "
            f"{paw.get('cpu_s', float('nan')):.1f} ({paw['process']['cpu_s']:.1f}) | {ratio} | "
            f"{naive.get('cpu_s', float('nan')):.1f} ({naive.get('process', {}).get('cpu_s', float('nan')):.1f}) | {vs} |")
    return "\n".join(lines)


def parts(rows: list[dict]) -> str:
    """PAW's own split of its distillation (its report's ``cost.measured.cpu_seconds``)."""
    out = []
    for r in rows:
        cost = (r.get("paw", {}).get("cost") or {}).get("cpu_seconds") or {}
        out.append(f"{r['shape']} {r['target']}: " + ", ".join(f"{k} {v:.1f}" for k, v in cost.items()))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", choices=list(RUNS), default=list(RUNS))
    ap.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    ap.add_argument("--tokenizer-from", type=Path, default=Path.home() / "paw-models" / "smollm2-135m-instruct",
                    help="a model folder whose tokenizer both models use (default: SmolLM2-135M-Instruct's)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/paw-bench-distill"))
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                    help="which children run (the floor reads the token counts of PAW's run in --workdir)")
    ap.add_argument("--child", choices=["setup", "paw", "floor", "naive"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--shape", choices=list(RUNS), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--target", choices=TARGETS, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rows-from", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = args.workdir
    if args.child == "setup":
        return setup(work, args.tokenizer_from, args.shapes)
    if args.child == "paw":
        return paw_child(work, args.shape, args.target, args.out)
    if args.child == "floor":
        return floor_child(work, args.shape, args.target, args.rows_from, args.out)
    if args.child == "naive":
        return naive_child(work, args.shape, args.target, args.out)

    work.mkdir(parents=True, exist_ok=True)
    child(["--child", "setup", "--workdir", str(work), "--tokenizer-from", str(args.tokenizer_from),
           "--shapes", *args.shapes], "setup")
    rows = [measure(work, shape, target, args.kinds) for shape in args.shapes for target in args.targets]
    info = {"cpu": _cpu(), "threads": os.environ.get("OMP_NUM_THREADS", "default"),
            "load": os.getloadavg(), "runs": {s: RUNS[s] for s in args.shapes}}
    for key, value in info.items():
        print(f"{key}: {value}")
    print(table(rows))
    print(parts(rows))
    if args.json:
        args.json.write_text(json.dumps({**info, "rows": rows}, indent=2) + "\n", encoding="utf-8")


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return "unknown"


if __name__ == "__main__":
    main()
