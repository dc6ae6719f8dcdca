"""Tiny local models, tokenizers, fine-tunes and LoRA adapters, built on the spot.

Nothing is downloaded: models come from ``transformers`` configs with small hidden sizes and
depths, tokenizers are trained in a second on embedded text, and everything is saved as ordinary
Hugging Face / PEFT folders so every PAW command (and ``from_pretrained``) can read it.

>>> from paw import data
>>> model = build_model("llama", hidden_size=32, num_layers=2, vocab_size=300)  # doctest: +SKIP
>>> save_model(model, "tiny-llama", tokenizer=train_tokenizer(data.sample_texts(), 300))  # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw import data
from paw.errors import PawError
from paw.io.adapter_config import make_portable_adapter
from paw.io.atomic import atomic_dir, check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.hub import quiet_transformers
from paw.io.lm import load_tokenizer, sort_target_modules
from paw.io.model_config import make_portable_config
from paw.io.tokenizer_config import make_portable
from paw.zoo_options import BuildOptions, FineTuneOptions

SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|unk|>"]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class Arch:
    """How to build one architecture: its transformers config class and per-family defaults."""

    config_class: str
    model_class: str
    defaults: dict[str, Any]


ARCHS: dict[str, Arch] = {
    "llama": Arch("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": False}),
    "qwen2": Arch("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
    # Gemma-style: tied embeddings scaled by sqrt(hidden), GeGLU MLP, (1 + w) RMSNorm gains
    "gemma": Arch("GemmaConfig", "GemmaForCausalLM", {"tie_word_embeddings": True}),
    "mistral": Arch("MistralConfig", "MistralForCausalLM", {"tie_word_embeddings": False}),
}


def tiny_config(arch: str = "llama", *, vocab_size: int = 256, hidden_size: int = 32, num_layers: int = 2,
                num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int | None = None,
                max_position_embeddings: int = 512, **overrides: Any):
    """A transformers config for a tiny model of family ``arch`` (llama, qwen2, gemma, mistral)."""
    import transformers

    if arch not in ARCHS:
        raise PawError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    spec = ARCHS[arch]
    fields = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size or 2 * hidden_size, max_position_embeddings=max_position_embeddings,
        head_dim=hidden_size // num_heads, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, pad_token_id=2,
        **spec.defaults,
    )
    fields.update(overrides)
    return getattr(transformers, spec.config_class)(**fields)


def build_model(arch: str = "llama", *, seed: int = 0, init_std: float = 0.05, **dims: Any):
    """A randomly initialised tiny causal LM (float32, eval mode), deterministic in ``seed``."""
    import torch
    import transformers

    config = tiny_config(arch, initializer_range=init_std, **dims)
    torch.manual_seed(seed)
    model = getattr(transformers, ARCHS[arch].model_class)(config)
    with torch.no_grad():  # norm gains away from 1 so that tests see them (transfer must fold them)
        gen = torch.Generator().manual_seed(seed + 7919)
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model.eval()


def train_tokenizer(texts: Iterable[str], vocab_size: int = 300, *, kind: str = "byte-bpe"):
    """Train a tiny tokenizer and wrap it as ``PreTrainedTokenizerFast`` (kinds: :data:`TOKENIZER_KINDS`)."""
    from transformers import PreTrainedTokenizerFast

    tok = TOKENIZER_KINDS[kind](list(texts), vocab_size)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>",
                                   pad_token="<|pad|>", unk_token="<|unk|>")


def _byte_bpe(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def _sentencepiece_bpe(texts: list[str], vocab_size: int):
    """Llama-2 style: ``▁`` for spaces, ``<0xNN>`` byte fallback tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<|unk|>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size + 256, special_tokens=SPECIAL_TOKENS + byte_tokens,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def _wordpiece(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


TOKENIZER_KINDS: dict[str, Callable] = {
    "byte-bpe": _byte_bpe,
    "sentencepiece-bpe": _sentencepiece_bpe,
    "wordpiece": _wordpiece,
}


def save_model(model, folder: str | Path, *, tokenizer=None, overwrite: bool = True) -> Path:
    """Save as a Hugging Face folder (safetensors + config [+ tokenizer]), atomically."""
    quiet_transformers()  # PAW draws its own progress; no per-shard bars in its output
    with atomic_dir(folder, overwrite=overwrite) as tmp:
        model.save_pretrained(tmp)
        make_portable_config(tmp)  # transformers 4 reads its rotary settings too (paw.io.model_config)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
            make_portable(tmp)  # transformers 5 names a class transformers 4 lacks (paw.io.tokenizer_config)
    return Path(folder)


def tiny_model(folder: str | Path, arch: str = "llama", *, seed: int = 0, vocab_size: int = 300,
               tokenizer_kind: str = "byte-bpe", texts: list[str] | None = None, **dims: Any) -> Path:
    """Build, save and return the folder of a tiny model with its own trained tokenizer."""
    check_dims(vocab_size=vocab_size, **dims)
    if arch not in ARCHS:
        tiny_config(arch)  # the error that lists the architectures
    tokenizer = train_tokenizer(texts or data.sample_texts("multi"), vocab_size, kind=tokenizer_kind)
    model = build_model(arch, seed=seed, vocab_size=len(tokenizer), **dims)
    return save_model(model, folder, tokenizer=tokenizer)


def check_dims(*, vocab_size: int = 300, hidden_size: int = 32, num_layers: int = 2, num_heads: int = 4,
               **_: Any) -> None:
    """Refuse sizes no tiny model can have (the tokenizer trainer would abort the process on some)."""
    if not 260 <= vocab_size <= 100_000:
        raise PawError(f"--vocab-size {vocab_size}: a zoo tokenizer needs 260 to 100,000 ids (256 bytes + specials)")
    if hidden_size <= 0 or hidden_size % num_heads or hidden_size > 8192:
        raise PawError(f"--hidden-size {hidden_size}: must be a positive multiple of {num_heads} (the heads), "
                       "at most 8192")
    if not 1 <= num_layers <= 64:
        raise PawError(f"--num-layers {num_layers}: must be between 1 and 64")


def perturb(model, *, seed: int, scale: float = 0.01, include: str = r".*") -> dict[str, Any]:
    """Add a known Gaussian task vector (std ``scale`` x the tensor's std) in place; return it by name."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    deltas = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if re.search(include, name):
                d = torch.randn(p.shape, generator=gen) * scale * (float(p.std()) if p.numel() > 1 else 1.0)
                p.add_(d)
                deltas[name] = d
    return deltas


def fine_tune(base: str | Path, folder: str | Path, *, seed: int, scale: float = 0.01,
              include: str = r".*") -> dict[str, Any]:
    """Save a 'fine-tune' of the model in ``base``: base plus :func:`perturb`; returns the task vector."""
    from transformers import AutoModelForCausalLM

    try:
        re.compile(include)
    except re.error as err:
        raise PawError(f"--include {include!r} is not a valid regex ({err})") from None
    open_checkpoint(base)  # a wrong folder or file is named in one line (x.gguf/, an adapter, no weights)
    try:
        model = AutoModelForCausalLM.from_pretrained(base)
    except (OSError, ValueError, KeyError) as err:
        raise PawError(f"cannot load a causal language model ({str(err).strip().splitlines()[0][:300]})",
                       path=base) from None
    deltas = perturb(model, seed=seed, scale=scale, include=include)
    tokenizer = load_tokenizer(base) if (Path(base) / "tokenizer.json").exists() else None
    save_model(model, folder, tokenizer=tokenizer)
    return deltas


def make_lora(base: str | Path, folder: str | Path, *, rank: int = 4, alpha: float = 8.0,
              target_modules: list[str] | str = "all-linear", seed: int = 0, scale: float = 0.1,
              modules_to_save: list[str] | None = None, use_dora: bool = False) -> Path:
    """Save a PEFT LoRA adapter for ``base`` whose B factors are random (non-zero), deterministic in ``seed``;
    ``use_dora``: a DoRA adapter, whose magnitude vectors are its initial row norms scaled by ``1 ± scale``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    targets = ALL_LINEAR if target_modules == "all-linear" else list(target_modules)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0,
                        modules_to_save=modules_to_save, task_type="CAUSAL_LM", use_dora=use_dora)
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name or "lora_embedding_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
            elif "lora_magnitude_vector" in name:
                p.mul_(1 + torch.randn(p.shape, generator=gen) * scale)
    peft_model.peft_config["default"].base_model_name_or_path = str(base)
    sort_target_modules(peft_model.peft_config["default"])
    with atomic_dir(folder, overwrite=True) as tmp:
        peft_model.save_pretrained(tmp)
        make_portable_adapter(tmp)  # without the keys PEFT 0.13 refuses (paw.io.adapter_config)
    return Path(folder)


def build_zoo(options: BuildOptions, *, say: Callable[[str], None] = lambda line: None) -> Path:
    """``paw zoo build``: a tiny base in ``OUTPUT/base`` (and, with ``lora``, ``OUTPUT/finetune`` and ``OUTPUT/lora``);
    ``say`` gets a line as each folder is written. Returns ``OUTPUT/base``."""
    if options.tokenizer not in TOKENIZER_KINDS:
        raise PawError(f"--tokenizer {options.tokenizer!r}: choose one of {', '.join(TOKENIZER_KINDS)}")
    output = Path(options.output)
    check_output(output, overwrite=False)
    base = tiny_model(output / "base", options.arch, seed=options.seed, vocab_size=options.vocab_size,
                      tokenizer_kind=options.tokenizer, hidden_size=options.hidden_size, num_layers=options.num_layers)
    say(f"base model:  {base}")
    if options.lora:
        fine_tune(base, output / "finetune", seed=options.seed + 1)
        make_lora(base, output / "lora", seed=options.seed + 2)
        say(f"fine-tune:   {output / 'finetune'}\nLoRA:        {output / 'lora'}")
    return base


def fine_tune_folder(options: FineTuneOptions) -> dict[str, Any]:
    """``paw zoo fine-tune``: :func:`fine_tune` into a new folder (an existing one is refused); the task vector."""
    check_output(options.output, overwrite=False)
    return fine_tune(options.base, options.output, seed=options.seed, scale=options.scale, include=options.include)
