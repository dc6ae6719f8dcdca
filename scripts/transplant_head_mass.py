"""How much of a transplant's bits per byte is the tied head? Left-out and rescaled fitted rows.

For a model given a donor's tokenizer (made by ``paw transplant-tokenizer``), the rows that are not
exact matches of the source vocabulary and that the scored texts never use are (a) left out of the
softmax, and (b) scaled by a few factors, and the bits per byte of the first 100 OpenBookQA test
texts printed for each (BOS first, 256-token windows, as ``scripts/bench_transplant_real.py``).

    python scripts/transplant_head_mass.py TRANSPLANTED SOURCE DONOR [DATA_FOLDER]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

from paw.io.lm import load_lm
from paw.io.tokenizer import open_tokenizer, read_corpus
from paw.vocab.align import AlignContext, align
from paw.vocab.heal import windows
from paw.vocab.heal_pipeline import bos_prefix


def main() -> None:
    folder, source, donor = sys.argv[1:4]
    data = Path(sys.argv[4] if len(sys.argv) > 4 else "/work/shared/data/commonsense")
    s, g = open_tokenizer(source), open_tokenizer(donor)
    exact = set(align(AlignContext(s, g), ["exact"]).entries)
    lm, _ = load_lm(folder, dtype="float32", device="cpu")
    tok = open_tokenizer(folder)
    texts = read_corpus([data / "formatted/openbookqa_test_formatted.jsonl"])[:100]
    wins, pre = windows(tok.encode_batch(texts), 256), bos_prefix(tok)
    used = {i for w in wins for i in w}
    fitted = torch.tensor(sorted(set(range(g.size)) - exact - used - set(pre)))
    W = lm.get_input_embeddings().weight
    print(f"{len(fitted):,} fitted rows the texts never use; median norm {W[fitted].norm(dim=1).median():.3f}, "
          f"copied rows {W[torch.tensor(sorted(exact))].norm(dim=1).median():.3f}")

    def bpb(mask: bool = False, scale: float = 1.0) -> float:
        old = W.data[fitted].clone()
        W.data[fitted] *= scale
        nats, nbytes = 0.0, 0
        with torch.no_grad():
            for w in wins:
                logits = lm(torch.tensor([pre + list(w)])).logits[0, len(pre) - 1:-1].float()
                if mask:
                    logits[:, fitted] = -float("inf")
                nats -= torch.log_softmax(logits, -1).gather(1, torch.tensor(w)[:, None]).sum().item()
                nbytes += sum(len(tok.token_bytes(i)) for i in w)
        W.data[fitted] = old
        return nats / nbytes / math.log(2)

    print(f"as built: {bpb():.4f}")
    print(f"fitted rows out of the softmax: {bpb(mask=True):.4f}")
    for sc in (1.3, 1.63):
        print(f"fitted rows x{sc}: {bpb(scale=sc):.4f}")


if __name__ == "__main__":
    main()
