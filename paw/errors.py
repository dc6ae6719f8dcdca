"""One error type for everything a user can get wrong, and the outcomes that are not failures.

The CLI prints ``error: <message>`` on one line and exits with the error's ``exit_code`` (2 for bad
input, 3 for :class:`NoGain`), never a traceback.
Messages name the file or value at fault and, where there is one, the fix. Code that must tell
outcomes apart (the benchmark scores a refusal as the base, a method that cannot apply as n/a)
catches the subclasses below; it never reads the message text.
"""

from __future__ import annotations

from pathlib import Path


class PawError(Exception):
    """A user-facing failure with a one-line message."""

    exit_code = 2  # what the CLI exits with

    def __init__(self, message: str, *, path: str | Path | None = None):
        self.path = None if path is None else str(path)
        full = f"{self.path}: {message}" if self.path else message
        super().__init__(" ".join(full.split()))  # always one line


class Refused(PawError):
    """The inputs are valid but PAW declines on evidence: ``auto`` transfer to an unrelated target, or
    across a tokenizer change.

    The user can override the first (``--force``) and name a method for the second; a benchmark scores
    it as "refused", not as a failure.
    """


class NotApplicable(PawError):
    """This method cannot apply to these inputs (``copy`` across shapes); another method may."""


class Skipped(PawError):
    """A step or benchmark target was not run because something it needs is missing."""


class NoGain(PawError):
    """A result was measured and asked to beat a reference, and did not: ``--require-gain`` found
    the moved adapter no better than the target's base on ``--check-data``. Nothing was written."""

    exit_code = 3
