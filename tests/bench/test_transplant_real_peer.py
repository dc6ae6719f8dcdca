"""scripts/bench_transplant_real_peer.py: tokensurgeon's batches kept per token, so a killed run resumes."""

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_transplant_real_peer.py"


def _module():
    spec = importlib.util.spec_from_file_location("bench_transplant_real_peer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(tokens, is_lm_head):
    """A stand-in for compute_new_embeddings: each token's row depends on that token alone."""
    return torch.stack([torch.tensor([float(len(str(t))), float(sum(map(ord, str(t)))), float(is_lm_head)])
                        for t in tokens])


def test_resumed_run_computes_only_missing_tokens_in_any_batch_order(tmp_path):
    m = _module()
    calls = []

    def compute(orig_embed, *_, target_tokens, is_lm_head, **__):
        calls.append(list(target_tokens))
        return _rows(target_tokens, is_lm_head)

    embed = torch.zeros(2, 3)
    tokens = ["a", "bb", ("word_start", "c"), "dddd", "e", "ff"]
    first = m.cached(compute, tmp_path)
    first(embed, None, target_tokens=tokens[:3], is_lm_head=False)   # the killed run finished one batch
    assert calls == [tokens[:3]]

    calls.clear()
    again = m.cached(compute, tmp_path)                                # a new process: other batches, other order
    out = again(embed, None, target_tokens=[tokens[4], tokens[1], tokens[5], tokens[0]], is_lm_head=False)
    assert calls == [[tokens[4], tokens[5]]]                           # only the tokens not saved yet
    torch.testing.assert_close(out, _rows([tokens[4], tokens[1], tokens[5], tokens[0]], False), rtol=0, atol=0)

    calls.clear()
    head = again(embed, None, target_tokens=tokens[:2], is_lm_head=True)   # the head's rows are kept apart
    assert calls == [tokens[:2]]
    assert head[:, 2].tolist() == [1.0, 1.0]
    assert len(list(tmp_path.glob("part-*.pt"))) == 3


def test_a_part_saved_without_its_seconds_is_not_overwritten(tmp_path):
    """Killed between saving a part and writing seconds.json: the next run numbers its part after it."""
    m = _module()

    def compute(orig_embed, *_, target_tokens, is_lm_head, **__):
        return _rows(target_tokens, is_lm_head)

    embed = torch.zeros(2, 3)
    m.cached(compute, tmp_path)(embed, target_tokens=["a", "bb"], is_lm_head=False)
    (tmp_path / "seconds.json").unlink()
    m.cached(compute, tmp_path)(embed, target_tokens=["ccc"], is_lm_head=False)
    assert sorted(p.name for p in tmp_path.glob("part-*.pt")) == ["part-00000.pt", "part-00001.pt"]
    out = m.cached(lambda *a, **k: pytest.fail("nothing left to compute"), tmp_path)(
        embed, target_tokens=["ccc", "a", "bb"], is_lm_head=False)
    torch.testing.assert_close(out, _rows(["ccc", "a", "bb"], False), rtol=0, atol=0)
