"""The CLI shell: fast help without torch, version, one help example per command."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_help_does_not_import_torch():
    code = ("import sys; from paw.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'numpy', 'matplotlib', 'pandas') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


def test_import_paw_is_light():
    code = "import sys, paw; print(paw.__version__, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == [__import__("paw").__version__, "False"]


def test_version(cli):
    from paw import __version__

    result = cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"paw {__version__}"


def _commands(app, prefix=()):
    import typer.main

    group = typer.main.get_command(app)
    stack = [(prefix, group)]
    while stack:
        path, cmd = stack.pop()
        sub = getattr(cmd, "commands", None)
        if sub:
            stack.extend(((*path, name), c) for name, c in sub.items())
        elif path:
            yield path, cmd


def test_every_command_has_an_example():
    from paw.cli import app

    commands = list(_commands(app))
    assert commands
    missing = [" ".join(p) for p, cmd in commands if "Example" not in (cmd.help or "")]
    assert missing == []


@pytest.mark.parametrize("spec", ["cpu", "auto"])
def test_resolve_device(spec):
    from paw.device import resolve_device

    assert resolve_device(spec).type == "cpu"  # CI has no GPU


def test_resolve_device_errors():
    import torch

    from paw.device import resolve_device
    from paw.errors import PawError

    with pytest.raises(PawError, match="expected auto"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(PawError, match="CUDA is not available"):
            resolve_device("cuda:0")


def test_a_short_flag_means_one_thing_everywhere():
    """``-m`` was --method in one command and --model in another; a short flag now names one option."""
    import click

    from paw.cli import app

    same = {"--outdir": "--output"}  # both name where the results go
    meaning: dict[str, set[str]] = {}
    for _, cmd in _commands(app):
        for param in cmd.params:
            if not isinstance(param, click.Option):
                continue
            longs = [o for o in param.opts if o.startswith("--")]
            for short in (o for o in param.opts + param.secondary_opts if not o.startswith("--")):
                meaning.setdefault(short, set()).update(same.get(o, o) for o in longs)
    assert {s: names for s, names in meaning.items() if len(names) > 1} == {}
    assert "-m" not in meaning


def test_tables_do_not_wrap_off_a_terminal(capsys):
    from rich.table import Table

    from paw.cli._options import console

    table = Table(title="a wide table")
    headers = [f"header number {i} of the table" for i in range(6)]  # ~170 columns: wider than 80
    for h in headers:
        table.add_column(h)
    table.add_row(*[f"value {i}" for i in range(6)])
    console().print(table)
    lines = capsys.readouterr().out.splitlines()
    header_line = next(line for line in lines if "header number 0" in line)
    assert all(h in header_line for h in headers)


def test_ctrl_c_is_exit_130_with_one_line_not_success(cli, monkeypatch, tmp_path):
    """typer hands a KeyboardInterrupt back as the return value 130 (not an exception) when it does not
    exit itself; a script that chains paw commands must not read an interrupted one as a success."""
    from paw.vocab import pipelines

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipelines, "transplant_tokenizer", interrupted)
    res = cli("transplant-tokenizer", "--model", tmp_path, "--tokenizer", tmp_path, "-o", tmp_path / "out")
    assert res.exit_code == 130 and res.stderr.strip() == "error: interrupted"
