"""``check_adapter`` and ``resize_base``: the folder-level pipelines of ``paw adapter``.

Both read only what they need through :mod:`paw.io` (``check_adapter`` reads file headers, no
tensor data) and compute with :mod:`paw.adaptercheck.fit` / :mod:`paw.adaptercheck.rebase`::

    from paw.adaptercheck.options import ResizeOptions
    from paw.adaptercheck.pipeline import check_adapter, resize_base
    report = check_adapter("./my-lora", "./llama")
    if report.vocab_mismatch:
        resize_base(ResizeOptions(adapter="./my-lora", base="./llama", output="./llama-resized"))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paw import __version__
from paw.adaptercheck.fit import check_fit
from paw.adaptercheck.options import ResizeOptions
from paw.adaptercheck.rebase import rebase_tensors, vocab_sources
from paw.device import resolve_device
from paw.errors import PawError
from paw.io.adapter import read_adapter
from paw.io.adapter_check import read_adapter_header, read_base_header
from paw.io.atomic import check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.hf_tokenizer_edit import TOKENIZER_JSON, open_tokenizer_json
from paw.io.manifest import describe_input, records_call
from paw.io.model_card import Card
from paw.io.writer import TOKENIZER_FILES, write_checkpoint
from paw.knobs import RunOptions
from paw.vocab.extend import find_vocab_tensors, with_vocab_size

PathLike = str | Path


def check_adapter(adapter: PathLike, base: PathLike):
    """A :class:`~paw.adaptercheck.fit.FitReport`: does ``adapter`` load on ``base``, and if not, why."""
    header = read_adapter_header(adapter)
    base_header = read_base_header(base)
    return check_fit(header.config, header.shapes, base_header.shapes, tied=base_header.tied)


@dataclass(frozen=True)
class ResizedBase:
    """What ``resize_base`` wrote; ``manifest`` is ``paw_resize_base.json``."""

    output: Path
    adapter: Path
    keys: tuple[str, ...]            # the vocabulary tensors grown (embedding, then lm_head if untied)
    old_rows: int
    rows: int
    rows_from_adapter: tuple[str, ...]   # tensors whose new rows the adapter saved
    tokenizer_from: Path
    tokenizer_is_base: bool          # True: the base's tokenizer, which does not know the new tokens
    manifest: dict

    def lines(self) -> list[str]:
        """What was done, for people (the CLI prints these)."""
        carried = ", ".join(self.rows_from_adapter) or "none (mean of trained rows)"
        lines = [f"resized {' and '.join(self.keys)}: {self.old_rows} -> {self.rows} rows",
                 f"new rows from the adapter's saved tensors: {carried}",
                 f"tokenizer from {self.tokenizer_from}"]
        if self.tokenizer_is_base:
            lines.append("  note: the base's tokenizer does not know the new tokens; pass --tokenizer with the "
                         "extended one")
        lines.append(f"wrote {self.output}; load with PeftModel.from_pretrained(<model from {self.output}>, "
                     f"'{self.adapter}')")
        return lines


@records_call
def resize_base(options: ResizeOptions, run: RunOptions = RunOptions(), *, command: str | None = None) -> ResizedBase:
    """Write ``options.base`` grown to the adapter's vocabulary (rows the adapter saved are reused), so that
    ``PeftModel.from_pretrained(output, adapter)`` loads; ``vocab_size`` 0: the size the adapter's tensors say."""
    options.check()
    adapter, base, output, tokenizer = options.adapter, options.base, options.output, options.tokenizer
    vocab_size, overwrite = options.vocab_size or None, run.overwrite
    check_output(output, overwrite=overwrite)
    header = read_adapter_header(adapter)
    ckpt = open_checkpoint(base)
    keys = tuple(k for k in find_vocab_tensors(list(ckpt)) if k)
    report = check_fit(header.config, header.shapes, {n: ckpt.shape(n) for n in ckpt}, tied=ckpt.tied_embeddings)
    tok_source = tokenizer or (header.path if any((header.path / f).exists() for f in TOKENIZER_FILES) else ckpt.path)
    rows = vocab_size or report.expected_vocab
    if rows is not None and report.vocab_is_lower_bound and not vocab_size:
        rows = max(rows, _tokenizer_size(tok_source) or 0)  # trainable tokens only bound it from below
    old = ckpt.shape(keys[0])[0]
    if rows is None:
        raise PawError("the adapter carries no vocabulary-sized tensor; pass --vocab-size", path=adapter)
    if rows == old:
        raise PawError(f"base already has {old} rows, the size the adapter expects; nothing to resize", path=base)
    sources = vocab_sources(read_adapter(adapter, dora=None).tensors, header.config, keys)
    manifest = {"paw_version": __version__, "command": command,
                "inputs": {"adapter": describe_input(adapter), "base": describe_input(base)},
                "old_rows": old, "rows": rows, "tokenizer_from": str(tok_source),
                "rows_from_adapter": sorted(sources)}
    write_checkpoint(output, rebase_tensors(ckpt, rows=rows, keys=keys, sources=sources,
                                            device=resolve_device(run.device)),
                     config=with_vocab_size(ckpt.config, rows), copy_from=ckpt.path, tokenizer_from=tok_source,
                     overwrite=overwrite, extra_files={"paw_resize_base.json": manifest},
                     card=_card(output, base, adapter, old, rows, sorted(sources), command))
    return ResizedBase(Path(output), Path(adapter), keys, old, rows, tuple(sources), Path(tok_source),
                       tok_source == ckpt.path, manifest)


def _card(output: PathLike, base: PathLike, adapter: PathLike, old: int, rows: int, carried: list[str],
          command: str | None) -> Card:
    """The resized base's model card: from what, to how many rows, for which adapter."""
    lines = [f"- embedding rows: {old} -> {rows}",
             f"- new rows from the adapter's saved tensors: {', '.join(carried) or 'none (mean of trained rows)'}"]
    intro = (f"`{base}` with its vocabulary grown to {rows} rows by PAW's `paw adapter resize-base`, so that the "
             f"adapter `{adapter}` (trained with an extended tokenizer) loads on it with PEFT's "
             "`PeftModel.from_pretrained`. Every other weight is the base's.")
    return Card(Path(output).name, "transformers", inputs=(str(base),), tags=("paw", "resize-base"), intro=intro,
                sections=(("Resize", tuple(lines)),), command=command)


def _tokenizer_size(folder: PathLike) -> int | None:
    path = Path(folder)
    if (path / TOKENIZER_JSON).exists() or path.suffix == ".json":
        return open_tokenizer_json(path).size()
    return None
