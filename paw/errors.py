"""One error type for everything a user can get wrong.

The CLI prints ``error: <message>`` on one line and exits with code 2, never a traceback.
Messages name the file or value at fault and, where there is one, the fix.
"""

from __future__ import annotations

from pathlib import Path


class PawError(Exception):
    """A user-facing failure with a one-line message."""

    def __init__(self, message: str, *, path: str | Path | None = None):
        self.path = None if path is None else str(path)
        full = f"{self.path}: {message}" if self.path else message
        super().__init__(" ".join(full.split()))  # always one line
