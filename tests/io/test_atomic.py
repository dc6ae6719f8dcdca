"""``paw.io.atomic`` and ``paw.io.input_guard``: every file of an output gets the umask's mode; a hard link of an
input is the input."""

from __future__ import annotations

import os
import stat

import pytest

from paw.errors import PawError
from paw.io.atomic import atomic_dir, atomic_file
from paw.io.input_guard import check_not_input


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_every_file_and_folder_of_an_output_follows_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        with atomic_dir(tmp_path / "out") as tmp:
            (tmp / "sub" / "deeper").mkdir(parents=True)
            for name in ("a.bin", "sub/b.json", "sub/deeper/c.txt"):
                fd = os.open(tmp / name, os.O_CREAT | os.O_WRONLY, 0o600)  # as safetensors creates its files
                os.close(fd)
            os.chmod(tmp / "sub", 0o700)  # as tempfile.mkdtemp makes folders
    finally:
        os.umask(old)
    for path in [tmp_path / "out", *(tmp_path / "out").rglob("*")]:
        assert stat.S_IMODE(path.stat().st_mode) == (0o777 if path.is_dir() else 0o666) & ~umask, path


def test_a_single_file_output_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        with atomic_file(tmp_path / "r.json") as f:
            f.write("{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o640


def test_a_hard_link_of_an_input_file_is_the_input(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("x\n")
    os.link(data, tmp_path / "link.json")
    with pytest.raises(PawError, match="the output is the input .*data.jsonl"):  # same st_dev and st_ino
        check_not_input(tmp_path / "link.json", [data])


def test_a_hard_link_of_a_file_inside_an_input_folder_is_refused(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    os.link(tmp_path / "model" / "config.json", tmp_path / "r.json")
    with pytest.raises(PawError, match="is a hard link of the input .*model/config.json"):
        check_not_input(tmp_path / "r.json", [tmp_path / "model"])
    (tmp_path / "out").mkdir()  # an output folder holding one
    os.link(tmp_path / "model" / "config.json", tmp_path / "out" / "keep.json")
    with pytest.raises(PawError, match="contains .*keep.json, which is a hard link of the input"):
        check_not_input(tmp_path / "out", [tmp_path / "model"])


def test_files_with_one_name_are_not_walked(tmp_path):
    (tmp_path / "a").write_text("1")
    (tmp_path / "b").write_text("1")
    check_not_input(tmp_path / "b", [tmp_path / "a", tmp_path / "missing"])  # equal bytes are not the same file
