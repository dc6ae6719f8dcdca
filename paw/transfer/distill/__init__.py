"""Distillation: move a LoRA to any base model by teaching a new LoRA to imitate the old one.

The wing of ``paw transfer-lora --method distill`` (``docs/distill.md``), one room per concern:

- :mod:`~paw.transfer.distill.options`: :class:`DistillOptions`, every knob with its default, checked before any work;
- :mod:`~paw.transfer.distill.prompts`: label-free inputs (prompt files, generic text, a held-out share);
- :mod:`~paw.transfer.distill.generation`: what the teacher writes (continuations, its likeliest next words);
- :mod:`~paw.transfer.distill.synthesis`: new inputs the teacher writes from a few seeds, and their filter;
- :mod:`~paw.transfer.distill.loss`: the losses and agreement figures (token, byte-aligned, choice KL; sequence NLL);
- :mod:`~paw.transfer.distill.byte_align`: the cuts two tokenizations of one text share;
- :mod:`~paw.transfer.distill.train`: :class:`LM` (one side: model and tokenizer), examples from the teacher, a batch's losses;
- :mod:`~paw.transfer.distill.fit`: those losses through :func:`paw.train.run`, the automatic stop, the agreement figures;
- :mod:`~paw.transfer.distill.lora`: :func:`distill_lora`, the in-memory algorithm;
- :mod:`~paw.transfer.distill.report`: its report (budget, cost estimate, warnings);
- :mod:`~paw.transfer.distill.run`: folders and files in, an adapter folder out (what
  :func:`paw.transfer.folder_pipeline.transfer_adapter` runs for ``method='distill'``).
"""

from paw.transfer.distill.lora import distill_lora
from paw.transfer.distill.options import DISTILL, GENERIC, INITS, DistillOptions
from paw.transfer.distill.train import LM

__all__ = ["DISTILL", "GENERIC", "INITS", "LM", "DistillOptions", "distill_lora"]
