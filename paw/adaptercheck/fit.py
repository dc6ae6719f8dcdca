"""Does a LoRA adapter fit a base model? Decided from tensor shapes alone (pure).

PEFT saves, besides the LoRA factors, full copies of ``modules_to_save`` (``embed_tokens`` and
``lm_head`` when new tokens were trained), the base layer of an adapted embedding when it was
resized (``...embed_tokens.base_layer.weight``), and trainable-token rows
(``...embed_tokens.token_adapter.trainable_tokens_delta`` with ``trainable_token_indices`` in the
config). Every one of them fixes the vocabulary size the adapter expects; loading it on a base
with another row count fails inside ``load_state_dict`` with ``size mismatch for ...``.

:func:`check_fit` compares each saved tensor with the base tensor it belongs to:

- LoRA pair on a linear layer of base shape (out, in): A (r, in), B (out, r);
- LoRA pair on an embedding of base shape (V, d): ``lora_embedding_A`` (r, V), ``lora_embedding_B`` (d, r);
- a DoRA magnitude vector: ``out`` entries for a linear layer, ``d`` for an embedding;
- a full copy: the same shape as the base tensor;
- trainable tokens: rows (n, d), every index < V.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from paw import arch
from paw.io.adapter import COPY_SEGMENTS, split_adapter_key, strip_prefix

TRAINABLE_TOKENS = ".token_adapter.trainable_tokens_delta"


@dataclass
class Row:
    """One line of the check table."""

    check: str  # 'save', 'target', 'lora', 'copy', 'tokens'
    module: str
    adapter: str
    base: str
    ok: bool
    note: str = ""


@dataclass
class FitReport:
    """All rows, the base's vocabulary size and the one the adapter expects (None when it does not say)."""

    rows: list[Row] = field(default_factory=list)
    base_vocab: int | None = None
    expected_vocab: int | None = None
    vocab_is_lower_bound: bool = False

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def vocab_mismatch(self) -> bool:
        if self.expected_vocab is None or self.base_vocab is None:
            return False
        if self.vocab_is_lower_bound:
            return self.expected_vocab > self.base_vocab
        return self.expected_vocab != self.base_vocab

    def failures(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]


def _shape(s: Sequence[int] | None) -> str:
    return "-" if s is None else "(" + ", ".join(str(x) for x in s) + ")"


def check_fit(config: Mapping, adapter_shapes: Mapping[str, Sequence[int]],
              base_shapes: Mapping[str, Sequence[int]], *, tied: bool = False) -> FitReport:
    """Compare an adapter (config + saved key -> shape) with a base (tensor name -> shape).

    ``tied``: the base's output head is its embedding, stored once under the embedding's name.
    """
    base, head = dict(base_shapes), arch.GENERIC.head
    embed = next((n for n in base if n.endswith(".weight") and arch.is_embedding(n)), None)
    if tied and embed and head not in base:
        base[head] = base[embed]  # the tied head is the embedding
    report = FitReport(base_vocab=base[embed][0] if embed else None)
    vocab_sizes: list[tuple[int, bool]] = []  # (rows, exact?) implied by each vocabulary tensor
    _check_targets(config, base, report)
    pairs, copies, tokens = _group(adapter_shapes)
    for module, parts in sorted(pairs.items()):
        _check_lora(module, parts, base, report, vocab_sizes)
    for key, shape in sorted(copies.items()):
        b = base.get(key)
        ok = b is not None and tuple(b) == tuple(shape)
        note = "" if ok else ("not in base" if b is None else "shape differs")
        if b is not None and arch.is_vocab_tensor(key):
            vocab_sizes.append((shape[0], True))
        report.rows.append(Row("copy", key, _shape(shape), _shape(b), ok, note))
    for module, shape in sorted(tokens.items()):
        _check_tokens(module, shape, config, base, report, vocab_sizes)
    exact = [n for n, is_exact in vocab_sizes if is_exact]
    if exact:
        report.expected_vocab = max(exact)
    elif vocab_sizes:  # only trainable-token indices: the adapter needs at least this many rows
        report.expected_vocab, report.vocab_is_lower_bound = max(n for n, _ in vocab_sizes), True
    return report


def _group(adapter_shapes):
    """Split saved keys into LoRA pairs, full copies (base-keyed) and trainable-token rows."""
    pairs: dict[str, dict[str, tuple]] = {}
    copies: dict[str, tuple] = {}
    tokens: dict[str, tuple] = {}
    for key, shape in adapter_shapes.items():
        split = split_adapter_key(key)
        if split:
            module, factor, kind = split
            entry = pairs.setdefault(module, {"kind": "linear"})
            entry[factor] = tuple(shape)
            if kind is not None:  # a magnitude vector does not say; its A and B do
                entry["kind"] = kind
        elif key.endswith(TRAINABLE_TOKENS):
            tokens[strip_prefix(key[: -len(TRAINABLE_TOKENS)])] = tuple(shape)
        else:
            copies.setdefault(COPY_SEGMENTS.sub("", strip_prefix(key)), tuple(shape))
    return pairs, copies, tokens


def _count_modules(base: Mapping, name: str) -> int:
    """Base modules whose path ends with ``name`` at a dot boundary (PEFT's matching rule)."""
    return sum(1 for n in base if n.endswith(".weight") and
               re.search(rf"(^|\.){re.escape(name)}$", n.removesuffix(".weight")))


def _check_targets(config: Mapping, base: Mapping, report: FitReport) -> None:
    for name in sorted(config.get("modules_to_save") or []):
        found = _count_modules(base, name)
        report.rows.append(Row("save", name, "modules_to_save", f"{found} module(s)", found > 0,
                               "" if found else "no such module in base"))
    targets = config.get("target_modules") or []
    if isinstance(targets, str):  # a regex or 'all-linear': present if it matches something
        names = [n.removesuffix(".weight") for n in base if n.endswith(".weight")]
        found = sum(1 for n in names if targets == "all-linear" or re.fullmatch(targets, n))
        report.rows.append(Row("target", targets, "pattern", f"{found} module(s)", found > 0,
                               "" if found else "matches no base module"))
        return
    for name in sorted(targets):
        found = _count_modules(base, name)
        report.rows.append(Row("target", name, "target_modules", f"{found} module(s)", found > 0,
                               "" if found else "no such module in base"))


def _check_lora(module: str, parts: dict, base: Mapping, report: FitReport, vocab_sizes: list) -> None:
    a, b, kind, m = parts.get("A"), parts.get("B"), parts["kind"], parts.get("m")
    w = base.get(f"{module}.weight")
    shown = f"A{_shape(a)} B{_shape(b)}" + (f" m{_shape(m)}" if m is not None else "")
    if w is None:
        report.rows.append(Row("lora", module, shown, "-", False, "not in base"))
        return
    if a is None or b is None:
        report.rows.append(Row("lora", module, shown, _shape(w), False, "only one factor saved"))
        return
    if kind == "embedding":  # A (r, V), B (d, r) for a base (V, d)
        implied, ok = (a[1], b[0]), a[0] == b[1] and (a[1], b[0]) == tuple(w)
    else:  # A (r, in), B (out, r) for a base (out, in)
        implied, ok = (b[0], a[1]), a[0] == b[1] and (b[0], a[1]) == tuple(w)
    ok = ok and (m is None or tuple(m) == (b[0],))  # DoRA: one magnitude per row of B
    if arch.is_vocab_tensor(module):
        vocab_sizes.append((implied[0], True))
    note = "" if ok else f"adapter implies {_shape(implied)}"
    report.rows.append(Row("lora", module, shown, _shape(w), ok, note))


def _check_tokens(module: str, shape: tuple, config: Mapping, base: Mapping, report: FitReport,
                  vocab_sizes: list) -> None:
    indices = token_indices(config, module)
    w = base.get(f"{module}.weight")
    need = max(indices) + 1 if indices else 0
    ok = w is not None and need <= w[0] and shape[-1] == w[1] and shape[0] == len(indices)
    if need:
        vocab_sizes.append((need, False))
    note = "" if ok else (f"index {need - 1} needs >= {need} rows" if w is not None and need > w[0]
                          else "not in base" if w is None else "rows or width differ")
    report.rows.append(Row("tokens", module, f"{shape[0]} rows, max id {need - 1}", _shape(w), ok, note))


def token_indices(config: Mapping, module: str) -> list[int]:
    """The ``trainable_token_indices`` PEFT stored for ``module`` (a list means the input embedding)."""
    spec = config.get("trainable_token_indices")
    if isinstance(spec, list):
        return [int(i) for i in spec] if arch.is_embedding(module) else []
    if isinstance(spec, dict):
        for name, ids in spec.items():
            if module == name or module.endswith("." + name):
                return [int(i) for i in ids]
    return []


def table(report: FitReport) -> list[str]:
    """The report as aligned text lines."""
    head = ("check", "module", "adapter", "base", "ok", "note")
    body = [(r.check, r.module, r.adapter, r.base, "yes" if r.ok else "NO", r.note) for r in report.rows]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*head).rstrip(), *(fmt.format(*row).rstrip() for row in body)]
