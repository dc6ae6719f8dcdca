"""The ``README.md`` model card of a merge output, from its ``paw_merge.json`` record.

The Hugging Face Hub reads the YAML front matter between the two ``---`` lines (``base_model``,
``library_name``, ``tags``) and shows the rest as the model's page; mergekit writes the same kind of
card (``mergekit/card.py``): the method, the base, the models and the configuration that made it.
Built from the record alone, the card says nothing the record does not, and the same merge gives
the same bytes.
"""

from __future__ import annotations

from typing import Any

from paw.io.lora_model import ref_paths
from paw.merge.methods import get_method

# the options each method's card shows besides its own knobs (MergeMethod.params)
_ALWAYS = ("scale", "dtype", "vocab_policy")
_RANDOM = ("seed",)


def model_card(record: dict[str, Any], *, name: str) -> str:
    """Markdown text of the card; ``record`` is :func:`paw.merge.pipeline.manifest`'s, ``name`` the title.

    The front matter lists every input as ``base_model`` (base first; a ``MODEL+LORA`` as the model and
    the adapter, each once), as mergekit does, so the Hub links the merge to its parents; the body names the method with its paper, the base, each model
    with its weight, the parameters that took part and the command (or mergekit YAML) to redo it.
    """
    method = get_method(record["method"])
    options = record["options"]
    base, models = options.get("base"), list(options["models"])
    lines = ["---", *_front_matter([*([base] if base else []), *models], method.name), "---", "",
             f"# {name}", "",
             "This model is a merge of pre-trained language models made with PAW's `paw merge`.", "",
             "## Merge details", "", "### Method", ""]
    using = f", with `{base}` as the base" if base else ", without a base (the models' full weights)"
    lines += [f"This model was merged with the **{method.name}** method{using}: {method.summary.rstrip('.')}."]
    if method.paper:
        lines += ["", f"Reference: {method.paper.rstrip('.')}."]
    lines += ["", "### Models merged", "", *_models_table(record, models, weighted=method.weighted), ""]
    lines += ["### Parameters", "", "| parameter | value |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in _parameters(record, method).items()]
    lines += ["", "### Configuration", "", *_configuration(record), ""]
    return "\n".join(lines)


def _front_matter(inputs: list[str], method: str) -> list[str]:
    """YAML lines; strings in JSON quotes, which YAML reads as they are (a path may hold ``:`` or ``#``)."""
    import json

    tags = list(dict.fromkeys(["merge", "paw", method]))
    paths = dict.fromkeys(p for m in inputs for p in ref_paths(m))
    return ["base_model:", *(f"- {json.dumps(p, ensure_ascii=False)}" for p in paths),
            "library_name: transformers", "tags:", *(f"- {t}" for t in tags)]


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


def _configuration(record: dict[str, Any]) -> list[str]:
    lines = ["The command that produced this model:", "", "```bash", record["command"], "```"]
    if record.get("mergekit_config") is not None:
        import yaml

        text = yaml.safe_dump(record["mergekit_config"], sort_keys=False, allow_unicode=True).rstrip("\n")
        lines += ["", "with this mergekit configuration:", "", "```yaml", text, "```"]
    return lines + ["", "`paw_merge.json` beside this card holds the full record: input sizes, norms, "
                        "tensors copied from the base."]


def _text(value: Any) -> str:
    return "`" + ", ".join(map(str, value)) + "`" if isinstance(value, (list, tuple)) else f"`{value}`"
