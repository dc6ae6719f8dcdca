"""Every ``--help`` reads well on an 80-column terminal: nothing wider, no ``<bool>``, no cut words."""

from __future__ import annotations

import re

import pytest


def _command_paths():
    import typer.main

    from paw.cli import app

    stack = [((), typer.main.get_command(app))]
    while stack:
        path, command = stack.pop()
        yield path
        stack.extend(((*path, name), sub) for name, sub in (getattr(command, "commands", None) or {}).items())


@pytest.fixture
def help_at_80(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")

    def run(*path: str) -> list[str]:
        result = cli(*path, "--help")
        assert result.exit_code == 0, result.stderr
        return result.stdout.splitlines()

    return run


def test_every_help_fits_80_columns(help_at_80):
    paths = list(_command_paths())
    assert len(paths) > 20  # the root, the groups and every command
    for path in paths:
        lines = help_at_80(*path)
        name = " ".join(("paw", *path))
        assert [line for line in lines if len(line) > 80] == [], name
        assert not any("<bool>" in line for line in lines), name
        # lines break at spaces only: a path or a method name is never cut at its hyphen
        assert not any(re.search(r"\w-$", line) for line in lines), name


def test_transfer_lora_help_is_one_screenful_of_options(help_at_80):
    lines = help_at_80("transfer-lora")
    assert len(lines) < 110  # 200 with typer's rich table at 80 columns (104 with the training loop's four flags)
    flags = {line.split()[0]: line for line in lines if line.startswith("  --")}
    assert flags["--force"].split()[1] == "Transfer"  # a flag shows no value
    assert flags["--max-steps"].split()[1] == "<int>"  # `<int range>` widened the flag column
    method = " ".join(lines[lines.index(flags["--method"]):][:4])
    assert "<choice>" in method and "cross-lora" in method  # the values are in the help text


def test_groups_list_whole_first_paragraphs(help_at_80):
    lines = help_at_80()
    assert not any(line.endswith("...") for line in lines if not line.startswith("Usage:"))
    text = " ".join(" ".join(lines).split())
    assert "(training-free, rank-preserving) with a report." in text
