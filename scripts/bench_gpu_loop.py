"""Time ``paw eval`` scoring and ``paw train-lora`` steps on CPU and on CUDA with the same zoo model.

A 12-layer, hidden-768 Llama (about GPT-2-small size) scores the synthetic colour task repeated to
512 items and trains a rank-16 LoRA for 60 steps; the script prints seconds on each device and the
ratio. It needs no data beside the repository.

    python scripts/bench_gpu_loop.py              # needs a CUDA device for the second column
"""

from __future__ import annotations

import time


def main() -> None:
    import torch

    from paw import zoo
    from paw.evaluate.mc import evaluate
    from paw.evaluate.synthetic import fact_task, tokenizer_corpus
    from paw.evaluate.train import train_lora

    items = fact_task("colour", n=64, seed=0) * 8
    tok = zoo.train_tokenizer(tokenizer_corpus(items), 2000)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = {}
    for device in devices:
        model = zoo.build_model("llama", hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=4,
                                vocab_size=len(tok), intermediate_size=2048)
        start = time.perf_counter()
        evaluate(model, tok, items, batch_size=32, device=device, progress=False)
        if device == "cuda":
            torch.cuda.synchronize()
        ev = time.perf_counter() - start
        start = time.perf_counter()
        train_lora(model, tok, items, rank=16, alpha=32, steps=60, batch_size=16, lr=1e-3, device=device,
                   progress=False)
        tr = time.perf_counter() - start
        rows[device] = (ev, tr)
        print(f"{device:<5} eval {len(items)} items {ev:7.2f} s   train-lora 60 steps {tr:7.2f} s", flush=True)
    if "cuda" in rows:
        (ec, tc), (eg, tg) = rows["cpu"], rows["cuda"]
        print(f"cuda speed-up: eval {ec / eg:.1f}x, train-lora {tc / tg:.1f}x  (CPU threads {torch.get_num_threads()})")


if __name__ == "__main__":
    main()
