#!/usr/bin/env python
"""Run the examples of README.md and docs/ as written: each page in its own empty folder, in order.

The convention (docs/contributing.md):

- a ```bash block is an example: it runs, in the order of the page, in one folder per page that
  starts empty (but for links to the repository's ``configs/`` and ``scripts/``, as in a clone),
  with ``paw`` and ``python`` on PATH;
- a ```python block runs there too, with the same Python;
- what a command prints is shown in a ```text block, which never runs;
- a block right after ``<!-- not run: REASON -->`` is shown, not run (real models, a GPU, a
  benchmark that takes an hour). The reason is required.

    python scripts/docs_examples.py                          # every page; stops at the first failure
    python scripts/docs_examples.py README.md --show         # print what each block printed
    python scripts/docs_examples.py docs/commands/merge.md --keep /tmp/merge-docs

``tests/test_docs_examples.py`` checks the pages without running them (fast) and runs them all
(``-m slow``).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ("bash", "python")
SHOWN = ("text", "json", "yaml", "csv", "")  # never run
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(\S.*?)\s*-->\s*$")  # alone on its line, right before the block
LINKED = ("configs", "scripts")  # repository folders a page may use, as from the root of a clone


@dataclass(frozen=True)
class Block:
    page: Path
    line: int            # 1-based line of the opening fence
    lang: str
    code: str
    skip: str = ""       # the reason given in <!-- not run: ... -->, empty when the block runs

    @property
    def runs(self) -> bool:
        return self.lang in RUN and not self.skip

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md, then every page under docs/, in name order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with their language and whether a ``not run`` comment precedes them."""
    out, lines, i, skip = [], page.read_text(encoding="utf-8").splitlines(), 0, ""
    while i < len(lines):
        line = lines[i]
        found = NOT_RUN.search(line)
        if found:
            skip = found[1]
        elif line.startswith("```"):
            lang, start, body = line[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append(Block(page, start, lang, "\n".join(body) + "\n", skip))
            skip = ""
        elif line.strip():
            skip = ""  # the comment must sit right before its block
        i += 1
    return out


def tool_dir(folder: Path) -> Path:
    """A folder with ``paw`` and ``python`` that run this checkout with this interpreter."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, command in (("paw", f'exec "{sys.executable}" -m paw "$@"'), ("python", f'exec "{sys.executable}" "$@"')):
        tool = folder / name
        tool.write_text(f"#!/bin/sh\n{command}\n")
        tool.chmod(0o755)
    return folder


def environment(tools: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{tools}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(ROOT)
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COLUMNS="200", MPLBACKEND="Agg")
    return env


def run_page(page: Path, folder: Path, *, show: bool = False, timeout: int = 1800) -> list[tuple[Block, int, str]]:
    """Run the runnable blocks of ``page`` in ``folder``; stops at the first failing block."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        if not (folder / name).exists():
            (folder / name).symlink_to(ROOT / name)
    env = environment(tool_dir(folder.parent / f".{folder.name}-bin"))
    done = []
    for block in (b for b in blocks(page) if b.runs):
        argv = ["bash", "-euo", "pipefail", "-c", block.code] if block.lang == "bash" else [sys.executable, "-c", block.code]
        proc = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
        output = proc.stdout + proc.stderr
        done.append((block, proc.returncode, output))
        if show:
            print(f"===== {block.where()} ({block.lang}) rc={proc.returncode}\n{block.code}----- output\n{output}")
        if proc.returncode:
            break
    return done


# ------------------------------------------------------------------ static checks (no running)

INPUTS = {"--model", "--base", "--models", "--adapter", "--source-base", "--target-base", "--data", "--eval-data",
          "--corpus", "--tokenizer", "--tokenizers", "--source", "--target", "--config", "--tokens-file",
          "--from-tokenizer", "--stats-dir", "--vocab-map", "--source-model", "--input"}
OUTPUTS = {"--output", "-o", "--outdir", "--export-hf", "--save-corpus", "--plot", "--workdir"}


def commands(code: str) -> list[list[str]]:
    """Each shell command of a block as words (continuations joined, comments dropped, ``&&`` split)."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        current: list[str] = []
        for word in words:
            if word in ("&&", "||", ";", "|"):
                out.append(current)
                current = []
            else:
                current.append(word)
        out.append(current)
    return [c for c in out if c]


def _created(words: list[str]) -> list[str]:
    made = []
    for flag, value in zip(words, words[1:], strict=False):
        if flag in OUTPUTS or flag in (">", ">>"):
            made.append(value)
        if flag == "--output" and words[:3] == ["paw", "bpe", "train"]:
            made += [f"{value}.model", f"{value}.vocab"]
    made += [w[1:] for w in words if w.startswith(">") and len(w) > 1]
    if words[:3] == ["paw", "zoo", "build"]:
        folder = next(w for w in words[3:] if not w.startswith("-"))
        made += [f"{folder}/{name}" for name in ("base", "finetune", "lora")]
    if words[:3] == ["paw", "zoo", "fine-tune"] and len(words) > 4:
        made.append(words[4])  # paw zoo fine-tune BASE OUT [options]
    if words[:1] == ["cp"]:
        made.append(words[-1])
    if words[:2] == ["paw", "demo"]:
        made.append(words[words.index("--outdir") + 1] if "--outdir" in words else "paw_demo")
    if words[:1] == ["mkdir"]:
        made += [w for w in words[1:] if not w.startswith("-")]
    return made


def _inputs(words: list[str]) -> list[str]:
    if words[:1] != ["paw"]:
        return []
    found, current = [], None
    for word in words[1:]:
        if word.startswith("-"):
            current = word.partition("=")[0] if word.partition("=")[0] in INPUTS else None
            continue
        if current:
            found.append(word)
    if words[:3] in (["paw", "bpe", "train"], ["paw", "bpe", "compare"]):  # positional corpus files
        found += [w for w in words[3:] if not w.startswith("-") and w.endswith(".txt")]
    return [w for w in found if "/" in w or re.search(r"\.(txt|jsonl|json|yaml|model|safetensors)$", w)]


def missing_inputs(page: Path) -> list[str]:
    """Paths a runnable block reads that neither an earlier block nor the repository provides."""
    created: set[str] = set()
    problems = []
    for block in blocks(page):
        if not block.runs:
            continue
        if block.lang == "python":
            created.update(re.findall(r"['\"]([\w./-]+)['\"]", block.code))  # what a script names, it may write
            continue
        created.update(re.findall(r"cat\s*>\s*(\S+)\s*<<", block.code))  # cat > f <<'EOF'
        created.update(re.findall(r"open\(['\"]([^'\"]+)['\"],\s*['\"]w", block.code))  # python -c "open('f', 'w')"
        for words in commands(block.code):
            for path in _inputs(words):
                norm = os.path.normpath(path)
                parts = Path(norm).parts
                known = any(os.path.normpath(os.path.join(*parts[: i + 1])) in created for i in range(len(parts)))
                if not known and not (ROOT / norm).exists():
                    problems.append(f"{block.where()}: {path} is read but no earlier block creates it")
            created.update(os.path.normpath(p) for p in _created(words))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="Markdown files (default: README.md and docs/)")
    parser.add_argument("--show", action="store_true", help="print each block and what it printed")
    parser.add_argument("--keep", type=Path, help="run in this folder (one subfolder per page) and keep it")
    args = parser.parse_args(argv)
    chosen = [p.resolve() for p in args.pages] or pages()
    with tempfile.TemporaryDirectory(prefix="paw-docs-") as tmp:
        base = args.keep or Path(tmp)
        for page in chosen:
            folder = base / page.relative_to(ROOT).with_suffix("").as_posix().replace("/", "--")
            results = run_page(page, folder, show=args.show)
            failed = [(b, rc, out) for b, rc, out in results if rc]
            print(f"{page.relative_to(ROOT)}: {len(results) - len(failed)} block(s) ran"
                  + (f"; FAILED at {failed[0][0].where()}:\n{failed[0][2]}" if failed else ""))
            if failed:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
