"""Text that ships with PAW: the embedded samples that tiny tokenizers, probes and prompts are made of.

Standard library only, so any room may read it (the zoo, distillation, the benchmarks, the tests)
without importing the one that builds tiny models.

>>> sample_texts("en")[0][:44]
'The quick brown fox jumps over the lazy dog.'
>>> len(sample_texts("en")), len(sample_texts("multi"))
(10, 22)
"""

from __future__ import annotations

from importlib import resources

__all__ = ["sample_texts"]


def sample_texts(name: str = "en") -> list[str]:
    """Lines of the embedded sample text: ``'en'`` (English) or ``'multi'`` (English, Chinese, code, numbers...)."""
    text = resources.files(__name__).joinpath(f"sample_{name}.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]
