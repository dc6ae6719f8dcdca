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

import re

from paw.io.tokenizer_info import SpecialToken, TokenizerInfo
from paw.io.tokenizer_json import CONFIG_ROLES

ROLES = (*CONFIG_ROLES, "chat")
# special-token names by role, used when tokenizer_config.json does not say (first match wins)
_ROLE_NAMES = {
    "bos": ("<s>", "<|begin_of_text|>", "<|bos|>", "<bos>", "<|startoftext|>", "[CLS]"),
    "eos": ("</s>", "<|end_of_text|>", "<|endoftext|>", "<|eos|>", "<eos>", "<|im_end|>", "[SEP]"),
    "pad": ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>", "<|fim_pad|>"),
    "unk": ("<unk>", "<|unk|>", "[UNK]"),
    "cls": ("[CLS]",), "sep": ("[SEP]",), "mask": ("[MASK]", "<mask>"),
}
_CHAT_MARKER = re.compile(r"im_start|im_end|im_sep|start_header_id|end_header_id|eot_id|start_of_turn|"
                          r"end_of_turn|\[/?INST\]|<\|(user|assistant|system)\|>|<\|eom_id\|>", re.I)


def guess_role(content: str) -> str | None:
    """The role a special token's spelling implies, or None."""
    for role, names in _ROLE_NAMES.items():
        if content in names:
            return role
    return "chat" if _CHAT_MARKER.search(content) else None


def role_of(token: SpecialToken) -> str | None:
    """The declared role, else the one its spelling implies."""
    return token.declared_role or guess_role(token.content)


def role_id(tok: TokenizerInfo, role: str) -> int | None:
    """Id of the first special token of ``tok`` with ``role`` (bos, eos, pad, unk, ...), or None."""
    return next((i for i, s in sorted(tok.specials.items()) if role_of(s) == role), None)
