"""Check PAW's memory prediction against the measured peak RSS of a one-step distillation on CPU.

Builds a pair of the shape of a real model from its config with random weights (Llama-3.2-1B by
default: 1.24B parameters, bf16 on disk), a random rank-16 LoRA on all seven projections as the
teacher's adapter, then runs ``paw transfer-lora --method distill --max-steps 1`` in a child process
and compares the child's peak resident set (``getrusage(RUSAGE_CHILDREN).ru_maxrss``) with the
``memory.predicted`` of its report. The teacher and the student share the base folder (the same
shape is what the prediction depends on). Needs about 2.5 GB of disk and 6-7 GB of RAM in bf16.

    nice -n 10 python scripts/bench_scale_memory.py --work /tmp/paw-1b [--dtype bfloat16]

With ``--source-like DIR --target-like DIR`` the pair takes the shapes and tokenizers of two real
model folders instead (their config.json and tokenizer files; their weights are not read), e.g.
SmolLM2-135M -> Gemma-3-270M, to time a cross-family distillation where the real weights cannot go:

    python scripts/bench_scale_memory.py --source-like ~/paw-models/smollm2-135m-instruct \
        --target-like ~/paw-models/gemma-3-270m --device cuda --max-steps 200 --work /tmp/paw-real-shape

Prints one JSON object: predicted parts, measured peak, their ratio, and the run's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

LLAMA_3_2_1B = {  # the public config.json of meta-llama/Llama-3.2-1B (shape fields)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "vocab_size": 128256, "tie_word_embeddings": True, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "hidden_act": "silu", "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
}


def build(work: Path, config: dict, rank: int) -> tuple[Path, Path]:
    """``(base folder, adapter folder)``: random bf16 weights of ``config``, a zoo tokenizer, a random LoRA."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from paw import zoo
    from paw.data import sample_texts

    base, lora = work / "base", work / "lora"
    if (base / "config.json").is_file() and (lora / "adapter_config.json").is_file():
        return base, lora
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**config), dtype=torch.bfloat16)
    tokenizer = zoo.train_tokenizer(sample_texts("multi"), 300)
    with torch.no_grad():  # tied head: ids past the tokenizer get logit 0, so greedy text decodes to words
        model.get_input_embeddings().weight[len(tokenizer):] = 0
    model = random_lora(model, lora, rank)
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    return base, lora


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def random_lora(model, folder: Path, rank: int):
    """Save a random rank-``rank`` LoRA on every linear layer of ``model`` to ``folder``; return the bare model."""
    import torch
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear",
                                                  lora_dropout=0.0, task_type="CAUSAL_LM"))
    with torch.no_grad():
        for p in peft_model.parameters():
            if p.requires_grad:
                p.normal_(0.0, 0.02)
    peft_model.save_pretrained(folder)
    return peft_model.unload()


def build_like(like: Path, folder: Path, seed: int, lora: Path | None = None, rank: int = 16) -> Path:
    """Random bf16 weights of the shape in ``like/config.json``, with ``like``'s tokenizer files, in ``folder``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if (folder / "config.json").is_file() and (lora is None or (lora / "adapter_config.json").is_file()):
        return folder
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(like), dtype=torch.bfloat16)
    if lora is not None:
        model = random_lora(model, lora, rank)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (like / name).is_file():
            shutil.copy(like / name, folder / name)
    return folder


def seconds(duration: str) -> float:
    """Invert :func:`paw.progress.format_duration`: ``'3 min 10 s'`` -> 190.0."""
    words = duration.split()
    unit = {"s": 1, "min": 60, "h": 3600, "d": 86400}
    return sum(float(n) * unit[u] for n, u in zip(words[::2], words[1::2], strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/paw-scale-1b"))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (then the allocator's peak is compared)")
    parser.add_argument("--max-steps", type=int, default=1, help="Distillation steps (1: the memory check).")
    parser.add_argument("--source-like", type=Path, help="A model folder whose shape and tokenizer the source takes.")
    parser.add_argument("--target-like", type=Path, help="Likewise for the target (needs --source-like).")
    args = parser.parse_args(argv)
    if (args.source_like is None) != (args.target_like is None):
        parser.error("--source-like and --target-like go together")
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.source_like is None:
        shape = "Llama-3.2-1B"
        source, lora = build(args.work, LLAMA_3_2_1B, args.rank)
        target = source
    else:
        shape = f"{args.source_like.name} -> {args.target_like.name}"
        lora = args.work / "lora"
        source = build_like(args.source_like, args.work / "source", 0, lora=lora, rank=args.rank)
        target = build_like(args.target_like, args.work / "target", 1)
    built = time.perf_counter() - t0
    out = args.work / f"out-{args.device}-{args.dtype}-{args.max_steps}{'-gc' if args.gradient_checkpointing else ''}"
    cmd = [sys.executable, "-m", "paw", "transfer-lora", "--method", "distill", "--adapter", str(lora),
           "--source-base", str(source), "--target-base", str(target), "--output", str(out), "--overwrite",
           "--prompts", "generic", "--max-steps", str(args.max_steps), "--batch-size", str(args.batch_size),
           "--max-new-tokens", str(args.max_new_tokens), "--init", "none", "--dtype", args.dtype, "--device", args.device,
           *(["--gradient-checkpointing"] if args.gradient_checkpointing else [])]
    t1 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PAW_PROGRESS": "1"})
    wall = time.perf_counter() - t1
    if run.returncode != 0:
        print(run.stderr[-4000:], file=sys.stderr)
        return run.returncode
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    memory = json.loads((out / "transfer_report.json").read_text())["memory"]
    peak = memory["measured"].get("cuda_max_allocated_bytes", peak)
    predicted = memory["predicted"]
    took = [line for line in run.stderr.splitlines() if "distilling:" in line and " took " in line]
    train_seconds = seconds(took[-1].rsplit(" took ", 1)[1]) if took else None
    print(json.dumps({"shape": shape, "steps": args.max_steps, "dtype": args.dtype, "batch_size": args.batch_size,
                      "max_new_tokens": args.max_new_tokens, "gradient_checkpointing": args.gradient_checkpointing,
                      "predicted_peak_gib": round(predicted["predicted_peak_bytes"] / 2**30, 3),
                      "predicted_parts_gib": {k: round(v / 2**30, 3) for k, v in predicted["parts"].items()},
                      "device": args.device, "measured_peak_gib": round(peak / 2**30, 3),
                      "measured_over_predicted": round(peak / predicted["predicted_peak_bytes"], 3),
                      "run_seconds": round(wall, 1), "train_seconds": train_seconds, "build_seconds": round(built, 1),
                      "stderr_tail": run.stderr.strip().splitlines()[-4:]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
