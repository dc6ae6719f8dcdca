"""``paw extend-tokenizer``: add tokens to a model's tokenizer and grow its embeddings in one step."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE, multi_value_command


class Init(str, Enum):
    mean = "mean"
    subtoken_mean = "subtoken-mean"
    interpolate = "interpolate"


def register(app: typer.Typer) -> None:
    @app.command("extend-tokenizer", cls=multi_value_command("--tokens"))
    def extend_tokenizer(
        model: Path = typer.Option(..., "--model", help="Model folder with tokenizer.json."),
        output: Path = typer.Option(..., "--output", help="Folder to write (model + tokenizer)."),
        tokens: list[str] = typer.Option(None, "--tokens", help="Tokens to add: --tokens A B C (or repeat the option)."),
        tokens_file: Path = typer.Option(None, "--tokens-file",
                                         help="Text file, one token per line (kept verbatim, spaces included)."),
        from_tokenizer: Path = typer.Option(None, "--from-tokenizer",
                                            help="Add every token of this tokenizer that the model lacks "
                                            "(HF tokenizer.json / folder, or a `paw bpe train` .model)."),
        special: bool = typer.Option(False, "--special", help="Add them as special (added, unsplittable) tokens."),
        init: Init = typer.Option(Init.interpolate, "--init", help="How new rows start."),
        pad_to_multiple: int = typer.Option(0, "--pad-to-multiple", min=0,
                                            help="Pad the row count to a multiple of N (0: no padding)."),
        max_intermediates: int = typer.Option(-1, "--max-intermediates",
                                              help="A token whose merge chain needs more new intermediate "
                                              "tokens than this is added as an added token instead (-1: no limit)."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
    ):
        """Add tokens to a model's tokenizer (real BPE vocabulary where possible) and resize its embeddings.

        Byte-level BPE tokenizers get the tokens as vocabulary plus appended merges, so encoding
        produces them; other tokenizers (and --special) get added tokens. embed_tokens and lm_head
        (tied or not) grow; config.vocab_size follows; logits of old-token text stay identical.

        Example: paw extend-tokenizer --model ./tiny/base --tokens-file words.txt --output ./tiny-ext
        """
        from paw.io.atomic import check_output

        check_output(output, overwrite=overwrite)
        token_list = _collect_tokens(tokens, tokens_file, from_tokenizer)
        for line in run_extend(model, output, token_list, special=special, init=init.value,
                               pad_to_multiple=pad_to_multiple, device=device, overwrite=overwrite,
                               max_intermediates=None if max_intermediates < 0 else max_intermediates):
            typer.echo(line)


def _collect_tokens(tokens: list[str] | None, tokens_file: Path | None, from_tokenizer: Path | None) -> list:
    from paw.errors import PawError

    given = [x for x in (tokens, tokens_file, from_tokenizer) if x]
    if len(given) != 1:
        raise PawError("give exactly one of --tokens, --tokens-file, --from-tokenizer")
    if tokens:
        return list(tokens)
    if tokens_file:
        from paw.io.hf_tokenizer_edit import read_tokens_file

        return read_tokens_file(tokens_file)
    from paw.io.hf_tokenizer_edit import read_token_list

    return read_token_list(from_tokenizer)


def run_extend(model: Path, output: Path, tokens: list, *, special: bool = False, init: str = "interpolate",
               pad_to_multiple: int = 0, device: str = "cpu", overwrite: bool = False,
               max_intermediates: int | None = None) -> list[str]:
    """Read model and tokenizer, plan the new tokens, grow the tensors, write one folder; return report lines."""
    import tempfile

    from paw import __version__
    from paw.cli._options import command_line
    from paw.device import resolve_device
    from paw.errors import PawError
    from paw.io.checkpoint import open_checkpoint
    from paw.io.hf_tokenizer_edit import open_tokenizer_json, save_tokenizer_folder
    from paw.io.manifest import describe_input
    from paw.io.writer import write_checkpoint
    from paw.vocab.extend import extend_tensors, find_vocab_tensors, with_vocab_size
    from paw.vocab.resize import INITS
    from paw.vocab.resize import pad_to_multiple as padded
    from paw.vocab.tokenizer_edit import extend_tokenizer_json

    if init not in INITS:
        raise PawError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
    torch_device = resolve_device(device)
    tok = open_tokenizer_json(model)
    ckpt = open_checkpoint(model)
    keys = find_vocab_tensors(list(ckpt))
    rows = ckpt.shape(keys[0])[0]
    if tok.size() > rows:
        raise PawError(f"tokenizer has {tok.size()} ids but {keys[0]} has only {rows} rows", path=model)
    ext = extend_tokenizer_json(tok, tokens, special=special, max_intermediates=max_intermediates)
    if not ext.tokens:
        why = [f"{len(ext.present)} already in the tokenizer"] if ext.present else []
        why += [f"{len(ext.skipped)} not valid UTF-8 (added tokens must be text)"] if ext.skipped else []
        raise PawError(f"nothing to add: {', '.join(why) or 'no tokens given'}")
    total = padded(max(rows, ext.size), pad_to_multiple)
    config = with_vocab_size(ckpt.config, total)
    manifest = {"paw_version": __version__, "command": command_line(), "inputs": {"model": describe_input(model)},
                "init": init, "special": special, "old_rows": rows, "rows": total, "tied": keys[1] is None,
                "merges_added": ext.merges_added,
                "new_tokens": _by_route(ext.tokens)}
    grown = extend_tensors(ckpt, new_ids=[t.id for t in ext.tokens], pieces=[t.pieces for t in ext.tokens],
                           total_rows=total, init=init, keys=keys, device=torch_device)
    with tempfile.TemporaryDirectory(prefix="paw-tok-") as scratch:
        save_tokenizer_folder(ext.doc, tok.path, scratch, new_tokens=ext.tokens)
        write_checkpoint(output, grown, config=config, copy_from=ckpt.path, tokenizer_from=scratch,
                         overwrite=overwrite, extra_files={"paw_extend.json": manifest})
    return _report(ext, tok.kind, keys, rows, total, init, output)


def _by_route(tokens) -> dict[str, dict[str, int]]:
    """``{'bpe': {text: id}, 'bpe-intermediate': {...}, 'added': {...}, 'special': {...}}`` (flat, so that
    a manifest of 40k tokens is quick to write)."""
    out: dict[str, dict[str, int]] = {}
    for t in tokens:
        out.setdefault(t.how, {})[t.text] = t.id
    return out


def _report(ext, kind: str, keys, rows: int, total: int, init: str, output: Path) -> list[str]:
    bpe = ext.count("bpe") + ext.count("bpe-intermediate")
    lines = []
    if bpe:
        lines.append(f"added {ext.count('bpe')} token(s) as real {kind} vocabulary: {ext.merges_added} merge(s) "
                     "appended, so encoding produces them")
        inter = [t.text for t in ext.tokens if t.how == "bpe-intermediate"]
        if inter:
            shown = ", ".join(repr(t) for t in inter[:8]) + (" ..." if len(inter) > 8 else "")
            lines.append(f"  + {len(inter)} intermediate token(s) needed to chain the merges: {shown}")
    for how, why in (("added", "added tokens (matched as whole strings before BPE)"),
                     ("special", "special added tokens")):
        n = ext.count(how)
        if n:
            reason = " (the pre-tokenizer splits them, or --max-intermediates ruled their merge chain out)" \
                if kind == "byte-bpe" and how == "added" else ""
            lines.append(f"added {n} token(s) as {why}{reason}")
    if kind != "byte-bpe" and not ext.count("special"):
        lines.append(f"  (tokenizer model is {kind}, not byte-level BPE: added tokens are the safe way)")
    if ext.present:
        lines.append(f"skipped {len(ext.present)} token(s) already in the tokenizer")
    if ext.skipped:
        lines.append(f"skipped {len(ext.skipped)} token(s) that are not valid UTF-8 (byte fragments need byte-level BPE)")
    heads = f"{keys[0]} and {keys[1]}" if keys[1] else f"{keys[0]} (tied lm_head)"
    pad = f", padded to {total}" if total > ext.size and total > rows else ""
    lines.append(f"resized {heads}: {rows} -> {total} rows{pad}; new rows: {init}")
    lines.append(f"wrote {output}")
    return lines
