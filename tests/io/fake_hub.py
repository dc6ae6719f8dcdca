"""A Hub that never leaves the machine: ``huggingface_hub.model_info`` and ``snapshot_download``
replaced by functions that serve local folders and write what they "download" in the Hugging Face
cache layout (``models--org--name/refs/<rev>`` -> ``snapshots/<commit>``), recording every call.

    hub = FakeHub(monkeypatch, tmp_path / "cache")
    hub.publish("org/tiny", tiny_llama)              # the folder's files are the repo's, at revision main
    open_checkpoint("org/tiny")                      # downloads into the cache
    hub.calls == [{"repo_id": "org/tiny", "revision": None, "allow_patterns": [...], ...}]
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from types import SimpleNamespace

_RESPONSE = SimpleNamespace(headers={}, request=None, status_code=404)  # what huggingface_hub's errors read


class FakeHub:
    def __init__(self, monkeypatch, cache: Path, *, offline: bool = False):
        import huggingface_hub
        from huggingface_hub import constants

        self.cache = cache
        self.repos: dict[tuple[str, str], Path] = {}
        self.calls: list[dict] = []
        self.infos: list[dict] = []
        self.fail: Exception | None = None  # raised by model_info, as a network failure would be
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
        monkeypatch.setattr(huggingface_hub, "model_info", self.model_info)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", self.snapshot_download)

    def publish(self, repo_id: str, folder: Path, *, revision: str = "main", extra: dict[str, str] | None = None):
        """Serve ``folder``'s files (plus ``extra`` name -> text) as ``repo_id`` at ``revision``."""
        served = self.cache.parent / "served" / repo_id.replace("/", "--") / revision
        shutil.copytree(folder, served)
        for name, text in (extra or {}).items():
            (served / name).parent.mkdir(parents=True, exist_ok=True)
            (served / name).write_text(text)
        self.repos[repo_id, revision] = served

    def _repo(self, repo_id: str, revision: str | None) -> Path:
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

        if not any(r == repo_id for r, _ in self.repos):
            raise RepositoryNotFoundError(f"404: {repo_id}", response=_RESPONSE)
        if (repo_id, revision or "main") not in self.repos:
            raise RevisionNotFoundError(f"404: {repo_id}@{revision}", response=_RESPONSE)
        return self.repos[repo_id, revision or "main"]

    def model_info(self, repo_id, *, revision=None, token=None, **kwargs):
        self.infos.append({"repo_id": repo_id, "revision": revision, "token": token})
        if self.fail is not None:
            raise self.fail
        served = self._repo(repo_id, revision)
        names = sorted(str(p.relative_to(served)) for p in served.rglob("*") if p.is_file())
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=n) for n in names])

    def snapshot_download(self, repo_id, *, revision=None, allow_patterns=None, token=None, tqdm_class=None,
                          **kwargs):
        self.calls.append({"repo_id": repo_id, "revision": revision, "allow_patterns": allow_patterns,
                           "token": token, **kwargs})
        served = self._repo(repo_id, revision)
        commit = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
        storage = self.cache / ("models--" + repo_id.replace("/", "--"))
        snapshot = storage / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        for name in allow_patterns:
            shutil.copyfile(served / name, snapshot / name)
        (storage / "refs").mkdir(exist_ok=True)
        (storage / "refs" / (revision or "main")).write_text(commit)
        return str(snapshot)


def card_of(folder: Path) -> tuple[dict, str]:
    """``(front matter, body)`` of ``folder/README.md``, checked to load as the Hub's own ``ModelCard``."""
    import yaml
    from huggingface_hub import ModelCard

    text = (Path(folder) / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    meta = yaml.safe_load(head)
    assert ModelCard.load(Path(folder) / "README.md").data.to_dict() == meta
    return meta, body
