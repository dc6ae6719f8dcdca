"""No import circle between PAW's modules: every import counts, at module top or inside a function.

A function-local import still ties two modules together; placed to dodge a cycle, it only hides it
until the function runs. The walker reads the source (nothing is imported), so it also sees imports
under ``if TYPE_CHECKING:`` and in functions no test calls. :func:`cycles` takes any package root,
so the check covers all of ``paw/`` and, to name the room at fault, each package alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PAW = Path(__file__).resolve().parents[1] / "paw"


def top_package(root: Path) -> Path:
    """The outermost package folder holding ``root`` (``paw/bench`` -> ``paw``): where dotted names start."""
    top = root
    while (top.parent / "__init__.py").is_file():
        top = top.parent
    return top


def module_name(path: Path, root: Path) -> str:
    """``paw/bench/quality.py`` -> ``paw.bench.quality`` (``__init__.py`` names its package)."""
    parts = path.relative_to(top_package(root).parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """Modules of ``known`` that the file imports anywhere in its body.

    ``from paw.bench import distill`` names the module ``paw.bench.distill`` where it is one, else the
    package ``paw.bench``; ``from paw.bench.testbed import Base`` names ``paw.bench.testbed``; relative
    imports are resolved against ``name``.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # import paw.bench.quality.x -> the module paw.bench.quality
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules of the same package root it imports}`` for every ``.py`` file under ``root``.

    A package's own ``__init__`` is left out of the edges of its modules (importing ``paw.bench.tasks``
    runs ``paw/bench/__init__.py`` first, but that is the interpreter's order, not a tie the code made).
    """
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    known = set(files)
    return {name: imported(path, name, known) for name, path in files.items()}


def cycles(root: Path) -> list[list[str]]:
    """Every import circle under ``root`` as a list of modules (the first repeated at the end); [] if none.

    Tarjan's strongly connected components: a component of two or more modules, or a module that
    imports itself, is a circle; one path around it is returned so the message can name each edge.
    """
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_loop(sorted(component), graph))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _loop(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One closed path through ``component``, from its first module back to it (breadth first)."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return [*component, start]


def test_names_start_at_the_top_package():
    assert module_name(PAW / "bench" / "quality.py", PAW / "bench") == "paw.bench.quality"
    assert "paw.bench.testbed" in import_graph(PAW / "bench")["paw.bench.quality"]


# Circles known and owned elsewhere, each as the set of its modules. Keep this list empty but for
# entries with a reason and an issue; a new circle, or a known one that grows, fails the test.
def test_no_import_circle():
    found = cycles(PAW)
    assert found == [], "import circles: " + "; ".join(" -> ".join(c) for c in found)


@pytest.mark.parametrize("package", ["bench", "transfer", "merge", "vocab", "evaluate", "taskvec", "cli", "io", "bpe",
                                     "bytelevel"])
def test_no_import_circle_in_a_package(package):
    found = cycles(PAW / package)
    assert found == [], "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_walker_finds_a_circle_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from pkg.high import g\n    return g\n")
    (pkg / "high.py").write_text("from pkg import low\n\ndef g():\n    return low\n")
    (pkg / "apart.py").write_text("from . import low\n")
    assert import_graph(pkg) == {"pkg": set(), "pkg.apart": {"pkg.low"}, "pkg.high": {"pkg.low"},
                                 "pkg.low": {"pkg.high"}}
    assert cycles(pkg) == [["pkg.high", "pkg.low", "pkg.high"]]
