"""Benchmark ``paw extend-tokenizer`` against the usual transformers recipe.

Scenario of the issue, scaled down: a base tokenizer trained on one kind of text (ARC science
questions) is extended with every token of a second tokenizer trained on new-domain text (BoolQ
Wikipedia passages). Both routes receive the same missing tokens:

- PAW: ``paw extend-tokenizer --from-tokenizer T2`` (real byte-level BPE vocabulary + merges);
- peer: ``tokenizer.add_tokens(strings)`` + ``model.resize_token_embeddings(..., mean_resizing=True)``
  + ``save_pretrained`` (added tokens, matched as literal strings before BPE).

Reported on held-out new-domain text: tokens per 1,000 characters (fewer = the extension helps),
the share of token ends that are also token ends in the new-domain tokenizer's own segmentation (a literal
added-token match can cut ``"other"`` into ``"o" + "the" + "r"``; BPE merges respect the
pre-tokenizer), how many lines decode back to themselves, and the wall time of each route. Needs --data: a folder of the formatted commonsense *.jsonl files (not with --base-tokenizer).

    python scripts/bench_extend.py --base-vocab 2000 --new-vocab 4000 --hidden 256
    python scripts/bench_extend.py --base-tokenizer llama3/tokenizer.json --new-tokenizer qwen3/tokenizer.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")



def _lines(path: Path, limit: int) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line)["input"])
            if len(out) >= limit:
                break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-vocab", type=int, default=2000, help="base tokenizer size")
    ap.add_argument("--new-vocab", type=int, default=4000, help="new-domain tokenizer size")
    ap.add_argument("--hidden", type=int, default=256, help="model hidden size")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--texts", type=int, default=1500, help="lines of each corpus to train on")
    ap.add_argument("--data", type=Path, default=None, help="folder with the formatted commonsense jsonl files")
    ap.add_argument("--work", type=Path, default=Path("/tmp/paw-bench-extend/bench"))
    ap.add_argument("--base-tokenizer", type=Path, help="a real tokenizer.json to extend instead of a trained one")
    ap.add_argument("--new-tokenizer", type=Path, help="with --base-tokenizer: the tokenizer whose tokens are added")
    ap.add_argument("--held-out", type=Path, help="with --base-tokenizer: text file to measure on "
                    "(default: PAW's multilingual sample text)")
    args = ap.parse_args()
    if args.data is None and args.base_tokenizer is None:
        ap.error("--data DIR (the formatted commonsense *.jsonl files) is needed unless --base-tokenizer is given")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paw import zoo
    from paw.data import sample_texts
    from paw.knobs import RunOptions
    from paw.vocab.extend_pipeline import extend_tokenizer
    from paw.vocab.options import ExtendOptions

    if not args.base_tokenizer:
        old_domain = _lines(args.data / "arc-easy_train_formatted.jsonl", args.texts)
        new_domain = _lines(args.data / "boolq_validation_formatted.jsonl", args.texts + 300)
        train_new, held_out = new_domain[: args.texts], new_domain[args.texts:]
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)

    if args.base_tokenizer:  # real tokenizers, e.g. Llama 3 extended with Qwen's vocabulary
        from transformers import PreTrainedTokenizerFast

        base_tok = PreTrainedTokenizerFast(tokenizer_file=str(args.base_tokenizer))
        held_out = (args.held_out.read_text(encoding="utf-8").splitlines() if args.held_out
                    else sample_texts("multi"))
        held_out = [t for t in held_out if t.strip()]
    else:
        base_tok = zoo.train_tokenizer(old_domain, args.base_vocab)
    model = zoo.build_model("llama", vocab_size=len(base_tok), hidden_size=args.hidden,
                            num_layers=args.layers, num_heads=4, num_kv_heads=2)
    base = zoo.save_model(model, args.work / "base", tokenizer=base_tok)
    if args.new_tokenizer:
        PreTrainedTokenizerFast(tokenizer_file=str(args.new_tokenizer)).save_pretrained(args.work / "t2")
    else:
        zoo.train_tokenizer(train_new, args.new_vocab).save_pretrained(args.work / "t2")

    t0 = time.perf_counter()
    every = ExtendOptions(model=base, output=args.work / "paw", from_tokenizer=args.work / "t2", skip_numbers=False)
    lines = extend_tokenizer(every, RunOptions(device="cpu")).lines()
    t_paw = time.perf_counter() - t0

    t0 = time.perf_counter()
    peer_tok = AutoTokenizer.from_pretrained(base)
    t2 = AutoTokenizer.from_pretrained(args.work / "t2")
    have = set(peer_tok.get_vocab())
    strings = [t2.convert_tokens_to_string([t]) for t in t2.get_vocab() if t not in have and not t.startswith("<|")]
    strings = [s for s in strings if s and "\ufffd" not in s]
    peer_tok.add_tokens(strings)
    peer = AutoModelForCausalLM.from_pretrained(base)
    peer.resize_token_embeddings(len(peer_tok), mean_resizing=True)
    peer.save_pretrained(args.work / "peer")
    peer_tok.save_pretrained(args.work / "peer")
    t_peer = time.perf_counter() - t0

    paw_tok = AutoTokenizer.from_pretrained(args.work / "paw")
    chars = sum(len(t) for t in held_out)
    old_n = len(base_tok)

    t2_bounds = [_boundaries(t2, text) for text in held_out]

    def stats(tok):
        n = new = shared = own = exact = 0
        for text, ref in zip(held_out, t2_bounds, strict=True):
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            n += len(enc.input_ids)
            new += sum(i >= old_n for i in enc.input_ids)
            mine = _boundaries(tok, text)
            shared, own = shared + len(mine & ref), own + len(mine)
            exact += tok.decode(enc.input_ids) == text
        return n, new, 100 * shared / own, exact

    print("\n".join(lines))
    print(f"\nheld-out new-domain text: {len(held_out)} lines, {chars} characters")
    head = f"{'route':<24}{'tok/1k chars':>13}{'new-token uses':>16}{'ends as T2':>15}{'decode ok':>11}{'time s':>9}"
    print(head)
    for name, tok in (("base tokenizer", base_tok), ("T2 (new-domain, ideal)", t2)):
        n, _, shared, exact = stats(tok)
        print(f"{name:<24}{1000 * n / chars:>13.1f}{'-':>16}{shared:>14.1f}%"
              f"{exact:>7}/{len(held_out)}{'-':>9}")
        if name == "base tokenizer":
            base_n = n
    results = {}
    for name, tok, secs in (("paw extend-tokenizer", paw_tok, t_paw), ("add_tokens + resize", peer_tok, t_peer)):
        n, new, shared, exact = stats(tok)
        results[name] = (n, shared)
        print(f"{name:<24}{1000 * n / chars:>13.1f}{new:>16}{shared:>14.1f}%"
              f"{exact:>7}/{len(held_out)}{secs:>9.2f}")
    (n_paw, sh_paw), (n_peer, sh_peer) = results.values()
    print(f"\ntokens: paw / peer = {n_paw / n_peer:.3f}; base / paw = {base_n / n_paw:.3f}; "
          f"token ends that are T2 token ends: paw {sh_paw:.1f}%, peer {sh_peer:.1f}%; "
          f"time paw / peer = {t_paw / t_peer:.2f}")


def _boundaries(tok, text: str) -> set[int]:
    """Character offsets where a token ends (the text's segmentation)."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    return {b for _a, b in enc.offset_mapping}

if __name__ == "__main__":
    main()
