"""Does CUDA score a real model as the CPU does? The first lines of a lease's log, before any bench.

On 2026-11-26 (an H200, transformers 5.17.0) Gemma-3-270M with the same LoRA scored 54.5% on PIQA's
1,000 test items under ``--device cuda`` and 65.4% on the CPU, 269 items apart, spread evenly over the
lengths; its LoRA's first training loss on the GPU was 5.28 where SmolLM2's was 3.52. The CPU gives
the same with transformers 5.17 and 5.24, and a CUDA-like SDPA emulated on the CPU changes nothing, so
the cause is on the device. This prints, for the first ITEMS PIQA test items, the accuracy and the
largest log-likelihood difference against the CPU of: CUDA at batch 8 with the memory-efficient SDPA
kernel allowed (PAW's guard bypassed: the suspect, pytorch issue 191937, for one key/value head),
CUDA batch 1 (no padding), CUDA batch 8 as PAW runs it (guarded), CUDA with only the math kernel,
CUDA with eager attention, and the loss of one plain sentence.

    python scripts/gpu_check_scores.py MODEL_FOLDER DATA_FOLDER [ITEMS]
"""

from __future__ import annotations

import sys

import torch

from paw.bench.real.task_sets import load_task
from paw.evaluate import mc
from paw.evaluate.encode import encode_pair, max_length_of, pad_id_of
from paw.evaluate.mc import score_encoded
from paw.io.lm import load_lm


def main() -> None:
    guard = mc.guard_cuda_attention
    folder, data = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    _, test = load_task(data, "piqa", 0)
    items = test[:n]
    rows = {}
    for label, device, batch, attn in (("cpu, batch 8", "cpu", 8, "sdpa"), ("cuda, batch 8, unguarded", "cuda", 8, "raw"),
                                       ("cuda, batch 1", "cuda", 1, "sdpa"),
                                       ("cuda, batch 8", "cuda", 8, "sdpa"), ("cuda, batch 8, math sdpa", "cuda", 8, "math"),
                                       ("cuda, batch 8, eager", "cuda", 8, "eager")):
        if device == "cuda" and not torch.cuda.is_available():
            continue
        lm, tok = load_lm(folder, dtype="float32", device=device)
        if attn == "eager":
            lm.config._attn_implementation = "eager"
        enc = [encode_pair(tok, c, x, max_length=max_length_of(lm)) for it in items for c, x in it.pairs()]
        ctx = (torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH) if attn == "math"
               else torch.autocast("cpu", enabled=False))
        mc.guard_cuda_attention = (lambda model: False) if attn == "raw" else guard
        if attn == "raw":
            torch.backends.cuda.enable_mem_efficient_sdp(True)
        with ctx:
            scores = [s for s, _ in score_encoded(lm, enc, pad_id=pad_id_of(tok), batch_size=batch, device=device,
                                                  progress=False)]
        ids = tok("The capital of France is Paris. The capital of Germany is Berlin.", return_tensors="pt").input_ids
        with torch.no_grad():
            loss = lm(ids.to(device), labels=ids.to(device)).loss.item()
        k, correct = 0, 0
        for it in items:
            got = scores[k:k + len(it.choices)]
            correct += int(max(range(len(got)), key=got.__getitem__) == it.answer)
            k += len(it.choices)
        rows[label] = (scores, correct / len(items), loss)
        del lm
    ref = rows["cpu, batch 8"][0]
    for label, (scores, acc, loss) in rows.items():
        worst = max(abs(a - b) for a, b in zip(scores, ref, strict=True))
        print(f"{label:28s} accuracy {acc:.3f}   max |dLL| vs cpu {worst:9.4f}   sentence loss {loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
