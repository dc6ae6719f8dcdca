"""LoRA extraction from full fine-tunes: per module, the truncated SVD of fine-tune − base as a PEFT LoRA.

    from paw.extract import ExtractOptions, extract_lora
    extract_lora("./tiny/base", "./tiny/ft-math", "./ft-lora", ExtractOptions(energy=0.9))

:mod:`paw.extract.svd` holds the math (pure tensor functions), :mod:`paw.extract.plan` what each
tensor becomes, :mod:`paw.extract.pipeline` the streamed run. Nothing here imports torch at import time.
"""

from paw.extract.pipeline import ExtractedLora, ExtractOptions, extract_lora

__all__ = ["ExtractOptions", "ExtractedLora", "extract_lora"]
