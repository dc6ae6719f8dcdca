"""The student of :func:`paw.transfer.distill.lora.distill_lora`: the target base wrapped in a trainable LoRA,
started from PEFT's initialisation or from the data-free ``auto`` transfer, and the trained LoRA read back
as an adapter for the target.
"""

from __future__ import annotations

from paw.device import guard_cuda_attention
from paw.errors import PawError
from paw.io.adapter import LoraAdapter, lora_config_dict
from paw.transfer.training_free import transfer_lora


def target_modules_of(adapter, model, target_modules) -> list[str]:
    """The source adapter's module types (``q_proj`` ...) that the target has, or the ones given."""
    if target_modules:
        return list(target_modules)
    suffixes = sorted({m.rsplit(".", 1)[-1] for m in adapter.modules()})
    present = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    kept = [s for s in suffixes if s in present]
    if not kept:
        raise PawError(f"the target has none of the adapter's module types ({', '.join(suffixes)}); "
                       "pass --target-modules")
    return kept


def init_adapter(adapter, teacher, student, init, columns, rank, alpha, target_modules, device):
    """``(LoraAdapter to start from or None, note)``: the ``auto`` transfer when it applies."""
    if init == "none":
        return None, {"how": "none", "why": "--init none"}
    mapped = columns >= 0 if columns is not None else None  # rows past the tokenizer (padding) map to nothing
    same_ids = columns is not None and bool((columns[mapped] == _arange(len(columns))[mapped]).all())
    if not same_ids:
        return None, {"how": "none", "why": "the tokenizers differ, so no weight-space map keeps the gain"}
    if rank is not None or alpha is not None or target_modules:
        return None, {"how": "none", "why": "rank, alpha or target modules differ from the source adapter's"}
    if teacher.checkpoint is None or student.checkpoint is None:
        return None, {"how": "none", "why": "no checkpoints given for the weight-space transfer"}

    try:
        moved, report = transfer_lora(adapter, teacher.checkpoint, student.checkpoint, method="auto", device=device)
    except PawError as err:
        return None, {"how": "none", "why": f"auto transfer did not apply: {str(err)[:300]}"}
    return moved, {"how": "auto transfer", "methods": report["summary"]["methods"]}


def _arange(n: int):
    import torch

    return torch.arange(n)


def student(adapter, model, init_adapter, rank, alpha, target_modules, seed, device):
    """The target base wrapped in a fresh (or ``init_adapter``-initialised) trainable LoRA."""
    import torch
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    if init_adapter is not None:
        cfg = init_adapter.config
        config = LoraConfig(r=cfg["r"], lora_alpha=cfg["lora_alpha"], target_modules=cfg["target_modules"],
                            rank_pattern=cfg.get("rank_pattern") or {}, alpha_pattern=cfg.get("alpha_pattern") or {},
                            use_rslora=bool(cfg.get("use_rslora")), lora_dropout=0.0, task_type="CAUSAL_LM")
    else:
        config = LoraConfig(r=rank or adapter.r, lora_alpha=alpha if alpha is not None else adapter.alpha,
                            target_modules=target_modules_of(adapter, model, target_modules),
                            use_rslora=bool(adapter.config.get("use_rslora")), lora_dropout=0.0,
                            task_type="CAUSAL_LM")
    torch.manual_seed(seed)
    try:
        peft_model = get_peft_model(model.to(device), config)
    except ValueError as err:
        raise PawError(f"cannot attach a LoRA to the target: {err}") from None
    guard_cuda_attention(model)
    if init_adapter is not None:
        set_peft_model_state_dict(peft_model, {k: v.to(device) for k, v in init_adapter.tensors.items()})
    return peft_model


def adapter_of(peft_model, adapter, base_name: str, state_dict: dict | None = None):
    """The trained LoRA as an adapter for ``base_name``; ``state_dict``: whole factors of a sharded model."""
    from peft import get_peft_model_state_dict

    cfg = peft_model.peft_config["default"]
    tensors = {k: v.detach().to("cpu").float().clone().contiguous() for k, v in
               get_peft_model_state_dict(peft_model, state_dict=state_dict).items()}
    targets = sorted(cfg.target_modules) if not isinstance(cfg.target_modules, str) else [cfg.target_modules]
    config = lora_config_dict(r=cfg.r, alpha=cfg.lora_alpha, target_modules=targets, base_model=base_name,
                              rank_pattern=dict(cfg.rank_pattern or {}), alpha_pattern=dict(cfg.alpha_pattern or {}),
                              use_rslora=bool(cfg.use_rslora))
    return LoraAdapter(config=config, tensors=tensors)


