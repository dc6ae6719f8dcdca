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

from paw.bytelevel.alphabet import str_to_token, token_to_str
from paw.bytelevel.patterns import PATTERNS, to_oniguruma
from paw.bytelevel.ranks import all_merges, merges_from_ranks, ranks_from_merges
from paw.errors import PawError
from paw.io.atomic import atomic_file, atomic_outputs
from paw.io.reports import save_figure

MODEL_VERSION = "paw-bpe v1"
MAX_TOKEN_ID = 2**32 - 1  # tiktoken's ranks and tokenizers' ids are u32


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
    """Read a ``.model`` file; each fault is refused naming its line.

    Checked: the four header lines, the 256 single bytes (each once), the merge count against the
    lines that follow, each merge's two ranks (tokens already made: a rank is never negative nor
    beyond the tokens so far), nothing after the last merge, special ids apart from the tokens.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise PawError(f"malformed PAW model file (not UTF-8 at byte {exc.start})", path=path) from None
    header = {}
    for lineno, key in enumerate(("pattern", "special_tokens", "bytes", "merges"), start=2):
        name, _, value = (lines[lineno - 1] if lineno <= len(lines) else "").partition(" ")
        if name != key:
            raise PawError(f"malformed PAW model file: line {lineno} should start with {key!r}", path=path)
        header[key] = value
    pattern = _header_json(path, 2, header["pattern"], (str, type(None)))
    specials = _header_json(path, 3, header["special_tokens"], dict)
    order = _byte_order(path, header["bytes"])
    n = _natural(header["merges"])
    if n is None:
        raise PawError(f"malformed PAW model file: line 5: merge count {header['merges'][:40]!r}", path=path)
    body = lines[5:]
    if len(body) < n:
        raise PawError(f"malformed PAW model file (truncated): {n} merges announced, {len(body)} lines follow",
                       path=path)
    if any(line.strip() for line in body[n:]):
        raise PawError(f"malformed PAW model file: line {5 + n + 1}: text after the last of the {n} merges",
                       path=path)
    merges = _paw_merges(path, body[:n], order)
    ranks = ranks_from_merges(merges, order)
    _check_specials(path, ranks, specials)
    return BpeFile(ranks, pattern, specials, "paw", merges)


def _header_json(path: Path, lineno: int, text: str, kind):
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = ...
    if not isinstance(value, kind):
        raise PawError(f"malformed PAW model file: line {lineno} is not the JSON it should hold", path=path)
    return value


def _byte_order(path: Path, text: str) -> tuple[int, ...]:
    items = text.split()
    values = [_natural(x, 255) for x in items]
    if len(values) != 256 or None in values or len(set(values)) != 256:
        raise PawError("malformed PAW model file: line 4 must list each of the bytes 0..255 once", path=path)
    return tuple(values)


def _natural(text: str, limit: int = MAX_TOKEN_ID) -> int | None:
    """``int(text)`` for ASCII digits naming ``0..limit``, else ``None`` (no sign, no ``'²'``, no 5000 digits)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(limit)) or int(text) > limit:
        return None
    return int(text)


def _paw_merges(path: Path, lines: list[str], order: tuple[int, ...]) -> list[tuple[bytes, bytes]]:
    """``left_rank right_rank`` per line -> byte pairs; a rank must name a token made before the line."""
    by_rank = [bytes([b]) for b in order]
    known = set(by_rank)
    merges = []
    for lineno, line in enumerate(lines, start=6):
        parts = [_natural(x) for x in line.split()]
        if len(parts) != 2 or None in parts:
            raise PawError(f"malformed PAW model file: line {lineno} is not 'left_rank right_rank'", path=path)
        bad = next((x for x in parts if x >= len(by_rank)), None)
        if bad is not None:
            raise PawError(f"line {lineno}: the merge names rank {bad}, which is not a token of the vocabulary "
                           f"(ranks 0..{len(by_rank) - 1} exist at that point)", path=path)
        left, right = by_rank[parts[0]], by_rank[parts[1]]
        merges.append((left, right))
        if left + right not in known:  # a merge that rebuilds a known token adds no rank
            by_rank.append(left + right)
            known.add(left + right)
    return merges


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
    """``base64(token) rank`` per line; a duplicate token or rank, an empty token, a rank outside
    ``0..2**32-1`` or a missing single byte is refused naming the line (tiktoken would keep the last
    of two duplicates silently, or panic on text holding a missing byte)."""
    ranks: dict[bytes, int] = {}
    line_of_rank: dict[int, int] = {}
    for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            token = base64.b64decode(token, validate=True)
            if not rank.isdigit():
                raise ValueError
            rank = int(rank)
        except (ValueError, binascii.Error):
            raise PawError(f"line {lineno} is not 'base64-token rank' (not a PAW model, tiktoken rank "
                           "file or tokenizer.json)", path=path) from None
        _check_rank_line(path, lineno, token, rank, ranks, line_of_rank)
        ranks[token] = rank
        line_of_rank[rank] = lineno
    if not ranks:
        raise PawError("empty tiktoken rank file", path=path)
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise PawError(f"{len(missing)} of the 256 single bytes are not tokens (first: byte {missing[0]}); a "
                       "byte-level BPE needs all of them", path=path)
    name = path.name.split(".")[0]
    pattern = PATTERNS[TIKTOKEN_PATTERNS[name]] if name in TIKTOKEN_PATTERNS else None
    specials = {**TIKTOKEN_SPECIALS.get(name, {}), **_sidecar_specials(path)}
    _check_specials(path, ranks, specials)
    return BpeFile(ranks, pattern, specials, "tiktoken")


def _check_rank_line(path: Path, lineno: int, token: bytes, rank: int, ranks: dict[bytes, int],
                     line_of_rank: dict[int, int]) -> None:
    if not token:
        raise PawError(f"line {lineno}: an empty token (a token is at least one byte)", path=path)
    if rank > MAX_TOKEN_ID:
        raise PawError(f"line {lineno}: rank {rank} is above {MAX_TOKEN_ID} (token ids are 32-bit)", path=path)
    if token in ranks:
        raise PawError(f"line {lineno}: token {token!r} already has rank {ranks[token]}", path=path)
    if rank in line_of_rank:
        raise PawError(f"line {lineno}: rank {rank} is already the rank of the token on line "
                       f"{line_of_rank[rank]}", path=path)


def _check_specials(path: Path, ranks: dict[bytes, int], specials: dict[str, int]) -> None:
    """Special ids are distinct 32-bit ids that no ordinary token holds."""
    owner = {rank: token for token, rank in ranks.items()}
    seen: dict[int, str] = {}
    for content, tid in specials.items():
        if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid <= MAX_TOKEN_ID:
            raise PawError(f"special token {content!r} has id {tid!r}, not an integer in 0..{MAX_TOKEN_ID}",
                           path=path)
        if tid in owner:
            raise PawError(f"special token {content!r} has id {tid}, which the ordinary token "
                           f"{owner[tid]!r} already holds", path=path)
        if tid in seen:
            raise PawError(f"special tokens {seen[tid]!r} and {content!r} share id {tid}", path=path)
        seen[tid] = content


def _sidecar_specials(path: Path) -> dict[str, int]:
    """Added tokens of a rank file from the ``tokenizer_config.json`` beside it, if there is one."""
    config = path.parent / "tokenizer_config.json"
    if not config.is_file():
        return {}
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PawError(f"not valid JSON ({exc})", path=config) from None
    decoder = (data.get("added_tokens_decoder") if isinstance(data, dict) else None) or {}
    if not isinstance(decoder, dict):
        raise PawError("'added_tokens_decoder' is not an object", path=config)
    specials = {}
    for key, value in decoder.items():
        if not isinstance(value, dict) or "content" not in value:
            continue
        tid = _natural(key)
        if tid is None or not isinstance(value["content"], str):
            raise PawError(f"'added_tokens_decoder' entry {key[:40]!r} is not 'id: {{content: text}}'", path=config)
        specials[value["content"]] = tid
    return specials


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
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PawError(f"not valid JSON: {str(exc)[:200]}", path=path) from None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        kind = model.get("type") if isinstance(model, dict) else model
        raise PawError(f"tokenizer.json model is {kind!r}, not a byte-level BPE", path=path)
    # added tokens are special tokens; many files (GPT-2, PAW's) also list them in the model vocabulary
    added = data.get("added_tokens", [])
    if not isinstance(added, list) or not all(isinstance(t, dict) and isinstance(t.get("content"), str)
                                              and "id" in t for t in added):
        raise PawError("tokenizer.json 'added_tokens' is not a list of {content, id} objects", path=path)
    specials = {t["content"]: t["id"] for t in added}
    ranks = _hf_ranks(path, model["vocab"], specials)
    _check_specials(path, ranks, specials)
    merges_b = _hf_merges(path, model.get("merges", []), ranks)
    return BpeFile(ranks, pretokenizer_pattern(data.get("pre_tokenizer"), path), specials, "hf", merges_b)


def _hf_ranks(path: Path, vocab: dict, specials: dict[str, int]) -> dict[bytes, int]:
    """The ordinary tokens of ``model.vocab``: byte-level spellings with distinct ids in ``0..2**32-1``."""
    ranks: dict[bytes, int] = {}
    owner: dict[int, str] = {}
    for tok, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= MAX_TOKEN_ID:
            raise PawError(f"tokenizer.json vocabulary gives {tok!r} the id {i!r}, not an integer in "
                           f"0..{MAX_TOKEN_ID}", path=path)
        if specials.get(tok) == i:
            continue
        if i in owner:
            raise PawError(f"tokenizer.json vocabulary gives {owner[i]!r} and {tok!r} the same id {i}", path=path)
        try:
            token = str_to_token(tok)
        except KeyError:
            raise PawError("tokenizer.json vocabulary is not byte-level (a character is outside the GPT-2 "
                           "byte alphabet; SentencePiece-style BPE is not supported)", path=path) from None
        if not token:
            raise PawError(f"tokenizer.json vocabulary holds an empty token (id {i})", path=path)
        ranks[token], owner[i] = i, tok
    return ranks


def _hf_merges(path: Path, merges, ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """``merges[k]`` as byte pairs; both parts and their join must be tokens of the vocabulary
    (``tokenizers`` refuses the file otherwise: ``MergeTokenOutOfVocabulary``)."""
    if not isinstance(merges, list):
        raise PawError("tokenizer.json 'merges' is not a list", path=path)
    out = []
    for k, m in enumerate(merges):
        pair = m.split(" ") if isinstance(m, str) else m
        if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise PawError(f"tokenizer.json merges[{k}] is {m!r}, not two tokens", path=path)
        try:
            left, right = str_to_token(pair[0]), str_to_token(pair[1])
        except KeyError:
            raise PawError(f"tokenizer.json merges[{k}] is not byte-level", path=path) from None
        for part in (left, right, left + right):
            if part not in ranks:
                raise PawError(f"tokenizer.json merges[{k}] {pair[0]} {pair[1]}: "
                               f"{token_to_str(part)!r} is not a token of the vocabulary", path=path)
        out.append((left, right))
    return out


def pretokenizer_pattern(pre: dict | None, path: str | Path = "tokenizer.json") -> str | None:
    """The regex of a ``Split`` pre-tokenizer, or GPT-2's for ``ByteLevel(use_regex=True)``.

    A regex PAW wrote for Oniguruma (:func:`paw.bytelevel.patterns.to_oniguruma`) comes back in its
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
    (:func:`paw.bytelevel.ranks.all_merges`, as transformers' TikTokenConverter does), not only the one
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


def save_chart(path: str | Path, fig) -> Path:
    """Save a figure (a :mod:`paw.bpe.plots` chart) at ``path``, making its folder if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=fig.dpi)
    return path
