"""A tokenizer's ``tokenizer_config.json`` with a new chat template (mergekit's ``chat_template`` key)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw.io.json_file import read_json_if_exists


def with_chat_template(model: str | Path, template: str) -> dict[str, Any]:
    """``tokenizer_config.json`` of ``model`` (a folder, or a weight file's folder) with ``chat_template`` set.

    A model without that file gets a minimal one holding only the template.
    """
    folder = Path(model)
    folder = folder if folder.is_dir() else folder.parent
    config = dict(read_json_if_exists(folder / "tokenizer_config.json") or {})
    config["chat_template"] = template
    return config
