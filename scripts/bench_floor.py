#!/usr/bin/env python
"""The I/O floor of a benchmark: read every input tensor once and write the output's bytes once.

Run by ``bench_merge.py``, ``bench_task_vectors.py`` and ``bench_extract.py`` as its own child process, under the same
thread settings as the tool it is compared with. Every tensor of every input is read once with
PAW's own lazy reader (``paw.io.checkpoint``: one ``readinto`` per tensor into a fresh buffer, as
``paw merge`` and ``paw task-vectors`` read), in the first input's tensor order, and a file of the
output's size is written to ``--out`` (on the disk the tool writes to):

- a merge's output has the base's tensors in the base's dtype, so by default the first input's
  tensors are written back, byte for byte, one after the other;
- ``--bytes N`` writes N bytes instead (the size of a task-vector report), in 16 MB pieces.

No computation, no check, no threads: what any tool doing this job must at least spend.

    python scripts/bench_floor.py --inputs base ft0 ft1 --out /tmp/floor.bin
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def floor(inputs: list[Path], out: Path, nbytes: int | None = None) -> int:
    """Read every tensor of ``inputs``; write the first input's tensors (or ``nbytes`` bytes) to ``out``."""
    import torch

    from paw.io.checkpoint import open_checkpoint

    ckpts = [open_checkpoint(p) for p in inputs]
    written = 0
    with open(out, "wb") as f:
        for name in ckpts[0]:
            tensor = ckpts[0][name]
            if nbytes is None:
                written += f.write(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
            del tensor
            for ckpt in ckpts[1:]:
                if name in ckpt:
                    ckpt[name]  # read and dropped
        piece = bytes(16 << 20) if nbytes else b""
        while nbytes is not None and written < nbytes:
            written += f.write(piece[:nbytes - written])
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", nargs="+", type=Path, required=True, help="model folders; the first sets the order")
    ap.add_argument("--out", type=Path, required=True, help="the file to write (removed by the caller)")
    ap.add_argument("--bytes", type=int, default=None, help="write this many bytes instead of the first input's tensors")
    args = ap.parse_args()
    written = floor(args.inputs, args.out, args.bytes)
    print(f"floor: read {len(args.inputs)} checkpoint(s), wrote {written} bytes to {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())  # run from the repository root: import paw from there
    sys.exit(main())
