"""Train a byte-level BPE from pre-token counts, updating pair counts incrementally.

The classroom trainer (minbpe) recounts every pair of the whole corpus after each merge:
O(merges x corpus). Here, as in Hugging Face's ``BpeTrainer`` and Sennrich et al. (2016, ACL,
"Neural Machine Translation of Rare Words with Subword Units"):

1. the corpus becomes counts of unique pre-tokens (``{b" the": 51234, ...}``), so a word seen
   50k times is one row with a weight;
2. ``pair_counts[(a, b)]`` and ``where[(a, b)]`` (the words containing that pair) are built once;
3. each merge rewrites only the words in ``where[pair]`` and adjusts the counts of the pairs
   around each merge site;
4. the best pair comes from a heap of ``(-count, a, b)``. Counts only ever fall for an existing
   pair (new pairs all contain the new token), so stale heap entries are fixed when they surface
   ("lazy invalidation"): pop, compare with the live count, push back corrected if it changed.

Ties: the heap order ``(-count, a, b)`` picks, among pairs of equal count, the one with the
smallest left id and then the smallest right id. Ids are ranks: single bytes in GPT-2 order
(:func:`paw.bytelevel.alphabet.byte_order`), then tokens in the order learned. That is exactly
``BpeTrainer``'s order (its ``Merge`` compares count, then the reversed pair; its alphabet ids are
sorted by the GPT-2 character's code point), so on the same pre-tokens the merges are the same.
``tests/bpe/test_train.py`` checks it against ``tokenizers`` directly.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from paw.bytelevel.alphabet import byte_order


@dataclass
class TrainResult:
    """``merges[i] = (left, right)`` in learned order; ``ranks`` in tiktoken's sense
    (``{b" the": 279}``), 256 single bytes first; ``counts[i]`` is the count of merge ``i``."""

    merges: list[tuple[bytes, bytes]]
    ranks: dict[bytes, int]
    counts: list[int]


def train_bpe(word_counts: Mapping[bytes, int], n_tokens: int, *, min_frequency: int = 0,
              track: Callable[[Iterable[int], int], Iterable[int]] | None = None) -> TrainResult:
    """Learn merges until the vocabulary has ``n_tokens`` byte tokens (256 + learned).

    ``word_counts``: pre-token bytes -> occurrences. Stops early when no pair is left or the best
    count is below ``max(1, min_frequency)``. ``track(range(k), k)`` wraps the merge loop (a bar).

    >>> r = train_bpe({b"aaab": 2, b"ab": 3}, 258)
    >>> r.merges                  # (a, b) occurs 5 times, (a, a) 4 times
    [(b'a', b'b'), (b'a', b'a')]
    """
    tokens = [bytes([b]) for b in byte_order()]  # id -> bytes
    ids = {tok: i for i, tok in enumerate(tokens)}
    words = [[ids[word[i:i + 1]] for i in range(len(word))] for word in word_counts if len(word) > 1]
    counts = [c for word, c in word_counts.items() if len(word) > 1]
    pair_counts, where = _count_pairs(words, counts)
    heap = [(-c, a, b) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)

    merges, merge_counts = [], []
    steps = range(max(0, n_tokens - len(tokens)))
    for _ in (track(steps, len(steps)) if track else steps):
        pair, count = _pop_best(heap, pair_counts)
        if pair is None or count < max(1, min_frequency):
            break
        joined = tokens[pair[0]] + tokens[pair[1]]
        new = ids.get(joined)
        if new is None:  # a merge may rebuild an existing token; it then adds no id (as BpeTrainer)
            new = ids[joined] = len(tokens)
            tokens.append(joined)
        merges.append((tokens[pair[0]], tokens[pair[1]]))
        merge_counts.append(count)
        for p in _apply_merge(pair, new, words, counts, pair_counts, where):
            if pair_counts[p] > 0:
                heapq.heappush(heap, (-pair_counts[p], p[0], p[1]))
        if len(tokens) >= n_tokens:
            break
    return TrainResult(merges, ids, merge_counts)


def _count_pairs(words: list[list[int]], counts: list[int]):
    pair_counts: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)
    for wi, word in enumerate(words):
        c = counts[wi]
        for pair in pairwise(word):
            pair_counts[pair] += c
            where[pair].add(wi)
    return pair_counts, where


def _pop_best(heap: list, pair_counts: dict) -> tuple[tuple[int, int] | None, int]:
    """Pop until the top entry's count is the live one (lazy invalidation)."""
    while heap:
        neg, a, b = heapq.heappop(heap)
        live = pair_counts.get((a, b), 0)
        if live == -neg:
            return (a, b), live
        if live > 0:
            heapq.heappush(heap, (-live, a, b))
    return None, 0


def _apply_merge(pair, new, words, counts, pair_counts, where) -> set[tuple[int, int]]:
    """Replace ``pair`` by ``new`` in the words that hold it, left to right without overlap
    (``a a a`` with pair ``(a, a)`` -> ``aa a``), and move the counts of the neighbouring pairs.

    At each merge site ``x a b y`` becomes ``x N y``: ``(x, a)`` and ``(b, y)`` lose the word's
    count, ``(x, N)`` and ``(N, y)`` gain it. ``x`` is read from the output, so back-to-back sites
    (``a b a b`` -> ``N N``) come out right. Only the sites are touched, not the whole word.
    Returns the pairs that contain ``new`` (their counts rose, so they need a fresh heap entry).
    """
    a, b = pair
    created: set[tuple[int, int]] = set()
    for wi in where.pop(pair, ()):
        word, c = words[wi], counts[wi]
        n, i, merged, sites = len(word), 0, [], 0
        find = word.index
        while True:
            try:
                j = find(a, i)
            except ValueError:
                break
            if j + 1 == n or word[j + 1] != b:
                merged += word[i:j + 1]
                i = j + 1
                continue
            merged += word[i:j]
            if merged:
                x = merged[-1]
                pair_counts[x, a] -= c
                left = (x, new)
                pair_counts[left] += c
                created.add(left)
                where[left].add(wi)
            if j + 2 < n:
                y = word[j + 2]
                pair_counts[b, y] -= c
                right = (new, y)
                pair_counts[right] += c
                created.add(right)
                where[right].add(wi)
            merged.append(new)
            i, sites = j + 2, sites + 1
        if sites:  # a stale entry (an earlier merge consumed the pair here) has none
            merged += word[i:]
            words[wi] = merged
    pair_counts.pop(pair, None)
    return created
