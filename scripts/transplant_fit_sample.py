"""Which anchors make a donor-OMP transplant's tied head leak? A sampled estimate, minutes on a CPU.

A full ``paw transplant-tokenizer --donor`` of SmolLM2-135M onto Gemma-3's 262,144 tokens fits 215,888
rows: two minutes on a GPU, hours on two CPU cores. Under a tied head the fitted rows the text never
uses still take softmax mass at every position. This fits a seeded sample of the rows that every anchor
set below approximates, with each anchor set (same solver, :func:`paw.vocab.omp.batch_omp`, k = 64),
and estimates from the source model's own hidden states on the first 100 OpenBookQA test texts the
share of the softmax the approximated rows would take and the nats per token that adds, scaling the
sample's ``logsumexp`` by the number of rows it stands for (so it assumes the scored token's row is
copied, as for 99.6% of those texts' tokens). Anchor sets:

- ``paw``: PAW's anchors now (:func:`paw.vocab.donor.anchor_entries`: exact matches less the target's
  byte-fallback pieces);
- ``paw-with-byte-fallback``: PAW's before 2026-11-27 (every exact match);
- ``tokensurgeon``: mergekit-tokensurgeon 0.1.5's string matches, where ``--mergekit`` points at an
  unpacked mergekit (its ``mergekit/tokenizer/normalization.py``).

    python scripts/transplant_fit_sample.py SOURCE DONOR [--samples 2048] [--mergekit DIR] [--data DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from pathlib import Path

import torch

from paw.io.tokenizer import open_tokenizer, read_corpus
from paw.vocab.align import AlignContext, align
from paw.vocab.donor import anchor_entries
from paw.vocab.heal import windows
from paw.vocab.omp import batch_omp


def tokensurgeon_anchors(mergekit: Path, source: str, donor: str) -> dict[int, int]:
    """Donor id -> source id for the tokens tokensurgeon copies (its own normalised-string match)."""
    from transformers import AutoTokenizer

    spec = importlib.util.spec_from_file_location("norm", mergekit / "mergekit/tokenizer/normalization.py")
    norm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(norm)
    vs = norm.normalized_vocabulary(AutoTokenizer.from_pretrained(source))
    vd = norm.normalized_vocabulary(AutoTokenizer.from_pretrained(donor))
    return {vd[t]: vs[t] for t in set(vs) & set(vd)}


def embedding(folder: str):
    from safetensors import safe_open

    with safe_open(str(Path(folder) / "model.safetensors"), "pt") as f:
        return f.get_tensor("model.embed_tokens.weight").float()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source")
    p.add_argument("donor")
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=64)
    p.add_argument("--mergekit", type=Path, help="an unpacked mergekit 0.1.5, for tokensurgeon's anchors")
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/commonsense")
    args = p.parse_args()
    from transformers import AutoModelForCausalLM

    src, tgt = open_tokenizer(args.source), open_tokenizer(args.donor)
    exact = align(AlignContext(src, tgt), ["exact"])
    sets = {"paw": {t: e[1][0] for t, e in anchor_entries(exact, tgt).entries.items()},
            "paw-with-byte-fallback": {t: e[1][0] for t, e in exact.entries.items()}}
    if args.mergekit:
        sets["tokensurgeon"] = tokensurgeon_anchors(args.mergekit, args.source, args.donor)
    G, E = embedding(args.donor), embedding(args.source)
    approx = [t for t in range(G.shape[0]) if not any(t in s for s in sets.values())]
    gen = torch.Generator().manual_seed(args.seed)
    sample = torch.tensor(approx)[torch.randperm(len(approx), generator=gen)[:args.samples]]
    scale = len(approx) / len(sample)
    lm = AutoModelForCausalLM.from_pretrained(args.source, dtype=torch.float32).eval()
    texts = read_corpus([args.data / "formatted/openbookqa_test_formatted.jsonl"])[:100]
    H, Y = [], []
    with torch.no_grad():
        for w in windows(src.encode_batch(texts), 256):
            H.append(lm.model(torch.tensor([list(w)])).last_hidden_state[0][:-1])
            Y.append(torch.tensor(w[1:]))
    H, Y = torch.cat(H), torch.cat(Y)
    logits = H @ E.T
    lse = torch.logsumexp(logits, 1)
    nll = (lse - logits.gather(1, Y[:, None])[:, 0]).mean().item()
    print(f"{len(H)} positions of the source's own text, its nll {nll:.4f} nats/token; {len(approx):,} rows no set "
          f"anchors, {len(sample)} fitted per set (x{scale:.0f})")
    for name, anchors in sets.items():
        t0 = time.time()
        pairs = sorted(anchors.items())
        A, src_ids = G[torch.tensor([t for t, _ in pairs])], torch.tensor([s for _, s in pairs])
        rows = []
        for i in range(0, len(sample), 512):
            idx, coef = batch_omp(G[sample[i:i + 512]], A, k=args.k)
            rows.append(torch.bmm(coef.unsqueeze(1), E[src_ids[idx]]).squeeze(1))
        R = torch.cat(rows).bfloat16().float()   # as the transplant writes them
        lse_fit = torch.logsumexp(H @ R.T, 1) + math.log(scale)
        mass = torch.sigmoid(lse_fit - lse).mean().item()
        added = torch.nn.functional.softplus(lse_fit - lse).mean().item()
        print(f"{name:24s} {len(pairs):6,} anchors | fitted rows: median norm {R.norm(dim=1).median():.3f}, "
              f"mean vector {R.mean(0).norm():.3f} | softmax share {mass:.3f}, +{added:.3f} nats/token "
              f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
