"""The peer side of ``scripts/bench_transplant_real.py``: ``mergekit-tokensurgeon``, resumable (run with its venv's python).

tokensurgeon approximates the new tokens in batches (``--batch-size``, default 512) and keeps them in
memory until the end: a run of SmolLM2-135M given Gemma-3's tokenizer is 423 batches, four to eight hours
of a 2-core machine, longer than one working session. This wrapper runs tokensurgeon's own command,
unchanged, with one addition: each batch its ``compute_new_embeddings`` returns is saved under
``--cache`` (each row keyed by its token and whether it is the head), and a later run with the same arguments
computes only the tokens not saved yet. Every value written is tokensurgeon's: its OMP fits each token
on its own, whatever other tokens share its batch (and tokensurgeon's own batches differ from run to
run: they follow the order a fast tokenizer lists its vocabulary in, which changes per process).

    V=~/.cache/paw-parity/tokensurgeon-venv
    $V/bin/python scripts/bench_transplant_real_peer.py --cache /tmp/ts-cache -- MODEL DONOR OUT --k 64

``--cache/seconds.json`` keeps the compute seconds of every batch computed, so a run spread over sessions still
reports its whole cost (``python scripts/bench_transplant_real_peer.py --cache DIR --seconds``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _key(token, is_lm_head: bool) -> str:
    return repr((token, bool(is_lm_head)))


def _write_json(path: Path, value) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)


def cached(compute, cache: Path):
    """``compute`` (tokensurgeon's ``compute_new_embeddings``) with every row it returns kept in ``cache``.

    Rows are kept per token, not per batch: tokensurgeon's batches follow the tokenizer's vocabulary
    order, which a fast tokenizer gives in a different order in every process."""
    import torch

    times_path = cache / "seconds.json"
    times = json.loads(times_path.read_text()) if times_path.is_file() else {}
    rows: dict[str, torch.Tensor] = {}
    parts = sorted(cache.glob("part-*.pt"))
    for part in parts:
        saved = torch.load(part, weights_only=True)
        rows.update(zip(saved["keys"], saved["rows"], strict=True))
    made = [len(parts)]   # parts on disk: the next one's number (a run killed before seconds.json was written has one more)

    def wrapper(*args, target_tokens, is_lm_head, **kwargs):
        keys = [_key(t, is_lm_head) for t in target_tokens]
        todo = [t for t, k in zip(target_tokens, keys, strict=True) if k not in rows]
        if todo:
            t0 = time.time()
            out = compute(*args, target_tokens=todo, is_lm_head=is_lm_head, **kwargs).detach().cpu()
            new = [_key(t, is_lm_head) for t in todo]
            part = cache / f"part-{made[0]:05d}.pt"
            made[0] += 1
            tmp = part.with_name(part.name + ".tmp")
            torch.save({"keys": new, "rows": out.clone()}, tmp)
            os.replace(tmp, part)
            rows.update(zip(new, out, strict=True))
            times[part.name] = round(time.time() - t0, 2)
            _write_json(times_path, times)
        orig_embed = kwargs.get("orig_embed", args[0] if args else None)   # where tokensurgeon computes
        result = torch.stack([rows[k] for k in keys])
        return result.to(orig_embed.device) if isinstance(orig_embed, torch.Tensor) else result

    return wrapper


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", type=Path, required=True, help="folder for the finished batches (made if absent)")
    p.add_argument("--seconds", action="store_true", help="print the compute seconds saved so far and stop")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then tokensurgeon's own arguments")
    a = p.parse_args()
    if a.seconds:
        times_path = a.cache / "seconds.json"
        times = json.loads(times_path.read_text()) if times_path.is_file() else {}
        print(f"{len(times)} parts, {sum(times.values()):.0f} s")
        return
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    a.cache.mkdir(parents=True, exist_ok=True)
    fingerprint = a.cache / "args.json"
    if fingerprint.is_file() and json.loads(fingerprint.read_text()) != args:
        sys.exit(f"{fingerprint}: this cache was made with other arguments ({fingerprint.read_text().strip()}); "
                 "use another --cache")
    _write_json(fingerprint, args)

    from mergekit.scripts import tokensurgeon

    tokensurgeon.compute_new_embeddings = cached(tokensurgeon.compute_new_embeddings, a.cache)
    tokensurgeon.main(args, prog_name="mergekit-tokensurgeon")


if __name__ == "__main__":
    main()
