"""Typed summaries of the transfer and distill reports (:mod:`paw.transfer.summary`)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from paw.transfer.summary import DistillSummary, LayerPairing, TransferSummary


def test_the_typed_result_is_the_report_it_wrote(tmp_path, src, src_lora, drifted):
    from paw.transfer.folder_pipeline import transfer_adapter

    moved = transfer_adapter(src_lora, src, drifted, tmp_path / "moved", method="copy")
    written = json.loads((moved.output / "transfer_report.json").read_text())
    assert asdict(moved.transfer) == written["summary"] == moved.summary  # the same keys, nothing lost
    assert moved.transfer.methods == {"copy": 21} and moved.transfer.modules == written["adapter"]["modules"] == 21
    assert asdict(moved.layers) == written["layers"] and moved.layers.how == "name"
    assert moved.distill is None and moved.warnings == written["warnings"]


def test_scalars_keep_the_numbers_that_are_set():
    # a distill report's summary names only the counts: the judged fields stay None and drop out
    s = TransferSummary.from_report({"summary": {"transferred": 14, "not_transferred": 0, "methods": {"distill": 14}}})
    assert s.scalars() == {"transferred": 14, "not_transferred": 0} and s.unrelated is None
    full = TransferSummary(3, 1, {"copy": 3}, related=2, judged=4, kept_share=0.5, unrelated=False)
    assert full.scalars() == {"transferred": 3, "not_transferred": 1, "related": 2, "judged": 4, "kept_share": 0.5,
                              "unrelated": False}
    assert full.modules == 4
    with pytest.raises(TypeError):  # a key the report format does not know is an error, not ignored
        TransferSummary.from_report({"summary": {"transferred": 1, "not_transferred": 0, "methods": {}, "extra": 1}})


def test_layer_pairing_reads_the_layers_block():
    layers = {"how": "depth", "why": "depths differ", "source": 3, "target": 2, "pairs": [[0, 0], [2, 1]],
              "source_without_partner": [1], "target_without_partner": [], "tried": [{"how": "depth"}]}
    lay = LayerPairing.from_report({"layers": layers})
    assert lay.source_without_partner == [1] and lay.pairs == [[0, 0], [2, 1]] and asdict(lay) == layers


def test_distill_summary_reads_the_figures_of_the_distill_block():
    after = {"top1_agreement": 0.5, "kl": None, "choice_agreement": None}
    report = {"method": "distill", "distill": {
        "inputs": {"source": "prompts", "train": 12, "train_used": 10, "count": 16, "held_out": 4},
        "losses": ["sequence-nll"], "vocabulary": "different tokenizers", "init": {"how": "none", "why": "-"},
        "student": {"r": 4, "alpha": 8.0, "modules": 14}, "steps": 20, "loss_start": 3.2, "loss_end": 1.1,
        "loss_tail_drop": 0.28, "agreement": {"before": {**after, "top1_agreement": 0.0}, "after": after,
                                              "measured_on": "held-out prompts"}}}
    d = DistillSummary.from_report(report)
    assert (d.student_modules, d.train, d.train_used, d.inputs_source, d.steps, d.init) == (14, 12, 10, "prompts", 20,
                                                                                           "none")
    assert d.agreement_after["top1_agreement"] == 0.5 and d.agreement_before["top1_agreement"] == 0.0
    assert d.synthesis is None and d.measured_on == "held-out prompts" and d.loss_tail_drop == 0.28
