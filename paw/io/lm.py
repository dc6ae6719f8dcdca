"""Load a causal language model (+ tokenizer, + optional PEFT adapter) and save trained adapters.

The one place where evaluation and training touch model folders; both commands and the demo go
through here, so a missing folder, a folder without a tokenizer or an adapter for another model
becomes one clear :class:`~paw.errors.PawError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw import __version__
from paw.errors import PawError
from paw.io.adapter_check import read_adapter_header
from paw.io.adapter_config import make_portable_adapter
from paw.io.atomic import atomic_dir, atomic_file
from paw.io.checkpoint import open_checkpoint
from paw.io.gguf import gguf_side_folder, load_gguf_model
from paw.io.hub import resolve_path
from paw.io.json_file import read_json_if_exists
from paw.io.manifest import dumps, write_json
from paw.io.model_card import CARD, Card, write_card

DTYPES = ("auto", "float32", "bfloat16", "float16")


def check_dtype(dtype: str) -> str:
    """``dtype`` if it is one of :data:`DTYPES`, else a PawError naming ``--dtype`` (before a model is read)."""
    if dtype not in DTYPES:
        raise PawError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return dtype


def load_lm(model: str | Path, *, adapter: str | Path | None = None, device=None, dtype: str = "auto"):
    """``(model, tokenizer)`` from a model folder or Hub id (cached or downloaded), with ``adapter`` applied if given.

    ``dtype='auto'`` keeps the checkpoint's dtype on GPU and uses float32 on CPU (bfloat16 matmuls
    are slow there). The model is in eval mode on ``device`` (default CPU).
    """
    import torch
    from transformers import AutoModelForCausalLM

    check_dtype(dtype)
    path = resolve_path(model, what="model")
    device = torch.device(device) if device is not None else torch.device("cpu")
    torch_dtype: Any = "auto" if device.type == "cuda" else torch.float32
    if dtype != "auto":
        torch_dtype = getattr(torch, dtype)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _load_gguf_lm(path, adapter=adapter, device=device, dtype=torch_dtype)
    if path.is_file():
        raise PawError("a file, not a model: pass the model folder (config.json, weights, tokenizer) "
                       "or a .gguf file", path=path)
    open_checkpoint(path)  # first: headers checked, pickles refused, a wrong folder named (x.gguf/, an adapter)
    for name in _SIDE_JSON:  # transformers reads them with .items(): a list would fail naming no file
        read_json_if_exists(path / name)
    tokenizer_source = path
    if not _has_tokenizer(path) and adapter is not None and _has_tokenizer(Path(adapter)):
        tokenizer_source = Path(adapter)
    try:
        tokenizer = load_tokenizer(tokenizer_source)
    except Exception as err:  # transformers raises what the files make it raise: name the folder
        raise PawError(f"cannot load a tokenizer from the model folder ({_first_line(err)})", path=path) from None
    try:
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except Exception as err:  # a config.json field of the wrong type is huggingface_hub's own error class
        raise PawError(f"cannot load a causal language model ({_first_line(err)})", path=path) from None
    if adapter is not None:
        lm = _apply_adapter(lm, adapter)
    return lm.to(device).eval(), tokenizer


# spaces, digits, punctuation, a line break, accents, CJK and an emoji: where tokenizer pipelines differ
_PROBE = "Fact: the colour of X is red.  12 345\n\tnaïve café — 東京 😀 <b>ok</b>"


def load_tokenizer(folder: str | Path):
    """transformers' tokenizer for ``folder``, made to tokenize exactly as its ``tokenizer.json`` says.

    transformers picks the tokenizer class from the model type, and a model-specific class
    (``Qwen2Tokenizer``, ``GemmaTokenizer``) rebuilds its own normaliser and pre-tokenizer around
    the file's vocabulary. For a folder whose tokenizer came from elsewhere (a transplant, a zoo
    model) that silently changes the tokens: spaces dropped, unknown characters lost. When the
    loaded tokenizer and the file disagree on a probe text, the file's own pipeline is loaded.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    file = Path(folder) / "tokenizer.json"
    if not file.is_file() or not getattr(tokenizer, "is_fast", False):
        return tokenizer
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    try:
        own = Tokenizer.from_file(str(file)).encode(_PROBE, add_special_tokens=False).ids
    except Exception:  # noqa: BLE001 - a file the tokenizers library cannot read: keep transformers' reading
        return tokenizer
    if list(tokenizer.encode(_PROBE, add_special_tokens=False)) == list(own):
        return tokenizer
    return PreTrainedTokenizerFast.from_pretrained(folder)


def _load_gguf_lm(path: Path, *, adapter, device, dtype):
    """A GGUF file: the model filled from :func:`paw.io.gguf.open_gguf`, transformers' tokenizer."""
    import torch
    from transformers import AutoTokenizer

    model_dtype = dtype if isinstance(dtype, torch.dtype) else torch.float32
    lm = load_gguf_model(path, dtype=model_dtype)
    tokenizer = AutoTokenizer.from_pretrained(gguf_side_folder(path))
    if adapter is not None:
        lm = _apply_adapter(lm, adapter)
    return lm.to(device).eval(), tokenizer


def _apply_adapter(lm, adapter: str | Path):
    from peft import PeftModel

    folder = resolve_path(adapter, what="adapter")
    if not (folder / "adapter_config.json").is_file():
        raise PawError("not a PEFT adapter folder (no adapter_config.json)", path=folder)
    read_adapter_header(folder)  # config against tensor shapes, as PEFT would, but in one line
    try:
        return PeftModel.from_pretrained(lm, folder)
    except Exception as err:  # PEFT's LoraConfig takes adapter_config.json's values unchecked (bias: 5, ...)
        raise PawError(f"cannot apply the adapter to this model ({_first_line(err)})", path=folder) from None


_SIDE_JSON = ("tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json"))


def _first_line(err: Exception) -> str:
    """The library's message on one line (a field validation error puts the field's problem on line two)."""
    text = " ".join(line.strip() for line in str(err).strip().splitlines()[:2])
    return text[:300] if text else type(err).__name__


def save_adapter(peft_model, output: str | Path, *, overwrite: bool = False, extra_files: dict[str, Any] | None = None,
                 base: str | Path | None = None, card: Card | None = None) -> Path:
    """Write a PEFT adapter folder atomically (+ JSON side files such as ``metrics.json``, and ``card``)."""
    with atomic_dir(output, overwrite=overwrite) as tmp:
        write_adapter_into(peft_model, tmp, extra_files=extra_files, base=base, card=card)
    return Path(output)


def write_adapter_into(peft_model, folder: str | Path, *, extra_files: dict[str, Any] | None = None,
                       base: str | Path | None = None, state_dict: dict | None = None, card: Card | None = None) -> None:
    """``save_pretrained`` into an existing (temporary) folder, recording ``base`` as the base model;
    ``state_dict``: the factors to write when the model's own are shards (:func:`paw.fsdp.full_lora_state`).

    PEFT's blank card template (``base_model`` a local path, which the Hub refuses) is replaced by
    ``card``, or removed without one (``checkpoint-STEP`` folders)."""
    for config in peft_model.peft_config.values():
        if base is not None:
            config.base_model_name_or_path = str(base)
        sort_target_modules(config)
    peft_model.save_pretrained(folder, **({"state_dict": state_dict} if state_dict is not None else {}))
    make_portable_adapter(folder)  # without the keys PEFT 0.13 refuses (paw.io.adapter_config)
    for name, data in (extra_files or {}).items():
        write_json(Path(folder) / name, data)
    if card is not None:
        write_card(folder, card)
    else:
        (Path(folder) / CARD).unlink(missing_ok=True)


def sort_target_modules(config) -> None:
    """PEFT keeps ``target_modules`` as a set and saves it in set order, which changes with Python's
    string hashing from run to run; a sorted list makes ``adapter_config.json`` byte-identical."""
    for key in ("target_modules", "modules_to_save"):
        value = getattr(config, key, None)
        if isinstance(value, (set, frozenset, list, tuple)):
            setattr(config, key, sorted(value))


def write_results(path: str | Path, *, command: str, inputs: dict[str, Any], **fields: Any) -> Path:
    """Write an evaluation's JSON (PAW version, command line, inputs, ``fields``) atomically."""
    with atomic_file(path, encoding="utf-8") as handle:
        handle.write(dumps({"paw_version": __version__, "command": command, "inputs": inputs, **fields}))
    return Path(path)
