"""Read a YAML file into plain Python values (dicts, lists, numbers, strings); one-line errors naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw.errors import PawError

# A merge config is a few kilobytes (a long chat template, a few hundred per-tensor conditions);
# PyYAML parses about 1 MB/s in pure Python, so the cap also bounds the wait.
MAX_YAML_BYTES = 1 << 20


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file (``yaml.safe_load``: no Python objects are built).

    A missing file, a file over :data:`MAX_YAML_BYTES` (judged by its size before a byte is read),
    YAML that does not parse (the parser's first line is quoted), nesting past Python's recursion
    limit and a file whose top level is not a mapping each raise :class:`PawError` naming the file.
    """
    import yaml

    path = Path(path)
    try:
        size = path.stat().st_size
        if path.is_file() and size > MAX_YAML_BYTES:
            raise PawError(f"{size:,} bytes is more than a config file holds (at most {MAX_YAML_BYTES:,} "
                           "bytes, paw.io.yaml_file.MAX_YAML_BYTES)", path=path)
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PawError("config file not found", path=path) from None
    except IsADirectoryError:
        raise PawError("is a folder, not a YAML config file", path=path) from None
    except UnicodeDecodeError:
        raise PawError("not a text file (expected YAML)", path=path) from None
    except RecursionError:
        raise PawError("YAML nested too deeply to be a config file", path=path) from None
    except yaml.YAMLError as err:
        raise PawError(f"not valid YAML ({str(err).splitlines()[0]})", path=path) from None
    if not isinstance(data, dict):
        raise PawError("expected a YAML mapping of option names to values", path=path)
    return data
