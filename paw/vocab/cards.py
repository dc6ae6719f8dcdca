"""Model cards of the tokenizer commands' model folders: ``extend-tokenizer``, ``transplant-tokenizer``
and ``heal-transplant``. Each is built from the record the command writes beside the weights
(``paw_extend.json``, ``paw_transplant.json``, ``paw_heal.json``), so the card says what it says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paw.io.model_card import Card


def extend_card(output: str | Path, model: str | Path, record: dict[str, Any], *, kind: str,
                command: str | None) -> Card:
    """``model`` with new tokens: how many by which route, the rows before and after, the init."""
    routes = ", ".join(f"{len(tokens)} {how}" for how, tokens in sorted(record["new_tokens"].items()))
    lines = [f"- new tokens: {routes}", f"- embedding rows: {record['old_rows']} -> {record['rows']}",
             f"- new rows initialised by `{record['init']}`; merges appended: {record['merges_added']}"]
    intro = (f"`{model}` with tokens added to its {kind} tokenizer by PAW's `paw extend-tokenizer`: the embedding "
             "(and head) grown to hold them, every old row unchanged. The new rows are an initialisation, not "
             "trained: fine-tune before relying on them.")
    return Card(Path(output).name, "transformers", inputs=(str(model),), tags=("paw", "extend-tokenizer"),
                intro=intro, sections=(("Tokens added", tuple(lines)),), command=command)


def transplant_card(output: str | Path, model: str | Path, tokenizer: str | Path, record: dict[str, Any], *,
                    command: str | None) -> Card:
    """``model`` with ``tokenizer``'s vocabulary: how each new row was made, and the coverage."""
    rows, coverage = record["rows"], record["coverage"]
    lines = [f"- embedding rows: {rows['before']} -> {rows['after']} ({'tied' if record['tied'] else 'untied'} head)",
             f"- rows made by: {', '.join(record['methods'])}; the rest initialised by `{record['init']}`",
             "- coverage: " + ", ".join(f"{k} {v}" for k, v in coverage.items()),
             *(f"- warning: {w}" for w in record.get("warnings", []))]
    intro = (f"`{model}` with its tokenizer replaced by `{tokenizer}`'s, by PAW's `paw transplant-tokenizer`: each "
             "new token's embedding row built from the old rows of the bytes it spells. Heal it on text "
             "(`paw heal-transplant`) or fine-tune it before use.")
    return Card(Path(output).name, "transformers", inputs=(str(model),), tags=("paw", "tokenizer-transplant"),
                intro=intro, sections=(("Transplant", tuple(lines)),), command=command)


def heal_card(output: str | Path, model: str, record: dict[str, Any], *, base: str | None,
              command: str | None) -> Card:
    """A transplant whose new rows were trained on text: the rows, the steps, bits per byte before and after.
    ``model``: how the text names the healed transplant (a path in backquotes; a temporary folder is not named)."""
    bpb = record["bpb"]
    lines = [f"- rows trained: {record['rows_trained']} ({', '.join(record['tensors_trained'])}); every other "
             "weight frozen",
             f"- {record['steps']} steps, lr {record['lr']}, batch {record['batch']} x {record['seq_len']} tokens",
             f"- bits per byte on held-out text: {bpb['before']:.4f} -> {bpb['after']:.4f}"
             + (f" (the model before the transplant: {bpb['original']:.4f})" if bpb.get("original") is not None
                else "")]
    intro = (f"The tokenizer transplant {model} with its new embedding rows trained on text by PAW's "
             "`paw heal-transplant`.")
    return Card(Path(output).name, "transformers", inputs=(base,) if base else (),
                tags=("paw", "tokenizer-transplant", "heal-transplant"),
                intro=intro, sections=(("Healing", tuple(lines)),), command=command)
