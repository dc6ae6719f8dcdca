"""Fixtures of the training-loop tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def one_thread_here(one_torch_thread):
    """Every test of this folder on one torch thread (tests/conftest.py): the pinned byte comparisons run the old
    and the new loop under the same threads."""
