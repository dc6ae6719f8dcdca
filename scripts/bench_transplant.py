"""Benchmark tokenizer transplant: bits per byte of a small LM before and after moving it to tokenizer B.

1. Train byte-level BPE tokenizer A on a corpus and a small Llama on A (a few CPU minutes).
2. Train tokenizer B of a different size on the same corpus.
3. Transplant the model to B with each alignment method chain, and with mean initialisation (every
   row = the mean source row, the naive baseline), without any further training.
4. Print bits per byte on held-out text: ``sum(-log2 p(token)) / bytes``, comparable across tokenizers
   because it is normalised by bytes, not tokens.

Run ``python scripts/bench_transplant.py --help``; ``--minutes 0.5`` gives a quick run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch


def load_corpus(paths: list[str]) -> list[str]:
    """Given files via paw's corpus reader (question + options of the commonsense sets, say); else the
    embedded sample text, with a warning: the published figures used the commonsense text."""
    from paw.io.tokenizer import read_corpus

    if paths:
        return read_corpus(paths)
    lines = []
    print("warning: no --corpus: training on the embedded sample text; figures differ from "
          "docs/benchmarks/tokenizers.md", file=sys.stderr)
    if not lines:
        from paw.data import sample_texts

        return sample_texts("en") * 50
    return lines


def batches(ids: torch.Tensor, seq: int, batch: int, gen: torch.Generator):
    while True:
        starts = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
        yield torch.stack([ids[s:s + seq + 1] for s in starts.tolist()])


def train(model, ids: torch.Tensor, *, minutes: float, max_steps: int, seq: int, batch: int, lr: float, seed: int):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    gen = torch.Generator().manual_seed(seed)
    model.train()
    start, step, loss = time.time(), 0, float("nan")
    for step, xb in enumerate(batches(ids, seq, batch, gen), 1):
        out = model(xb[:, :-1], labels=xb[:, :-1].clone())
        loss = out.loss.item()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        if step % 50 == 0:
            print(f"  step {step}: loss {loss:.3f} ({time.time() - start:.0f}s)", flush=True)
        if step >= max_steps or time.time() - start > minutes * 60:
            break
    model.eval()
    return step, loss, time.time() - start


@torch.no_grad()
def bits_per_byte(model, tok, text: str, *, seq: int) -> float:
    """Non-overlapping windows of ``seq`` tokens; every token but a window's first is scored."""
    ids = tok.encode(text)
    nll, nbytes = 0.0, 0
    for a in range(0, len(ids) - 1, seq):
        window = ids[a:a + seq]
        if len(window) < 2:
            continue
        logits = model(torch.tensor([window])).logits[0, :-1].float()
        target = torch.tensor(window[1:])
        nll += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
        nbytes += sum(len(tok.token_bytes(i)) for i in window[1:])
    return nll / math.log(2) / max(nbytes, 1)


def transplant(model, src, tgt, methods: list[str], *, counts=None, fallback: str = "mean", head: str = "mapping"):
    from paw import zoo
    from paw.vocab.align import AlignContext, align
    from paw.vocab.transplant import embedding_names, transplanted_tensors

    state = model.state_dict()
    emb = state["model.embed_tokens.weight"]
    ctx = AlignContext(src, tgt, source_embeddings=emb.float(), source_counts=counts)
    mapping = align(ctx, methods) if methods else align(ctx, [])
    if not methods:  # mean initialisation: every row (specials too) is the mean source row
        mapping.entries.clear()
    names = embedding_names({k: tuple(v.shape) for k, v in state.items()}, emb.shape[0])
    new_state = dict(transplanted_tensors(state, names, mapping, rows=tgt.size, fallback=fallback, head=head))
    cfg = model.config
    new = zoo.build_model("llama", vocab_size=tgt.size, hidden_size=cfg.hidden_size,
                          num_layers=cfg.num_hidden_layers, num_heads=cfg.num_attention_heads,
                          num_kv_heads=cfg.num_key_value_heads, intermediate_size=cfg.intermediate_size,
                          max_position_embeddings=cfg.max_position_embeddings)
    new.load_state_dict(new_state)
    return new.eval(), mapping.coverage()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", nargs="*", default=[], help="text/.jsonl files (default: the embedded sample text, with a warning)")
    p.add_argument("--max-lines", type=int, default=40000, help="corpus lines used (training + held-out)")
    p.add_argument("--vocab-a", type=int, default=2048, help="tokenizer A size (the model's own)")
    p.add_argument("--vocab-b", type=int, default=3072, help="tokenizer B size (the transplant target)")
    p.add_argument("--kind-b", default="byte-bpe", help="tokenizer B kind: byte-bpe, sentencepiece-bpe, wordpiece")
    p.add_argument("--minutes", type=float, default=3.0, help="CPU training budget")
    p.add_argument("--max-steps", type=int, default=2000)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared machine)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    import random

    from paw import zoo
    from paw.io.tokenizer import open_tokenizer

    lines = load_corpus(args.corpus)
    random.Random(args.seed).shuffle(lines)
    lines = lines[: args.max_lines]
    cut = int(len(lines) * 0.95)
    train_lines, held = lines[:cut], "\n".join(lines[cut:])
    print(f"corpus: {len(train_lines)} training lines, held-out {len(held.encode()):,} bytes")
    work = Path(f"/tmp/paw-bench-transplant-{args.seed}")
    for name, size, kind in (("A", args.vocab_a, "byte-bpe"), ("B", args.vocab_b, args.kind_b)):
        zoo.train_tokenizer(train_lines, size, kind=kind).save_pretrained(work / name)
    A, B = open_tokenizer(work / "A"), open_tokenizer(work / "B")
    print(f"tokenizer A: {A.kind} {A.size} ids; tokenizer B: {B.kind} {B.size} ids")

    ids = torch.tensor(A.encode("\n".join(train_lines)))
    model = zoo.build_model("llama", vocab_size=A.size, hidden_size=args.hidden, num_layers=args.layers,
                            num_heads=4, num_kv_heads=2, intermediate_size=3 * args.hidden,
                            max_position_embeddings=args.seq + 8, init_std=0.02, seed=args.seed)
    print(f"training a {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M-parameter Llama on "
          f"{len(ids):,} tokens for up to {args.minutes} min")
    steps, loss, secs = train(model, ids, minutes=args.minutes, max_steps=args.max_steps, seq=args.seq,
                              batch=args.batch, lr=args.lr, seed=args.seed)
    print(f"trained {steps} steps in {secs:.0f}s, last loss {loss:.3f}")

    from paw.vocab.compare import token_counts

    counts = token_counts(A.encode_batch(train_lines), A.size)
    results = {"original (A)": {"bpb": bits_per_byte(model, A, held, seq=args.seq), "coverage": None}}
    chains = {"exact": ["exact"], "exact+decompose (default)": ["exact", "decompose"],
              "exact+nearest-string": ["exact", "nearest-string"], "exact+frequency": ["exact", "frequency"],
              "exact+semantic": ["exact", "semantic"], "mean init": []}
    for label, methods in chains.items():
        for head in ("mapping", "first") if methods and methods != ["exact"] else ("mapping",):
            new, cov = transplant(model, A, B, methods, counts=counts, head=head)
            name = label if head == "mapping" else f"{label}, --head first"
            results[name] = {"bpb": bits_per_byte(new, B, held, seq=args.seq), "coverage": cov}
    base = results["original (A)"]["bpb"]
    mean = results["mean init"]["bpb"]
    print(f"\n{'model':42s} {'bits/byte':>10s} {'vs original':>12s}  coverage")
    for label, r in results.items():
        cov = ", ".join(f"{k} {v}" for k, v in (r["coverage"] or {}).items())
        print(f"{label:42s} {r['bpb']:10.4f} {r['bpb'] / base - 1:+11.1%}  {cov}")
    default = results["exact+decompose (default)"]["bpb"]
    print(f"\ndefault method: {default / base - 1:+.1%} vs original (target within +15%); mean init: "
          f"{mean / base - 1:+.1%}; default is {mean / default:.2f}x better in bits/byte than mean init")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "steps": steps,
                                         "results": results}, indent=2))


if __name__ == "__main__":
    main()
