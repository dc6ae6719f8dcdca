"""Read and write byte-level BPE tokenizers in the three common spellings.

* PAW ``.model``: text, first line ``paw-bpe v1``, then the pattern, the special tokens, the order
  of the 256 single bytes and one merge per line (``left_rank right_rank``), like minbpe's file.
  ``PREFIX.vocab`` beside it is for people only and is never read back.
* tiktoken rank file: one ``base64(token) rank`` per line (``cl100k_base.tiktoken``).
* Hugging Face ``tokenizer.json`` whose model is a byte-level BPE (GPT-2, Llama-3, Qwen2 ...).

All of them come back as a :class:`BpeFile`: ``mergeable_ranks`` ``{token_bytes: rank}`` in
tiktoken's sense, so one encoder serves them all. This is the one reader of these formats:
:func:`paw.io.tokenizer.open_tokenizer` sniffs files with :func:`sniff_format` and reads rank
tables through :func:`read_bpe`, so both see the same ranks, pattern and special tokens.

A rank table becomes a ``tokenizer.json`` in one place, :func:`tokenizer_json_doc`.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path

from paw.bpe.bytelevel import str_to_token, token_to_str
from paw.bpe.patterns import PATTERNS, to_oniguruma
from paw.bpe.ranks import all_merges, merges_from_ranks, ranks_from_merges
from paw.errors import PawError
from paw.io.atomic import atomic_file, atomic_outputs

MODEL_VERSION = "paw-bpe v1"


@dataclass
class BpeFile:
    """A byte-level BPE as tiktoken sees it.

    ``mergeable_ranks``: ``{b"!": 0, ..., b" the": 279, ...}``; ``pattern``: pre-tokenization regex
    or ``None``; ``special_tokens``: ``{"<|endoftext|>": 100257}``; ``kind``: ``'paw'``,
    ``'tiktoken'`` or ``'hf'``; ``merges``: the learned merge list when the file has one.
    """

    mergeable_ranks: dict[bytes, int]
    pattern: str | None
    special_tokens: dict[str, int]
    kind: str
    merges: list[tuple[bytes, bytes]] | None = field(default=None, repr=False)


def read_bpe(path: str | Path) -> BpeFile:
    """Open a PAW ``.model``, a tiktoken rank file or a byte-level BPE ``tokenizer.json``.

    A folder is read as the ``tokenizer.json`` inside it.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    return _READERS[sniff_format(path)](path)


def sniff_format(path: Path) -> str:
    """``'paw'``, ``'hf'`` (JSON) or ``'tiktoken'`` from a file's first bytes.

    Anything that is neither a PAW model nor JSON is taken for a rank file, whose reader names the
    first line that is not ``base64 rank``.
    """
    if not path.is_file():
        raise PawError("tokenizer file not found", path=path)
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise PawError(f"cannot read: {exc.strerror}", path=path) from None
    if head.startswith(MODEL_VERSION.encode()):
        return "paw"
    if head.startswith(b"paw-bpe"):
        raise PawError(f"unsupported PAW model version {head.splitlines()[0].decode(errors='replace')!r}", path=path)
    if head.lstrip().startswith(b"{"):
        return "hf"
    return "tiktoken"


# ---------------------------------------------------------------- PAW .model


def write_paw_model(prefix: str | Path, *, mergeable_ranks: dict[bytes, int], pattern: str | None,
                    special_tokens: dict[str, int], merges: list[tuple[bytes, bytes]] | None = None,
                    overwrite: bool = True, inputs=(), extra_dir: str | Path | None = None,
                    write_extra=None) -> Path:
    """Write ``PREFIX.model`` (read back by :func:`read_bpe`) and ``PREFIX.vocab`` (for people), as one set.

    ``merges`` defaults to the ones recovered from the ranks. Single bytes must hold ranks 0..255
    and the merges must rebuild ``mergeable_ranks`` exactly; otherwise the file could not
    round-trip and a :class:`PawError` says so. Both files (and ``extra_dir``, a folder beside them
    that ``write_extra(folder)`` fills, e.g. the ``--export-hf`` copy) appear together or not at
    all (:func:`paw.io.atomic.atomic_outputs`); ``overwrite=False`` refuses existing ones.
    """
    prefix = Path(prefix)
    order = _single_byte_order(mergeable_ranks)
    merges = merges_from_ranks(mergeable_ranks) if merges is None else merges
    if ranks_from_merges(merges, order) != mergeable_ranks:
        raise PawError("these ranks cannot be written as a merge list (ranks are not contiguous or a "
                       "token cannot be built by BPE)", path=f"{prefix}.model")
    ranks = ranks_from_merges(merges, order)
    lines = [MODEL_VERSION, f"pattern {json.dumps(pattern, ensure_ascii=False)}",
             f"special_tokens {json.dumps(special_tokens, ensure_ascii=False, sort_keys=True)}",
             "bytes " + " ".join(map(str, order)), f"merges {len(merges)}"]
    lines += [f"{ranks[left]} {ranks[right]}" for left, right in merges]
    model, vocab = Path(f"{prefix}.model"), Path(f"{prefix}.vocab")
    outputs = [model, vocab, *([Path(extra_dir)] if extra_dir is not None else [])]
    with atomic_outputs(outputs, overwrite=overwrite, inputs=inputs) as staging:
        (staging / model.name).write_text("\n".join(lines) + "\n", encoding="utf-8", newline="\n")
        (staging / vocab.name).write_text(_vocab_text(ranks, merges, special_tokens), encoding="utf-8",
                                          newline="\n")
        if extra_dir is not None:
            (staging / Path(extra_dir).name).mkdir()
            write_extra(staging / Path(extra_dir).name)
    return model


def _single_byte_order(ranks: dict[bytes, int]) -> tuple[int, ...]:
    singles = sorted((rank, token[0]) for token, rank in ranks.items() if len(token) == 1)
    if [rank for rank, _ in singles] != list(range(256)):
        raise PawError("a byte-level BPE needs all 256 single bytes at ranks 0..255")
    return tuple(b for _, b in singles)


def _vocab_text(ranks: dict[bytes, int], merges, special_tokens: dict[str, int]) -> str:
    """``[ the] 279  <- [ t] [he]``: one token per line, printable, with the merge that made it."""
    made_by = {}
    for left, right in merges:
        made_by.setdefault(left + right, (left, right))

    def show(token: bytes) -> str:  # printable text as is, control characters and broken UTF-8 escaped
        text = token.decode("utf-8", errors="backslashreplace")
        return "[" + "".join(c if c.isprintable() else repr(c)[1:-1] for c in text) + "]"

    out = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        pair = made_by.get(token)
        out.append(f"{rank}\t{show(token)}" + (f"\t<- {show(pair[0])} {show(pair[1])}" if pair else ""))
    out += [f"{tid}\t{name}\t(special)" for name, tid in sorted(special_tokens.items(), key=lambda kv: kv[1])]
    return "\n".join(out) + "\n"


def _read_paw(path: Path) -> BpeFile:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = dict(line.split(" ", 1) for line in lines[1:5])
        pattern = json.loads(header["pattern"])
        specials = json.loads(header["special_tokens"])
        order = tuple(int(b) for b in header["bytes"].split())
        n = int(header["merges"])
        by_rank = [bytes([b]) for b in order]
        known = set(by_rank)
        merges = []
        for line in lines[5:5 + n]:
            left, right = (by_rank[int(x)] for x in line.split())
            merges.append((left, right))
            if left + right not in known:  # a merge that rebuilds a known token adds no rank
                by_rank.append(left + right)
                known.add(left + right)
    except (ValueError, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise PawError(f"malformed PAW model file ({type(exc).__name__}: {exc})", path=path) from None
    if len(order) != 256 or len(merges) != n:
        raise PawError("malformed PAW model file (truncated)", path=path)
    return BpeFile(ranks_from_merges(merges, order), pattern, specials, "paw", merges)


# ---------------------------------------------------------------- tiktoken rank file

# A rank file holds neither pattern nor special tokens; tiktoken's own encodings are known by name.
TIKTOKEN_PATTERNS = {"cl100k_base": "gpt4", "o200k_base": "o200k", "r50k_base": "gpt2", "p50k_base": "gpt2",
                     "gpt2": "gpt2"}
TIKTOKEN_SPECIALS: dict[str, dict[str, int]] = {
    "cl100k_base": {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    "r50k_base": {"<|endoftext|>": 50256}, "p50k_base": {"<|endoftext|>": 50256}, "gpt2": {"<|endoftext|>": 50256},
}


def _read_tiktoken(path: Path) -> BpeFile:
    ranks = {}
    for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise PawError(f"line {lineno} is not 'base64-token rank' (not a PAW model, tiktoken rank "
                           "file or tokenizer.json)", path=path) from None
    if not ranks:
        raise PawError("empty tiktoken rank file", path=path)
    name = path.name.split(".")[0]
    pattern = PATTERNS[TIKTOKEN_PATTERNS[name]] if name in TIKTOKEN_PATTERNS else None
    specials = {**TIKTOKEN_SPECIALS.get(name, {}), **_sidecar_specials(path)}
    return BpeFile(ranks, pattern, specials, "tiktoken")


def _sidecar_specials(path: Path) -> dict[str, int]:
    """Added tokens of a rank file from the ``tokenizer_config.json`` beside it, if there is one."""
    config = path.parent / "tokenizer_config.json"
    if not config.is_file():
        return {}
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PawError(f"not valid JSON ({exc})", path=config) from None
    decoder = (data.get("added_tokens_decoder") if isinstance(data, dict) else None) or {}
    return {v["content"]: int(k) for k, v in decoder.items() if isinstance(v, dict) and "content" in v}


def write_tiktoken_ranks(path: str | Path, mergeable_ranks: dict[bytes, int]) -> Path:
    """Write tiktoken's own format (``tiktoken.load.load_tiktoken_bpe`` reads it)."""
    with atomic_file(path, encoding="ascii", newline="\n") as f:
        for token, rank in sorted(mergeable_ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    return Path(path)


# ---------------------------------------------------------------- Hugging Face tokenizer.json


def _read_hf(path: Path) -> BpeFile:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PawError(f"not valid JSON: {exc}", path=path) from None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        kind = model.get("type") if isinstance(model, dict) else model
        raise PawError(f"tokenizer.json model is {kind!r}, not a byte-level BPE", path=path)
    # added tokens are special tokens; many files (GPT-2, PAW's) also list them in the model vocabulary
    try:
        specials = {t["content"]: int(t["id"]) for t in data.get("added_tokens", [])}
    except (KeyError, TypeError, ValueError):
        raise PawError("tokenizer.json 'added_tokens' is not a list of {content, id} objects", path=path) from None
    try:
        ranks = {str_to_token(tok): int(i) for tok, i in model["vocab"].items() if specials.get(tok) != i}
    except KeyError:
        raise PawError("tokenizer.json vocabulary is not byte-level (a character is outside the GPT-2 "
                       "byte alphabet; SentencePiece-style BPE is not supported)", path=path) from None
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
    try:
        merges_b = [(str_to_token(a), str_to_token(b)) for a, b in merges]
    except (KeyError, ValueError):
        raise PawError("tokenizer.json merges are not byte-level", path=path) from None
    return BpeFile(ranks, pretokenizer_pattern(data.get("pre_tokenizer"), path), specials, "hf", merges_b)


def pretokenizer_pattern(pre: dict | None, path: str | Path = "tokenizer.json") -> str | None:
    """The regex of a ``Split`` pre-tokenizer, or GPT-2's for ``ByteLevel(use_regex=True)``.

    A regex PAW wrote for Oniguruma (:func:`paw.bpe.patterns.to_oniguruma`) comes back in its
    registered spelling, so cl100k's ``\\p{N}{1,3}+`` survives a round trip through ``tokenizer.json``.
    """
    if not isinstance(pre, dict):
        return None
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    for step in steps:
        if step.get("type") == "Split":
            pattern = step.get("pattern", {})
            if "Regex" in pattern:  # give back the registered spelling of a pattern PAW wrote
                known = [p for p in PATTERNS.values() if p and to_oniguruma(p) == pattern["Regex"]]
                return known[0] if known else pattern["Regex"]
            raise PawError("Split pre-tokenizer with a plain-string pattern is not supported", path=path)
        if step.get("type") == "ByteLevel" and step.get("use_regex", True):
            return PATTERNS["gpt2"]
    return None


def write_hf_tokenizer_json(path: str | Path, *, mergeable_ranks: dict[bytes, int], pattern: str | None,
                            special_tokens: dict[str, int]) -> Path:
    """Write :func:`tokenizer_json_doc` atomically; ``tokenizers`` and ``transformers`` load it."""
    data = tokenizer_json_doc(mergeable_ranks, pattern, special_tokens, path=path)
    with atomic_file(path, encoding="utf-8", newline="\n") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
    return Path(path)


def tokenizer_json_doc(mergeable_ranks: dict[bytes, int], pattern: str | None, special_tokens: dict[str, int],
                       *, path: str | Path = "tokenizer.json") -> dict:
    """A byte-level BPE ``tokenizer.json`` document that encodes exactly like tiktoken with the same ranks.

    The merge list holds every split of every token whose halves are tokens
    (:func:`paw.bpe.ranks.all_merges`, as transformers' TikTokenConverter does), not only the one
    merge that built each token: tiktoken merges any adjacent pair whose join is a token, so with
    ranks ``ca, ac, acac, cac`` it encodes ``aacac`` as ``a|acac`` through ``(a, cac)``, a split that
    never builds ``acac`` from its bytes. ``ignore_merges`` is on, so a piece that is itself a token
    stays whole, as in tiktoken. ``pattern=None`` keeps the whole text as one piece.
    """
    vocab = {token_to_str(tok): rank for tok, rank in sorted(mergeable_ranks.items(), key=lambda kv: kv[1])}
    # `tokenizers` ignores the ids in "added_tokens" and numbers added tokens after the vocabulary,
    # unless the content is in the model vocabulary: list special tokens there, under their own ids
    for content, tid in special_tokens.items():
        if vocab.get(content, tid) != tid:
            raise PawError(f"special token {content!r} is spelled like the ordinary token {vocab[content]}",
                           path=path)
        vocab[content] = tid
    merges = [[token_to_str(a), token_to_str(b)] for a, b in all_merges(mergeable_ranks)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    split = {"type": "Split", "pattern": {"Regex": pattern and to_oniguruma(pattern)}, "behavior": "Isolated", "invert": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": tid, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}
                         for tok, tid in sorted(special_tokens.items(), key=lambda kv: kv[1])],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]} if pattern else byte_level,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }


_READERS = {"paw": _read_paw, "tiktoken": _read_tiktoken, "hf": _read_hf}  # sniff_format -> reader


# ---------------------------------------------------------------- corpora and reports


def read_text_files(paths: list[str | Path]) -> list[str]:
    """The UTF-8 text of each file; invalid UTF-8 is refused with the byte offset of the fault."""
    texts = []
    for path in map(Path, paths):
        if not path.is_file():
            raise PawError("input file not found", path=path)
        data = path.read_bytes()
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise PawError(f"not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})", path=path) from None
    return texts


def write_bar_chart(path: str | Path, values: dict[str, dict[str, float]], *, ylabel: str, title: str) -> Path:
    """Grouped bars: ``values[group][series]`` (groups on the x axis, one colour per series)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(values)
    series = list(dict.fromkeys(s for g in groups for s in values[g]))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(groups) * max(1, len(series)) ** 0.5, 4), dpi=120)
    for k, name in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        ys = [values[g].get(name, 0.0) for g in groups]
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from paw.io.reports import save_figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=fig.dpi)
    plt.close(fig)
    return path
