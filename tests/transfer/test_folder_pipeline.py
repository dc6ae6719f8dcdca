"""``paw.transfer.folder_pipeline.transfer_adapter``: outcomes are types the caller can branch on."""

from __future__ import annotations

import pytest

from paw.errors import NotApplicable, PawError, Refused


def test_refusal_and_inapplicable_method_are_typed(tmp_path, src, src_lora, independent, drifted, troot):
    from paw import zoo
    from paw.transfer.folder_pipeline import transfer_adapter

    with pytest.raises(Refused, match="target looks unrelated"):
        transfer_adapter(src_lora, src, independent, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    wide = troot / "wide-src"  # built by test_transfer; build here if run alone
    if not wide.exists():
        zoo.tiny_model(wide, "llama", seed=1, hidden_size=48, num_layers=3)
    with pytest.raises(NotApplicable, match="copy needs equal shapes"):
        transfer_adapter(src_lora, src, wide, tmp_path / "copy", method="copy")
    with pytest.raises(PawError) as other:  # bad input stays a plain PawError
        transfer_adapter(src_lora, src, src, tmp_path / "bad", layer_map="diagonal")
    assert not isinstance(other.value, (Refused, NotApplicable))
    moved = transfer_adapter(src_lora, src, drifted, tmp_path / "ok")
    assert moved.summary["methods"] == {"copy": 21} and (moved.output / "adapter_model.safetensors").is_file()
