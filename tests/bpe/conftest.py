"""Real production rank tables (from the ``quicktok-v1`` package) as tiktoken oracles, loaded once."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

# quicktok data name -> (PAW pattern name, special-tokens file)
TABLES = {"cl100k": "gpt4", "llama3": "llama3", "qwen3": "qwen2", "o200k": "o200k"}


def quicktok_ranks(name: str) -> tuple[dict[bytes, int], dict[str, int]]:
    """Parse quicktok's binary tables: ``<u32 n>`` then ``n x (<u16 len> bytes <u32 rank>)``;
    specials ``<u32 n>`` then ``n x (<u32 id> <u16 len> bytes)``."""
    quicktok = pytest.importorskip("quicktok", reason="quicktok-v1 ships the rank tables")
    data = Path(quicktok.__file__).parent / "data"
    raw, ranks, pos = (data / f"{name}.vocab").read_bytes(), {}, 4
    for _ in range(struct.unpack_from("<I", raw, 0)[0]):
        (length,) = struct.unpack_from("<H", raw, pos)
        token = raw[pos + 2:pos + 2 + length]
        (rank,) = struct.unpack_from("<I", raw, pos + 2 + length)
        ranks[token] = rank
        pos += 6 + length
    raw, specials, pos = (data / f"{name}.special").read_bytes(), {}, 4
    for _ in range(struct.unpack_from("<I", raw, 0)[0]):
        tid, length = struct.unpack_from("<IH", raw, pos)
        specials[raw[pos + 6:pos + 6 + length].decode()] = tid
        pos += 6 + length
    return ranks, specials


@pytest.fixture(scope="session")
def real_tables():
    """``{'llama3': (ranks, specials, pattern), ...}`` parsed lazily, once per session."""
    from paw.bytelevel.patterns import PATTERNS

    cache = {}

    def get(name: str):
        if name not in cache:
            ranks, specials = quicktok_ranks(name)
            cache[name] = (ranks, specials, PATTERNS[TABLES[name]])
        return cache[name]

    return get
