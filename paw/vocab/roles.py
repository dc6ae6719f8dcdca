"""Roles of special tokens (bos, eos, pad, ...): declared by the tokenizer's config, else known by name.

``tokenizer_config.json`` says ``bos_token: '<s>'`` for most Hugging Face models, and the reader
keeps that as :attr:`SpecialToken.declared_role`. Rank files and bare ``tokenizer.json`` files say
nothing, so well-known spellings stand in: ``<|endoftext|>`` ends a text, ``[PAD]`` pads, and any
chat-turn marker (``<|im_start|>``, ``<|eot_id|>``, ``[INST]``) is ``chat``. Alignment matches
special tokens role to role, and transplant writes ``bos/eos/pad_token_id`` from them.

>>> guess_role("<|begin_of_text|>"), guess_role("<|im_start|>"), guess_role("<x>")
('bos', 'chat', None)
"""

from __future__ import annotations

from paw.io.tokenizer_info import SpecialToken, TokenizerInfo
from paw.io.tokenizer_json import CONFIG_ROLES, guess_role

ROLES = (*CONFIG_ROLES, "chat")


def role_of(token: SpecialToken) -> str | None:
    """The declared role, else the one its spelling implies."""
    return token.declared_role or guess_role(token.content)


def role_id(tok: TokenizerInfo, role: str) -> int | None:
    """Id of the first special token of ``tok`` with ``role`` (bos, eos, pad, unk, ...), or None."""
    return next((i for i, s in sorted(tok.specials.items()) if role_of(s) == role), None)
