"""Padded batches give every real token the result of its unpadded sequence, on CUDA too.

Found on an H100 (2026-11-26): Gemma-3-270M scored 25.7% on ARC-Easy under ``--device cuda`` and
58.5% on the CPU, item by item the same code. A left-padded row begins with pad queries that may
attend to no key; CUDA's SDPA returns NaN for such a query (transformers 5 no longer unmasks those
rows), and the NaN spreads through the row (``0 * NaN`` where the next layer mixes values). The CPU
kernel returns zeros there, so CPU tests never saw it. :func:`cuda_like_sdpa` behaves as the CUDA
kernel does, which lets these tests run anywhere.
"""

from __future__ import annotations

import pytest

from paw import zoo
from paw.evaluate.encode import Encoded, make_batch, sliding_window_of
from paw.evaluate.mc import forward_logits, score_encoded

torch = pytest.importorskip("torch")


def cuda_like_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Scaled dot-product attention that, like CUDA's kernels, gives NaN for a query whose keys are all masked."""
    if k.shape[1] != q.shape[1]:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    rows, cols = scores.shape[-2:]
    if is_causal:
        scores = scores.masked_fill(~torch.ones(rows, cols, dtype=torch.bool).tril(cols - rows), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return torch.softmax(scores, dim=-1) @ v


@pytest.fixture
def cuda_attention(monkeypatch):
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", cuda_like_sdpa)


def _model(arch: str = "llama", **overrides):
    model = zoo.build_model(arch, seed=0, vocab_size=64, hidden_size=32, num_layers=2, **overrides)
    model.config._attn_implementation = "sdpa"
    return model


ROWS = [Encoded((1, 5, 6, 7, 8, 9, 10, 11), 3), Encoded((1, 9, 11), 1), Encoded((1, 12, 13, 14, 15), 2),
        Encoded((1, 20, 21), 2)]


def test_the_emulation_reproduces_the_cuda_nan(cuda_attention):
    """Plain left padding (the layout before the fix) gives NaN rows under the CUDA-like kernel: the
    tests below can fail."""
    model = _model()
    width = max(len(e.ids) for e in ROWS) - 1
    ids = torch.zeros(len(ROWS), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, e in enumerate(ROWS):
        ids[r, width - len(e.ids) + 1:] = torch.tensor(e.ids[:-1])
        mask[r, width - len(e.ids) + 1:] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    assert torch.isnan(logits[1:]).any() and torch.isfinite(logits[0]).all()


def test_padded_scores_equal_unpadded_under_cuda_attention(cuda_attention):
    model = _model()
    batched = score_encoded(model, ROWS, pad_id=0, batch_size=4, progress=False)
    single = score_encoded(model, ROWS, pad_id=0, batch_size=1, progress=False)
    right = score_encoded(model, ROWS, pad_id=0, batch_size=4, padding_side="right", progress=False)
    for (b, nb), (s, ns), (r, nr) in zip(batched, single, right, strict=True):
        assert nb == ns == nr
        assert b == pytest.approx(s, abs=1e-5) and r == pytest.approx(s, abs=1e-5)


def test_every_real_token_matches_its_unpadded_logits(cuda_attention):
    """Not only the scores: every kept position of every row, against the row run alone."""
    model = _model()
    batch = make_batch(ROWS, pad_id=0, padding_side="left")
    with torch.no_grad():
        logits, skip = forward_logits(model, batch, "cpu")
        assert torch.isfinite(logits).all()
        for r, e in enumerate(ROWS):
            alone = model(input_ids=torch.tensor([e.ids[:-1]])).logits[0]
            cols = batch.attention_mask[r].nonzero()[:, 0]
            kept = cols[cols >= skip]
            torch.testing.assert_close(logits[r, kept - skip], alone[-len(kept):], rtol=1e-4, atol=1e-5)


def test_sliding_window_batches_wider_than_the_window_match_too(cuda_attention):
    """Sliding-window layers count distance in columns: a batch wider than the window is padded on the
    right, so a row's tokens keep their distances (Mistral with a window of 4)."""
    model = _model("mistral", sliding_window=4)
    assert sliding_window_of(model) == 4 and sliding_window_of(_model()) is None
    batched = score_encoded(model, ROWS, pad_id=0, batch_size=4, progress=False)
    single = score_encoded(model, ROWS, pad_id=0, batch_size=1, progress=False)
    for (b, _), (s, _) in zip(batched, single, strict=True):
        assert b == pytest.approx(s, abs=1e-5)


def test_generation_of_padded_batches_matches_one_at_a_time(cuda_attention, tiny_llama):
    """Distillation's teacher writes its continuations in left-padded batches with a KV cache."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paw.transfer.distill.generation import generate

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, attn_implementation="sdpa").eval()
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    texts = ["The colour of the sea is", "A", "Numbers: 1 2 3 4 5 6 7 8 9 10 and then", "def f(x):"]
    batched = generate(model, tok, texts, max_new_tokens=6, batch_size=4, stop="\u2603")
    single = generate(model, tok, texts, max_new_tokens=6, batch_size=1, stop="\u2603")
    assert batched == single and all(batched)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch, overrides", [("llama", {}), ("mistral", {"sliding_window": 4}),
                                             ("llama", {"num_key_value_heads": 1})])
def test_padded_batches_on_cuda_equal_one_row_at_a_time(arch, overrides):
    """The real CUDA kernels, where the NaN rows were found (Gemma-3 on an H100): padded batches,
    left and right, give the scores of each sequence alone, and none is NaN."""
    model = _model(arch, **overrides).to("cuda")
    single = score_encoded(model, ROWS, pad_id=0, batch_size=1, progress=False)
    for side in ("left", "right"):
        batched = score_encoded(model, ROWS, pad_id=0, batch_size=4, padding_side=side, progress=False)
        for (b, _), (s, _) in zip(batched, single, strict=True):
            assert b == pytest.approx(s, abs=1e-4), (arch, side)


def test_a_nan_log_likelihood_is_an_error_not_a_silent_first_choice():
    """Before the layout fix a NaN row scored as the first choice without a word (25.7% on ARC-Easy,
    four choices): scoring now refuses non-finite log-likelihoods."""
    from paw.errors import PawError

    model = _model()
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    with pytest.raises(PawError, match="NaN/Inf log-likelihood for 4 of the 4 sequences of one batch on cpu"):
        score_encoded(model, ROWS, pad_id=0, batch_size=4, progress=False)


def test_a_batch_over_the_logits_budget_goes_in_halves_with_the_same_scores(monkeypatch):
    """Gemma-3's 262k vocabulary on PIQA's long answers at a batch of 64 was killed for memory on the
    CPU: a batch past LOGITS_BUDGET is halved until it fits, and every score stays what it was."""
    from paw.evaluate import forward

    model = _model()
    whole = score_encoded(model, ROWS, pad_id=0, batch_size=4, progress=False)
    sizes = []
    real = forward.forward_logits
    monkeypatch.setattr(forward, "forward_logits",
                        lambda m, batch, d, **extra: sizes.append(len(batch.input_ids)) or real(m, batch, d, **extra))
    # room for two rows of this batch's kept positions (3: the longest continuation), 64-token vocabulary
    monkeypatch.setattr(forward, "LOGITS_BUDGET", 2 * 3 * 64 * 4)
    split = score_encoded(model, ROWS, pad_id=0, batch_size=4, progress=False)
    assert sizes == [2, 2]
    for (a, n), (b, m) in zip(split, whole, strict=True):
        assert n == m and a == pytest.approx(b, abs=1e-5)
    monkeypatch.setattr(forward, "LOGITS_BUDGET", 1)  # one row always runs, whatever its size
    sizes.clear()
    assert [n for _, n in score_encoded(model, ROWS, pad_id=0, batch_size=4, progress=False)] == [n for _, n in whole]
    assert sizes == [1, 1, 1, 1]
