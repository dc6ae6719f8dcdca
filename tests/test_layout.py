"""Package layout rules that keep the library usable without its CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import paw

PAW = Path(paw.__file__).resolve().parent
ENTRY_POINTS = {PAW / "__main__.py"}  # ``python -m paw`` is the CLI's second door


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` names in ``path``, relative imports resolved."""
    package = ".".join(path.relative_to(PAW.parent).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base]) if base else ".".join(parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_nothing_outside_paw_cli_imports_paw_cli():
    offenders = []
    for path in sorted(PAW.rglob("*.py")):
        if PAW / "cli" in path.parents or path in ENTRY_POINTS:
            continue
        bad = sorted(m for m in _imported_modules(path) if m == "paw.cli" or m.startswith("paw.cli."))
        offenders += [f"{path.relative_to(PAW.parent)}: {m}" for m in bad]
    assert offenders == []


def test_distillation_and_the_benchmarks_read_the_samples_without_the_zoo():
    """The embedded sample text is data (``paw.data``, standard library only), not the tiny-model zoo's."""
    import sys

    data = PAW / "data" / "__init__.py"
    assert {m.split(".")[0] for m in _imported_modules(data)} <= set(sys.stdlib_module_names) | {"__future__"}
    for path in sorted((PAW / "transfer" / "distill").rglob("*.py")):
        assert not {m for m in _imported_modules(path) if m == "paw.zoo" or m.startswith("paw.zoo.")}, path


def test_the_walker_sees_the_imports():
    assert "paw.bench.options.BenchOptions" in _imported_modules(PAW / "bench" / "quality.py")
    assert "paw.cli" in _imported_modules(PAW / "__main__.py")
