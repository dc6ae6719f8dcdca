"""Time ``paw transfer-lora --method distill`` on CPU and, where there is one, on CUDA.

A Llama source (byte-level BPE) with a LoRA that learned 64 colour facts is distilled onto a wider
Qwen2 with a SentencePiece-style tokenizer (another family, another tokenizer), from the questions
alone (no answers). Prints seconds per device, the target's accuracy before and after, and the
CUDA speed-up. Needs nothing beside the repository.

    python scripts/bench_distill.py --hidden 256 --layers 4 --steps 100
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path


def build(root: Path, hidden: int, layers: int, facts: int) -> dict:
    from peft import get_peft_model_state_dict

    from paw import zoo
    from paw.data import sample_texts
    from paw.evaluate.synthetic import fact_task, tokenizer_corpus
    from paw.evaluate.train import train_lora
    from paw.io.adapter import LoraAdapter, lora_config_dict, write_adapter

    task = fact_task("colour", n=facts, seed=0)
    texts = sample_texts("multi") + tokenizer_corpus(task)
    tok_s, tok_t = zoo.train_tokenizer(texts, 600), zoo.train_tokenizer(texts, 600, kind="sentencepiece-bpe")
    dims = dict(num_heads=8, num_kv_heads=4, num_layers=layers)
    source = zoo.build_model("llama", seed=0, init_std=0.2, vocab_size=len(tok_s), hidden_size=hidden, **dims)
    target = zoo.build_model("qwen2", seed=1, init_std=0.2, vocab_size=len(tok_t), hidden_size=hidden + 64, **dims)
    zoo.save_model(source, root / "source", tokenizer=tok_s)
    zoo.save_model(target, root / "target", tokenizer=tok_t)
    peft_model, _ = train_lora(copy.deepcopy(source), tok_s, task, rank=8, alpha=16, steps=150, batch_size=16,
                               lr=5e-3, seed=0, progress=False)
    tensors = {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
    config = lora_config_dict(r=8, alpha=16, target_modules=zoo.ALL_LINEAR, base_model=str(root / "source"))
    write_adapter(root / "lora", LoraAdapter(config=config, tensors=tensors))
    (root / "questions.txt").write_text("".join(item.question + "\n" for item in task))
    return {"task": task}


def accuracy(base: Path, items, adapter: Path | None = None) -> float:
    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm

    model, tokenizer = load_lm(base, adapter=adapter, device="cpu")
    return evaluate(model, tokenizer, items, progress=False)["accuracy"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--facts", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()

    import torch

    from paw.transfer.folder_pipeline import run_distill

    root = Path(tempfile.mkdtemp(prefix="paw-bench-distill-"))
    task = build(root, args.hidden, args.layers, args.facts)["task"]
    base = accuracy(root / "target", task)
    print(f"source llama hidden {args.hidden} x {args.layers} layers -> target qwen2 hidden {args.hidden + 64}; "
          f"{args.facts} facts; teacher accuracy {accuracy(root / 'source', task, root / 'lora'):.3f}, "
          f"target base {base:.3f}", flush=True)
    seconds = {}
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        start = time.perf_counter()
        run_distill(root / "lora", root / "source", root / "target", root / f"out-{device}",
                    prompts=root / "questions.txt", steps=args.steps, batch_size=16, lr=1e-2, max_new_tokens=4,
                    holdout=0.0, device=device, progress=False)
        seconds[device] = time.perf_counter() - start
        moved = accuracy(root / "target", task, root / f"out-{device}")
        print(f"{device:<5} distill {args.steps} steps: {seconds[device]:7.1f} s; target accuracy "
              f"{base:.3f} -> {moved:.3f} (questions only, never the answers)", flush=True)
    if "cuda" in seconds:
        print(f"cuda speed-up: {seconds['cpu'] / seconds['cuda']:.1f}x (CPU threads {torch.get_num_threads()})")


if __name__ == "__main__":
    main()
