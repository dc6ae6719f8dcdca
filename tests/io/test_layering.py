"""``paw.io`` reads and writes; it imports no package that computes (vocab, evaluate, zoo, merge, bpe, ...).

What ``paw.io`` and ``paw.bpe`` share (the byte alphabet, the pattern table, ranks <-> merges) lives
on the ground floor, ``paw.bytelevel``, which imports nothing of ``paw`` and nothing outside the
standard library.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import paw.io

ROOT = Path(__file__).resolve().parents[2]
# packages that hold algorithms, pipelines or the CLI; the pure paw.lora and paw.bytelevel may be used
FORBIDDEN = ("paw.vocab", "paw.evaluate", "paw.zoo", "paw.merge", "paw.taskvec", "paw.transfer", "paw.bench",
             "paw.cli", "paw.adaptercheck", "paw.demo", "paw.bpe")


def _loaded_after(*modules: str) -> list[str]:
    """``paw`` modules in ``sys.modules`` of a fresh interpreter after importing ``modules``."""
    code = ("import importlib, json, sys\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('paw'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _offending(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m.startswith(FORBIDDEN)]


def test_tokenizer_reader_imports_no_vocab():
    loaded = _loaded_after("paw.io.tokenizer")
    assert "paw.io.bpe_files" in loaded and not _offending(loaded)


def test_no_io_module_imports_an_algorithm_package():
    names = [f"paw.io.{m.name}" for m in pkgutil.iter_modules(paw.io.__path__)]
    assert len(names) > 15 and "paw.io.mcdata" in names
    assert _offending(_loaded_after(*names)) == []


def _imports(node) -> list[str]:
    """Modules a file imports anywhere (inside functions too), except under ``if TYPE_CHECKING:``."""
    import ast

    if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
        return []
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [m for child in ast.iter_child_nodes(node) for m in _imports(child)]


def test_no_io_module_imports_an_algorithm_package_even_lazily():
    import ast

    bad = {path.name: m for path in Path(paw.io.__path__[0]).glob("*.py")
           for m in _imports(ast.parse(path.read_text(encoding="utf-8"))) if m.startswith(FORBIDDEN)}
    assert bad == {}


# issue 25: io is sorted by format and sits below these, even for a type hint
ABOVE_IO = ("paw.bpe", "paw.transfer", "paw.bench", "paw.vocab", "paw.evaluate", "paw.merge")


def test_no_io_module_names_a_package_above_it_anywhere():
    """Module top, function body or ``if TYPE_CHECKING:``: no import in ``paw/io`` reaches up."""
    import ast

    def names(tree):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level:
                yield node.module or ""
            elif isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)

    bad = {path.name: m for path in Path(paw.io.__path__[0]).glob("*.py")
           for m in names(ast.parse(path.read_text(encoding="utf-8")))
           if m in ABOVE_IO or m.startswith(tuple(f"{p}." for p in ABOVE_IO))}
    assert bad == {}

def test_bytelevel_imports_only_itself_and_the_standard_library():
    import ast

    import paw.bytelevel

    files = sorted(Path(paw.bytelevel.__path__[0]).glob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "alphabet.py", "patterns.py", "ranks.py"}
    bad = {}
    for path in files:
        for m in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            top = m.split(".")[0]
            own = m == "paw.bytelevel" or m.startswith(("paw.bytelevel.", "paw.errors"))
            if (top == "paw" and not own) or (top != "paw" and top not in sys.stdlib_module_names):
                bad.setdefault(path.name, []).append(m)
    assert bad == {}


def test_bpe_and_io_read_one_pattern_table():
    from paw.bpe import PATTERNS
    from paw.bytelevel import patterns

    assert PATTERNS is patterns.PATTERNS and PATTERNS["gpt2"].startswith("'s|'t")
