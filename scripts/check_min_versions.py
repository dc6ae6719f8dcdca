#!/usr/bin/env python
"""Load every model, tokenizer and adapter folder under a folder of PAW outputs with the installed
transformers (and peft): one line per folder, exit 1 if any fails.

Run it in the normal environment and in one pinned at the oldest versions PAW declares, on the same
outputs; the lines hold the tokenizer's ids for a fixed text and a fingerprint of the model's
logits, so the two runs' outputs can be compared with ``diff`` (after the version line):

    paw zoo build tiny && paw merge --base tiny/base --models tiny/finetune --method linear -o merged
    python scripts/check_min_versions.py .                            # transformers 5.x
    python -m venv /tmp/old && /tmp/old/bin/pip install torch==2.13.0 transformers==4.57.6 peft
    /tmp/old/bin/python scripts/check_min_versions.py .               # transformers 4.57

It imports nothing of PAW (the pinned environment need not have PAW's other dependencies): only
the standard library, torch, transformers, and peft for adapter folders.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TEXT = "Hello world, tokenizers compress text."
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
SKIP_PARTS = ("checkpoint-", ".")  # training checkpoints and hidden work folders


def folders(root: Path) -> list[Path]:
    """Folders under ``root`` (``root`` included) that hold a tokenizer, a model or an adapter."""
    marks = (*TOKENIZER_FILES, "config.json", "adapter_config.json")
    found = []
    for path in sorted([root, *root.rglob("*")]):
        rel = path.relative_to(root).parts
        if not path.is_dir() or any(p.startswith(SKIP_PARTS) for p in rel):
            continue
        if any((path / m).is_file() for m in marks):
            found.append(path)
    return found


def check_tokenizer(folder: Path) -> str:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    if tok.decode(ids) != TEXT:
        raise ValueError(f"decode(encode(text)) = {tok.decode(ids)!r}")
    if (folder / "tokenizer.json").is_file():  # the tokenizers library on the same file: the same ids
        from tokenizers import Tokenizer

        raw = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(TEXT, add_special_tokens=False).ids
        if raw != ids:
            raise ValueError(f"ids {ids[:8]}... differ from tokenizers' {raw[:8]}...")
    specials = ",".join(f"{r}={getattr(tok, r + '_token')}" for r in ("bos", "eos", "pad") if getattr(tok, r + "_token"))
    return f"tokenizer {type(tok).__name__} {len(tok)} ids [{specials}] ids={ids[:6]}"


def check_model(folder: Path) -> str:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    return f"model {type(model).__name__} {_fingerprint(model)}"


def check_adapter(folder: Path, root: Path) -> str:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    base_path = next((p for p in (Path(base), root / base, folder.parent / base) if p.is_dir()), None)
    if base_path is None:
        raise ValueError(f"its base {base!r} is not a folder here")
    model = AutoModelForCausalLM.from_pretrained(base_path, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(model, folder).eval()
    return f"adapter on {base} {_fingerprint(model)}"


def _fingerprint(model) -> str:
    """Mean and max of the last position's logits for ids 1..8: equal across versions, equal numbers."""
    import torch

    with torch.no_grad():
        ids = torch.arange(1, 9).unsqueeze(0) % model.config.vocab_size
        logits = model(input_ids=ids).logits[0, -1]
    if not torch.isfinite(logits).all():
        raise ValueError("non-finite logits")
    return f"logits mean {logits.mean():.6f} max {logits.max():.6f}"


def check(folder: Path, root: Path) -> list[str]:
    parts = []
    if any((folder / f).is_file() for f in TOKENIZER_FILES):
        parts.append(check_tokenizer(folder))
    if (folder / "config.json").is_file() and any((folder / w).is_file() for w in WEIGHTS):
        parts.append(check_model(folder))
    if (folder / "adapter_config.json").is_file():
        parts.append(check_adapter(folder, root))
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a folder of PAW outputs (searched recursively)")
    args = parser.parse_args(argv)
    import transformers
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    versions = [f"transformers {transformers.__version__}"]
    try:
        import peft

        versions.append(f"peft {peft.__version__}")
    except ImportError:
        pass
    print(" ".join(versions))
    failed = 0
    for folder in folders(args.root):
        name = folder.relative_to(args.root).as_posix() or "."
        try:
            parts = check(folder, args.root)
        except Exception as err:  # report every folder, then fail
            failed += 1
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            print(f"FAIL {name}: {type(err).__name__}: {first[:200]}")
            continue
        if parts:
            print(f"ok   {name}: " + "; ".join(parts))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
