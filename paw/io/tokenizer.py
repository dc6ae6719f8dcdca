"""Open any tokenizer as a :class:`TokenizerInfo`: canonical token bytes, special tokens, a fast encoder.

Vocabularies are stored in different conventions, so comparing the stored strings is wrong: Qwen's
byte-level ``Ġthe``, Llama-2's SentencePiece ``▁the`` and BERT's WordPiece word-initial ``the`` are
the same piece of text. PAW compares the **canonical form** of a token, the bytes it stands for:

=====================  ==================================  ==============================
convention             stored                              canonical bytes
=====================  ==================================  ==============================
byte-level BPE         ``Ġthe``, ``åĮ`` (GPT-2 alphabet)   ``b' the'``, ``b'\\xe5\\x8c'``
SentencePiece BPE      ``▁the``, ``<0xE5>`` (byte fallback) ``b' the'``, ``b'\\xe5'``
WordPiece              ``the`` (word-initial), ``##the``    ``b' the'``, ``b'the'``
tiktoken / PAW BPE     rank table entries (raw bytes)       the bytes themselves
=====================  ==================================  ==============================

WordPiece drops whitespace, so the space is a choice: a word-initial piece gets a leading space
(the way a word appears in running text, like ``Ġthe`` and ``▁the``), a ``##`` continuation gets
none. Punctuation is word-initial in WordPiece, so ``,`` becomes ``b' ,'``; exact matches against
byte-level ``,`` therefore miss and fall through to decomposition.

Supported inputs (:func:`open_tokenizer`): a Hugging Face folder with ``tokenizer.json`` (or a model
ID in the local cache), a ``tokenizer.json`` file (:mod:`paw.io.tokenizer_json`), a tiktoken rank
file (``<base64> <rank>`` lines) and a PAW BPE ``.model`` file. Files are told apart and rank tables
read by :mod:`paw.io.bpe_files`, the one reader of those formats, so ``open_tokenizer`` and
``read_bpe`` agree on ranks, pattern and special tokens.

>>> tok = open_tokenizer("tiny/base")                 # doctest: +SKIP
>>> tok.token_bytes(tok.encode(" the")[0])            # doctest: +SKIP
b' the'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from paw.bytelevel.patterns import PATTERNS
from paw.errors import PawError
from paw.io.bpe_files import read_bpe, sniff_format
from paw.io.bpe_table import BpeFile
from paw.io.checkpoint import folder_hint
from paw.io.gguf import gguf_side_folder
from paw.io.hub import resolve_path
from paw.io.textdata import read_utf8
from paw.io.tokenizer_info import SpecialToken, TokenizerInfo
from paw.io.tokenizer_json import embedding_rows, read_json_object_or_none, read_tokenizer_json

__all__ = ["CL100K_PATTERN", "SpecialToken", "TokenizerInfo", "open_tokenizer", "read_corpus", "two_model_tokenizers"]

# tiktoken's cl100k_base split pattern; the default for rank files that neither say nor are known by name
CL100K_PATTERN = PATTERNS["gpt4"]
# what tiktoken needs for "no pattern": the whole text is one piece
_WHOLE_TEXT = r"[\s\S]+"


def open_tokenizer(spec: str | Path, *, pattern: str | None = None, fast: bool = True) -> TokenizerInfo:
    """Open a tokenizer folder, ``tokenizer.json``, tiktoken rank file or PAW BPE ``.model`` file.

    ``pattern`` is the pre-tokenizer regex for tiktoken rank files, which do not store one
    (default: the pattern of a file known by name such as ``cl100k_base.tiktoken``, else cl100k's).
    Anything unreadable is a :class:`PawError` naming the file. With ``fast``, a byte-level BPE
    ``tokenizer.json`` whose merges follow its token ids (GPT-2, Llama-3, Qwen2 and the zoo's do)
    is encoded by tiktoken once a parity check on the embedded samples passes (on first use);
    otherwise the ``tokenizers`` library encodes.
    """
    path = resolve_path(spec, what="tokenizer")
    if path.is_file() and path.suffix.lower() == ".gguf":  # transformers' conversion of its vocabulary
        path = gguf_side_folder(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return read_tokenizer_json(path / "tokenizer.json", str(spec), fast=fast)
        for name in sorted(path.iterdir()):
            if name.suffix in (".tiktoken", ".model") and name.is_file():
                return _open_file(name, str(spec), pattern, fast)
        if (path / "tokenizer.json").is_dir():
            raise PawError("tokenizer.json is a folder, not a file", path=path / "tokenizer.json")
        raise PawError(f"folder has no tokenizer.json, *.tiktoken or *.model file{folder_hint(path)}", path=path)
    return _open_file(path, str(spec), pattern, fast)


def two_model_tokenizers(first: str | Path, second: str | Path) -> tuple[TokenizerInfo, TokenizerInfo] | None:
    """The ``tokenizer.json`` of two model folders, or None when either folder has none or both files
    hold the same bytes (the same tokenizer, known without reading it)."""
    files = []
    for spec in (first, second):
        path = resolve_path(spec, what="model")
        if not (path.is_dir() and (path / "tokenizer.json").is_file()):
            return None
        files.append((path / "tokenizer.json", str(spec)))
    if files[0][0].stat().st_size == files[1][0].stat().st_size and \
            files[0][0].read_bytes() == files[1][0].read_bytes():
        return None
    a, b = (read_tokenizer_json(path, spec, fast=False) for path, spec in files)
    return a, b


def _open_file(path: Path, spec: str, pattern: str | None, fast: bool) -> TokenizerInfo:
    fmt = sniff_format(path)
    if fmt == "hf":
        return read_tokenizer_json(path, spec, fast=fast)
    bpe = read_bpe(path)
    if fmt == "tiktoken":  # a rank file stores no pattern: the caller's, else the known one, else cl100k's
        return _from_ranks(spec, "tiktoken", bpe, pattern or bpe.pattern or CL100K_PATTERN, folder=path.parent)
    return _from_ranks(spec, "paw-bpe", bpe, bpe.pattern, folder=path.parent)


def _from_ranks(spec: str, kind: str, bpe: BpeFile, pattern: str | None, *, folder: Path) -> TokenizerInfo:
    import tiktoken

    ranks, specials = bpe.mergeable_ranks, bpe.special_tokens
    size = max([*ranks.values(), *specials.values()]) + 1
    vocab: list[bytes | None] = [None] * size
    for b, r in ranks.items():
        vocab[r] = b
    try:
        enc = tiktoken.Encoding(Path(spec).name, pat_str=pattern or _WHOLE_TEXT, mergeable_ranks=ranks,
                                special_tokens=specials)
    except Exception as err:
        raise PawError(f"cannot build a BPE encoder from the rank table ({err})", path=spec) from None
    special_info = {i: SpecialToken(i, s, True) for s, i in specials.items()}
    for i in special_info:
        vocab[i] = None
    config = read_json_object_or_none(folder / "config.json")
    return TokenizerInfo(spec, kind, vocab, special_info, embedding_rows=embedding_rows(config),
                         folder=folder, backend=enc, config=config, pattern=pattern)


def read_corpus(paths: Sequence[str | Path]) -> list[str]:
    """Non-empty lines of text files; for ``.jsonl`` files the texts of each record (:func:`record_texts`).

    Long lines are kept whole; an unreadable or non-UTF-8 file is a PawError naming it.
    """
    lines: list[str] = []
    for p in paths:
        path = Path(p)
        text = read_utf8(path, what="corpus file")
        if path.suffix == ".jsonl":
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    lines.extend(record_texts(_json_line(line, path, n)))
        else:
            lines.extend(line for line in text.splitlines() if line.strip())
    if not lines:
        raise PawError("corpus has no non-empty lines", path=", ".join(map(str, paths)))
    return lines


# fields that name or label a record rather than hold its text (ARC's answerKey, the formatted sets'
# target_idx, ...); matched on the whole key or its last ``_`` part
_NOT_TEXT = {"id", "ids", "idx", "uid", "label", "labels", "answerkey", "key", "dataset", "subset", "split",
             "task_type", "type", "url", "lang", "language"}
_CHOICE_LISTS = {"options", "choices", "endings", "option1", "sol1"}


def record_texts(record) -> list[str]:
    """The texts of one JSON record, in field order: ``text`` when it has one, else every text field.

    ``{"id": "arc_7", "input": "Which gas?", "options": ["A: air", "B: CO2"], "target": "B",
    "target_idx": 1}`` -> ``["Which gas?", "A: air", "B: CO2"]``: lists and nested objects are read,
    ids and labels are not, and ``answer``/``target`` are left out where the record lists its choices
    (there they are a label or a copy of one choice).
    """
    if not isinstance(record, dict):
        return _strings(record)
    if isinstance(record.get("text"), str):
        return [record["text"]] if record["text"].strip() else []
    has_choices = bool(_CHOICE_LISTS & {k.lower() for k in record})
    out: list[str] = []
    for key, value in record.items():
        name = str(key).lower()
        if name in _NOT_TEXT or name.rsplit("_", 1)[-1] in _NOT_TEXT:
            continue
        if has_choices and name in ("answer", "target"):
            continue
        out.extend(record_texts(value) if isinstance(value, dict) else _strings(value))
    return out


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [t for v in value for t in (record_texts(v) if isinstance(v, dict) else _strings(v))]
    return []


def _json_line(line: str, path: Path, n: int):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        raise PawError(f"line {n} is not JSON", path=path) from None
    except RecursionError:
        raise PawError(f"line {n}: JSON nested too deeply", path=path) from None
