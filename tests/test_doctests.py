"""The examples in the docstrings of PAW's torch-free modules run, and give what they say.

A docstring example is documentation a reader copies; run here, it cannot drift from the code.
Modules that need torch for their examples keep them as ``# doctest: +SKIP`` and stay off this
list; :func:`test_the_listed_modules_do_not_need_torch` keeps the list honest. ``paw/io`` and
``paw/bpe`` are being re-sorted by format (issue 25) and join the list once they settle.
"""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys

import pytest

TORCH_FREE = [
    "paw.arch",
    "paw.bench.conditions",
    "paw.bench.real.task_sets",
    "paw.bench.stats",
    "paw.bench.surgery",
    "paw.bench.tables",
    "paw.bench.tasks",
    "paw.data",
    "paw.device",
    "paw.evaluate.chat",
    "paw.evaluate.exact",
    "paw.evaluate.fewshot",
    "paw.evaluate.formats",
    "paw.evaluate.generate",
    "paw.evaluate.items",
    "paw.evaluate.mc",
    "paw.evaluate.options",
    "paw.evaluate.stats",
    "paw.fsdp",
    "paw.io.adapter_config",
    "paw.io.model_config",
    "paw.merge.weights",
    "paw.progress",
    "paw.transfer.distill.byte_align",
    "paw.transfer.distill.cost",
    "paw.transfer.distill.timing",
    "paw.transfer.distill.prompts",
    "paw.transfer.distill.synthesis",
    "paw.transfer.distill.lora",
    "paw.transfer.distill.fit",
    "paw.transfer.distill.report",
    "paw.transfer.gate",
    "paw.transfer.layers",
    "paw.transfer.relatedness",
    "paw.vocab.embed",
    "paw.vocab.roles",
    "paw.vocab.scripts",
]


@pytest.mark.parametrize("name", TORCH_FREE)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0, f"{name} has no example left to run; take it off the list"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see above)"


def test_the_listed_modules_do_not_need_torch():
    code = ("import doctest, importlib, sys\n"
            f"for name in {TORCH_FREE!r}:\n"
            "    doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)\n"
            "print(sorted(m for m in ('torch', 'transformers', 'peft', 'matplotlib') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
