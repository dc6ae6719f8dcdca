"""ReadAhead: the reads of a plan made on a second thread, handed over in order; anything else read now."""

from __future__ import annotations

import pytest
import torch

from paw.io.checkpoint import open_checkpoint
from paw.io.stream import ReadAhead
from paw.io.writer import write_checkpoint


@pytest.fixture
def ckpt(tmp_path):
    gen = torch.Generator().manual_seed(0)
    write_checkpoint(tmp_path / "m", {"a": torch.randn(6, 4, generator=gen), "b": torch.randn(3, generator=gen)})
    return open_checkpoint(tmp_path / "m")


def test_planned_reads_are_handed_over_in_order(ckpt):
    plan = [(ckpt, "a", (0, 2)), (ckpt, "a", (2, 6)), (ckpt, "b", None)]
    with ReadAhead(plan, budget=1) as ahead:  # one read held at a time
        got = [ahead.get(*read) for read in plan]
    assert torch.equal(torch.cat(got[:2]), ckpt["a"]) and torch.equal(got[2], ckpt["b"])
    assert ahead.misses == 0


def test_a_read_off_the_plan_is_made_now_and_counted(ckpt):
    with ReadAhead([(ckpt, "a", None), (ckpt, "b", None)]) as ahead:
        assert torch.equal(ahead.get(ckpt, "b"), ckpt["b"])      # not the next one: read now
        assert torch.equal(ahead.get(ckpt, "a"), ckpt["a"])      # the next one: from the reader
        assert torch.equal(ahead.get(ckpt, "a", (1, 3)), ckpt["a"][1:3])  # past the plan's end
    assert ahead.misses == 2


def test_a_failed_read_is_raised_by_the_get_that_asks_for_it(ckpt):
    from paw.errors import PawError

    def plan():
        yield ckpt, "b", None
        yield ckpt, "missing", None

    with ReadAhead(plan()) as ahead:
        assert torch.equal(ahead.get(ckpt, "b"), ckpt["b"])
        with pytest.raises(KeyError):
            ahead.get(ckpt, "missing")
    truncated = ckpt.files[0]
    truncated.write_bytes(truncated.read_bytes()[:-8])
    with ReadAhead([(ckpt, "b", None)]) as ahead, pytest.raises(PawError, match="truncated"):
        ahead.get(ckpt, "b")  # the last tensor of the file


def test_closing_early_stops_the_reader(ckpt):
    import threading

    with ReadAhead([(ckpt, "a", None)] * 1000, budget=1) as ahead:
        ahead.get(ckpt, "a")
    assert not [t for t in threading.enumerate() if t.name == "paw-read-ahead"]
