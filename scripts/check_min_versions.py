#!/usr/bin/env python
"""Load every model, tokenizer and adapter folder under a folder of PAW outputs with the installed
transformers, tokenizers and peft: one line per folder, exit 1 if any fails to load.

Run it in PAW's environment (the newest versions) and in one pinned at the oldest versions PAW
declares, on the same outputs, then compare the two records: token ids must be equal, logits equal
within a tolerance. ``scripts/check_min_versions.sh`` does all of it (environments, outputs, both
runs, the comparison):

    python scripts/check_min_versions.py OUTPUTS --record newest.json       # PAW's .venv
    .venv-min/bin/python scripts/check_min_versions.py OUTPUTS --record oldest.json
    python scripts/check_min_versions.py --compare newest.json oldest.json

Per folder it records: the tokenizer's ids for a few texts (with and without special tokens) and
their decoding, as ``AutoTokenizer`` and ``PreTrainedTokenizerFast`` open the folder, both checked
against the ``tokenizers`` library on ``tokenizer.json``; the model's last-position logits for the
ids 1..8; an adapter's logits on its base (``PeftModel``). It imports nothing of PAW (the pinned
environment has only torch, transformers, tokenizers, safetensors and peft).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

TEXTS = (
    "Hello world, tokenizers compress text.",   # must decode back to itself
    "a , b don 't it 's ok ?",                  # spaces before punctuation: clean-up rules
    "  two  spaces\ttab\n\nnew lines",
    "Ünïcode café 日本語 🙂 12345 3.14",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
SKIP_PARTS = ("checkpoint-", ".")  # training checkpoints and hidden work folders
GENERIC_TOKENIZERS = ("PreTrainedTokenizerFast", "TokenizersBackend")  # read tokenizer.json as it is
ATOL = RTOL = 1e-4  # logits of one torch build under two transformers versions: float noise only


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


def _encodings(tok) -> dict:
    specials = [t for t in (tok.bos_token, tok.eos_token) if t]
    texts = [*TEXTS, " ".join([*specials, TEXTS[0]])] if specials else list(TEXTS)
    out = {"ids": [], "ids_special": [], "decoded": []}
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        out["ids"].append(ids)
        out["ids_special"].append(tok(text)["input_ids"])
        out["decoded"].append(tok.decode(ids))
    return out


def check_tokenizer(folder: Path) -> dict:
    """Both ways transformers opens the folder, against the ``tokenizers`` library on tokenizer.json."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    auto = AutoTokenizer.from_pretrained(folder)
    fast = PreTrainedTokenizerFast.from_pretrained(folder) if (folder / "tokenizer.json").is_file() else auto
    got = _encodings(fast)
    if got["decoded"][0] != TEXTS[0]:
        raise ValueError(f"decode(encode(text)) = {got['decoded'][0]!r}")
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
        for text, ids in zip(TEXTS, got["ids"][:len(TEXTS)], strict=True):
            if raw.encode(text, add_special_tokens=False).ids != ids:
                raise ValueError(f"ids of {text!r} differ from the tokenizers library's")
    record = {"size": len(fast), "specials": {r: getattr(fast, f"{r}_token_id") for r in ("bos", "eos", "pad", "unk")},
              **got, "auto_class": type(auto).__name__}
    auto_got = _encodings(auto)
    if auto_got != got:
        if type(auto).__name__ in GENERIC_TOKENIZERS or _declared_class(folder) not in GENERIC_TOKENIZERS:
            raise ValueError(f"AutoTokenizer ({type(auto).__name__}) gives other ids than tokenizer.json")
        # transformers chose a model-specific class over the folder's declared one (transformers 5:
        # config.json's model_type qwen2 -> Qwen2Tokenizer, which rebuilds Qwen's pre-tokenizer)
        record["auto_overrides"] = {"class": type(auto).__name__, "model_type": _model_type(folder)}
    return record


def _declared_class(folder: Path) -> str | None:
    path = folder / "tokenizer_config.json"
    return json.loads(path.read_text(encoding="utf-8")).get("tokenizer_class") if path.is_file() else None


def _model_type(folder: Path) -> str | None:
    path = folder / "config.json"
    return json.loads(path.read_text(encoding="utf-8")).get("model_type") if path.is_file() else None


def check_model(folder: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    if (folder / "generation_config.json").is_file():
        from transformers import GenerationConfig

        GenerationConfig.from_pretrained(folder)
    return {"class": type(model).__name__, "logits": _logits(model)}


def check_adapter(folder: Path, root: Path) -> dict:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    base_path = next((p for p in (Path(base), root / base, folder.parent / base) if p.is_dir()), None)
    if base_path is None:
        raise ValueError(f"its base {base!r} is not a folder here")
    model = AutoModelForCausalLM.from_pretrained(base_path, torch_dtype=torch.float32).eval()
    before = _logits(model)
    model = PeftModel.from_pretrained(model, folder).eval()
    after = _logits(model)
    return {"base": base, "logits": after, "change": max(abs(a - b) for a, b in zip(after, before, strict=True))}


def _logits(model) -> list[float]:
    """The last position's logits for the ids 1..8."""
    import torch

    with torch.no_grad():
        ids = torch.arange(1, 9).unsqueeze(0) % model.config.vocab_size
        logits = model(input_ids=ids).logits[0, -1].float()
    if not torch.isfinite(logits).all():
        raise ValueError("non-finite logits")
    return [round(float(x), 6) for x in logits]


def check(folder: Path, root: Path) -> dict:
    record: dict = {}
    if any((folder / f).is_file() for f in TOKENIZER_FILES):
        record["tokenizer"] = check_tokenizer(folder)
    if (folder / "config.json").is_file() and any((folder / w).is_file() for w in WEIGHTS):
        record["model"] = check_model(folder)
    if (folder / "adapter_config.json").is_file():
        record["adapter"] = check_adapter(folder, root)
    return record


def line(name: str, record: dict) -> str:
    if "error" in record:
        return f"FAIL {name}: {record['error']}"
    parts = []
    if tok := record.get("tokenizer"):
        note = f" (AutoTokenizer: {tok['auto_overrides']['class']}, other ids)" if "auto_overrides" in tok else ""
        parts.append(f"tokenizer {tok['size']} ids{note} ids={tok['ids'][0][:6]}")
    for kind in ("model", "adapter"):
        if got := record.get(kind):
            logits = got["logits"]
            what = got["class"] if kind == "model" else f"adapter on {got['base']} (change {got['change']:.4f})"
            parts.append(f"{what} logits mean {sum(logits) / len(logits):.6f} max {max(logits):.6f}")
    return f"ok   {name}: " + "; ".join(parts)


def run(root: Path) -> dict:
    import warnings

    import transformers
    from transformers.utils import logging

    warnings.filterwarnings("ignore", category=FutureWarning)  # deprecation notices, one per load
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    versions = {"transformers": transformers.__version__}
    for name in ("tokenizers", "peft", "safetensors", "torch"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            pass
    print(" ".join(f"{k} {v}" for k, v in versions.items()))
    records = {}
    for folder in folders(root):
        name = folder.relative_to(root).as_posix() or "."
        try:
            record = check(folder, root)
        except Exception as err:  # report every folder, then fail
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            record = {"error": f"{type(err).__name__}: {first[:200]}"}
        if record:
            records[name] = record
            print(line(name, record), flush=True)
    return {"versions": versions, "folders": records}


def compare(a: dict, b: dict, *, atol: float = ATOL, rtol: float = RTOL) -> tuple[list[str], list[str]]:
    """``(differences, notes)`` between two records of the same outputs: a folder one lacks or fails,
    other token ids, decodings or special tokens, logits beyond ``atol + rtol * |x|``. A transformers
    that opens a folder with a model-specific tokenizer class is a note, not a difference."""
    diffs, notes = [], []
    for name in sorted(set(a["folders"]) | set(b["folders"])):
        ra, rb = a["folders"].get(name), b["folders"].get(name)
        if ra is None or rb is None or "error" in ra or "error" in rb:
            why = [f"{side}: {'missing' if r is None else r['error']}" for side, r in (("first", ra), ("second", rb))
                   if r is None or "error" in r]
            diffs.append(f"{name}: " + "; ".join(why))
            continue
        if set(ra) != set(rb):
            diffs.append(f"{name}: read as {sorted(ra)} and {sorted(rb)}")
            continue
        if "tokenizer" in ra:
            ta, tb = ra["tokenizer"], rb["tokenizer"]
            for key in ("size", "specials", "ids", "ids_special", "decoded"):
                if ta[key] != tb[key]:
                    diffs.append(f"{name}: tokenizer {key} differ: {_first_difference(ta[key], tb[key])}")
            for tok, versions in ((ta, a["versions"]), (tb, b["versions"])):
                if over := tok.get("auto_overrides"):
                    notes.append(f"{name}: transformers {versions['transformers']} AutoTokenizer opens it as "
                                 f"{over['class']} (model_type {over['model_type']}), whose ids differ from "
                                 "tokenizer.json's; PreTrainedTokenizerFast reads it as written")
        for kind in ("model", "adapter"):
            if kind not in ra:
                continue
            la, lb = ra[kind]["logits"], rb[kind]["logits"]
            if len(la) != len(lb):
                diffs.append(f"{name}: {kind} has {len(la)} and {len(lb)} logits")
                continue
            worst = max((abs(x - y) - rtol * max(abs(x), abs(y)), i) for i, (x, y) in enumerate(zip(la, lb, strict=True)))
            if worst[0] > atol or any(math.isnan(x) for x in la + lb):
                i = worst[1]
                diffs.append(f"{name}: {kind} logit {i} is {la[i]} and {lb[i]}")
            if kind == "model" and ra[kind]["class"] != rb[kind]["class"]:
                diffs.append(f"{name}: model class {ra[kind]['class']} and {rb[kind]['class']}")
    return diffs, notes


def _first_difference(x, y) -> str:
    """The first text whose value differs, for lists with one value per text."""
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        i = next(i for i, (p, q) in enumerate(zip(x, y, strict=True)) if p != q)
        x, y = x[i], y[i]
        return f"text {i}: {str(x)[:80]} vs {str(y)[:80]}"
    return f"{str(x)[:80]} vs {str(y)[:80]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, nargs="?", help="a folder of PAW outputs (searched recursively)")
    parser.add_argument("--record", type=Path, help="write what was read (ids, logits) to this JSON file")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("FIRST", "SECOND"),
                        help="compare two --record files: exit 1 on any difference")
    parser.add_argument("--atol", type=float, default=ATOL, help="logits: absolute tolerance (plus --rtol x |x|)")
    parser.add_argument("--rtol", type=float, default=RTOL, help="logits: relative tolerance")
    args = parser.parse_args(argv)
    if args.compare:
        first, second = (json.loads(p.read_text(encoding="utf-8")) for p in args.compare)
        diffs, notes = compare(first, second, atol=args.atol, rtol=args.rtol)
        names = [" ".join(f"{k} {v}" for k, v in r["versions"].items()) for r in (first, second)]
        print(f"compared {len(first['folders'])} folders: [{names[0]}] against [{names[1]}]")
        for note in notes:
            print(f"note {note}")
        for diff in diffs:
            print(f"DIFF {diff}")
        print("same ids, logits within tolerance" if not diffs else f"{len(diffs)} difference(s)")
        return 1 if diffs else 0
    if args.root is None:
        parser.error("give a folder of outputs, or --compare FIRST SECOND")
    result = run(args.root)
    if args.record:
        args.record.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 1 if any("error" in r for r in result["folders"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
