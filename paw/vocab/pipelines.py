"""Tokenizer pipelines from files to files: compare two tokenizers, align their vocabularies, and
give a model a new tokenizer.

These are what ``paw analyze-tokenizers``, ``paw align-vocab`` and ``paw transplant-tokenizer``
run, and what the demo and the benchmark call directly::

    from paw.vocab.options import TransplantOptions
    from paw.vocab.pipelines import transplant_tokenizer
    result = transplant_tokenizer(TransplantOptions(model="./tiny/base", tokenizer="./other-tok", output="./tiny-t2",
                                                    check=False))
    result.coverage  # {'exact': 213, 'decompose': 87, 'fallback': 0}

Each takes its command's options (:mod:`paw.vocab.options`) and the run's :class:`~paw.knobs.RunOptions`,
reads through :mod:`paw.io`, computes with the pure functions of :mod:`paw.vocab`, writes one output
atomically and returns a small typed result; none prints.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paw import __version__, arch
from paw.bpe.patterns import resolve_pattern
from paw.data import sample_texts
from paw.device import resolve_device
from paw.errors import PawError
from paw.io.atomic import check_output
from paw.io.checkpoint import open_checkpoint
from paw.io.manifest import describe_input, records_call, write_json
from paw.io.tokenizer import open_tokenizer, read_corpus
from paw.io.tokenizer_config import minimal_config
from paw.io.train_state import remove_fit_parts, work_dir
from paw.io.vocab_map import mapping_to_json, read_vocab_map, write_analysis, write_vocab_map
from paw.io.writer import write_checkpoint
from paw.knobs import RunOptions
from paw.vocab import transplant
from paw.vocab.align import DEFAULT_METHODS, AlignContext, align, check_methods
from paw.vocab.analyze import analyze
from paw.vocab.cards import transplant_card
from paw.vocab.compare import token_counts
from paw.vocab.donor import donor_mappings, open_embeddings
from paw.vocab.embed import FALLBACKS
from paw.vocab.heal_pipeline import heal_transplant
from paw.vocab.options import AlignOptions, AnalyzeOptions, HealOptions, TransplantOptions
from paw.vocab.roles import role_id
from paw.vocab.transplant import embedding_names, semantic_check, vocab_rows

PathLike = str | Path


def parse_methods(values: Sequence[str] | None) -> list[str]:
    """``['exact,decompose', 'semantic']`` -> ``['exact', 'decompose', 'semantic']``; empty -> the default chain."""
    out = [m.strip() for v in values or [] for m in v.split(",") if m.strip()]
    return out or list(DEFAULT_METHODS)


def open_tokenizer_spec(spec: PathLike, rank_pattern: str | None = None):
    """Any tokenizer PAW reads; ``rank_pattern`` (a name or regex) fills in a rank file's missing pattern."""
    if rank_pattern is None:
        return open_tokenizer(spec)

    return open_tokenizer(spec, pattern=resolve_pattern(rank_pattern))


def corpus_texts(corpus: Sequence[PathLike] | None) -> list[str]:
    """The texts of ``corpus`` files, or the embedded multilingual sample when none are given."""
    return read_corpus(corpus) if corpus else sample_texts("multi")


# ------------------------------------------------------------------------------------------ analyze

@dataclass(frozen=True)
class TokenizerAnalysis:
    """What ``analyze_tokenizers`` wrote: ``report`` is ``report.json`` (sizes, vocabulary, encoding, ...)."""

    outdir: Path
    report: dict[str, Any]
    figures: bool                # whether the PNG figures were written


@records_call
def analyze_tokenizers(options: AnalyzeOptions, run: RunOptions = RunOptions(), *,
                       command: str | None = None) -> TokenizerAnalysis:
    """Compare two tokenizers on ``options.corpus`` and write ``options.outdir/`` (report.json, encoding.csv, ...)."""
    options.check()
    source, target, outdir, corpus = options.source, options.target, options.outdir, options.corpus
    check_output(outdir, overwrite=run.overwrite)
    src, tgt = open_tokenizer_spec(source, options.rank_pattern), open_tokenizer_spec(target, options.rank_pattern)
    result = analyze(src, tgt, corpus_texts(corpus), plots=options.plots)
    report = {"paw_version": __version__, "command": command,
              "inputs": {"source": describe_input(source), "target": describe_input(target),
                         "corpus": [describe_input(c) for c in corpus or []] or "embedded sample 'multi'"},
              **result.report}
    write_analysis(outdir, report=report, rows=result.rows, source_only=result.source_only,
                   target_only=result.target_only, figures=result.figures, overwrite=run.overwrite)
    return TokenizerAnalysis(Path(outdir), report, bool(result.figures))


# ------------------------------------------------------------------------------------------ align

def align_context(source, target, methods: Sequence[str], *, embeddings=None,
                  corpus: Sequence[PathLike] | None = None, anchors: int = 8):
    """The :class:`~paw.vocab.align.AlignContext` ``methods`` need; refuses a method whose input is missing."""
    need_counts = "frequency" in methods
    check_methods(list(methods), have_embeddings=embeddings is not None, have_counts=not need_counts or bool(corpus))
    counts = token_counts(source.encode_batch(corpus_texts(corpus)), source.size) if need_counts else None
    return AlignContext(source, target, source_embeddings=embeddings, source_counts=counts, k=anchors)


def input_embeddings(model: PathLike, device: str = "cpu"):
    """The model's input embedding matrix (Ns, d), float32 on ``device``."""
    ckpt = open_checkpoint(model)
    names = embedding_names({n: ckpt.shape(n) for n in ckpt}, vocab_rows(ckpt.config or {}))
    pick = [n for n in names if not arch.is_head(n)] or names
    if not pick:
        raise PawError("no input embedding matrix found (a tensor with vocab_size rows named "
                       f"{' / '.join(arch.EMBED_ALIASES)})", path=model)
    return ckpt[pick[0]].float().to(resolve_device(device))


@dataclass(frozen=True)
class Alignment:
    """What ``align_vocab`` wrote: the mapping (also in ``output``)."""

    output: Path
    mapping: Any                  # paw.io.vocab_map.VocabMapping

    @property
    def coverage(self) -> dict[str, int]:
        return self.mapping.coverage()


def align_vocab(options: AlignOptions, run: RunOptions = RunOptions()) -> Alignment:
    """Map every target token to source tokens with the chained ``options.method`` (default: exact, decompose);
    write ``options.output`` (paw-vocab-map v1)."""
    o = options
    o.check()
    check_output(o.output, overwrite=run.overwrite)
    src, tgt = open_tokenizer_spec(o.source, o.rank_pattern), open_tokenizer_spec(o.target, o.rank_pattern)
    emb = input_embeddings(o.source_model, run.device) if o.source_model else None
    methods = parse_methods(o.method)
    mapping = align(align_context(src, tgt, methods, embeddings=emb, corpus=o.corpus, anchors=o.anchors), methods)
    write_vocab_map(o.output, mapping)
    return Alignment(Path(o.output), mapping)


# ------------------------------------------------------------------------------------------ transplant

@dataclass(frozen=True)
class Transplant:
    """What ``transplant_tokenizer`` wrote; ``record`` is ``paw_transplant.json``."""

    output: Path
    record: dict[str, Any]
    heal_seconds: float | None = None  # the healing's wall time (--heal-steps), kept out of the record

    @property
    def coverage(self) -> dict[str, int]:
        return self.record["coverage"]

    @property
    def target_size(self) -> int:
        return self.record["target_size"]

    @property
    def warnings(self) -> list[str]:
        return self.record.get("warnings", [])

    @property
    def semantic_check(self) -> dict | None:
        return self.record.get("semantic_check")


@records_call
def transplant_tokenizer(options: TransplantOptions, run: RunOptions = RunOptions(), *,
                         omp_work: PathLike | None = None, command: str | None = None) -> Transplant:
    """Give ``options.model`` the tokenizer ``options.tokenizer``: remapped embedding/head rows, new config,
    T's files.

    Aligns the vocabularies with ``method`` (or reads ``vocab_map``; or, with ``donor``, the model
    whose tokenizer T is, fits every non-shared token by donor-aware OMP with ``omp_k`` anchors,
    :mod:`paw.vocab.omp`), writes ``output`` atomically with ``paw_vocab_map.json`` and
    ``paw_transplant.json``, then (``check``) compares hidden states of the old and new model on
    ``check_texts`` texts. ``tokenizer`` may be None when ``donor`` is given (the donor's own).
    With ``donor``, each batch of OMP fits is kept in ``omp_work`` (default ``OUTPUT-work``) as it is
    done and removed once ``output`` is written; ``resume`` takes the batches a stopped run kept there.
    With ``heal_steps``, the transplant goes to a temporary folder beside ``output`` and
    :func:`paw.vocab.heal_pipeline.heal_transplant` writes ``output``; ``record['heal']`` is its report.
    """
    o = options
    o.validate()
    model, tokenizer, output, donor, init, head = o.model, o.tokenizer, o.output, o.donor, o.init, o.head
    omp_k, omp_batch, corpus = o.omp_k, o.omp_batch, o.corpus
    check_output(output, overwrite=run.overwrite)
    heal = o.heal()
    if heal is not None:
        heal.check()
        return _transplant_then_heal(o, run, heal, omp_work=omp_work or work_dir(output), command=command)
    if tokenizer is None and donor is None:
        raise PawError("--tokenizer is needed (or --donor, whose tokenizer is then taken)")
    if donor is not None and o.vocab_map is not None:
        raise PawError("--donor and --vocab-map both say where the rows come from: pass one")
    if omp_k < 1 or omp_batch < 1:
        raise PawError(f"--omp-k and --omp-batch must be at least 1 (got {omp_k}, {omp_batch})")
    tokenizer = donor if tokenizer is None else tokenizer
    if init not in FALLBACKS:
        raise PawError(f"unknown --init {init!r}; choose from {', '.join(FALLBACKS)}")
    if head not in transplant.HEAD_POLICIES:
        raise PawError(f"unknown --head {head!r}; choose from {', '.join(transplant.HEAD_POLICIES)}")
    dev = resolve_device(run.device)
    ckpt, rows, names = open_embeddings(model)
    src, tgt = open_tokenizer_spec(model, o.rank_pattern), open_tokenizer_spec(tokenizer, o.rank_pattern)
    if src.size > rows:
        raise PawError(f"the model's tokenizer has {src.size} ids but its embedding only {rows} rows", path=model)
    config = transplant.new_config(ckpt.config, tgt, tgt.size)
    tied = bool(ckpt.tied_embeddings or arch.tied(config))
    head_mapping, omp = None, None
    omp_work = Path(omp_work) if omp_work is not None else work_dir(output)
    if donor is not None:
        fit = donor_mappings(donor, src, tgt, tied=tied or not any(arch.is_head(n) for n in names), k=omp_k,
                             batch=omp_batch, device=dev, work=omp_work, resume=o.resume)
        mapping, head_mapping, methods, omp = fit.mapping, fit.head_mapping, ["exact", "omp"], fit.record
    else:
        mapping, methods = _mapping(ckpt, names, src, tgt, rows, parse_methods(o.method), o.vocab_map, corpus,
                                    o.anchors, dev)
    record = {"paw_version": __version__, "command": command,
              "inputs": {"model": describe_input(model), "tokenizer": describe_input(tokenizer)},
              "methods": methods, "init": init, "head": head, "tied": tied, "embedding_tensors": names,
              "rows": {"before": rows, "after": tgt.size},
              "coverage": mapping.coverage(), "target_size": mapping.target_size}
    warning = transplant.tied_head_warning(record["coverage"], source_rows=rows, tied=tied)
    record["warnings"] = [warning] if warning else []
    if omp is not None:
        record["omp"] = omp
        record["head"] = "omp" if head_mapping is not None else head
    extra = {"paw_vocab_map.json": mapping_to_json(mapping)}
    if head_mapping is not None:
        extra["paw_vocab_map_head.json"] = mapping_to_json(head_mapping)
    with tempfile.TemporaryDirectory() as empty:
        tok_from = tgt.folder if tgt.kind not in ("tiktoken", "paw-bpe") else Path(empty)
        if tgt.kind in ("tiktoken", "paw-bpe"):
            extra["tokenizer.json"] = json.loads(tgt.tokenizer_json())
            extra["tokenizer_config.json"] = _minimal_tokenizer_config(tgt)
        gen = ckpt.path / "generation_config.json" if ckpt.path.is_dir() else None
        if gen is not None and gen.is_file():
            extra["generation_config.json"] = _generation_config(gen, config)
        tensors = transplant.transplanted_tensors(ckpt, names, mapping, rows=tgt.size, fallback=init, head=head,
                                                  tied=tied, head_mapping=head_mapping, device=dev)
        write_checkpoint(output, tensors, config=config, tokenizer_from=tok_from, overwrite=run.overwrite,
                         extra_files={**extra, "paw_transplant.json": record},
                         card=transplant_card(output, model, tokenizer, record, command=command))
    if donor is not None:
        remove_fit_parts(omp_work)  # the output is complete: nothing left to resume
    if o.check:
        record["semantic_check"] = _semantic_check(model, output, src, tgt, corpus_texts(corpus)[:o.check_texts], dev)
        write_json(Path(output) / "paw_transplant.json", record)
    return Transplant(Path(output), record)


# what the heal records as its model input when the transplant it healed was made in a temporary folder
TRANSPLANTED_HERE = {"note": "the transplant of this run (paw_transplant.json), made in a temporary folder "
                             "that is not kept"}


def _transplant_then_heal(options: TransplantOptions, run: RunOptions, heal: HealOptions, *, omp_work, command
                          ) -> Transplant:
    output = Path(options.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.transplant-") as tmp:
        plain = dataclasses.replace(options, output=Path(tmp) / "model", heal_steps=0, heal_corpus=None)
        first = transplant_tokenizer(plain, dataclasses.replace(run, overwrite=False), omp_work=omp_work,
                                     command=command)
        heal = dataclasses.replace(heal, model=first.output, output=output,
                                   original=options.model if heal.original is None else heal.original)
        healed = heal_transplant(heal, run, command=command, model_input=TRANSPLANTED_HERE)
    record = {**first.record, "heal": healed.record}
    write_json(output / "paw_transplant.json", record)
    return Transplant(output, record, healed.seconds)


def _mapping(ckpt, names, src, tgt, rows, methods, vocab_map, corpus, anchors, dev):
    """``(mapping, methods as recorded)``: read from ``vocab_map``, else aligned with ``methods``."""
    if vocab_map is not None:
        mapping = read_vocab_map(vocab_map)
        if mapping.source_size > rows or mapping.target_size != tgt.size:
            raise PawError(f"mapping is {mapping.source_size} -> {mapping.target_size} ids but the model has "
                           f"{rows} rows and the tokenizer {tgt.size} ids", path=vocab_map)
        return mapping, ["from " + str(vocab_map)]
    emb = ckpt[next((n for n in names if not arch.is_head(n)), names[0])].float().to(dev) \
        if "semantic" in methods else None
    return align(align_context(src, tgt, methods, embeddings=emb, corpus=corpus, anchors=anchors), methods), methods


def _minimal_tokenizer_config(tgt) -> dict:
    ids = {role: role_id(tgt, role) for role in ("bos", "eos", "pad", "unk")}
    return minimal_config({role: tgt.specials[i].content for role, i in ids.items() if i is not None})


def _generation_config(path: Path, config: dict) -> dict:
    gen = json.loads(path.read_text(encoding="utf-8"))
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in gen or config.get(key) is not None:
            gen[key] = config.get(key)
    return gen


def _semantic_check(model, output, src, tgt, texts, dev) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    original = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).to(dev).eval()
    new = AutoModelForCausalLM.from_pretrained(output, dtype=torch.float32).to(dev).eval()
    limit = getattr(original.config, "max_position_embeddings", None) or 2048
    texts = [t[:2000] for t in texts]  # same text span on both sides; ids cut only past the position limit
    cut = lambda rows: [r[:limit] for r in rows]  # noqa: E731
    return semantic_check(original, new, cut(src.encode_batch(texts)), cut(tgt.encode_batch(texts)), device=dev)
