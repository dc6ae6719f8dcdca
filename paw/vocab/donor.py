"""The donor side of a transplant: read the donor model, check it matches the tokenizer, fit OMP rows.

``paw transplant-tokenizer --donor MODEL`` calls :func:`donor_mappings`; the arithmetic is in
:mod:`paw.vocab.omp`, the reading in :mod:`paw.io`. The anchors are the tokens PAW matches exactly
(same canonical bytes, :func:`paw.vocab.align.exact`) plus special tokens matched by role, less the
tokenizer's byte-fallback pieces (:func:`anchor_entries`); every other target id the donor has a row for
is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from paw import arch
from paw.errors import PawError
from paw.io.checkpoint import open_checkpoint
from paw.io.manifest import describe_input
from paw.io.tokenizer import TokenizerInfo, open_tokenizer
from paw.io.train_state import read_fit_parts, save_fit_part
from paw.io.vocab_map import VocabMapping
from paw.lora import tensors_digest
from paw.progress import status, track
from paw.vocab.align import AlignContext, align
from paw.vocab.omp import METHOD, donor_omp
from paw.vocab.transplant import embedding_names, vocab_rows

SOLVER = ("orthogonal matching pursuit, anchors picked by largest |residual . anchor| (raw inner product), "
          "coefficients by least squares over the picked anchors (QR, Gram-Schmidt twice), unconstrained")


@dataclass(frozen=True)
class DonorFit:
    """The input-side mapping, an untied head's mapping (or None) and what the report states."""

    mapping: VocabMapping
    head_mapping: VocabMapping | None
    record: dict[str, Any]


def open_embeddings(folder: str | Path, what: str = "model"):
    """``(checkpoint, vocabulary rows, names of its embedding and head)`` of a model folder, or a clear error."""
    ckpt = open_checkpoint(folder)
    if not ckpt.config:
        raise PawError(f"{what} folder has no config.json", path=folder)
    rows = vocab_rows(ckpt.config)
    names = embedding_names({n: ckpt.shape(n) for n in ckpt}, rows)
    if not names:
        raise PawError(f"no input embedding or output head with {rows} rows (config vocab_size)", path=folder)
    return ckpt, rows, names


def donor_mappings(donor: str | Path, source: TokenizerInfo, target: TokenizerInfo, *, tied: bool,
                   k: int, batch: int, device: Any, work: Path | None = None, resume: bool = False) -> DonorFit:
    """Exact/special matches, then OMP fits on the donor's rows for every other target id.

    With ``work``, each batch of fits is kept there as it is done (:func:`paw.io.train_state.save_fit_part`);
    with ``resume`` too, the batches kept there by a stopped run under the same key (the donor's rows, the
    anchors, the tokens, ``k``, the batch size, the device type) are taken as they are and only the rest
    fitted, so the result is the uninterrupted run's."""
    ckpt, rows, names = open_embeddings(donor, "donor model")
    _check_vocabulary(donor, rows, target)
    base = anchor_entries(align(AlignContext(source, target), ["exact"]), target)
    anchors = sorted((t, src[0]) for t, (_, src, _) in base.entries.items())
    todo = [t for t in range(target.size) if t not in base.entries]
    embed = next((n for n in names if not arch.is_head(n)), names[0])
    head = next((n for n in names if arch.is_head(n)), embed)  # a tied donor's head is its embedding
    keeping = _Keeping(work, resume, anchors, todo, k, batch, device)
    mapping = _fit(base, ckpt[embed], anchors, todo, k, batch, device, "input", keeping)
    head_mapping = None if tied else _fit(base, ckpt[head], anchors, todo, k, batch, device, "head", keeping)
    record = {"donor": describe_input(donor), "k": min(k, len(anchors)), "anchors": len(anchors),
              "anchor_set": "tokens with the same canonical bytes in both vocabularies, and special tokens "
                            "matched by role; the tokenizer's byte-fallback pieces are fitted, not anchored",
              "byte_fallback_fitted": len(target.byte_fallback_ids & set(todo)), "fitted": len(todo), "solver": SOLVER, "batch": batch,
              "resumed_batches": keeping.resumed,
              "donor_tensors": {"input": embed, "head": head},
              "head_fit": "tied: the input fit serves both" if tied else "own fit on the donor's head rows"}
    return DonorFit(mapping, head_mapping, record)


def anchor_entries(exact: VocabMapping, target: TokenizerInfo) -> VocabMapping:
    """The exact matches that may anchor OMP: all but the target's byte-fallback pieces (``<0x41>``).

    Their bytes match the source's single-byte tokens, but in the donor they are a fallback's rows,
    barely trained (Gemma-3's sit near its ``<unused*>`` rows), so OMP picks them first for many rare
    targets and the fitted rows become near-copies of frequent source tokens (``%``, ``-``, ``:``).
    Under a tied head every such row takes probability from the right token at every position: on
    SmolLM2-135M given Gemma-3's tokenizer the fitted rows took 46% of the softmax where
    mergekit-tokensurgeon's took 6.5% (docs/benchmarks/tokenizers.md). Copying them would also give
    ``<0x3A>`` the same row as ``:`` and halve that token's probability. tokensurgeon, which matches
    strings, never matches them either; they are fitted like any other token.
    """
    keep = {t: e for t, e in exact.entries.items() if t not in target.byte_fallback_ids}
    return VocabMapping(exact.source_size, exact.target_size, keep, exact.source, exact.target)


class _Keeping:
    """Where a fit's batches are kept and which were kept before (``work`` None: nowhere, nothing)."""

    def __init__(self, work, resume, anchors, todo, k, batch, device):
        self.work, self.resume, self.resumed = work, resume, 0
        self.settings = repr((anchors, todo, k, batch, getattr(device, "type", str(device)))).encode()

    def hooks(self, part: str, rows):
        """``(done, keep)`` of :func:`donor_omp` for the fit of ``part`` (input, head) on the donor's ``rows``."""
        if self.work is None:
            return None, None
        key = tensors_digest({"rows": rows}, prefix=self.settings)
        done = read_fit_parts(self.work, part, key) if self.resume else {}
        self.resumed += len(done)
        return done, partial(save_fit_part, self.work, part, key)


def _fit(base: VocabMapping, donor_rows, anchors, todo, k, batch, device, part, keeping: _Keeping) -> VocabMapping:
    rows = donor_rows.to(device)
    done, keep = keeping.hooks(part, donor_rows)
    batches = -(-len(todo) // batch)
    if done:
        status(f"fitting OMP {part} rows: {len(done)} of {batches} batches taken as a stopped run "
               f"kept them in {keeping.work}")
    fits = donor_omp(rows, anchors, todo, k=k, batch=batch, done=done, keep=keep,
                     track=lambda it, kept: track(it, f"fitting OMP {part} rows", total=batches, unit="batches",
                                                  start=kept))
    entries = dict(base.entries)
    entries.update({t: (METHOD, src, w) for t, (src, w) in fits.items()})
    return VocabMapping(base.source_size, base.target_size, entries, base.source, base.target)


def _check_vocabulary(donor, rows: int, target: TokenizerInfo) -> None:
    """The donor's rows must be the tokenizer's ids: enough rows, and its own tokenizer (if any) equal."""
    if rows < target.size:
        raise PawError(f"the donor has {rows} embedding rows but the tokenizer given has {target.size} ids: "
                       "pass the donor's own tokenizer (or leave --tokenizer out)", path=donor)
    try:
        own = open_tokenizer(donor)
    except PawError:
        return  # a donor folder without tokenizer files: the row count is all there is to check
    diff = [i for i in range(max(own.size, target.size))
            if i >= own.size or i >= target.size or own.token_bytes(i) != target.token_bytes(i)]
    if diff:
        i = diff[0]
        raise PawError(f"the donor's vocabulary does not match the tokenizer given: {len(diff)} of "
                       f"{max(own.size, target.size)} ids differ (first: id {i}); pass the donor's own tokenizer "
                       "(or leave --tokenizer out)", path=donor)
