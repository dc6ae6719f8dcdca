"""Read a YAML file into plain Python values (dicts, lists, numbers, strings); one-line errors naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw.errors import PawError


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file (``yaml.safe_load``: no Python objects are built).

    A missing file, YAML that does not parse (the parser's first line is quoted) and a file whose top
    level is not a mapping each raise :class:`PawError` naming the file.
    """
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PawError("config file not found", path=path) from None
    except IsADirectoryError:
        raise PawError("is a folder, not a YAML config file", path=path) from None
    except UnicodeDecodeError:
        raise PawError("not a text file (expected YAML)", path=path) from None
    except yaml.YAMLError as err:
        raise PawError(f"not valid YAML ({str(err).splitlines()[0]})", path=path) from None
    if not isinstance(data, dict):
        raise PawError("expected a YAML mapping of option names to values", path=path)
    return data
