#!/usr/bin/env python
"""Run the examples of README.md and docs/ as written: each page in its own empty folder, in order.

The convention (docs/contributing.md):

- a ```bash block is an example: it runs, in the order of the page, in one folder per page that
  starts empty (but for links to the repository's ``configs/`` and ``scripts/``, as in a clone),
  with ``paw`` and ``python`` on PATH;
- a ```python block runs there too, with the same Python;
- what a command prints is shown in a ```text block, which never runs. A ```text block that follows a
  runnable block (blank lines and an ``output not compared`` mark may sit between) is its expected
  output: what the block prints must match it, after :func:`normalise` (times, temporary paths,
  spacing) and with each line that is just ``...`` standing for any lines (none included);
- a block right after ``<!-- not run: REASON -->`` is shown, not run (real models, a GPU, a
  benchmark that takes an hour). The reason is required;
- a ```text block right after ``<!-- output not compared: REASON -->`` is shown, not compared (output
  that changes from run to run beyond times: timings tables, memory figures). The reason is required.

    python scripts/docs_examples.py                          # every page; stops at the first failure
    python scripts/docs_examples.py README.md --show         # print what each block printed
    python scripts/docs_examples.py docs/commands/merge.md --keep /tmp/merge-docs
    python scripts/docs_examples.py docs/commands/eval.md --update   # shown outputs := what ran

``tests/test_docs_examples.py`` checks the pages without running them (fast) and runs them all
(``-m slow``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RUN = ("bash", "python")
SHOWN = ("text", "json", "yaml", "csv", "")  # never run
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(\S.*?)\s*-->\s*$")  # alone on its line, right before the block
NOT_COMPARED = re.compile(r"^<!--\s*output not compared:\s*(\S.*?)\s*-->\s*$")  # right before a ```text block
ANY_LINES = "..."  # a shown-output line that is just this stands for any lines
LINKED = ("configs", "scripts")  # repository folders a page may use, as from the root of a clone


@dataclass(frozen=True)
class Block:
    page: Path
    line: int            # 1-based line of the opening fence
    lang: str
    code: str
    skip: str = ""       # the reason given in <!-- not run: ... -->, empty when the block runs
    expected: str | None = None   # the ```text block that follows a runnable block: its output
    expected_line: int = 0        # 1-based line of that block's opening fence
    not_compared: str = ""        # the reason given in <!-- output not compared: ... -->

    @property
    def runs(self) -> bool:
        return self.lang in RUN and not self.skip

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md, then every page under docs/, in name order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``: language, ``not run`` reason, and a runnable block's shown output."""
    out, lines, i, skip, unmarked = [], page.read_text(encoding="utf-8").splitlines(), 0, "", ""
    after_run = False  # only blank lines (and an output-not-compared mark) since a runnable block ended
    while i < len(lines):
        line = lines[i]
        found, not_compared = NOT_RUN.search(line), NOT_COMPARED.search(line)
        if found:
            skip, after_run = found[1], False
        elif not_compared:
            unmarked = not_compared[1]
        elif line.startswith("```"):
            lang, start, body = line[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            text = "\n".join(body) + "\n"
            if lang == "text" and after_run:
                out[-1] = replace(out[-1], expected=text, expected_line=start, not_compared=unmarked)
            out.append(Block(page, start, lang, text, skip))
            after_run = out[-1].runs
            skip = unmarked = ""
        elif line.strip():
            skip, unmarked, after_run = "", "", False  # a mark must sit right before its block
        i += 1
    return out


# ------------------------------------------------------------------ comparing output with the shown text

_UNIT = r"\d+(?:\.\d+)?\s?(?:ms|s|min|h|d|seconds?|minutes?)\b"
_TIME = re.compile(rf"\b{_UNIT}(?:\s{_UNIT})?(?!\s*-?\d)")  # '15 s', '1 min 5 s'; not 'std 0.3 min 0.1'
_TMP = re.compile(r"(?:/private)?/(?:tmp|var/folders)/[^\s'\"]*")


def normalise(text: str, folder: Path | None = None) -> list[str]:
    """Lines to compare: times -> ``<time>``, the page's folder and temporary paths dropped, spaces squeezed.

    >>> normalise("ok (5.4 s)\\nDone in 1 min 15 s.  Reports: /tmp/x/demo\\n\\n")
    ['ok (<time>)', 'Done in <time>. Reports: <tmp>']
    """
    if folder is not None:
        text = text.replace(f"{folder}/", "").replace(str(folder), ".")
    text = _TMP.sub("<tmp>", _TIME.sub("<time>", text))
    lines = [" ".join(line.split()) for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` fits ``shown``, where a ``...`` line in ``shown`` matches any lines (none too)."""
    # reach[j]: the first j printed lines can be matched by the shown lines seen so far
    reach = [True] + [False] * len(printed)
    for line in shown:
        if line == ANY_LINES:
            for j in range(1, len(reach)):
                reach[j] = reach[j] or reach[j - 1]
        else:
            reach = [False] + [reach[j - 1] and printed[j - 1] == line for j in range(1, len(reach))]
    return reach[-1]


def output_difference(block: Block, output: str, folder: Path | None = None) -> str:
    """Empty when ``output`` matches the block's shown text (or none is shown / compared), else a diff."""
    if block.expected is None or block.not_compared:
        return ""
    shown, printed = normalise(block.expected, folder), normalise(output, folder)
    if matches(shown, printed):
        return ""
    diff = difflib.unified_diff(shown, printed, "shown", "printed", lineterm="", n=1)
    return f"output differs from the text block at line {block.expected_line}:\n" + "\n".join(diff)


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
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COLUMNS="200", MPLBACKEND="Agg",
               PYTHONUNBUFFERED="1",  # stdout and stderr reach the shared pipe in the order written
               PAW_PROGRESS_EVERY="100000")  # no timed progress lines: a terminal's bar vanishes too
    return env


class Ran(NamedTuple):
    block: Block
    rc: int
    output: str           # stdout and stderr together, in the order they were written
    difference: str = ""  # from the shown output (:func:`output_difference`); empty when it matches


def run_page(page: Path, folder: Path, *, show: bool = False, timeout: int = 1800) -> list[Ran]:
    """Run the runnable blocks of ``page`` in ``folder``; stops at the first failing block.

    A block whose output differs from its shown text still counts as run: the next blocks run too.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        if not (folder / name).exists():
            (folder / name).symlink_to(ROOT / name)
    env = environment(tool_dir(folder.parent / f".{folder.name}-bin"))
    done = []
    for block in (b for b in blocks(page) if b.runs):
        argv = ["bash", "-euo", "pipefail", "-c", block.code] if block.lang == "bash" else [sys.executable, "-c", block.code]
        proc = subprocess.run(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)
        output = proc.stdout
        done.append(Ran(block, proc.returncode, output, output_difference(block, output, folder)))
        if show:
            print(f"===== {block.where()} ({block.lang}) rc={proc.returncode}\n{block.code}----- output\n{output}"
                  + (f"----- {done[-1].difference}\n" if done[-1].difference else ""))
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
            # mergekit's MODEL+LORA reads two paths (paw.io.lora_model.split_model_ref)
            for path in (part for given in _inputs(words) for part in given.split("+")):
                norm = os.path.normpath(path)
                parts = Path(norm).parts
                known = any(os.path.normpath(os.path.join(*parts[: i + 1])) in created for i in range(len(parts)))
                if not known and not (ROOT / norm).exists():
                    problems.append(f"{block.where()}: {path} is read but no earlier block creates it")
            created.update(os.path.normpath(p) for p in _created(words))
    return problems


def update_shown(page: Path, differ: list[Ran], folder: Path) -> list[Ran]:
    """Replace the text blocks of ``differ`` with what their blocks printed; returns those left by hand.

    A text block with a ``...`` line was shortened by hand and is left for a hand edit.
    """
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    left = []
    for ran in sorted(differ, key=lambda r: -r.block.expected_line):  # bottom up: line numbers stay valid
        block = ran.block
        if ANY_LINES in (line.strip() for line in block.expected.splitlines()):
            left.append(ran)
            continue
        printed = [line.rstrip() for line in ran.output.replace(f"{folder}/", "").replace(str(folder), ".").splitlines()]
        while printed and not printed[-1]:
            printed.pop()
        while printed and not printed[0]:
            printed.pop(0)
        start = block.expected_line  # 0-based index of the first line after the opening fence
        lines[start:start + len(block.expected.splitlines())] = [f"{line}\n" for line in printed]
        print(f"{block.where()}: updated the text block at line {block.expected_line}")
    page.write_text("".join(lines), encoding="utf-8")
    for ran in left:
        print(f"{ran.block.where()}: the text block at line {ran.block.expected_line} has '...' lines: edit it by hand")
    return left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="Markdown files (default: README.md and docs/)")
    parser.add_argument("--show", action="store_true", help="print each block and what it printed")
    parser.add_argument("--keep", type=Path, help="run in this folder (one subfolder per page) and keep it")
    parser.add_argument("--keep-going", action="store_true", help="after a failing page, run the next pages too")
    parser.add_argument("--update", action="store_true",
                        help="write what a block printed into its text block when that has no '...' line "
                             "(the others are listed for a hand edit)")
    args = parser.parse_args(argv)
    chosen = [p.resolve() for p in args.pages] or pages()
    status = False
    with tempfile.TemporaryDirectory(prefix="paw-docs-") as tmp:
        base = args.keep or Path(tmp)
        for page in chosen:
            folder = base / page.relative_to(ROOT).with_suffix("").as_posix().replace("/", "--")
            results = run_page(page, folder, show=args.show)
            failed = [r for r in results if r.rc]
            differ = [r for r in results if r.difference]
            print(f"{page.relative_to(ROOT)}: {len(results) - len(failed)} block(s) ran"
                  + (f"; FAILED at {failed[0].block.where()}:\n{failed[0].output}" if failed else "")
                  + "".join(f"\n{r.block.where()}: {r.difference}" for r in differ))
            if args.update and differ:
                differ = update_shown(page, differ, folder)
            if failed and not args.keep_going:
                return 1
            status = status or bool(failed or differ)
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
