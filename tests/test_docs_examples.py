"""README.md and docs/: every example runs as written (slow), and the pages are sound (fast).

The convention the pages follow is in docs/contributing.md and scripts/docs_examples.py: ```bash
and ```python blocks run, in order, in one empty folder per page; output sits in ```text blocks,
and what a block prints must match the ```text block after it (``...`` lines match any lines);
a block after ``<!-- not run: REASON -->`` is only shown, a text block after
``<!-- output not compared: REASON -->`` is not compared.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_examples", ROOT / "scripts" / "docs_examples.py")
docs = importlib.util.module_from_spec(_spec)
sys.modules["docs_examples"] = docs  # dataclasses look their module up while the class is built
_spec.loader.exec_module(docs)

PAGES = docs.pages()
KNOWN = set(docs.RUN) | set(docs.SHOWN)
# pages other branches of this project write; their links are checked once they exist
ELSEWHERE: set[str] = set()  # pages other work still has to write (none now)


def _ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


def test_readme_is_short_and_docs_exist():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"docs/index.md", "docs/architecture.md", "docs/contributing.md", "docs/benchmarks/index.md"} <= names
    assert len([n for n in names if n.startswith("docs/commands/")]) >= 9


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_blocks_parse(page):
    for block in docs.blocks(page):
        assert block.lang in KNOWN, f"{block.where()}: unknown block language {block.lang!r}"
        if block.lang == "bash":
            check = subprocess.run(["bash", "-n", "-c", block.code], capture_output=True, text=True)
            assert check.returncode == 0, f"{block.where()}: {check.stderr}"
        elif block.lang == "python":
            compile(block.code, block.where(), "exec")


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_not_run_marks_name_a_reason_and_a_block(page):
    lines = page.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("<!-- not run"):
            assert docs.NOT_RUN.search(line), f"{page.name}:{i + 1}: say why: <!-- not run: REASON -->"
            assert i + 1 < len(lines) and lines[i + 1].startswith("```"), f"{page.name}:{i + 1}: no block follows"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_output_not_compared_marks_name_a_reason_and_a_shown_output(page):
    lines = page.read_text(encoding="utf-8").splitlines()
    marked = {b.expected_line - 1 for b in docs.blocks(page) if b.not_compared}  # 0-based fence lines
    for i, line in enumerate(lines):
        if line.startswith("<!-- output not compared"):
            assert docs.NOT_COMPARED.search(line), f"{page.name}:{i + 1}: say why: <!-- output not compared: REASON -->"
            assert i + 1 in marked, f"{page.name}:{i + 1}: the mark must sit right before the text block of a run block"


def test_shown_output_belongs_to_the_runnable_block_before_it(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\necho hi\n```\n\n<!-- output not compared: varies -->\n```text\nhi\n```\n"
                    "Prose.\n```text\nnot an output\n```\n<!-- not run: GPU -->\n```bash\necho x\n```\n"
                    "```text\nx\n```\n```bash\necho y\n```\n```text\ny\n```\n")
    found = docs.blocks(page)
    runs = [b for b in found if b.lang == "bash"]
    assert [(b.expected, b.expected_line, b.not_compared) for b in runs] == [
        ("hi\n", 6, "varies"), (None, 0, ""), ("y\n", 23, "")]


def test_output_comparison_normalises_times_and_paths_and_honours_ellipsis(tmp_path):
    block = docs.Block(tmp_path / "p.md", 1, "bash", "true\n", expected="start\n...\nok (2.1 s)\nDone in 15 s.\n")
    assert docs.output_difference(block, "start\nok (0.4 s)\nDone in 3 s.\n") == ""
    assert docs.output_difference(block, "start\na\nb\nok (9.0 s)\nDone in 3 s.\n\n") == ""
    assert "+ok (<time>)" in docs.output_difference(block, "start\nok (1 s)\nok (1 s)\n")
    assert "-start" in docs.output_difference(block, "ok (0.4 s)\nDone in 3 s.\n")
    assert docs.normalise(f"wrote {tmp_path}/out and /tmp/paw-x/y", tmp_path) == ["wrote out and <tmp>"]
    assert docs.normalise("cosine std 0.2398 min 0.1, took 1 min 5 s") == ["cosine std 0.2398 min 0.1, took <time>"]
    assert docs.matches(["a", "...", "c", "..."], ["a", "c", "c", "d"]) and not docs.matches(["a", "..."], ["b"])
    assert docs.output_difference(docs.replace(block, not_compared="timings"), "anything") == ""


def test_update_rewrites_plain_shown_outputs_and_leaves_shortened_ones(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\necho a\n```\n```text\nold\n```\nText.\n```bash\necho b\n```\n```text\nx\n...\n```\n")
    first, _, second, _ = docs.blocks(page)
    ran = [docs.Ran(first, 0, f"new {tmp_path}/out\nline 2\n\n", "differs"), docs.Ran(second, 0, "y\n", "differs")]
    left = docs.update_shown(page, ran, tmp_path)
    assert left == [ran[1]]
    assert page.read_text() == ("```bash\necho a\n```\n```text\nnew out\nline 2\n```\nText.\n"
                                "```bash\necho b\n```\n```text\nx\n...\n```\n")


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_examples_create_what_they_read(page):
    assert docs.missing_inputs(page) == []
    for block in docs.blocks(page):
        if block.runs:  # nothing beside the page's folder: no ../shared, no machine paths
            assert not re.search(r"(^|\s)\.\./|/work/|shared/data", block.code), block.where()


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```|`[^`\n]*`", "", page.read_text(encoding="utf-8"), flags=re.S)  # not in code
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path = (page.parent / target).resolve()
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        assert path.exists() or rel in ELSEWHERE, f"{page.relative_to(ROOT)}: broken link {target}"


def test_demo_help_and_readme_agree_on_the_time(cli):
    help_text = " ".join(cli("demo", "--help").stdout.split())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "under a minute" in help_text and "under a minute" in readme


def test_missing_inputs_finds_an_unmade_file(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\npaw zoo build tiny\npaw merge --base tiny/base --models tiny/ft0 --output m\n```\n"
                    "```bash\npaw eval --model m --data quiz.jsonl\n```\n")
    problems = docs.missing_inputs(page)
    assert len(problems) == 2 and "tiny/ft0" in problems[0] and "quiz.jsonl" in problems[1]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_examples_run_as_written(page, tmp_path):
    results = docs.run_page(page, tmp_path / "work")
    failed = [(r.block.where(), r.output[-3000:]) for r in results if r.rc]
    assert not failed, failed
    assert len(results) == len([b for b in docs.blocks(page) if b.runs])
    differ = [f"{r.block.where()}: {r.difference}" for r in results if r.difference]
    assert not differ, "\n\n".join(differ)


def test_script_runs_standalone():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_examples.py"), "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "not run" not in out.stderr
