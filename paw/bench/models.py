"""Build a transformers causal LM straight from a state dict and a config dict (no disk)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from paw import arch
from paw.errors import PawError

if TYPE_CHECKING:
    from torch import Tensor


def model_from_state_dict(sd: dict[str, Tensor], config: dict[str, Any]):
    """A model of ``config['model_type']`` with exactly the weights ``sd`` (strict), float32, eval mode.

    >>> model = model_from_state_dict(*grow_state_dict(sd, cfg, num_layers=4))  # doctest: +SKIP
    """
    import torch
    import transformers

    kind = config.get("model_type")
    if kind not in transformers.CONFIG_MAPPING:
        raise PawError(f"unknown model_type {kind!r} in config")
    fields = {k: v for k, v in config.items() if k not in ("model_type", "transformers_version")}
    cfg = transformers.CONFIG_MAPPING[kind](**fields)
    model = transformers.AutoModelForCausalLM.from_config(cfg)  # tiny models: a throwaway init is cheap
    sd = dict(sd)
    if cfg.tie_word_embeddings:
        names = arch.family(config)
        sd.setdefault(names.head, sd[names.embed])
    with torch.no_grad():
        model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    return model.float().eval()
