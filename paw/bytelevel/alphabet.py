"""The GPT-2 byte-to-unicode alphabet that byte-level BPE files use to write bytes as text.

``tokenizer.json`` and GPT-2's ``vocab.json`` cannot hold raw bytes, so every byte is shown as one
printable character: bytes that are already printable (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) stand
for themselves and the other 68 are shifted to ``Ā`` (U+0100) onwards, so ``b" "`` is written ``Ġ``
and ``b"\\n"`` is ``Ċ`` (Radford et al. 2019, GPT-2 ``encoder.py``).

The same table fixes the rank order of the 256 single bytes in GPT-2, cl100k, Llama-3 and Qwen:
rank ``i`` is the byte whose character has the ``i``-th smallest code point, so ``b"!"`` is rank 0.
Hugging Face's ``BpeTrainer`` gives the alphabet ids in that order too, which is why PAW uses it.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """``{byte: char}`` for all 256 bytes: ``bytes_to_unicode()[32] == 'Ġ'``."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    """Inverse of :func:`bytes_to_unicode`: ``unicode_to_bytes()['Ġ'] == 32``."""
    return {c: b for b, c in bytes_to_unicode().items()}


@lru_cache(maxsize=1)
def _tables() -> tuple[dict[int, str], dict[int, str]]:
    """``str.translate`` tables: latin-1 char -> alphabet char, and back. Characters below 256 that
    are not in the alphabet (space, controls) map to U+0100 + 0xFFFF so that encoding fails loudly."""
    to_str = dict(bytes_to_unicode())
    to_bytes = {ord(c): chr(b) for b, c in bytes_to_unicode().items()}
    alphabet = set(to_bytes)
    to_bytes.update({cp: "\uffff" for cp in range(256) if cp not in alphabet})
    return to_str, to_bytes


def token_to_str(token: bytes) -> str:
    """``b" hi"`` -> ``"Ġhi"`` (how ``tokenizer.json`` spells a token)."""
    return token.decode("latin-1").translate(_tables()[0])


def str_to_token(text: str) -> bytes:
    """``"Ġhi"`` -> ``b" hi"``; raises ``KeyError`` on a character outside the alphabet."""
    try:
        return text.translate(_tables()[1]).encode("latin-1")
    except UnicodeEncodeError:
        raise KeyError(text) from None


@lru_cache(maxsize=1)
def byte_order() -> tuple[int, ...]:
    """The 256 bytes in rank order: ``byte_order()[0] == ord('!')``, ``byte_order()[255] == 173``."""
    table = bytes_to_unicode()
    return tuple(sorted(range(256), key=lambda b: ord(table[b])))


def base_ranks() -> dict[bytes, int]:
    """``{bytes([b]): rank}`` for the 256 single bytes in GPT-2 order."""
    return {bytes([b]): rank for rank, b in enumerate(byte_order())}
