"""Typed summaries of a ``transfer-lora`` report: what the CLI prints and the benchmarks read.

The report itself stays a JSON-ready dict (``transfer_report.json`` is its file, unchanged); these
frozen dataclasses are the parts a reader branches on, read by attribute instead of by string key::

    s = TransferSummary.from_report(report)
    s.transferred, s.methods            # 21, {'copy': 21}
    asdict(s) == report["summary"]      # True for a weight-space transfer: the pipeline builds it so

:class:`TransferSummary` is the report's ``summary`` block (the pipeline builds it and stores
``asdict`` of it); :class:`LayerPairing` its ``layers`` block; :class:`DistillSummary` the figures of
a distillation's ``distill`` block that ``paw transfer-lora`` prints and ``paw bench`` keeps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TransferSummary:
    """The ``summary`` block of a transfer report; ``None`` where the method judged nothing (distill)."""

    transferred: int                                # modules written
    not_transferred: int                            # modules skipped (reasons per module in the report)
    methods: dict[str, int]                         # {method: modules it moved}, sorted by method
    related: int | None = None                      # modules judged related to their partner
    judged: int | None = None                       # modules the relatedness test could judge
    median_similarity: float | None = None          # ‖U_sᵀU_t‖²_F / R of the bases, paired layers
    median_similarity_null: float | None = None     # the same against the other target layers
    median_similarity_lift: float | None = None
    median_chance: float | None = None              # the similarity of random subspaces
    median_remix_residual: float | None = None
    median_residual_lift: float | None = None
    max_norm_ratio: float | None = None             # largest ‖ΔW_t‖ / ‖ΔW_s‖ over the modules
    kept_share: float | None = None                 # energy share of the update kept (weighted over modules)
    kept_modules: int | None = None                 # modules that have a kept share
    norm_ratio_total: float | None = None           # ‖ΔW_t‖ / ‖ΔW_s‖ of the adapter as a whole
    unrelated: bool | None = None                   # auto judged the target unrelated (it refuses then)

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> TransferSummary:
        """The ``summary`` block of ``report`` (a transfer or distill report), typed."""
        return cls(**report["summary"])

    @property
    def modules(self) -> int:
        """The adapter's modules: transferred or not."""
        return self.transferred + self.not_transferred

    def scalars(self) -> dict[str, int | float | str]:
        """The fields that hold a number (``methods`` and unset ones left out), for a benchmark row."""
        return {k: v for k, v in asdict(self).items() if isinstance(v, (int, float, str))}


@dataclass(frozen=True)
class LayerPairing:
    """The ``layers`` block of a transfer report: how source layers were paired with target layers."""

    how: str                                        # the layer map used: name, depth, similarity ...
    why: str                                        # why that pairing was chosen
    source: int                                     # layers of the source
    target: int                                     # layers of the target
    pairs: list[list[int]]                          # [[source layer, target layer], ...]
    source_without_partner: list[int]
    target_without_partner: list[int]
    tried: list[dict[str, Any]] = field(default_factory=list)  # every pairing auto tried, in order

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> LayerPairing:
        return cls(**report["layers"])


@dataclass(frozen=True)
class DistillSummary:
    """What a distillation's report says in a line or two: its inputs, losses, start and agreement."""

    student_modules: int                            # LoRA modules of the trained student
    inputs_source: str                              # prompts, generic or synthesized
    train: int                                      # training inputs
    train_used: int                                 # of those, the ones the steps reached
    synthesis: dict[str, Any] | None                # what --synthesize made, if it ran
    steps: int
    losses: list[str]                               # e.g. ['sequence-nll', 'choice-kl']
    init: str                                       # how the student started: none, auto transfer
    vocabulary: str                                 # how the tokenizers were bridged, in words
    loss_start: float | None
    loss_end: float | None
    loss_tail_drop: float | None                    # share the loss fell over the last fifth of the steps
    agreement_before: dict[str, Any]                # agreement figures with the teacher (top1_agreement, kl ...)
    agreement_after: dict[str, Any]
    measured_on: str                                # which inputs the agreement was measured on
    budget: dict[str, Any] | None = None            # steps run and why training ended (report.budget)

    @property
    def stopped_note(self) -> str:
        """``' (levelled off; cap 200)'`` for an automatic budget, ``''`` for --max-steps."""
        b = self.budget or {}
        if not b.get("auto"):
            return ""
        return f" ({b['stopped']}; cap {b['max_steps']})"

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> DistillSummary:
        """The figures of ``report["distill"]`` (a ``method='distill'`` report), typed."""
        d = report["distill"]
        inputs, agreement = d["inputs"], d["agreement"]
        return cls(student_modules=d["student"]["modules"], inputs_source=inputs["source"], train=inputs["train"],
                   train_used=inputs["train_used"], synthesis=inputs.get("synthesis"),
                   steps=(d.get("budget") or {}).get("steps_run", d["steps"]),
                   losses=list(d["losses"]), init=d["init"]["how"], vocabulary=d["vocabulary"],
                   loss_start=d["loss_start"], loss_end=d["loss_end"], loss_tail_drop=d["loss_tail_drop"],
                   agreement_before=agreement["before"], agreement_after=agreement["after"],
                   measured_on=agreement["measured_on"], budget=d.get("budget"))
