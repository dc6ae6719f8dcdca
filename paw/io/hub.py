"""Resolve a user's model argument: a local path, or a Hugging Face Hub ID (``org/name[@revision]``).

A Hub ID already in the local Hugging Face cache is used from there without touching the network.
One that is not is downloaded into the cache by ``huggingface_hub.snapshot_download``, with its
progress bars, fetching only what PAW reads (:func:`files_to_fetch`): the config, the safetensors
weights (``pytorch_model*.bin`` only where a repo has no safetensors; PAW and transformers load them
with ``weights_only=True``), the tokenizer files, or an adapter's two files. ``HF_TOKEN`` from the
environment is sent for private and gated repos. With ``HF_HUB_OFFLINE=1``, or when the Hub cannot
be reached, a model that is not cached is one clear error naming it and the ``hf download`` command
that fetches it. No code from a repo is ever run (no ``trust_remote_code``).

Also here: :func:`hub_id`, the Hub ID behind an argument (for a model card's ``base_model``), and
:func:`quiet_transformers`, which every reader that goes through ``transformers`` calls first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from paw.errors import PawError
from paw.io.input_guard import note_input
from paw.progress import status

# org/name, optionally @revision (a branch, a tag or a commit; mergekit's spelling of a pinned model)
_MODEL_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*(/[\w.-]+)?)(@(?P<rev>[\w./-]+))?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja")
_MODEL_SIDE = ("config.json", "generation_config.json")
_ADAPTER_CONFIG = "adapter_config.json"
KINDS = ("model", "adapter", "tokenizer")  # what an argument names: which files PAW fetches for it


def looks_like_model_id(spec: str) -> bool:
    """``'Qwen/Qwen2.5-1.5B'``, ``'org/name@v1.0'`` -> True; ``'./model'``, ``'/x/y'``, ``'a/b/c'`` -> False."""
    return bool(_MODEL_ID.match(spec)) and not spec.startswith(".")


def split_revision(spec: str) -> tuple[str, str | None]:
    """``'org/name@v2'`` -> ``('org/name', 'v2')``; ``'org/name'`` -> ``('org/name', None)``."""
    match = _MODEL_ID.match(spec)
    if not match:
        return spec, None
    return match["repo"], match["rev"]


def resolve_path(spec: str | os.PathLike, *, what: str = "model", kind: str | None = None) -> Path:
    """Return an existing local path for ``spec``: the path itself, or the Hub snapshot folder (cached
    or downloaded now). ``what`` names the argument in messages; ``kind`` (``model``, ``adapter``,
    ``tokenizer``; default: ``what`` if it is one of them, else ``model``) says which files to fetch."""
    path = Path(spec).expanduser()
    if path.exists():
        note_input(path)  # read-only for the rest of this run (paw.io.input_guard.input_scope)
        return path
    text = str(spec)
    if looks_like_model_id(text) and "/" in split_revision(text)[0]:
        path = hub_snapshot(text, what=what, kind=kind or (what if what in KINDS else "model"))
        note_input(path)
        return path
    raise PawError(f"no such file or folder ({what})", path=text)


def hub_id(spec: str | os.PathLike) -> str | None:
    """The Hub repo ID an argument stands for, or None for a local folder of unknown origin.

    ``'org/name@v2'`` (not a local path) -> ``'org/name'``; a folder of the Hugging Face cache
    (``.../models--org--name/snapshots/<commit>``) -> ``'org/name'``; ``'./tiny/base'`` -> None. A
    card's ``base_model`` holds only such IDs: the Hub refuses a card that names a local path there.
    """
    text = str(spec)
    path = Path(text).expanduser()
    if path.exists():
        parts = path.resolve().parts
        for i, part in enumerate(parts[:-1]):
            if part.startswith("models--") and parts[i + 1] == "snapshots":
                return part[len("models--"):].replace("--", "/")
        return None
    repo, _ = split_revision(text)
    return repo if looks_like_model_id(text) and "/" in repo else None


def hub_snapshot(spec: str, *, what: str = "model", kind: str = "model") -> Path:
    """The snapshot folder of Hub ID ``spec`` (``org/name[@rev]``): from the cache when it holds what a
    ``kind`` needs, else downloaded (one PawError when offline or refused)."""
    repo, revision = split_revision(spec)
    cached = cached_snapshot(repo, revision)
    if cached is not None and _complete(cached, kind):
        return cached
    hint = _fetch_hint(repo, revision)
    if _offline():
        partly = " only partly" if cached is not None else " not"
        raise PawError(f"{what} '{spec}' is{partly} in the Hugging Face cache ({_cache_dir()}) and HF_HUB_OFFLINE=1 "
                       f"forbids downloading it: fetch it with `{hint}`, or pass a local folder")
    return _download(repo, revision, what=what, kind=kind, hint=hint)


def cached_snapshot(repo: str, revision: str | None) -> Path | None:
    """The cache's snapshot folder of ``repo`` at ``revision`` (a branch, tag or commit; default main),
    read from the cache layout (``models--org--name/refs/<rev>`` -> ``snapshots/<commit>``), or None."""
    from huggingface_hub.file_download import repo_folder_name

    storage = Path(_cache_dir()) / repo_folder_name(repo_id=repo, repo_type="model")
    revision = revision or "main"
    commit = revision if _COMMIT.match(revision) else None
    ref = storage / "refs" / revision
    if commit is None and ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
    folder = storage / "snapshots" / commit if commit else None
    return folder if folder is not None and folder.is_dir() else None


def files_to_fetch(repo_files: list[str], kind: str) -> list[str]:
    """Which of a repo's files PAW downloads for an argument of ``kind``; top-level files only.

    >>> files = ["config.json", "model.safetensors", "pytorch_model.bin", "README.md", "tokenizer.json",
    ...          "onnx/model.safetensors", "training_args.bin"]
    >>> files_to_fetch(files, "model")
    ['config.json', 'model.safetensors', 'tokenizer.json']
    >>> files_to_fetch(["config.json", "pytorch_model.bin"], "model")  # no safetensors: the pickle
    ['config.json', 'pytorch_model.bin']
    >>> files_to_fetch(["adapter_config.json", "adapter_model.safetensors", "README.md"], "adapter")
    ['adapter_config.json', 'adapter_model.safetensors']
    """
    top = [f for f in repo_files if "/" not in f]
    tokenizer = [f for f in top if f in TOKENIZER_FILES or f.endswith(".tiktoken")]
    if kind == "tokenizer":
        return sorted({*tokenizer, *(f for f in top if f == "config.json")})
    if kind == "adapter":
        weights = [f for f in top if f == "adapter_model.safetensors"] or [f for f in top if f == "adapter_model.bin"]
        return sorted({*(f for f in top if f == _ADAPTER_CONFIG), *weights, *tokenizer})
    weights = [f for f in top if f.endswith(".safetensors") or f == "model.safetensors.index.json"]
    if not any(f.endswith(".safetensors") for f in weights):
        weights = [f for f in top if re.fullmatch(r"pytorch_model(-\d+-of-\d+)?\.bin(\.index\.json)?", f)]
    return sorted({*(f for f in top if f in _MODEL_SIDE), *weights, *tokenizer})


def _complete(folder: Path, kind: str) -> bool:
    """Whether a cached snapshot holds what a ``kind`` argument needs (a partial ``hf download`` may not)."""
    names = {p.name for p in folder.iterdir()}
    if kind == "adapter":
        return _ADAPTER_CONFIG in names and bool(names & {"adapter_model.safetensors", "adapter_model.bin"})
    if kind == "tokenizer":
        return any(n in names for n in ("tokenizer.json", "tokenizer.model", "vocab.json")) or \
            any(n.endswith(".tiktoken") for n in names)
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if index in names:
            return _shards_present(folder, folder / index)
    return any(n.endswith(".safetensors") or re.fullmatch(r"pytorch_model.*\.bin", n) for n in names)


def _shards_present(folder: Path, index: Path) -> bool:
    import json

    try:
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return all((folder / name).is_file() for name in shards)


def _download(repo: str, revision: str | None, *, what: str, kind: str, hint: str) -> Path:
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    token = os.environ.get("HF_TOKEN") or None
    named = f"{what} '{repo}'" + (f" (revision {revision})" if revision else "")
    try:
        info = huggingface_hub.model_info(repo, revision=revision, token=token)  # one request, no retries
        files = files_to_fetch([s.rfilename for s in info.siblings or ()], kind)
        if not _complete_listing(files, kind):
            raise PawError(f"{named}: the Hub repo holds no {_needs(kind)} at its top level")
        status(f"downloading {named} from the Hugging Face Hub into {_cache_dir()}: {', '.join(files)}")
        folder = huggingface_hub.snapshot_download(repo, revision=revision, allow_patterns=files, token=token,
                                                   tqdm_class=_bars())
    except PawError:
        raise
    except GatedRepoError:
        raise PawError(f"{named} is gated on the Hub: accept its terms on its page, then set HF_TOKEN "
                       "to a token of that account") from None
    except RepositoryNotFoundError:
        raise PawError(f"{named} is not on the Hugging Face Hub, or is private (set HF_TOKEN to a token "
                       "that may read it)") from None
    except RevisionNotFoundError:
        raise PawError(f"{named}: the Hub repo has no such revision (a branch, tag or commit)") from None
    except Exception as err:  # no network (a connection error, a timeout), the Hub down, a full disk
        raise PawError(f"{named} is not in the Hugging Face cache and could not be downloaded "
                       f"({type(err).__name__}); fetch it where the Hub can be reached with `{hint}`, "
                       "or pass a local folder") from None
    return Path(folder)


def _complete_listing(files: list[str], kind: str) -> bool:
    if kind == "adapter":
        return _ADAPTER_CONFIG in files
    if kind == "tokenizer":
        return any(f != "config.json" for f in files)
    return any(f.endswith((".safetensors", ".bin")) for f in files)


def _needs(kind: str) -> str:
    return {"adapter": "adapter_config.json", "tokenizer": "tokenizer files"}.get(
        kind, "safetensors (or pytorch_model*.bin) weights")


def _fetch_hint(repo: str, revision: str | None) -> str:
    return f"hf download {repo}" + (f" --revision {revision}" if revision else "")


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _bars():
    """huggingface_hub's own progress bars for a download, even under the CLI's default
    ``HF_HUB_DISABLE_PROGRESS_BARS=1`` (which keeps its other bars quiet); none with ``PAW_PROGRESS=0``."""
    if os.environ.get("PAW_PROGRESS", "").strip() == "0":
        from huggingface_hub.utils import tqdm as silenced  # honours HF_HUB_DISABLE_PROGRESS_BARS

        return silenced
    from tqdm.auto import tqdm

    return tqdm


def quiet_transformers() -> None:
    """No per-file "Loading weights" / "Writing model shards" bars or deprecation chatter from
    transformers and peft: PAW draws its own progress (``paw.progress``)."""
    import warnings

    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers|peft")
