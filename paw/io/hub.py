"""Resolve a user's model argument: a local path, or a Hugging Face model ID from the local cache.

No network: a model ID that is not in the cache is a clear error, never a download. Also here:
:func:`quiet_transformers`, which every reader that goes through ``transformers`` calls first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from paw.errors import PawError
from paw.io.input_guard import note_input

_MODEL_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def looks_like_model_id(spec: str) -> bool:
    """``'Qwen/Qwen2.5-1.5B'`` -> True; ``'./model'``, ``'/x/y'``, ``'a/b/c'`` -> False."""
    return bool(_MODEL_ID.match(spec)) and not spec.startswith(".")


def resolve_path(spec: str | os.PathLike, *, what: str = "model") -> Path:
    """Return an existing local path for ``spec``: the path itself or the cached snapshot folder."""
    path = Path(spec).expanduser()
    if path.exists():
        note_input(path)  # read-only for the rest of this run (paw.io.input_guard.input_scope)
        return path
    text = str(spec)
    if looks_like_model_id(text) and "/" in text:
        path = _cached_snapshot(text, what)
        note_input(path)
        return path
    raise PawError(f"no such file or folder ({what})", path=text)


def _cached_snapshot(repo_id: str, what: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception as err:  # LocalEntryNotFoundError, HFValidationError, ...
        raise PawError(
            f"{what} '{repo_id}' is not a local path and is not in the Hugging Face cache "
            f"({HF_HUB_CACHE}); PAW never downloads: fetch it on a machine with network "
            f"(huggingface-cli download {repo_id}) or pass a local folder ({type(err).__name__})"
        ) from None


def quiet_transformers() -> None:
    """No per-file "Loading weights" / "Writing model shards" bars or deprecation chatter from
    transformers and peft: PAW draws its own progress (``paw.progress``)."""
    import warnings

    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers|peft")
