"""Merge fine-tunes of one base: registered methods, L2-norm weighting, a streamed pipeline.

>>> from paw.merge import MergeOptions, merge                             # doctest: +SKIP
>>> merge(MergeOptions(base="base", models=["ft1", "ft2"], output="out", method="ties"))  # doctest: +SKIP

The methods are plain tensor functions in :data:`METHODS` (see :mod:`paw.merge.methods`); the
weight modes are in :data:`WEIGHT_MODES` (see :mod:`paw.merge.weights`).
"""

from paw.merge.methods import METHODS, MergeMethod, get_method, merge_method
from paw.merge.options import MergeOptions
from paw.merge.pipeline import MergeJob, execute, merge, prepare
from paw.merge.weights import WEIGHT_MODES, weights_from_norms

__all__ = ["METHODS", "WEIGHT_MODES", "MergeJob", "MergeMethod", "MergeOptions", "execute", "get_method",
           "merge", "merge_method", "prepare", "weights_from_norms"]
