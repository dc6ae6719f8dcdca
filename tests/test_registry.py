"""The one registry helper: duplicate names refused, unknown names listed, CLI choices built from it."""

from __future__ import annotations

import pytest

from paw.errors import PawError
from paw.registry import DuplicateName, Registry


def test_register_lookup_and_mapping_behaviour():
    shapes: Registry[int] = Registry("shape")

    @shapes.register("square")
    def square():
        return 4

    shapes.add("triangle", 3)
    assert shapes.names() == ["square", "triangle"] and list(shapes) == shapes.names()
    assert shapes["square"] is square and shapes.lookup("triangle") == 3
    assert "square" in shapes and "circle" not in shapes and len(shapes) == 2
    assert dict(shapes.items()) == {"square": square, "triangle": 3}
    with pytest.raises(KeyError):
        shapes["circle"]  # Mapping semantics stay plain
    with pytest.raises(PawError, match=r"^unknown shape 'circle'; choose one of: square, triangle$"):
        shapes.lookup("circle")
    with pytest.raises(PawError, match=r"^unknown --shape 'circle'"):
        shapes.lookup("circle", what="--shape")


def test_duplicate_name_is_refused_and_the_first_entry_kept():
    shapes: Registry[int] = Registry("shape")
    shapes.add("square", 4)
    with pytest.raises(DuplicateName, match=r"shape 'square' is registered twice \(int and int\)"):
        shapes.add("square", 5)
    assert shapes["square"] == 4


@pytest.mark.parametrize("module, name, taken", [
    ("paw.merge.methods", "METHODS", "ties"),
    ("paw.merge.weights", "WEIGHT_MODES", "exp"),
    ("paw.vocab.align", "METHODS", "exact"),
    ("paw.evaluate.formats", "READERS", "arc"),
    ("paw.transfer.methods", "METHODS", "copy"),
    ("paw.transfer.layers", "LAYER_MAPS", "similarity"),
    ("paw.bench.targets", "TARGETS", "pruned"),
    ("paw.bench.tasks", "TASKS", "facts"),
    ("paw.demo", "STEPS", "merge"),
])
def test_every_registry_refuses_a_second_entry_under_a_taken_name(module, name, taken):
    import importlib

    registry = getattr(importlib.import_module(module), name)
    assert isinstance(registry, Registry) and taken in registry
    before = registry[taken]
    with pytest.raises(DuplicateName, match=f"'{taken}' is registered twice"):
        registry.add(taken, object())
    assert registry[taken] is before


def test_cli_choices_follow_the_registries(cli):
    from paw.knobs import choices_of
    from paw.merge.adapters import ADAPTER_METHODS
    from paw.merge.methods import METHODS as MERGE_METHODS
    from paw.merge.options import MergeSpec
    from paw.merge.weights import WEIGHT_MODES
    from paw.transfer.distill import DISTILL
    from paw.transfer.layers import LAYER_MAPS
    from paw.transfer.options import TransferOptions
    from paw.transfer.training_free import method_names

    # the data-free maps of the registry, then distill (a training pipeline of its own)
    assert list(choices_of(TransferOptions, "method")) == [*method_names(), DISTILL] and method_names()[0] == "auto"
    assert list(choices_of(TransferOptions, "layer_map")) == LAYER_MAPS.names()
    assert list(choices_of(MergeSpec, "method")) == [*MERGE_METHODS.names(), *ADAPTER_METHODS.names()]  # then --adapters
    assert list(choices_of(MergeSpec, "mode")) == WEIGHT_MODES.names()
    help_text = cli("align-vocab", "--help").stdout
    from paw.vocab.align import METHODS as ALIGNERS

    assert all(name in help_text for name in ALIGNERS.names())
    res = cli("transfer-lora", "--adapter", "a", "--source-base", "s", "--target-base", "t", "-o", "o",
              "--layer-map", "diagonal")
    assert res.exit_code == 2 and "diagonal" in res.stderr
