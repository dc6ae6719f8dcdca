"""The ``README.md`` model card of a merge output, from its ``paw_merge.json`` record.

mergekit writes the same kind of card (``mergekit/card.py``): the method, the base, the models and
the configuration that made it; PAW's front matter has ``base_model`` (the inputs that are Hub IDs,
base first), ``library_name: transformers`` and the tags ``paw``, ``merge`` and the method under
mergekit's name (``dare_ties``, ``model_stock``: what a Hub search for a method finds). Built from the
record alone, the card says nothing the record does not, and the same merge gives the same bytes.
"""

from __future__ import annotations

from typing import Any

from paw.io.lora_model import ref_paths
from paw.io.model_card import Card
from paw.merge.mergekit import MERGEKIT_METHODS
from paw.merge.methods import get_method

# the options each method's card shows besides its own knobs (MergeMethod.params)
_ALWAYS = ("scale", "dtype", "vocab_policy")
_RANDOM = ("seed",)
_MERGEKIT_NAME = {spec.paw: name for name, spec in MERGEKIT_METHODS.items()}  # PAW's method -> mergekit's name


def model_card(record: dict[str, Any], *, name: str) -> Card:
    """The card of a merge; ``record`` is :func:`paw.merge.pipeline.manifest`'s, ``name`` the title.

    The front matter's ``base_model`` holds the inputs that are Hub IDs (base first; a ``MODEL+LORA`` as
    the model and the adapter, each once), as mergekit lists a merge's parents; the body names the method
    with its paper, the base, each model with its weight, the parameters that took part and the command
    (or mergekit YAML) to redo it.
    """
    method = get_method(record["method"])
    options = record["options"]
    base, models = options.get("base"), list(options["models"])
    using = f", with `{base}` as the base" if base else ", without a base (the models' full weights)"
    about = [f"Merged with the **{method.name}** method{using}: {method.summary.rstrip('.')}."]
    if method.paper:
        about += ["", f"Reference: {method.paper.rstrip('.')}."]
    parameters = ["| parameter | value |", "| --- | --- |",
                  *(f"| {key} | {value} |" for key, value in _parameters(record, method).items())]
    sections = [("Method", tuple(about)), ("Models merged", tuple(_models_table(record, models,
                                                                                 weighted=method.weighted))),
                ("Parameters", tuple(parameters))]
    if record.get("mergekit_config") is not None:
        import yaml

        text = yaml.safe_dump(record["mergekit_config"], sort_keys=False, allow_unicode=True).rstrip("\n")
        sections.append(("mergekit configuration", ("The configuration given to `paw merge --config`:", "",
                                                    "```yaml", text, "```")))
    inputs = tuple(p for m in (*([base] if base else []), *models) for p in ref_paths(m))  # MODEL+LORA: both
    return Card(name, "transformers", inputs=inputs,
                tags=("paw", "merge", _MERGEKIT_NAME.get(method.name, method.name)),
                intro="This model is a merge of pre-trained language models made with PAW's `paw merge`.",
                sections=tuple(sections), command=record["command"])


def _models_table(record: dict[str, Any], models: list[str], *, weighted: bool) -> list[str]:
    rows = record.get("models") or []
    if not weighted:
        return [f"- `{m}`" for m in models]
    head = ["| model | weight | L2 norm of its task vector |", "| --- | --- | --- |"]
    return head + [f"| `{m}` | {row['weight']:.4f} | {'-' if row['l2'] is None else format(row['l2'], '.6f')} |"
                   for m, row in zip(models, rows, strict=True)]


def _parameters(record: dict[str, Any], method) -> dict[str, str]:
    """Table cells: the knobs the method read, how the weights were set, the output's scale, dtype and
    vocabulary, and the seed of a random method."""
    options = record["options"]
    out = {k: _text(options[k]) for k in method.params if k in options and options[k] is not None}
    if method.weighted:
        if options.get("weights") is not None:
            out["weights"] = "given (`--weights`)"
        else:
            mode = record.get("mode")
            knob = {"exp": f", beta {options.get('beta')}", "power": f", alpha {options.get('alpha')}"}.get(mode, "")
            out["weights"] = f"from L2 norms, mode {mode}{knob} (norms {record.get('norm_source')})"
    keys = (*_ALWAYS, *(_RANDOM if method.random else ()))
    out.update({k: _text(options[k]) for k in keys if k in options})
    return out


def _text(value: Any) -> str:
    return "`" + ", ".join(map(str, value)) + "`" if isinstance(value, (list, tuple)) else f"`{value}`"
