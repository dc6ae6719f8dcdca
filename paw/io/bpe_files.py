"""Open a byte-level BPE in any of its three spellings; read training corpora; save charts.

* PAW ``.model`` (:mod:`paw.io.bpe_paw_model`);
* tiktoken rank file (:mod:`paw.io.bpe_tiktoken`);
* Hugging Face ``tokenizer.json`` whose model is a byte-level BPE (:mod:`paw.io.bpe_tokenizer_json`).

All of them come back as a :class:`~paw.io.bpe_table.BpeFile`: ``mergeable_ranks``
``{token_bytes: rank}`` in tiktoken's sense, so one encoder serves them all. This is the one reader of
these formats: :func:`paw.io.tokenizer.open_tokenizer` sniffs files with :func:`sniff_format` and reads
rank tables through :func:`read_bpe`, so both see the same ranks, pattern and special tokens.

A rank table becomes a ``tokenizer.json`` in one place, :func:`paw.io.bpe_tokenizer_json.tokenizer_json_doc`.
"""

from __future__ import annotations

from pathlib import Path

from paw.errors import PawError
from paw.io.bpe_paw_model import MODEL_VERSION, read_paw_model
from paw.io.bpe_table import BpeFile
from paw.io.bpe_tiktoken import read_tiktoken_ranks
from paw.io.bpe_tokenizer_json import read_bpe_tokenizer_json
from paw.io.reports import save_figure


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


_READERS = {"paw": read_paw_model, "tiktoken": read_tiktoken_ranks, "hf": read_bpe_tokenizer_json}  # sniff_format -> reader


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
