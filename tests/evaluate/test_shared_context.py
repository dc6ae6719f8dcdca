"""Choices scored from their context's cached keys and values equal choices scored whole.

The reference is every row run alone, unpadded (``share_context=False``, batch 1). Rows come in groups of
two or four answers after contexts of 1 to 14 tokens, some groups with answers that begin alike, so a batch
mixes left-padded prefixes of different lengths and rests of different lengths.
"""

from __future__ import annotations

import functools
import random

import pytest

from paw import zoo
from paw.evaluate import forward, shared
from paw.evaluate.encode import Encoded, encode_pair, pad_id_of
from paw.evaluate.mc import score_encoded
from tests.evaluate.test_padding import cuda_like_sdpa

torch = pytest.importorskip("torch")


def grouped_rows(seed: int = 0, items: int = 7, vocab: int = 60) -> list[Encoded]:
    """Items of 2 or 4 answers (1-6 tokens) after a BOS and 1-14 context tokens; a third of them with 3
    answer tokens every choice starts with."""
    rng = random.Random(seed)
    rows = []
    for _ in range(items):
        context = [0] + [rng.randrange(3, vocab) for _ in range(rng.randrange(1, 15))]
        common = [rng.randrange(3, vocab) for _ in range(rng.choice([0, 0, 3]))]
        for _ in range(rng.choice([2, 4])):
            answer = common + [rng.randrange(3, vocab) for _ in range(rng.randrange(1, 7))]
            rows.append(Encoded(tuple(context + answer), len(answer)))
    return rows


def tiny(arch: str, **overrides):
    if arch == "gemma3_text":   # sliding layers of 5 tokens and one key/value head, as Gemma-3-270M has one
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig

        config = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=256,
                                  pad_token_id=2, bos_token_id=0, eos_token_id=1, **{"sliding_window": 5, **overrides})
        torch.manual_seed(0)
        model = Gemma3ForCausalLM(config).eval()
    else:
        model = zoo.build_model(arch, seed=0, hidden_size=32, num_layers=2, **{"vocab_size": 64, **overrides})
    model.config._attn_implementation = "sdpa"
    return model


def alone(model, rows):
    return [score_encoded(model, [e], pad_id=2, batch_size=1, progress=False, share_context=False)[0] for e in rows]


@pytest.fixture
def spy(monkeypatch):
    """Counts forward passes, their tokens (padding included), and the rows that ran from a cache (rests)."""
    seen = {"rest_rows": 0, "tokens": 0, "passes": 0}

    def recording(real):
        def run(model, batch, device, **extra):
            seen["tokens"] += batch.input_ids.numel()
            seen["passes"] += 1
            if batch.attention_mask.shape[1] > batch.input_ids.shape[1]:
                seen["rest_rows"] += batch.input_ids.shape[0]
            return real(model, batch, device, **extra)
        return run

    monkeypatch.setattr(forward, "forward_logits", recording(forward.forward_logits))   # whole rows
    monkeypatch.setattr(shared, "score_targets", recording(shared.score_targets))        # prefixes and rests
    return seen


ARCHS = [("llama", {}), ("qwen2", {}), ("gemma", {}), ("mistral", {"sliding_window": 4}), ("gemma3_text", {})]


@pytest.mark.parametrize("arch, overrides", ARCHS)
def test_cached_context_equals_every_row_alone(arch, overrides, spy):
    model = tiny(arch, **overrides)
    rows = grouped_rows()
    reference = alone(model, rows)
    for batch_size in (1, 3, 8):
        spy["rest_rows"] = 0
        got = score_encoded(model, rows, pad_id=2, batch_size=batch_size, progress=False)
        assert spy["rest_rows"] == len(rows)   # every row ran from its context's cache
        assert [n for _, n in got] == [n for _, n in reference] == [e.n_cont for e in rows]
        assert [s for s, _ in got] == pytest.approx([s for s, _ in reference], abs=2e-5), (arch, batch_size)


@pytest.mark.parametrize("arch, overrides", [("mistral", {"sliding_window": 4}), ("gemma3_text", {})])
def test_the_sliding_window_counts_in_the_cached_path(arch, overrides):
    """Rows up to 20 tokens in windows of 4 and 5: the window changes the scores, and the cached path keeps
    it (each row's prefix keys right-aligned against its rest, the cache built without dropping keys)."""
    rows = grouped_rows(seed=1)
    windowed, wide = tiny(arch, **overrides), tiny(arch, sliding_window=256)
    assert max(len(e.ids) for e in rows) > 2 * overrides.get("sliding_window", 5)
    cached = score_encoded(windowed, rows, pad_id=2, batch_size=8, progress=False)
    unwindowed = score_encoded(wide, rows, pad_id=2, batch_size=8, progress=False)
    assert max(abs(a - b) for (a, _), (b, _) in zip(cached, unwindowed, strict=True)) > 1e-2
    assert [s for s, _ in cached] == pytest.approx([s for s, _ in alone(windowed, rows)], abs=2e-5)


def test_under_cuda_like_attention_no_row_is_nan(monkeypatch):
    """The kernel that gives NaN for a query with no key (:mod:`tests.evaluate.test_padding`): no rest row
    and no prefix row is one, so the cached path gives the plain numbers."""
    model = tiny("llama")
    rows = grouped_rows(seed=2)
    reference = alone(model, rows)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", cuda_like_sdpa)
    got = score_encoded(model, rows, pad_id=2, batch_size=8, progress=False)
    assert [s for s, _ in got] == pytest.approx([s for s, _ in reference], abs=2e-5)


def test_plan_groups_by_context_and_shares_the_common_answer_start():
    rows = [Encoded((0, 5, 6, 7, 8, 9), 3), Encoded((0, 5, 6, 7, 8, 4), 3),   # answers share (7, 8)
            Encoded((0, 5, 6, 9), 1), Encoded((0, 5, 6, 9), 1),               # the same context, equal answers
            Encoded((0, 3, 4), 1),                                            # a context of its own
            Encoded((0, 7), 1), Encoded((0, 8), 1)]                           # BOS alone: nothing to share
    groups, alone_rows = shared.plan(rows)
    # the context (0, 5, 6) is all four share: (0, 5) runs once, the rests (6, 7, 8), (6, 7, 8), (6,), (6,)
    assert [(g.rows, g.prefix, g.length) for g in groups] == [((0, 1, 2, 3), Encoded((0, 5, 6), 0), 2)]
    assert alone_rows == [4, 5, 6]
    groups, _ = shared.plan(rows[:2])
    # (0, 5, 6, 7) runs once and scores the shared 7 and 8 once; the rests (8,) and (8,) score 9 and 4
    assert [(g.prefix, g.length) for g in groups] == [(Encoded((0, 5, 6, 7, 8), 2), 4)]


def test_shared_answer_tokens_are_scored_once_and_counted_for_each(spy):
    model = tiny("llama")
    rows = [Encoded((0, 5, 6, 7, 8, 9), 3), Encoded((0, 5, 6, 7, 8, 4), 3), Encoded((0, 5, 6, 7, 8, 11, 12), 4)]
    got = score_encoded(model, rows, pad_id=2, batch_size=8, progress=False)
    assert [n for _, n in got] == [3, 3, 4]
    assert spy["tokens"] == 4 + 3 * 2   # the prefix (0, 5, 6, 7) once, rests of 1, 1 and 2 tokens padded to 2
    assert [s for s, _ in got] == pytest.approx([s for s, _ in alone(model, rows)], abs=2e-5)


def test_four_choice_items_run_their_question_once(spy, tiny_llama):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    model = tiny("llama", vocab_size=len(tok))
    rows = [encode_pair(tok, f"Question: which of these is item number {i} of the list?\nAnswer:", f" {c}",
                        start="tokenizer") for i in range(3) for c in ("red", "a green one", "blue", "grey")]
    whole = score_encoded(model, rows, pad_id=pad_id_of(tok), batch_size=4, progress=False, share_context=False)
    plain_tokens, spy["tokens"] = spy["tokens"], 0
    got = score_encoded(model, rows, pad_id=pad_id_of(tok), batch_size=4, progress=False)
    assert spy["tokens"] < plain_tokens / 2
    assert [s for s, _ in got] == pytest.approx([s for s, _ in whole], abs=2e-5)


def test_an_untested_family_runs_whole_rows_and_says_so(monkeypatch, capsys):
    model = tiny("llama")
    rows = grouped_rows(seed=3)
    cached = score_encoded(model, rows, pad_id=2, batch_size=8, progress=False)
    monkeypatch.setattr(shared, "CACHED_TYPES", frozenset({"qwen2"}))
    monkeypatch.setattr(shared, "score_groups", lambda *a, **k: pytest.fail("the cached path ran"))
    whole = score_encoded(model, rows, pad_id=2, batch_size=8, progress=False)
    assert "each choice with its whole context, the context not shared (model type llama: the shared context is " \
           "tested on qwen2)" in capsys.readouterr().err
    assert [s for s, _ in whole] == pytest.approx([s for s, _ in cached], abs=2e-5)


def test_a_cache_laid_out_otherwise_falls_back_to_whole_rows(monkeypatch, capsys):
    """A cache this module cannot read (here: one layer short) is found on the first batch; every row then
    runs whole and the scores are the plain ones."""
    model = tiny("llama")
    rows = grouped_rows(seed=4)
    reference = alone(model, rows)
    real = shared._layers
    monkeypatch.setattr(shared, "_layers", lambda cache, **k: real(_Short(cache), **k))
    got = score_encoded(model, rows, pad_id=2, batch_size=8, progress=False)
    assert "the context not shared (its KV cache (_Short) is not 2 layers" in capsys.readouterr().err
    assert [s for s, _ in got] == pytest.approx([s for s, _ in reference], abs=2e-5)


class _Short:
    def __init__(self, cache):
        self.layers = cache.layers[:-1]


def test_a_peft_model_passes_the_cache_through(tiny_llama, tiny_lora):
    from paw.io.lm import load_lm

    model, tok = load_lm(tiny_llama, adapter=tiny_lora, device="cpu", dtype="float32")
    assert shared.refusal(model) is None and shared.cache_keyword(model) in ("cache", "past_key_values")
    rows = [encode_pair(tok, f"Question {i}: the colour of the sky?\nAnswer:", c, start="tokenizer")
            for i in range(3) for c in (" blue", " a grey one", " blue and white")]
    whole = score_encoded(model, rows, pad_id=pad_id_of(tok), batch_size=4, progress=False, share_context=False)
    got = score_encoded(model, rows, pad_id=pad_id_of(tok), batch_size=4, progress=False)
    assert [s for s, _ in got] == pytest.approx([s for s, _ in whole], abs=2e-5)


def test_out_of_memory_under_auto_halves_the_cached_batches_too(monkeypatch):
    model = tiny("llama")
    rows = grouped_rows(seed=5, items=9)
    reference = alone(model, rows)
    real, seen = model.forward, []

    @functools.wraps(real)   # the signature stays the model's: it takes a cache
    def small_memory(*args, **kwargs):   # a device where more than 3 rows do not fit
        seen.append(kwargs["input_ids"].shape[0])
        if seen[-1] > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "forward", small_memory)
    got = score_encoded(model, rows, pad_id=2, batch_size="auto", progress=False)
    refused = [rows for rows in seen if rows > 3]
    assert seen[0] > 3 and len(refused) >= 2   # a prefix batch and a rest batch, each halved until it fits
    assert [s for s, _ in got] == pytest.approx([s for s, _ in reference], abs=2e-5)


def test_logits_over_budget_and_a_small_kv_budget_give_the_same_scores(monkeypatch, spy):
    model = tiny("llama")
    rows = grouped_rows(seed=6)
    whole = score_encoded(model, rows, pad_id=2, batch_size=8, progress=False)
    passes, spy["passes"] = spy["passes"], 0
    monkeypatch.setattr(forward, "LOGITS_BUDGET", 2 * 6 * 64 * 4)   # two rows of six answer tokens
    monkeypatch.setattr(shared, "KV_BUDGET", 1)                      # rests run after every prefix batch
    split = score_encoded(model, rows, pad_id=2, batch_size=8, progress=False)
    assert spy["passes"] > passes
    assert [s for s, _ in split] == pytest.approx([s for s, _ in whole], abs=2e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch, overrides", ARCHS)
def test_cached_context_on_cuda_equals_rows_alone(arch, overrides):
    model = tiny(arch, **overrides).to("cuda")
    rows = grouped_rows()
    reference = alone(model, rows)
    for batch_size in (3, 8, "auto"):
        got = score_encoded(model, rows, pad_id=2, batch_size=batch_size, progress=False)
        assert [s for s, _ in got] == pytest.approx([s for s, _ in reference], abs=1e-4), (arch, batch_size)
