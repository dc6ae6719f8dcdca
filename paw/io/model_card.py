"""The ``README.md`` model card of every model or adapter folder PAW writes, ready for the Hub.

The Hub reads the YAML front matter between the two ``---`` lines: ``base_model`` (Hub IDs only: the
Hub refuses an upload whose card names a local path there, so a local input is named in the text
instead, with how to add its ID), ``library_name`` (``transformers`` for a model folder, ``peft`` for
an adapter) and ``tags``. The body says what made the folder (the pipeline's :class:`Card`), the
command that redoes it, and, last, which files PAW added beside the weights and what each holds:
PAW's reports (JSON, CSV, PNG) stay in the folder, named here, with their figures shown, and
transformers and PEFT never read them; ``hf upload ... --exclude`` leaves them out of an upload.

The card is written with the folder, which PAW always creates new (or replaces whole with
``--overwrite``): there is never a user's ``README.md`` in it to keep. Same inputs, same bytes.

>>> card = Card("moved", "peft", inputs=("./tiny/base",), tags=("paw", "lora"), intro="A LoRA.")
>>> print(render(card, files=["adapter_config.json", "adapter_model.safetensors"]).splitlines()[:6])
['---', 'library_name: peft', 'tags:', '- paw', '- lora', '---']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from paw.io.hub import hub_id

CARD = "README.md"
FILES_HEADING = "## Files PAW added"  # the card's last section, listed from the folder as it is written

# PAW's own files and what each holds (a name not here, such as a weight shard, is not listed)
FILE_NOTES = {
    "metrics.json": "training and test figures (losses per step, accuracies before and after)",
    "paw_train_lora.json": "provenance: PAW version, command, inputs (paths and sizes), settings",
    "paw_train_full.json": "provenance: PAW version, command, inputs (paths and sizes), settings",
    "paw_merge.json": "provenance and the full merge record: inputs, weights, norms, tensors copied",
    "adapter_merge.json": "the adapter merge: method, weights, each module's rank and the adapters it came from",
    "paw_extend.json": "provenance and the tokens added",
    "paw_transplant.json": "provenance and how each new embedding row was made",
    "paw_vocab_map.json": "the vocabulary map: old token ids behind each new one",
    "paw_vocab_map_head.json": "the vocabulary map of the output head",
    "paw_heal.json": "provenance and the bits per byte before and after healing",
    "paw_resize_base.json": "provenance and the rows added to the embeddings",
    "transfer_report.json": "provenance and the transfer report, module by module",
    "transfer_report.csv": "the transfer report, one row per module",
    "similarity_vs_depth.png": "subspace similarity between the two bases, layer by layer",
    "distill_curve.png": "the distillation's loss and agreement, step by step",
    "gate.md": "the gain gate: accuracy on labeled items before and after (--check-data)",
    "extract_report.json": "provenance and the extraction report: energy kept per module",
    "energy_vs_rank.png": "share of each module's update kept against the rank",
    "extract_energy_vs_rank.png": "the extraction's energy against rank (--finetune)",
    "heal_curve.png": "bits per byte during healing",
}


@dataclass(frozen=True)
class Card:
    """What a pipeline knows about the folder it writes; :func:`render` makes the card of it.

    ``inputs``: the models the folder derives from, as the user named them (the base first); those
    that are Hub IDs (or folders of the Hugging Face cache) become ``base_model``. ``sections``:
    ``(heading, markdown lines)`` after the intro. ``command``: what redoes it.
    """

    title: str
    library: str                                 # "transformers" (a model folder) or "peft" (an adapter)
    inputs: tuple[str, ...] = ()
    tags: tuple[str, ...] = ("paw",)
    intro: str = ""
    sections: tuple[tuple[str, tuple[str, ...]], ...] = ()
    command: str | None = None


def base_models(inputs: Iterable[str]) -> list[str]:
    """The Hub IDs among ``inputs``, in order, once each (``base_model`` of the front matter)."""
    return list(dict.fromkeys(i for i in (hub_id(s) for s in inputs) if i))


def render(card: Card, *, files: Sequence[str]) -> str:
    """The card's text; ``files``: the names in the folder (their PAW reports are listed last)."""
    import yaml

    ids = base_models(card.inputs)
    meta = {**({"base_model": ids} if ids else {}), "library_name": card.library,
            "tags": list(dict.fromkeys(card.tags))}
    lines = ["---", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip("\n"), "---", "",
             f"# {card.title}", ""]
    if card.intro:
        lines += [card.intro, ""]
    local = [s for s in dict.fromkeys(card.inputs) if hub_id(s) is None]
    if local:
        named = ", ".join(f"`{s}`" for s in local)
        lines += [f"{named} {'is a local path, not a Hub ID' if len(local) == 1 else 'are local paths, not Hub IDs'}"
                  ": the Hub would refuse a local path in `base_model`, so the front matter leaves "
                  f"{'it' if len(local) == 1 else 'them'} out. Add the Hub ID under `base_model:` if you know it.", ""]
    for heading, body in card.sections:
        lines += [f"## {heading}", "", *body, ""]
    if card.command:
        lines += ["## How it was made", "", "```bash", card.command, "```", ""]
    return "\n".join(lines + files_section(files)) + "\n"


def files_section(files: Sequence[str]) -> list[str]:
    """The card's last section: PAW's files among ``files``, a note each, the figures shown."""
    ours = sorted(f for f in files if f in FILE_NOTES)
    if not ours:
        return []
    lines = [FILES_HEADING, "", "| file | what it holds |", "| --- | --- |"]
    lines += [f"| `{f}` | {FILE_NOTES[f]} |" for f in ours]
    lines += ["", *(f"![{f}]({f})" for f in ours if f.endswith(".png"))]
    excluded = " ".join(f"--exclude {f}" for f in ours)
    lines += ["", f"transformers and PEFT never read these files. To upload without them: `hf upload REPO FOLDER "
              f"{excluded}`."]
    return [line for i, line in enumerate(lines) if line or (i and lines[i - 1])]  # no double blank line


def write_card(folder: str | Path, card: Card) -> Path:
    """``folder/README.md`` from ``card``, listing the files ``folder`` holds now (write it last)."""
    folder = Path(folder)
    path = folder / CARD
    path.unlink(missing_ok=True)  # PEFT's save_pretrained leaves its blank template here
    path.write_text(render(card, files=_names(folder)), encoding="utf-8")
    return path


def refresh_files(folder: str | Path) -> None:
    """Re-list PAW's files in a card written before more were added (the gain gate's ``gate.md``)."""
    path = Path(folder) / CARD
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    head = text.split("\n" + FILES_HEADING + "\n", 1)[0].rstrip("\n")
    path.write_text("\n".join([head, "", *files_section(_names(Path(folder)))]).rstrip("\n") + "\n", encoding="utf-8")


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_file())
