"""Choices that share their context, scored with that context run once: its keys and values are cached,
and every choice runs as a continuation of them.

A four-choice ARC-Easy item scored row by row runs its question four times, ``4 x (40 + 4)`` tokens for a
40-token question and 4-token answers; here the question runs once and each choice from its cached keys
and values, ``40 + 4 x 4`` tokens. Choices that begin alike (PIQA's two solutions often differ in one
word) share those tokens too: the log-likelihood of the answer tokens every choice has is computed once
and counted for each.

For a group of rows ``s_r`` (token ids, context then choice, as
:func:`~paw.evaluate.encode.encode_pair` gives them) with the same ``a``-token context and a common
prefix of ``L`` tokens::

    s_1 = [BOS, Question, :, ..., Answer, :, | ▁red,  ▁car]       a = context tokens, L = common tokens
    s_2 = [BOS, Question, :, ..., Answer, :, | ▁blue]
           |-------- prefix s[:P] ---------|   P = min(L - 1, min_r len(s_r) - 2) >= a - 1
                                    |--- each rest s_r[P:-1], from the prefix's keys and values

- the *prefix* ``s[:P]`` runs once; its positions ``a - 1 .. P - 1`` predict answer tokens all rows
  share (``s[a .. P]``: none when the choices differ from their first token);
- each row's *rest* ``s_r[P:-1]`` (one token at least) runs from the cached prefix and predicts
  ``s_r[P + 1:]``, the rest of its answer.

Batches: prefixes longest first, laid out as :func:`~paw.evaluate.encode.make_batch` lays out any batch;
their keys and values are kept per group (up to :data:`KV_BUDGET` bytes), then the rests of the kept
groups go longest first, right-padded, two sorts because prefix and rest lengths vary apart (PIQA). In a
rest batch each row's prefix keys are right-aligned against its rest, so a column distance is a token
distance, which is what a sliding-window layer (Gemma-3, Mistral) measures; the cache is built without the
model's config, so no layer drops keys past its window and the window is applied by the mask alone.

Where the equality with whole rows is not tested, the rows run whole (:func:`refusal`): model families
other than :data:`CACHED_TYPES`, and a cache whose layout this module does not read (:class:`Unshareable`).
The cached and the whole path agree to float rounding: ``tests/evaluate/test_shared_context.py``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

from paw.evaluate.encode import Batch, Encoded, left_columns, make_batch, sliding_window_of
from paw.evaluate.forward import Batches, TooBig, logits_fit, score_targets, vocab_size
from paw.progress import track

CACHED_TYPES = frozenset({"llama", "mistral", "qwen2", "gemma", "gemma3_text"})
"""``config.model_type`` of the families the cached path is tested against whole rows on (left padding,
contexts of different lengths, sliding windows): the zoo's four and Gemma-3's text model."""

REST_ROWS = 4
"""A rest batch holds up to this many times ``batch_size`` rows, as long as its rest tokens stay within those of
``batch_size`` whole rows (:func:`cheapest_slices`): an ARC-Easy rest is a few tokens, and a matrix product over
8 x 5 rows runs at about three quarters of the speed of one over 32 x 5 on a CPU core (torch 2.13)."""

PASS_TOKENS = 16
"""A forward pass's fixed cost, in tokens of work, for :func:`cheapest_slices`: every pass reads all the weights,
so SmolLM2-135M takes 88 ms for one token on a CPU core and 4.7 ms a token in a batch of 320 (torch 2.13)."""

KV_BUDGET = 256 << 20
"""Bytes of cached prefix keys and values held before the rests waiting on them are run (SmolLM2-135M keeps
46 KB a token: about 150 ARC-Easy questions, or 20 five-shot ones)."""


class Unshareable(Exception):
    """The model's KV cache is not laid out as this module reads it: score every row whole instead."""


@dataclass(frozen=True)
class Group:
    """Rows (indices of encodings) with one context; ``prefix`` holds ``s[:P + 1]`` with ``n_cont = P - a + 1``,
    so that :func:`~paw.evaluate.encode.make_batch` runs ``s[:P]`` and scores the shared answer tokens."""

    rows: tuple[int, ...]
    prefix: Encoded

    @property
    def length(self) -> int:
        """``P``, the prefix tokens that run once."""
        return len(self.prefix.ids) - 1


def plan(encoded: Sequence[Encoded]) -> tuple[list[Group], list[int]]:
    """``(groups, alone)``: encodings with one context and a prefix to share, grouped; the others' indices.

    >>> groups, alone = plan([Encoded((1, 5, 6, 7), 1), Encoded((1, 5, 6, 8, 9), 2), Encoded((1, 3), 1)])
    >>> [(g.rows, g.prefix) for g in groups], alone
    ([((0, 1), Encoded(ids=(1, 5, 6), n_cont=0))], [2])
    """
    by_context: dict[tuple[int, ...], list[int]] = {}
    for i, e in enumerate(encoded):
        by_context.setdefault(e.ids[:len(e.ids) - e.n_cont], []).append(i)
    groups, alone = [], []
    for context, rows in by_context.items():
        seqs = [encoded[i].ids for i in rows]
        cut = min(common_length(seqs) - 1, min(map(len, seqs)) - 2)
        if len(rows) < 2 or cut < 1:
            alone += rows
            continue
        groups.append(Group(tuple(rows), Encoded(seqs[0][:cut + 1], cut - len(context) + 1)))
    return groups, sorted(alone)


def common_length(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all of ``seqs`` share.

    >>> common_length([(1, 2, 3), (1, 2, 4, 5), (1, 2)])
    2
    """
    first, n = seqs[0], min(map(len, seqs))
    for s in seqs[1:]:
        n = next((k for k in range(n) if s[k] != first[k]), n)
    return n


def refusal(model) -> str | None:
    """Why ``model``'s rows cannot share their context here (``None``: they can)."""
    kind = getattr(getattr(model, "config", None), "model_type", None)
    if kind not in CACHED_TYPES:
        return f"model type {kind}: the shared context is tested on {', '.join(sorted(CACHED_TYPES))}"
    if cache_keyword(model) is None:
        return "the model's forward takes no KV cache"
    try:
        from transformers import DynamicCache  # noqa: F401
    except ImportError:
        return "this transformers has no DynamicCache"
    return None


def cache_keyword(model) -> str | None:
    """The forward argument a KV cache goes in: ``cache`` (transformers 5.24 on), ``past_key_values`` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model   # PEFT passes it through
    names = inspect.signature(base.forward).parameters
    return next((name for name in ("cache", "past_key_values") if name in names), None)


def score_groups(model, encoded: Sequence[Encoded], groups: Sequence[Group], *, pad_id: int, batches: Batches,
                 results: list, progress: bool = False, description: str = "scoring choices") -> None:
    """``results[r] = (sum log p(answer), n_tokens)`` for every row ``r`` of every group; rows run as in the
    module docstring, prefixes longest first, then rests longest first."""
    run = _Run(model, encoded, groups, pad_id=pad_id, batches=batches, results=results)
    order = sorted(range(len(groups)), key=lambda g: -groups[g].length)
    slices = cheapest_slices([groups[g].length for g in order], most=batches.size)  # Batches.run splits them
    for part in track(slices, description, total=len(slices), unit="batches") if progress else slices:  # if need be
        batches.run([order[i] for i in part], run.prefixes, tokens=run.longest)
        if run.held_bytes >= KV_BUDGET:
            run.rests()
    run.rests()


class _Run:
    """The state of one :func:`score_groups` call: the prefixes' keys and values waiting for their rests."""

    def __init__(self, model, encoded, groups, *, pad_id: int, batches: Batches, results: list) -> None:
        self.model, self.encoded, self.groups, self.pad_id = model, encoded, groups, pad_id
        self.batches, self.results = batches, results
        self.rest_batches = Batches(batches.size * REST_ROWS, auto=batches.auto, device=batches.device)
        self.keyword = cache_keyword(model)
        self.window = sliding_window_of(model)
        self.vocab = vocab_size(model)
        self.held: dict[int, tuple[float, int, list]] = {}   # group -> (shared sum, shared n, [(k, v) per layer])
        self.held_bytes = 0

    def longest(self, part: list[int]) -> int:
        return max(self.groups[g].length for g in part)

    def prefixes(self, part: list[int]) -> None:
        """Run the prefixes of groups ``part``; keep each one's keys and values (H, P, d) per layer."""
        import torch

        batch = make_batch([self.groups[g].prefix for g in part], pad_id=self.pad_id, padding_side="left",
                           window=self.window)
        if not logits_fit(batch, self.vocab, targets_only=True):
            raise TooBig
        cache = _empty_cache()
        sums, counts = score_targets(self.model, batch, self.batches.device, **{self.keyword: cache, "use_cache": True})
        layers = _layers(cache, rows=len(part), width=batch.input_ids.shape[1], model=self.model)
        width = batch.input_ids.shape[1]
        right = self.window is not None and width > self.window   # make_batch's own rule
        for row, g in enumerate(part):
            n = self.groups[g].length
            cols = (torch.arange(n) if right else left_columns(n, width)).to(layers[0][0].device)
            kv = [(k[row][:, cols], v[row][:, cols]) for k, v in layers]
            self.held[g] = (float(sums[row]), int(counts[row]), kv)
            self.held_bytes += sum(k.numel() * k.element_size() * 2 for k, _ in kv)

    def rests(self) -> None:
        """Run the rests of every held group's rows, longest first, and free the held keys and values."""
        rows = [(r, g) for g in sorted(self.held) for r in self.groups[g].rows]
        rows.sort(key=lambda rg: -(len(self.encoded[rg[0]].ids) - self.groups[rg[1]].length))
        whole = [len(self.encoded[r].ids) - 1 for r, _ in rows]
        rest = [n - self.groups[g].length for n, (_, g) in zip(whole, rows, strict=True)]
        for part in cheapest_slices(rest, most=self.rest_batches.size, size=self.batches.size, whole=whole):
            self.rest_batches.run(list(part), lambda part: self._rest_batch([rows[i] for i in part]),
                                  tokens=lambda part: max(whole[i] for i in part))
        self.held.clear()
        self.held_bytes = 0

    def _rest_batch(self, rows: list[tuple[int, int]]) -> None:
        lengths = [self.groups[g].length for _, g in rows]
        batch = rest_batch([self.encoded[r].ids[p:] for (r, _), p in zip(rows, lengths, strict=True)], lengths,
                           pad_id=self.pad_id)
        if not logits_fit(batch, self.vocab, targets_only=True):
            raise TooBig
        cache = _prefix_cache([self.held[g][2] for _, g in rows], lengths)
        sums, counts = score_targets(self.model, batch, self.batches.device, **{self.keyword: cache, "use_cache": True})
        for (r, g), s, c in zip(rows, sums.tolist(), counts.tolist(), strict=True):
            shared_sum, shared_n, _ = self.held[g]
            self.results[r] = (shared_sum + float(s), shared_n + int(c))


def cheapest_slices(lengths: Sequence[int], *, most: int, size: int | None = None,
                    whole: Sequence[int] | None = None, overhead: int = None) -> list[range]:
    """Cut rows sorted longest first into consecutive batches at the least cost, ``rows x longest + overhead``
    per batch (padded tokens, and a pass's fixed cost in tokens, :data:`PASS_TOKENS` by default).

    A batch holds at most ``most`` rows; with ``whole``, also at most ``size`` x its longest ``whole`` row in
    tokens (a rest batch: the tokens a batch of ``size`` whole rows would hold). Dynamic programming over the
    cut points, O(rows x most).

    >>> cheapest_slices([40, 39, 38, 12, 11, 10, 2], most=4, overhead=16)   # 136 + 64; fixed fours: 176 + 49
    [range(0, 3), range(3, 7)]
    """
    overhead = PASS_TOKENS if overhead is None else overhead
    n = len(lengths)
    best, cut = [0] * (n + 1), list(range(1, n + 2))
    for i in range(n - 1, -1, -1):
        best[i], longest = None, 0
        for j in range(i + 1, min(n, i + most) + 1):
            longest = max(longest, whole[j - 1]) if whole is not None else 0
            if whole is not None and j > i + 1 and (j - i) * lengths[i] > size * longest:
                break
            cost = (j - i) * lengths[i] + overhead + best[j]
            if best[i] is None or cost < best[i]:
                best[i], cut[i] = cost, j
    slices, i = [], 0
    while i < n:
        slices.append(range(i, cut[i]))
        i = cut[i]
    return slices


def rest_batch(rests: Sequence[Sequence[int]], prefix_lengths: Sequence[int], *, pad_id: int) -> Batch:
    """The batch of rests ``s_r[P_r:]`` that run after cached prefixes of ``P_r`` tokens (rest inputs right-padded).

    ``attention_mask`` (B, max P + T) covers the cached columns too: row ``r``'s prefix sits in the last
    ``P_r`` of the first ``max P`` (as :func:`_prefix_cache` puts it), then its rest. Positions go on from
    ``P_r``. Every input position predicts an answer token.

    >>> b = rest_batch([(7, 8, 9), (4, 5)], [3, 1], pad_id=0)
    >>> b.input_ids.tolist(), b.attention_mask.tolist(), b.position_ids.tolist()
    ([[7, 8], [4, 0]], [[1, 1, 1, 1, 1], [0, 0, 1, 1, 0]], [[3, 4], [1, 2]])
    """
    import torch

    width, length = max(prefix_lengths), max(len(s) for s in rests) - 1
    shape = (len(rests), length)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    targets = torch.full(shape, pad_id, dtype=torch.long)
    target_mask = torch.zeros(shape, dtype=torch.bool)
    mask = torch.zeros(len(rests), width + length, dtype=torch.long)
    for row, (ids, p) in enumerate(zip(rests, prefix_lengths, strict=True)):
        n = len(ids) - 1
        input_ids[row, :n] = torch.tensor(ids[:-1])
        targets[row, :n] = torch.tensor(ids[1:])
        target_mask[row, :n] = True
        mask[row, width - p:width + n] = 1
    positions = torch.tensor(prefix_lengths)[:, None] + torch.arange(length)
    return Batch(input_ids, mask, positions, targets, target_mask)


def _empty_cache():
    from transformers import DynamicCache

    return DynamicCache()   # without the config: no layer drops keys past a sliding window


def _prefix_cache(kvs: list[list], lengths: Sequence[int]):
    """A cache of ``max(lengths)`` columns: row ``r``'s prefix keys and values right-aligned, zeros before them
    (masked by :func:`rest_batch`'s attention mask)."""
    import torch
    import torch.nn.functional as F

    width = max(lengths)
    cache = _empty_cache()
    for layer in range(len(kvs[0])):
        keys, values = (torch.stack([F.pad(kv[layer][i], (0, 0, width - n, 0)) for kv, n in zip(kvs, lengths,
                                                                                                 strict=True)])
                        for i in (0, 1))
        cache.update(keys, values, layer)
    return cache


def _layers(cache, *, rows: int, width: int, model) -> list[tuple]:
    """``[(keys, values)]`` per layer, each (rows, kv heads, width, head dim); :class:`Unshareable` otherwise."""
    if hasattr(cache, "layers"):   # transformers 5
        layers = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in cache.layers]
    else:                          # transformers 4
        layers = list(zip(getattr(cache, "key_cache", ()), getattr(cache, "value_cache", ()), strict=False))
    config = getattr(model.config, "text_config", None) or model.config
    expected = getattr(config, "num_hidden_layers", None)
    if (not layers or len(layers) != expected
            or any(k is None or v is None or k.ndim != 4 or k.shape[0] != rows or k.shape[2] != width
                   or v.shape[:3] != k.shape[:3] for k, v in layers)):
        raise Unshareable(f"its KV cache ({type(cache).__name__}) is not {expected} layers of (batch, heads, "
                          "tokens, head dim) keys and values")
    return layers
