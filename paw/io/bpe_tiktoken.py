"""tiktoken's rank file (``cl100k_base.tiktoken``): one ``base64(token) rank`` per line.

Read as a :class:`~paw.io.bpe_table.BpeFile` (the pattern and special tokens of tiktoken's own
encodings known by the file's name, added tokens from a ``tokenizer_config.json`` beside it), and
written from a rank table in the format ``tiktoken.load.load_tiktoken_bpe`` reads.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path

from paw.bytelevel.patterns import PATTERNS
from paw.errors import PawError
from paw.io.atomic import atomic_file
from paw.io.bpe_table import MAX_TOKEN_ID, BpeFile, check_specials, natural_number

# A rank file holds neither pattern nor special tokens; tiktoken's own encodings are known by name.
TIKTOKEN_PATTERNS = {"cl100k_base": "gpt4", "o200k_base": "o200k", "r50k_base": "gpt2", "p50k_base": "gpt2",
                     "gpt2": "gpt2"}
TIKTOKEN_SPECIALS: dict[str, dict[str, int]] = {
    "cl100k_base": {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    "r50k_base": {"<|endoftext|>": 50256}, "p50k_base": {"<|endoftext|>": 50256}, "gpt2": {"<|endoftext|>": 50256},
}


def read_tiktoken_ranks(path: Path) -> BpeFile:
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
    check_specials(path, ranks, specials)
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
        tid = natural_number(key)
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
