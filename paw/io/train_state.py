"""A training run's work folder: resumable checkpoints and the teacher's cached continuations.

``OUT-work/`` sits beside the output folder (which appears atomically only at the end), so what a
killed run made survives it:

- ``train-state.pt``: the last checkpoint of ``--save-every K`` (LoRA factors, optimiser and
  scheduler state, RNG states, step, loss curve, settings), written atomically: a run killed while
  writing leaves the previous checkpoint. Read back with ``weights_only=True``.
- ``continuations-rank{R}.jsonl``: the teacher's continuations, one JSON line per input, appended
  and flushed chunk by chunk as they are made (one file per rank, so ranks never share a file). A
  line cut short by a kill is ignored on reading.
- ``teacher-{NAME}.json``: one list of the teacher's per-input scores (its choice log-likelihoods,
  its per-token log-probability gains), written atomically once made, under a key that names the
  teacher and every input it scored; a file under another key, or unreadable, is made again.
- ``synthesis.json``: ``--synthesize``'s inputs so far and what it needs to go on (counts, every text
  seen, the sampler's RNG), rewritten atomically after each round of candidates under a key that
  names the teacher, the seeds and the settings; a file under another key, or unreadable, is ignored.
- ``omp-{WHAT}-{START}.safetensors``: ``paw transplant-tokenizer --donor``'s OMP fits, one file per
  batch of tokens (``idx`` and ``coef``, the batch's first position ``START``), written atomically as
  each batch is done, under a key that names the donor's rows, the anchors, the tokens and ``k``; a
  file under another key, or unreadable, is fitted again.

This module knows files only; what a state holds is :mod:`paw.train_state`'s business.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from paw.errors import PawError
from paw.io.atomic import atomic_file

STATE_NAME = "train-state.pt"
STATE_KEYS = ("step", "settings", "params", "optimizer")  # what every checkpoint holds (paw.train_state.capture)
CACHE_GLOB = "continuations-rank*.jsonl"


def work_dir(output: str | os.PathLike) -> Path:
    """``OUT-work`` beside ``OUT``: ``work_dir('runs/moved')`` -> ``runs/moved-work``."""
    output = Path(output)
    return output.with_name(output.name + "-work")


def check_work_dir(folder: str | os.PathLike, *, flag: str = "--save-every") -> Path:
    """Refuse, before any work, a work folder path that holds something other than a folder.

    ``OUT-work`` keeps the resumable training state; a file of that name made the first save fail
    with a bare "File exists" after the first steps had run.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise PawError(f"is a file, but {flag} keeps the resumable training state in a folder of this name; "
                       "move the file away or choose another --output", path=folder)
    return folder


def save_train_state(folder: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` (tensors, numbers, strings, lists, dicts) as ``folder/train-state.pt``, atomically."""
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STATE_NAME
    with atomic_file(path, "wb", overwrite=True) as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    return path


def load_train_state(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The checkpoint in ``folder``, or None when there is none; a damaged, empty or cut one, or a folder of
    its name, is refused naming the file."""
    import torch

    path = Path(folder) / STATE_NAME
    if path.exists() and not path.is_file():  # a restart from step 0 would have hidden it
        raise PawError("is a folder, not a training checkpoint; --resume reads the file of this name: move the "
                       "folder away to start over", path=path)
    if not path.is_file():
        return None
    if path.stat().st_size == 0:
        raise PawError("is empty, not a training checkpoint; delete it to start over", path=path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises what the bytes make it raise (a bare EOFError on a cut file)
        said = (str(err).splitlines() or [""])[0][:200] or type(err).__name__
        raise PawError(f"not a readable training checkpoint ({said}); delete it to start over", path=path) from None
    if not isinstance(state, dict) or "step" not in state:
        raise PawError("not a PAW training checkpoint (no step); delete it to start over", path=path)
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise PawError(f"not a complete training checkpoint (no {', '.join(missing)}); delete it to start over",
                       path=path)
    return state


def remove_train_state(folder: str | os.PathLike) -> None:
    (Path(folder) / STATE_NAME).unlink(missing_ok=True)


def read_continuations(folder: str | os.PathLike, key: str) -> dict[str, str]:
    """``{input text: continuation}`` of every cache file in ``folder`` made under ``key`` (teacher + settings)."""
    out: dict[str, str] = {}
    for path in sorted(Path(folder).glob(CACHE_GLOB)):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # the last line of a killed run
                continue
            if isinstance(record, dict) and record.get("key") == key and isinstance(record.get("text"), str) \
                    and isinstance(record.get("continuation"), str):
                out[record["text"]] = record["continuation"]
    return out


def append_continuations(folder: str | os.PathLike, rank: int, key: str, pairs: list[tuple[str, str]]) -> None:
    """Append ``(input, continuation)`` pairs to this rank's cache file and flush them to disk."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"continuations-rank{rank}.jsonl"
    cut = path.is_file() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with open(path, "a", encoding="utf-8") as f:
        if cut:  # a killed run's last line: end it, so the next record is a line of its own
            f.write("\n")
        for text, continuation in pairs:
            f.write(json.dumps({"key": key, "text": text, "continuation": continuation}, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_teacher_scores(folder: str | os.PathLike, name: str, key: str) -> list | None:
    """The list kept as ``folder/teacher-{name}.json`` under ``key``, or None (absent, other key, unreadable)."""
    path = Path(folder) / f"teacher-{name}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and record.get("key") == key and isinstance(record.get("values"), list):
        return record["values"]
    return None


def write_teacher_scores(folder: str | os.PathLike, name: str, key: str, values: list) -> None:
    """Keep ``values`` (JSON numbers and lists) as ``folder/teacher-{name}.json`` under ``key``, atomically."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_file(folder / f"teacher-{name}.json", "w", overwrite=True, encoding="utf-8") as f:
        json.dump({"key": key, "values": values}, f)


SYNTHESIS_NAME = "synthesis.json"


def _synthesis_record(folder: str | os.PathLike) -> tuple[object, dict] | None:
    """``(key, state)`` of ``folder/synthesis.json``, or None (absent, unreadable, not that shape)."""
    try:
        record = json.loads((Path(folder) / SYNTHESIS_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and isinstance(record.get("state"), dict):
        return record.get("key"), record["state"]
    return None


def read_synthesis(folder: str | os.PathLike, key: str) -> dict | None:
    """The synthesis state kept as ``folder/synthesis.json`` under ``key``, or None (absent, other key, unreadable)."""
    found = _synthesis_record(folder)
    return found[1] if found is not None and found[0] == key else None


def read_synthesized(folder: str | os.PathLike) -> list[str]:
    """The inputs ``folder/synthesis.json`` holds, whatever run wrote it; [] when there is none."""
    found = _synthesis_record(folder)
    kept = found[1].get("kept") if found is not None else None
    return [str(x) for x in kept] if isinstance(kept, list) else []


def write_synthesis(folder: str | os.PathLike, key: str, state: dict) -> None:
    """Keep ``state`` (JSON values) as ``folder/synthesis.json`` under ``key``, atomically: a kill while
    writing leaves the previous round's."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_file(folder / SYNTHESIS_NAME, "w", overwrite=True, encoding="utf-8") as f:
        json.dump({"key": key, "state": state}, f)


FIT_GLOB = "omp-*.safetensors"


def save_fit_part(folder: str | os.PathLike, what: str, key: str, start: int, tensors: dict[str, Any]) -> Path:
    """Keep one batch of fits as ``folder/omp-{what}-{start}.safetensors`` under ``key``, atomically."""
    from safetensors.torch import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"omp-{what}-{start:08d}.safetensors"
    data = save({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, metadata={"key": key})
    with atomic_file(path, "wb", overwrite=True) as f:
        f.write(data)
    return path


def read_fit_parts(folder: str | os.PathLike, what: str, key: str) -> dict[int, dict[str, Any]]:
    """``{start: tensors}`` of every batch kept in ``folder`` for ``what`` under ``key`` (others are skipped)."""
    from safetensors import safe_open

    out: dict[int, dict[str, Any]] = {}
    for path in sorted(Path(folder).glob(f"omp-{what}-*.safetensors")):
        try:
            start = int(path.stem.rsplit("-", 1)[1])
            with safe_open(str(path), framework="pt") as f:
                if (f.metadata() or {}).get("key") != key:
                    continue
                out[start] = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open has no iteration)
        except Exception:  # noqa: BLE001 (a damaged or foreign file is fitted again, whatever it raises)
            continue
    return out


def remove_fit_parts(folder: str | os.PathLike) -> None:
    """Delete the kept fits (the output is complete), and the folder if nothing else is in it."""
    folder = Path(folder)
    for path in folder.glob(FIT_GLOB):
        path.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        pass
