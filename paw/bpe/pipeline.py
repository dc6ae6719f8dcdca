"""What ``paw bpe`` runs, from files: train a tokenizer, open one, compare several on texts.

    from paw.bpe.options import CompareOptions, TrainOptions
    from paw.bpe.pipeline import compare_files, train_files
    bpe = train_files(TrainOptions(files=("corpus.txt",), vocab_size=8000, output="my", pattern="llama3",
                                   export_hf="my-hf"))
    table = compare_files(CompareOptions(files=("en.txt", "zh.txt"), tokenizers=("my.model", "llama3/tokenizer.json"),
                                         plot="cmp.png"))

Each takes its command's options (:mod:`paw.bpe.options`); the one that writes, the run's too.

The training and encoding themselves are the pure functions of :mod:`paw.bpe`; reading goes through
:mod:`paw.io.bpe_files`, writing through :mod:`paw.io.bpe_paw_model` and :mod:`paw.io.bpe_tokenizer_json`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from paw.bpe import BpeEncoder, compression, resolve_pattern, train_tokenizer
from paw.bpe.options import CompareOptions, DecodeOptions, EncodeOptions, TrainOptions
from paw.bpe.plots import compression_chart
from paw.bpe.tokenizer import check_vocab_size
from paw.errors import PawError
from paw.io.atomic import atomic_dir, check_output
from paw.io.bpe_files import read_bpe, read_text_files, save_chart
from paw.io.bpe_paw_model import write_paw_model
from paw.io.bpe_tokenizer_json import write_hf_tokenizer_json
from paw.io.manifest import describe_input, records_call, write_json, write_manifest
from paw.io.tokenizer_config import CONFIG_NAME, minimal_config
from paw.io.tokenizer_json import guess_role
from paw.knobs import RunOptions
from paw.progress import status

PathLike = str | Path


def open_encoder(spec: PathLike, pattern: str | None = None):
    """A :class:`~paw.bpe.BpeEncoder` for a tokenizer file; ``pattern`` fills in a rank file's missing one."""
    bpe = read_bpe(spec)
    if pattern is not None:
        bpe.pattern = resolve_pattern(pattern)
    elif bpe.pattern is None and bpe.kind == "tiktoken":
        raise PawError("a tiktoken rank file does not say how to pre-tokenize; pass --pattern", path=spec)
    return BpeEncoder(bpe.mergeable_ranks, bpe.pattern, bpe.special_tokens)


@records_call
def train_files(options: TrainOptions, run: RunOptions = RunOptions(), *, command: str | None = None,
                track: Callable | None = None):
    """Learn a byte-level BPE from ``options.files``; write ``OUTPUT.model`` / ``OUTPUT.vocab`` (and
    ``EXPORT_HF/tokenizer.json``). Returns the :class:`~paw.bpe.TrainedBpe`.

    ``track(steps, n)`` wraps the merge loop (a progress bar); ``processes=0`` counts on every core.
    """
    options.check()
    files, vocab_size, output, export_hf = list(options.files), options.vocab_size, options.output, options.export_hf
    special_tokens, overwrite = options.special_tokens or (), run.overwrite
    regex = resolve_pattern(options.pattern)
    check_vocab_size(vocab_size, list(special_tokens))
    for out in (f"{output}.model", f"{output}.vocab", *([export_hf] if export_hf is not None else [])):
        check_output(out, overwrite=overwrite, inputs=files)
    texts = read_text_files(files)
    if not any(texts):
        raise PawError("the corpus is empty (no text to learn from)")
    status(f"counting pre-tokens in {sum(len(t) for t in texts):,} characters")
    bpe = train_tokenizer(texts, vocab_size, pattern=regex, special_tokens=list(special_tokens),
                          min_frequency=options.min_frequency, processes=options.processes or None, track=track)
    _write_trained(bpe, Path(output), export_hf, overwrite=overwrite, inputs=files, command=command)
    return bpe


def _write_trained(bpe, output: Path, export_hf: PathLike | None, *, overwrite: bool, inputs, command) -> None:
    """``OUTPUT.model`` + ``OUTPUT.vocab`` (+ the export folder when it sits beside them) as one set."""
    def export(folder: Path) -> None:
        write_hf_tokenizer_json(folder / "tokenizer.json", mergeable_ranks=bpe.mergeable_ranks, pattern=bpe.pattern,
                                special_tokens=bpe.special_tokens)
        write_json(folder / CONFIG_NAME, minimal_config(special_roles(bpe.special_tokens)))
        write_manifest(folder, "paw_bpe.json", command=command,
                       inputs={str(p): describe_input(p) for p in inputs},
                       vocab_size=len(bpe.mergeable_ranks) + len(bpe.special_tokens), merges=len(bpe.merges))

    together = export_hf is not None and Path(export_hf).parent == output.parent and Path(export_hf).name not in \
        (f"{output.name}.model", f"{output.name}.vocab")
    if export_hf is not None and not together:  # another folder: its own atomic output, written first
        with atomic_dir(export_hf, overwrite=overwrite, inputs=inputs) as tmp:
            export(tmp)
    write_paw_model(output, mergeable_ranks=bpe.mergeable_ranks, pattern=bpe.pattern,
                    special_tokens=bpe.special_tokens, merges=bpe.merges, overwrite=overwrite, inputs=inputs,
                    extra_dir=export_hf if together else None, write_extra=export)


def special_roles(special_tokens: dict[str, int]) -> dict[str, str]:
    """``{role: token}`` for the bos/eos/pad/unk tokens among ``special_tokens``, known by their spelling
    (the first of each role by id), for the export's ``tokenizer_config.json``.

    >>> special_roles({"<|endoftext|>": 600, "<|pad|>": 601, "<|im_start|>": 602})
    {'eos': '<|endoftext|>', 'pad': '<|pad|>'}
    """
    roles: dict[str, str] = {}
    for content, _ in sorted(special_tokens.items(), key=lambda kv: kv[1]):
        role = guess_role(content)
        if role in ("bos", "eos", "pad", "unk"):
            roles.setdefault(role, content)
    return roles


def compare_files(options: CompareOptions) -> dict:
    """``{(tokenizer name, file name): Compression}`` for every pair, and a bar chart at ``options.plot``.

    Arguments in ``files`` that name tokenizer files (``*.model``, ``*.tiktoken``, ``tokenizer.json``,
    a folder with one) join the tokenizers, so ``--tokenizers T1 T2 FILES...`` reads naturally.
    """
    options.check()
    plot, pattern = options.plot, options.pattern
    specs, texts_files = split_specs([Path(t) for t in options.tokenizers], [Path(f) for f in options.files])
    texts = dict(zip([f.name for f in texts_files], read_text_files(texts_files), strict=True))
    names = short_names(specs)
    table = {}
    for name, spec in zip(names, specs, strict=True):
        encoder = open_encoder(spec, pattern) if pattern else open_encoder(spec)
        for file, text in texts.items():
            table[(name, file)] = compression(encoder.encode_ordinary(text), text)
    if plot is not None:
        chart = {file: {name: table[(name, file)].bytes_per_token for name in names} for file in texts}
        save_chart(plot, compression_chart(chart, ylabel="bytes per token (higher = better compression)",
                                           title="Compression by tokenizer and file"))
    return table


def encode_text(options: EncodeOptions) -> list[int]:
    """The token ids of ``options.text`` (or of the file ``options.input_file``); special tokens in the text are
    refused unless ``allowed_special`` names them (``('all',)``: every one; ``None`` or ``('none',)``: none)."""
    o = options
    o.check()
    if (o.text is None) == (o.input_file is None):
        raise PawError("give exactly one of --text and --input")
    content = o.text if o.text is not None else read_text_files([o.input_file])[0]
    given = list(o.allowed_special or ("none",))
    allowed = "all" if given == ["all"] else [] if given == ["none"] else given
    encoder = open_encoder(o.tokenizer, o.pattern)
    unknown = [t for t in ([] if allowed == "all" else allowed) if t not in encoder.special_tokens]
    if unknown:
        raise PawError(f"--allowed-special {unknown[0]!r} is not a special token of this tokenizer "
                       f"(it has {len(encoder.special_tokens)})", path=o.tokenizer)
    return encoder.encode_large(content, allowed_special=allowed)


def decode_ids(options: DecodeOptions) -> str:
    """The text of ``options.ids`` (``'9906 1917'`` or ``'9906,1917'``)."""
    options.check()
    words = options.ids.replace(",", " ").split()
    try:
        values = [int(w) for w in words]
    except ValueError:
        raise PawError(f"--ids must be integers, got {' '.join(words)!r}") from None
    return open_encoder(options.tokenizer).decode(values)


def split_specs(tokenizers: list[Path], args: list[Path]) -> tuple[list[Path], list[Path]]:
    """Move arguments that name tokenizer files (not text) from the text list to the tokenizers."""

    def is_tokenizer(p: Path) -> bool:
        return p.suffix in (".model", ".tiktoken") or p.name == "tokenizer.json" or (p / "tokenizer.json").is_file()

    specs = [*tokenizers, *(p for p in args if is_tokenizer(p))]
    texts = [p for p in args if not is_tokenizer(p)]
    if not texts:
        raise PawError("no text files to compare on (give UTF-8 files after the tokenizers)")
    return specs, texts


def short_names(paths: list[Path]) -> list[str]:
    """``tok/llama3/tokenizer.json`` -> ``llama3``; ``my.model`` -> ``my``; duplicates get a suffix."""
    names = []
    for p in paths:
        base = p.parent.name if p.name == "tokenizer.json" else p.name if p.is_dir() else p.name.split(".")[0]
        names.append(base if base not in names else f"{base}#{len(names)}")
    return names
