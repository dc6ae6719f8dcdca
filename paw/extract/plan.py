"""What ``paw extract-lora`` does with each tensor of a base / fine-tune pair, decided from headers only.

Every tensor name is asked of :mod:`paw.arch` (no name is spelled here): a projection weight of a
decoder layer is a LoRA target, the input embedding and the output head get the vocabulary rule,
and everything else (norm gains, biases, anything the family table does not know) is a
non-linear delta that a LoRA cannot carry. :func:`check_pair` refuses a fine-tune that is not the
base's architecture before any tensor is read.

>>> plan_tensor("model.layers.0.self_attn.q_proj.weight", (64, 64), arch.get("llama")).role  # doctest: +SKIP
'q'
"""

from __future__ import annotations

from dataclasses import dataclass

from paw import arch
from paw.errors import PawError

LINEAR, EMBED, HEAD, OTHER = "linear", "embed", "head", "other"


@dataclass(frozen=True)
class Planned:
    """One tensor: its kind (:data:`LINEAR`, :data:`EMBED`, :data:`HEAD` or :data:`OTHER`), the
    module PEFT wraps (``model.layers.0.self_attn.q_proj``) and its role (``'q'``, ``'embed'``...)."""

    tensor: str
    kind: str
    module: str
    role: str


def plan_tensor(name: str, shape: tuple[int, ...], fam: arch.Family) -> Planned:
    """Classify one tensor of the base checkpoint (see the module docstring)."""
    module = name.removesuffix(".weight")
    if name == fam.embed and len(shape) == 2:
        return Planned(name, EMBED, module, "embed")
    if name == fam.head and len(shape) == 2:
        return Planned(name, HEAD, module, "head")
    parts = arch.split_layer(name)
    proj = fam.proj_of(name)
    if proj is not None and parts and parts[0] == fam.layers and parts[2] == f"{proj.path}.weight" \
            and len(shape) == 2:
        return Planned(name, LINEAR, module, proj.role)
    return Planned(name, OTHER, module, arch.module_kind(name))


def tied_head_module(fam: arch.Family) -> str:
    """The module path of the output head (``lm_head``), for a model whose head is its embedding."""
    return fam.head.removesuffix(".weight")


def check_pair(base, finetune) -> arch.Family:
    """The family of two lazily opened checkpoints, once they are known to be one architecture.

    Refused, naming the fine-tune's path: another model family, another tying of the head, a tensor
    one of them lacks, a shape that differs. Reads headers only.
    """
    fam, fam_ft = arch.family(base.config), arch.family(finetune.config)
    if fam.name != fam_ft.name:
        raise PawError(f"the fine-tune is a {fam_ft.name} model but the base is {fam.name}; "
                       "extract-lora needs a fine-tune of the base itself", path=finetune.path)
    if base.tied_embeddings != finetune.tied_embeddings:
        how = {True: "tied to", False: "separate from"}
        raise PawError(f"the fine-tune's output head is {how[finetune.tied_embeddings]} its embedding but the "
                       f"base's is {how[base.tied_embeddings]} it", path=finetune.path)
    missing = [n for n in base if n not in finetune]
    extra = [n for n in finetune if n not in base]
    if missing or extra:
        what = f"lacks {missing[0]!r}" if missing else f"has {extra[0]!r}, which the base lacks"
        raise PawError(f"the fine-tune {what} ({len(missing)} missing, {len(extra)} extra tensor(s)): "
                       "not the base's architecture", path=finetune.path)
    for name in base:
        if tuple(base.shape(name)) != tuple(finetune.shape(name)):
            raise PawError(f"tensor {name!r} has shape {list(finetune.shape(name))} in the fine-tune but "
                           f"{list(base.shape(name))} in the base", path=finetune.path)
    return fam
