"""Nearest token by character n-grams through an inverted index (never an all-pairs scan).

Each token is the set of its character trigrams with start/end marks: ``'the'`` ->
``{'^th', 'the', 'he$'}``. The score of a pair is Dice's coefficient ``2|A ∩ B| / (|A| + |B|)``.
Candidates come from a sparse product of the target n-gram matrix with the source one restricted to
*informative* n-grams (those in at most ``max_df`` source tokens), so the work is proportional to
the number of pairs that share a rare n-gram. Frequent n-grams still count in the denominators.
"""

from __future__ import annotations


def ngrams(token: bytes, n: int = 3) -> set[str]:
    """``b'the'`` -> ``{'\\x02th', 'the', 'he\\x03'}`` (short tokens give one padded gram)."""
    s = "\x02" + token.decode("utf-8", errors="backslashreplace") + "\x03"
    if len(s) <= n:
        return {s}
    return {s[i:i + n] for i in range(len(s) - n + 1)}


class NgramIndex:
    """Index the source tokens once; :meth:`nearest` answers many target tokens in sparse chunks."""

    def __init__(self, tokens: list[bytes], *, n: int = 3, max_df: int = 1000):
        import numpy as np  # deferred with scipy: paw.vocab.align names its methods for paw --help
        import scipy.sparse as sp

        self.n = n
        self.grams: dict[str, int] = {}
        rows, cols = [], []
        for r, tok in enumerate(tokens):
            for g in ngrams(tok, n):
                rows.append(r)
                cols.append(self.grams.setdefault(g, len(self.grams)))
        data = np.ones(len(rows), dtype=np.float32)
        S = sp.csr_matrix((data, (rows, cols)), shape=(len(tokens), len(self.grams)))
        self.sizes = np.asarray(S.sum(axis=1)).ravel()
        df = np.asarray(S.sum(axis=0)).ravel()
        keep = sp.diags((df <= max_df).astype(np.float32))
        self.S_t = (S @ keep).T.tocsr()  # (G, Ns), informative grams only

    def nearest(self, tokens: list[bytes], *, chunk: int = 2048) -> list[tuple[int, float]]:
        """For each token, ``(source row, Dice score)``; ``(-1, 0.0)`` when no informative gram is shared."""
        import numpy as np  # deferred with scipy: paw.vocab.align names its methods for paw --help
        import scipy.sparse as sp

        out: list[tuple[int, float]] = []
        for start in range(0, len(tokens), chunk):
            part = [ngrams(t, self.n) for t in tokens[start:start + chunk]]
            rows, cols = [], []
            for r, gs in enumerate(part):
                for g in gs:
                    if (c := self.grams.get(g)) is not None:
                        rows.append(r)
                        cols.append(c)
            T = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)),
                              shape=(len(part), len(self.grams)))
            R = (T @ self.S_t).tocsr()
            R.sort_indices()
            sizes_t = np.array([len(gs) for gs in part], dtype=np.float32)
            for r in range(len(part)):
                lo, hi = R.indptr[r], R.indptr[r + 1]
                if lo == hi:
                    out.append((-1, 0.0))
                    continue
                cand = R.indices[lo:hi]
                dice = 2.0 * R.data[lo:hi] / (sizes_t[r] + self.sizes[cand])
                j = int(np.argmax(dice))
                out.append((int(cand[j]), float(dice[j])))
        return out
