"""Read a JSON object from a file, with a one-line :class:`~paw.errors.PawError` naming it."""

from __future__ import annotations

import json
from pathlib import Path

from paw.errors import PawError


def read_json(path: str | Path) -> dict:
    """Read a JSON object; a missing or malformed file is a one-line PawError naming it."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise PawError("file not found", path=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PawError(f"not valid JSON ({err})", path=path) from None
    if not isinstance(data, dict):
        raise PawError("expected a JSON object at the top level", path=path)
    return data


def read_json_if_exists(path: Path) -> dict | None:
    return read_json(path) if path.exists() else None
