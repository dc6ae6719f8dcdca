"""Provenance: the CLI records the arguments it parsed, a library call records itself; never sys.argv."""

from __future__ import annotations

import json
import sys

import pytest

from paw.io.manifest import call_text, command_line


def _train(tmp_path, name: str) -> dict:
    from paw.bpe.options import TrainOptions
    from paw.bpe.pipeline import train_files

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("low lower lowest newer newest wider\n" * 20, encoding="utf-8")
    train_files(TrainOptions(files=(corpus,), vocab_size=270, output=tmp_path / name, pattern="gpt2",
                             export_hf=tmp_path / f"{name}-hf", processes=1))
    return json.loads((tmp_path / f"{name}-hf" / "paw_bpe.json").read_text())


@pytest.mark.parametrize("host_argv", [["pytest"], ["/usr/bin/python", "-m", "paw", "merge", "--bogus"]])
def test_library_call_records_function_and_arguments(tmp_path, monkeypatch, host_argv):
    monkeypatch.setattr(sys, "argv", host_argv)  # whatever the host process was started with
    recorded = _train(tmp_path, "tok")["command"]
    corpus, out, hf = tmp_path / "corpus.txt", tmp_path / "tok", tmp_path / "tok-hf"
    assert recorded == (f"paw.bpe.pipeline.train_files(options=TrainOptions(files=[{str(corpus)!r}], vocab_size=270, "
                        f"output={str(out)!r}, pattern='gpt2', special_tokens=None, min_frequency=0, "
                        f"export_hf={str(hf)!r}, processes=1), run=RunOptions(device='auto', overwrite=False, "
                        "track='none'), track=None)")


@pytest.mark.parametrize("host_argv", [["pytest"], ["/usr/bin/python", "-m", "pytest", "-q", "-x"]])
def test_cli_records_its_own_arguments(cli, tmp_path, monkeypatch, host_argv):
    monkeypatch.setattr(sys, "argv", host_argv)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("low lower lowest newer newest wider\n" * 20, encoding="utf-8")
    args = ["bpe", "train", str(corpus), "--vocab-size", "270", "--output", str(tmp_path / "t"),
            "--export-hf", str(tmp_path / "hf"), "--processes", "1"]
    assert cli(*args).exit_code == 0
    recorded = json.loads((tmp_path / "hf" / "paw_bpe.json").read_text())["command"]
    assert recorded == "paw " + " ".join(args)


def test_call_text_shows_values_not_addresses():
    import enum
    from dataclasses import dataclass
    from pathlib import Path

    class Kind(str, enum.Enum):
        A = "a"

    @dataclass
    class Opts:
        path: Path
        kind: Kind
        sizes: tuple

    def f():
        pass

    text = call_text(f, {"opts": Opts(Path("x/y"), Kind.A, (1, 2.5)), "model": object(), "n": None})
    assert text.endswith(".f(opts=Opts(path='x/y', kind='a', sizes=[1, 2.5]), model=<object>, n=None)")


def test_command_line_outside_the_cli_says_so():
    assert "arguments unknown" in command_line()


def test_write_json_replaces_a_file_whole_or_not_at_all(tmp_path, monkeypatch):
    """Another process reading a work folder sees the old JSON or the new one; a write that fails half-way
    (a full disk) leaves the old file as it was and no temporary file beside it."""
    from pathlib import Path

    from paw.io.manifest import write_json

    path = tmp_path / "score.json"
    write_json(path, {"correct": [1, 0]})
    real = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OSError):
        write_json(path, {"correct": [0, 1, 1, 1]})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"correct": [1, 0]}
    assert [p.name for p in tmp_path.iterdir()] == ["score.json"]
    write_json(path, {"correct": [0, 1]})
    assert json.loads(path.read_text()) == {"correct": [0, 1]}
