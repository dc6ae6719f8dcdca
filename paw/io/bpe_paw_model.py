"""The PAW ``.model`` file of a byte-level BPE: read as a :class:`~paw.io.bpe_table.BpeFile`, written from ranks.

Text, first line ``paw-bpe v1``, then the pattern, the special tokens, the order of the 256 single
bytes and one merge per line (``left_rank right_rank``), like minbpe's file. ``PREFIX.vocab`` beside
it is for people only and is never read back.
"""

from __future__ import annotations

import json
from pathlib import Path

from paw.bytelevel.ranks import merges_from_ranks, ranks_from_merges
from paw.errors import PawError
from paw.io.atomic import atomic_outputs
from paw.io.bpe_table import BpeFile, check_specials, natural_number

MODEL_VERSION = "paw-bpe v1"


def write_paw_model(prefix: str | Path, *, mergeable_ranks: dict[bytes, int], pattern: str | None,
                    special_tokens: dict[str, int], merges: list[tuple[bytes, bytes]] | None = None,
                    overwrite: bool = True, inputs=(), extra_dir: str | Path | None = None,
                    write_extra=None) -> Path:
    """Write ``PREFIX.model`` (read back by :func:`paw.io.bpe_files.read_bpe`) and ``PREFIX.vocab`` (for people), as one set.

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


def read_paw_model(path: Path) -> BpeFile:
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
    n = natural_number(header["merges"])
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
    check_specials(path, ranks, specials)
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
    values = [natural_number(x, 255) for x in items]
    if len(values) != 256 or None in values or len(set(values)) != 256:
        raise PawError("malformed PAW model file: line 4 must list each of the bytes 0..255 once", path=path)
    return tuple(values)


def _paw_merges(path: Path, lines: list[str], order: tuple[int, ...]) -> list[tuple[bytes, bytes]]:
    """``left_rank right_rank`` per line -> byte pairs; a rank must name a token made before the line."""
    by_rank = [bytes([b]) for b in order]
    known = set(by_rank)
    merges = []
    for lineno, line in enumerate(lines, start=6):
        parts = [natural_number(x) for x in line.split()]
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
