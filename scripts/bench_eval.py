"""Benchmark ``paw.evaluate.mc.evaluate`` (batched, length-sorted, logits only where needed, each question
run once and its choices from the cached keys and values) against the naive loop: one forward pass per
(question, choice), full logits, no batching; and against PAW's own whole rows (the same batching, every
choice with its question: ``score_encoded(..., share_context=False)``), which is what the cached context gains.

All score the same items with the same zoo model; the script checks that they agree and prints
items/s, CPU seconds and the speed-ups.

    python scripts/bench_eval.py --items 64                 # quick
    python scripts/bench_eval.py --items 400 --hidden-size 256 --layers 4 --vocab-size 8000
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path


def naive_scores(model, tokenizer, items):
    """The textbook loop: for each choice, run ``context + choice`` alone and sum the choice's log-probs."""
    import torch

    from paw.evaluate.encode import encode_pair

    correct, nll, tokens = 0, 0.0, 0
    with torch.no_grad():
        for item in items:
            lls = []
            for context, cont in item.pairs():
                enc = encode_pair(tokenizer, context, cont, start="tokenizer")  # as paw eval
                ids = torch.tensor([enc.ids])
                logprobs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
                targets = ids[0, 1:]
                picked = logprobs.gather(-1, targets[:, None])[:, 0][-enc.n_cont:]
                lls.append(float(picked.sum()))
                if len(lls) - 1 == item.answer:
                    nll -= lls[-1]
                    tokens += enc.n_cont
            correct += max(range(len(lls)), key=lambda j: (lls[j], -j)) == item.answer
    return correct / len(items), nll / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="multiple-choice JSONL, e.g. ARC-Easy test (raw layout)")
    parser.add_argument("--items", type=int, default=64, help="number of items to score")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for both")
    args = parser.parse_args()

    import torch

    from paw import zoo
    from paw.data import sample_texts
    from paw.evaluate.encode import encode_pair, pad_id_of
    from paw.evaluate.formats import read_items
    from paw.evaluate.mc import evaluate, score_encoded, summarize

    torch.set_num_threads(args.threads)
    items = read_items(args.data, limit=args.items)
    tokenizer = zoo.train_tokenizer(sample_texts("multi"), args.vocab_size)
    model = zoo.build_model("llama", hidden_size=args.hidden_size, num_layers=args.layers,
                            num_heads=4, num_kv_heads=2, vocab_size=len(tokenizer))
    n_seq = sum(len(i.choices) for i in items)
    print(f"{len(items)} items ({n_seq} sequences) from {args.data.name}; llama hidden {args.hidden_size}, "
          f"{args.layers} layers, vocab {len(tokenizer)}, {args.threads} thread(s)")

    (naive_acc, naive_loss), naive = timed(naive_scores, model, tokenizer, items)
    tokenizer.padding_side = "left"
    metrics, batched = timed(evaluate, model, tokenizer, items, batch_size=args.batch_size, progress=False)
    encoded = [encode_pair(tokenizer, c, x, start="tokenizer") for item in items for c, x in item.pairs()]
    rows, whole = timed(score_encoded, model, encoded, pad_id=pad_id_of(tokenizer), batch_size=args.batch_size,
                        progress=False, share_context=False)

    assert metrics["accuracy"] == naive_acc, (metrics["accuracy"], naive_acc)
    assert math.isclose(metrics["loss"], naive_loss, rel_tol=1e-4), (metrics["loss"], naive_loss)
    assert summarize(items, rows)["accuracy"] == naive_acc
    for what, (wall, cpu) in (("naive loop", naive), ("whole rows", whole), ("paw evaluate", batched)):
        print(f"{what:14} {wall:7.2f} s  {cpu:7.2f} CPU s  {len(items) / wall:8.1f} items/s")
    print(f"speed-up       {naive[0] / batched[0]:.2f}x over the naive loop, {whole[1] / batched[1]:.2f}x CPU over "
          f"whole rows (batch {args.batch_size}; same accuracy {naive_acc:.4f}, loss {naive_loss:.4f})")


def timed(fn, *args, **kwargs):
    """``(fn(...), (wall s, CPU s of this process))``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - wall, time.process_time() - cpu)


if __name__ == "__main__":
    main()
