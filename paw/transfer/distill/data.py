"""The names :mod:`paw.bench` still imports from here; they live in the modules named for their job.

- :mod:`paw.transfer.distill.prompts`: :class:`Prompt` and the lists of them (files, generic text, held-out);
- :mod:`paw.transfer.distill.generation`: what the teacher writes (continuations, next words);
- :mod:`paw.transfer.distill.synthesis`: new inputs written from seeds, and the discriminator filter.

New code imports from those; this module goes once the benchmark does too.
"""

from paw.transfer.distill.prompts import Prompt, prompts_from
from paw.transfer.distill.synthesis import discriminator_passes

__all__ = ["Prompt", "discriminator_passes", "prompts_from"]
