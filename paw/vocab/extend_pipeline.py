"""``extend_tokenizer``: add tokens to a model's tokenizer and grow its embeddings, folder to folder.

What ``paw extend-tokenizer`` runs; callable directly::

    from paw.vocab.extend_pipeline import extend_tokenizer
    from paw.vocab.options import ExtendOptions
    result = extend_tokenizer(ExtendOptions(model="./tiny/base", output="./tiny-ext", tokens=(" zebra", "PAW")))
    result.rows, result.lines()  # 302, ['added 2 token(s) as real byte-bpe vocabulary: ...', ...]

Byte-level BPE tokenizers get the tokens as vocabulary plus appended merges, so encoding produces
them; other tokenizers (and ``special``) get added tokens. ``embed_tokens`` and ``lm_head`` (tied or
not) grow; ``config.vocab_size`` follows; logits of old-token text stay identical.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw import __version__
from paw.device import resolve_device
from paw.errors import PawError
from paw.io.atomic import check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.hf_tokenizer_edit import (
    open_tokenizer_json,
    read_token_list,
    read_tokens_file,
    save_tokenizer_folder,
)
from paw.io.manifest import describe_input, records_call
from paw.io.writer import write_checkpoint
from paw.knobs import RunOptions
from paw.vocab.cards import extend_card
from paw.vocab.extend import extend_tensors, find_vocab_tensors, with_vocab_size
from paw.vocab.options import ExtendOptions
from paw.vocab.resize import INITS
from paw.vocab.resize import pad_to_multiple as padded
from paw.vocab.tokenizer_edit import extend_tokenizer_json

PathLike = str | Path


def tokens_from(*, tokens: Sequence[str] | None = None, tokens_file: PathLike | None = None,
                from_tokenizer: PathLike | None = None, skip_numbers: bool = True) -> list:
    """The tokens to add, from exactly one source: a list, a file (one per line), or another tokenizer.

    ``skip_numbers`` leaves out the number strings of ``from_tokenizer`` (:func:`split_numbers`);
    tokens named explicitly are always kept.
    """
    given = [x for x in (tokens, tokens_file, from_tokenizer) if x]
    if len(given) != 1:
        raise PawError("give exactly one of --tokens, --tokens-file, --from-tokenizer")
    if tokens:
        return list(tokens)

    if tokens_file:
        return read_tokens_file(tokens_file)
    found = read_token_list(from_tokenizer)
    return split_numbers(found)[0] if skip_numbers else found


def token_list(options: ExtendOptions) -> tuple[list, list]:
    """``(tokens to add, number strings left out)`` from the one source ``options`` names; the numbers are left
    out of ``--from-tokenizer``'s tokens unless ``--keep-numbers`` (:func:`split_numbers`)."""
    tokens = tokens_from(tokens=options.tokens, tokens_file=options.tokens_file,
                         from_tokenizer=options.from_tokenizer, skip_numbers=False)
    if options.from_tokenizer and options.skip_numbers:
        return split_numbers(tokens)
    return tokens, []


_NUMBER = re.compile(r"\s?\d+")  # any script's digits: pre-tokenizers split \p{N} runs alike


def split_numbers(tokens: Sequence) -> tuple[list, list]:
    """``(others, numbers)``: number strings are digits with at most one leading space (``b" 2024"``).

    Why another tokenizer's numbers are left out by default: pre-tokenizers such as Llama 3's cut
    digit runs into pieces of 1-3, so BPE can never produce ``"2024"`` or ``"12345"``; they could only
    become added tokens, which are matched as whole strings before BPE. Every number in ordinary text
    would then tokenize differently from before (``"120245"`` -> ``"1" "2024" "5"``), which breaks the
    promise that old text encodes as it did, and digit grouping stops being regular.
    """
    others, numbers = [], []
    for token in tokens:
        text = token.decode("utf-8", "replace") if isinstance(token, bytes) else str(token)
        (numbers if _NUMBER.fullmatch(text) else others).append(token)
    return others, numbers


@dataclass(frozen=True)
class Extension:
    """What ``extend_tokenizer`` wrote; ``manifest`` is ``paw_extend.json``."""

    output: Path
    manifest: dict[str, Any]
    added: Any                   # paw.io.hf_tokenizer_edit extension: tokens (with route), present, skipped
    tokenizer_kind: str          # 'byte-bpe', 'bpe', 'wordpiece', ...
    keys: tuple                  # (embedding tensor, lm_head tensor or None when tied)
    old_rows: int
    rows: int
    init: str

    def lines(self) -> list[str]:
        """What was added and how, for people (the CLI prints these)."""
        ext, kind = self.added, self.tokenizer_kind
        lines = []
        if ext.count("bpe") + ext.count("bpe-intermediate"):
            lines.append(f"added {ext.count('bpe')} token(s) as real {kind} vocabulary: {ext.merges_added} merge(s) "
                         "appended, so encoding produces them")
            inter = [t.text for t in ext.tokens if t.how == "bpe-intermediate"]
            if inter:
                shown = ", ".join(repr(t) for t in inter[:8]) + (" ..." if len(inter) > 8 else "")
                lines.append(f"  + {len(inter)} intermediate token(s) needed to chain the merges: {shown}")
        for how, why in (("added", "added tokens (matched as whole strings before BPE)"),
                         ("special", "special added tokens")):
            n = ext.count(how)
            if n:
                reason = " (the pre-tokenizer splits them, or --max-intermediates ruled their merge chain out)" \
                    if kind == "byte-bpe" and how == "added" else ""
                lines.append(f"added {n} token(s) as {why}{reason}")
        if kind != "byte-bpe" and not ext.count("special"):
            lines.append(f"  (tokenizer model is {kind}, not byte-level BPE: added tokens are the safe way)")
        if ext.present:
            lines.append(f"skipped {len(ext.present)} token(s) already in the tokenizer")
        if ext.skipped:
            lines.append(f"skipped {len(ext.skipped)} token(s) that are not valid UTF-8 "
                         "(byte fragments need byte-level BPE)")
        heads = f"{self.keys[0]} and {self.keys[1]}" if self.keys[1] else f"{self.keys[0]} (tied output head)"
        pad = f", padded to {self.rows}" if self.rows > ext.size and self.rows > self.old_rows else ""
        lines.append(f"resized {heads}: {self.old_rows} -> {self.rows} rows{pad}; new rows: {self.init}")
        lines.append(f"wrote {self.output}")
        return lines


@records_call
def extend_tokenizer(options: ExtendOptions, run: RunOptions = RunOptions(), *, tokens: Sequence | None = None,
                     command: str | None = None) -> Extension:
    """Read model and tokenizer, plan the new tokens, grow the tensors, write ``options.output`` atomically.

    ``tokens``: the tokens to add when the caller has read them already (:func:`token_list`); else they are read
    from the source ``options`` names.
    """
    options.check()
    model, output, init, overwrite = options.model, options.output, options.init, run.overwrite
    special, pad_to_multiple = options.special, options.pad_to_multiple
    max_intermediates = None if options.max_intermediates < 0 else options.max_intermediates
    check_output(output, overwrite=overwrite)
    if init not in INITS:
        raise PawError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
    if tokens is None:
        tokens = token_list(options)[0]
    torch_device = resolve_device(run.device)
    tok = open_tokenizer_json(model)
    ckpt = open_checkpoint(model)
    keys = find_vocab_tensors(list(ckpt))
    rows = ckpt.shape(keys[0])[0]
    if tok.size() > rows:
        raise PawError(f"tokenizer has {tok.size()} ids but {keys[0]} has only {rows} rows", path=model)
    ext = extend_tokenizer_json(tok, list(tokens), special=special, max_intermediates=max_intermediates)
    if not ext.tokens:
        why = [f"{len(ext.present)} already in the tokenizer"] if ext.present else []
        why += [f"{len(ext.skipped)} not valid UTF-8 (added tokens must be text)"] if ext.skipped else []
        raise PawError(f"nothing to add: {', '.join(why) or 'no tokens given'}")
    total = padded(max(rows, ext.size), pad_to_multiple)
    manifest = {"paw_version": __version__, "command": command,
                "inputs": {"model": describe_input(model)},
                "init": init, "special": special, "old_rows": rows, "rows": total, "tied": keys[1] is None,
                "merges_added": ext.merges_added, "new_tokens": _by_route(ext.tokens)}
    grown = extend_tensors(ckpt, new_ids=[t.id for t in ext.tokens], pieces=[t.pieces for t in ext.tokens],
                           total_rows=total, init=init, keys=keys, device=torch_device)
    with tempfile.TemporaryDirectory(prefix="paw-tok-") as scratch:
        save_tokenizer_folder(ext.doc, tok.path, scratch, new_tokens=ext.tokens)
        write_checkpoint(output, grown, config=with_vocab_size(ckpt.config, total), copy_from=ckpt.path,
                         tokenizer_from=scratch, overwrite=overwrite, extra_files={"paw_extend.json": manifest},
                         card=extend_card(output, model, manifest, kind=tok.kind, command=command))
    return Extension(Path(output), manifest, ext, tok.kind, tuple(keys), rows, total, init)


def _by_route(tokens) -> dict[str, dict[str, int]]:
    """``{'bpe': {text: id}, 'bpe-intermediate': {...}, 'added': {...}, 'special': {...}}`` (flat, so that
    a manifest of 40k tokens is quick to write)."""
    out: dict[str, dict[str, int]] = {}
    for t in tokens:
        out.setdefault(t.how, {})[t.text] = t.id
    return out
