"""Grow an embedding or output-head matrix by new rows: pure tensor functions.

A vocabulary extension appends rows to ``embed_tokens`` (V, d) and, when it is not tied to it,
to ``lm_head`` (V, d). How the new rows start matters: Hewitt (2021, "Initializing new word
embeddings for pretrained language models") shows that the mean of the existing rows keeps the
new tokens' logits close to the average instead of dominating the softmax; Gee et al. (2022,
"Fast vocabulary transfer") and FVT/FOCUS-style methods start a new token from the rows of the
pieces the old tokenizer splits it into. Three inits, chosen by name from :data:`INITS`:

- ``mean``: every new row is the mean of the *trained* rows. Rows that were never trained
  (reserved tokens that stayed all-zero, such as Llama 3's ``<|reserved_special_token_*|>``, or
  padding rows) are left out, otherwise they drag the mean towards zero.
- ``subtoken-mean``: row of a new token = mean of the rows of its old pieces
  (``"hello" -> ["hel", "lo"] -> (E[hel] + E[lo]) / 2``); falls back to ``mean`` for a token
  without trained pieces.
- ``interpolate`` (default): ``0.5 * mean + 0.5 * subtoken-mean``.

Every function takes and returns tensors on any device; nothing here touches a file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from paw.errors import PawError

UNTRAINED_REL_NORM = 1e-3  # a row whose norm is below this x the median row norm counts as never trained


def pad_to_multiple(n: int, multiple: int | None) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n``: ``pad_to_multiple(305, 64) -> 320``."""
    if not multiple or multiple <= 1:
        return n
    return -(-n // multiple) * multiple


def trained_rows(weight):
    """Boolean mask (V,) of rows that look trained: norm above ``UNTRAINED_REL_NORM`` x median norm.

    ``[[0, 0], [3, 4], [0, 1e-9], [1, 0]] -> [False, True, False, True]``.
    """
    import torch

    norms = weight.float().norm(dim=1)
    positive = norms[norms > 0]
    if positive.numel() == 0:
        return torch.zeros_like(norms, dtype=torch.bool)
    return norms > UNTRAINED_REL_NORM * positive.median()


def _mean_rows(weight, mask):
    """(d,) float32 mean of the rows in ``mask`` (all rows when none is marked trained)."""
    import torch

    if not bool(mask.any()):
        return weight.float().mean(dim=0)
    m = mask.to(device=weight.device, dtype=torch.float32).unsqueeze(0)  # (1, V): a mat-vec, no row gather
    return (m @ weight.float())[0] / float(mask.sum())


def init_mean(weight, pieces: Sequence[Sequence[int]], mask):
    """(N, d): every new row is the mean of the trained rows."""
    return _mean_rows(weight, mask).expand(len(pieces), -1).clone()


def init_subtoken_mean(weight, pieces: Sequence[Sequence[int]], mask):
    """(N, d): row i is the mean of the trained rows among ``pieces[i]`` (the old tokenizer's ids).

    ``weight=[[1,0],[0,2],[9,9]]``, ``pieces=[[0, 1], []]`` -> ``[[0.5, 1.0], mean]``.
    """
    import torch

    w = weight.float()
    flat = [(row, i) for row, ids in enumerate(pieces) for i in ids if 0 <= i < w.shape[0]]
    rows_idx = torch.tensor([r for r, _ in flat], dtype=torch.long, device=w.device)
    ids_idx = torch.tensor([i for _, i in flat], dtype=torch.long, device=w.device)
    keep = mask.to(w.device)[ids_idx] if len(flat) else rows_idx.bool()
    rows_idx, ids_idx = rows_idx[keep], ids_idx[keep]
    # one scatter-add instead of a Python loop: sums (N, d) and counts (N,) of each token's pieces
    sums = w.new_zeros((len(pieces), w.shape[1])).index_add_(0, rows_idx, w[ids_idx])
    counts = w.new_zeros(len(pieces)).index_add_(0, rows_idx, w.new_ones(len(rows_idx)))
    out = sums / counts.clamp(min=1).unsqueeze(1)
    out[counts == 0] = _mean_rows(weight, mask)
    return out


def init_interpolate(weight, pieces: Sequence[Sequence[int]], mask):
    """(N, d): half ``mean``, half ``subtoken-mean``."""
    return 0.5 * init_mean(weight, pieces, mask) + 0.5 * init_subtoken_mean(weight, pieces, mask)


INITS: dict[str, Callable] = {
    "mean": init_mean,
    "subtoken-mean": init_subtoken_mean,
    "interpolate": init_interpolate,
}


def new_rows(weight, pieces: Sequence[Sequence[int]], *, init: str = "interpolate"):
    """(N, d) rows for N new tokens, in ``weight``'s dtype and device; ``pieces[i]`` = old ids of token i."""
    if init not in INITS:
        raise PawError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
    return INITS[init](weight, pieces, trained_rows(weight)).to(weight.dtype)


def grow_rows(weight, total: int, *, ids: Sequence[int] = (), rows=None):
    """(total, d): ``weight`` (V, d) with ``rows[k]`` written at row ``ids[k]``; other added rows are zero.

    Rows past the old end that receive no value (padding to a multiple) stay all-zero, which also
    marks them as never trained for a later extension. An id inside the old matrix overwrites an
    unused row (a model whose matrix was already padded beyond its tokenizer).
    """
    import torch

    if total < weight.shape[0]:
        raise ValueError(f"cannot shrink {weight.shape[0]} rows to {total}")
    out = torch.zeros((total, weight.shape[1]), dtype=weight.dtype, device=weight.device)
    out[: weight.shape[0]] = weight
    if len(ids):
        index = torch.as_tensor(list(ids), dtype=torch.long, device=weight.device)
        out[index] = rows.to(weight.device, weight.dtype)
    return out
