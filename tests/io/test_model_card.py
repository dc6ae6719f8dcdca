"""The model card renderer: Hub front matter that ``huggingface_hub.ModelCard`` reads, base_model from Hub IDs
only (an ID, or a folder of the Hugging Face cache), PAW's files listed last and re-listed when more arrive."""

from __future__ import annotations

import yaml
from huggingface_hub import ModelCard

from paw.io.model_card import Card, base_models, refresh_files, render, write_card


def test_front_matter_takes_hub_ids_and_names_local_paths(tmp_path):
    snapshot = tmp_path / "hub" / "models--org--base" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    local = tmp_path / "mine"
    local.mkdir()
    inputs = (str(snapshot), "org/other@v2", str(local), "org/base")
    assert base_models(inputs) == ["org/base", "org/other"]
    text = render(Card("out", "peft", inputs=inputs, tags=("paw", "lora", "paw"), intro="Hello."), files=[])
    head, body = text[4:].split("\n---\n", 1)
    assert yaml.safe_load(head) == {"base_model": ["org/base", "org/other"], "library_name": "peft",
                                    "tags": ["paw", "lora"]}
    assert body == (f"\n# out\n\nHello.\n\n`{local}` is a local path, not a Hub ID: the Hub would refuse a local path "
                    "in `base_model`, so the front matter leaves it out. Add the Hub ID under `base_model:` if you "
                    "know it.\n\n")


def test_written_card_lists_paw_files_and_loads(tmp_path):
    for name in ("adapter_config.json", "adapter_model.safetensors", "transfer_report.json", "similarity_vs_depth.png",
                 "README.md", "notes.txt"):
        (tmp_path / name).write_text("x")  # README.md: PEFT's template, replaced
    write_card(tmp_path, Card("moved", "peft", inputs=("org/base",), sections=(("Transfer", ("- 14 modules",)),),
                              command="paw transfer-lora ..."))
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.base_model == ["org/base"] and card.data.library_name == "peft" and card.data.tags == ["paw"]
    assert card.text.endswith(
        "## Transfer\n\n- 14 modules\n\n## How it was made\n\n```bash\npaw transfer-lora ...\n```\n\n"
        "## Files PAW added\n\n| file | what it holds |\n| --- | --- |\n"
        "| `similarity_vs_depth.png` | subspace similarity between the two bases, layer by layer |\n"
        "| `transfer_report.json` | provenance and the transfer report, module by module |\n\n"
        "![similarity_vs_depth.png](similarity_vs_depth.png)\n\n"
        "transformers and PEFT never read these files. To upload without them: `hf upload REPO FOLDER "
        "--exclude similarity_vs_depth.png --exclude transfer_report.json`.\n")
    (tmp_path / "gate.md").write_text("gate")  # added later (the gain gate): the list follows
    before = (tmp_path / "README.md").read_text()
    refresh_files(tmp_path)
    after = (tmp_path / "README.md").read_text()
    assert after.split("## Files PAW added")[0] == before.split("## Files PAW added")[0]
    assert "| `gate.md` | the gain gate" in after and "--exclude gate.md --exclude similarity_vs_depth.png" in after
    refresh_files(tmp_path)
    assert (tmp_path / "README.md").read_text() == after  # idempotent
