"""Log-likelihood scoring against answers known from the model's construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from paw.evaluate.encode import encode_pair, make_batch
from paw.evaluate.items import MCItem
from paw.evaluate.mc import evaluate, summarize


@pytest.fixture(scope="module")
def bias_only():
    """A tiny Llama whose LM head is ``0 @ h + b``: log p(token) = b - logsumexp(b) whatever the context,
    so every choice's log-likelihood is a sum of known numbers."""
    import torch

    from paw import zoo
    from paw.data import sample_texts

    tok = zoo.train_tokenizer(sample_texts("en"), 300)
    model = zoo.build_model("llama", hidden_size=32, num_layers=1, vocab_size=len(tok))
    gen = torch.Generator().manual_seed(0)
    bias = torch.randn(len(tok), generator=gen) * 2
    head = torch.nn.Linear(32, len(tok), bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(bias)
    model.lm_head = head
    logp = torch.log_softmax(bias.double(), -1).numpy()
    return model, tok, logp


def reference(tok, logp, items):
    """numpy reference: LL of each choice from the tokens the tokenizer gives the continuation."""
    accs, norms, nll, ntok = [], [], 0.0, 0
    for item in items:
        lls = []
        for context, cont in item.pairs():
            whole = tok.encode(context + cont, add_special_tokens=False)
            ctx = tok.encode(context, add_special_tokens=False)
            lls.append(float(sum(logp[t] for t in whole[len(ctx):])))
            if len(lls) - 1 == item.answer:
                nll -= lls[-1]
                ntok += len(whole) - len(ctx)
        accs.append(int(np.argmax(lls)) == item.answer)
        norms.append(int(np.argmax([ll / len(c) for ll, (_, c) in zip(lls, item.pairs(), strict=True)])) == item.answer)
    return np.mean(accs), np.mean(norms), nll / ntok


def test_bias_model_answers_are_known(bias_only):
    model, tok, logp = bias_only
    vocab = tok.get_vocab()
    likely = max((t for t in vocab if t.startswith("Ġ") and len(t) > 2), key=lambda t: logp[vocab[t]])
    unlikely = min((t for t in vocab if t.startswith("Ġ") and len(t) > 2), key=lambda t: logp[vocab[t]])
    good, bad = tok.convert_tokens_to_string([likely]), tok.convert_tokens_to_string([unlikely])
    right = [MCItem(f"Question {i}: pick", (bad, good), 1) for i in range(5)]
    wrong = [MCItem(f"Question {i}: pick", (bad, good), 0) for i in range(3)]
    metrics = evaluate(model, tok, right + wrong, batch_size=3, progress=False)
    assert metrics["accuracy"] == pytest.approx(5 / 8)
    # lm-eval's mean_stderr: sample variance of the 0/1 outcomes (n - 1), over n:
    # (5 (3/8)^2 + 3 (5/8)^2) / 7 = 15/56, and 15/56 / 8 = 15/448
    assert metrics["stderr"] == pytest.approx(math.sqrt(15 / 448))
    assert metrics["stderr"] == pytest.approx(math.sqrt(5 / 8 * 3 / 8 / 7))
    # loss = mean NLL of the correct answers' single tokens
    expected_loss = (5 * -logp[vocab[likely]] + 3 * -logp[vocab[unlikely]]) / 8
    assert metrics["loss"] == pytest.approx(expected_loss, rel=1e-5)
    assert metrics["perplexity"] == pytest.approx(math.exp(expected_loss), rel=1e-5)
    assert metrics["n"] == 8 and metrics["n_tokens"] == 8


def test_bias_model_matches_numpy_reference_on_real_text(bias_only, commonsense):
    from paw.evaluate.formats import read_items

    model, tok, logp = bias_only
    base = commonsense / "raw"
    items = read_items(base / "arc-easy_test.jsonl") + read_items(base / "piqa_validation.jsonl", limit=6)
    metrics = evaluate(model, tok, items, batch_size=5, progress=False)
    acc, acc_norm, loss = reference(tok, logp, items)
    assert metrics["accuracy"] == pytest.approx(acc)
    assert metrics["accuracy_norm"] == pytest.approx(acc_norm)
    assert metrics["loss"] == pytest.approx(loss, rel=1e-5)


def test_left_and_right_padding_agree(fact_model, colour_task):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(fact_model)
    tok = AutoTokenizer.from_pretrained(fact_model)
    items = colour_task[:6] + [MCItem("A much longer question about the colour of things is", (" red", " blue sea"), 1)]
    right = evaluate(model, tok, items, batch_size=4, progress=False, padding_side="right")
    left = evaluate(model, tok, items, batch_size=4, progress=False, padding_side="left")
    single = evaluate(model, tok, items, batch_size=1, progress=False)
    for key in ("accuracy", "accuracy_norm", "n_tokens"):
        assert right[key] == left[key] == single[key]
    assert right["loss"] == pytest.approx(single["loss"], rel=1e-5)
    assert left["loss"] == pytest.approx(single["loss"], rel=1e-5)


def test_make_batch_layout():
    """Left padding ends every row in the last column but keeps its first token in column 0, so no
    query attends to nothing (tests/evaluate/test_padding.py says why)."""
    from paw.evaluate.encode import Encoded

    rows = [Encoded((5, 6, 7, 8), 2), Encoded((5, 9, 11), 1), Encoded((5, 9), 1)]
    batch = make_batch(rows, pad_id=0, padding_side="left")
    assert batch.input_ids.tolist() == [[5, 6, 7], [5, 0, 9], [5, 0, 0]]
    assert batch.targets.tolist() == [[6, 7, 8], [9, 0, 11], [9, 0, 0]]
    assert batch.target_mask.tolist() == [[False, True, True], [False, False, True], [True, False, False]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 0, 1], [1, 0, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2], [0, 0, 1], [0, 0, 0]]
    right = make_batch(rows[::2], pad_id=0, padding_side="right")
    assert right.input_ids.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert right.target_mask.tolist() == [[False, True, True], [True, False, False]]
    # a batch wider than a sliding window is padded on the right: windows count columns
    assert make_batch(rows, pad_id=0, padding_side="left", window=2).input_ids.tolist() == [[5, 6, 7], [5, 9, 0],
                                                                                          [5, 0, 0]]
    assert make_batch(rows, pad_id=0, padding_side="left", window=3).input_ids.tolist() == batch.input_ids.tolist()


def test_head_reads_a_contiguous_input_and_the_hook_goes(fact_model):
    """logits_to_keep hands the head a strided view; on CPU that copied the whole expanded head weight
    (2 GiB at the Llama-3.2-1B shape). The head gets a contiguous copy, the logits are the same, and
    the model is left without PAW's hook."""
    import torch
    from transformers import AutoModelForCausalLM

    from paw.evaluate.encode import Encoded
    from paw.evaluate.mc import forward_logits

    model = AutoModelForCausalLM.from_pretrained(fact_model).eval()
    batch = make_batch([Encoded((5, 6, 7, 8, 9, 10), 2), Encoded((5, 9, 11), 1)], pad_id=0, padding_side="left")
    seen = []
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda _m, args, _out: seen.append(args[0].is_contiguous()))
    hooks_before = len(head._forward_pre_hooks)
    with torch.no_grad():
        logits, skip = forward_logits(model, batch, "cpu")
        full = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                     position_ids=batch.position_ids).logits
    handle.remove()
    assert seen == [True, True] and skip == 3 and logits.shape[1] == 2
    assert len(head._forward_pre_hooks) == hooks_before
    torch.testing.assert_close(logits, full[:, skip:], rtol=1e-5, atol=1e-5)


def test_encode_pair_moves_trailing_space(fact_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(fact_model)
    a = encode_pair(tok, "Fact: the colour of x is ", "red")
    b = encode_pair(tok, "Fact: the colour of x is", " red")
    assert a == b and tok.decode(list(a.ids[-a.n_cont:])) == " red"
    assert a.ids[0] == tok.bos_token_id


def test_summarize_by_hand():
    items = [MCItem("q", (" a", " bbbb"), 1), MCItem("q", (" a", " b"), 0)]
    # item 1: LL -1.0 vs -2.0 -> raw picks 0 (wrong); per char of "a", "bbbb": -1.0 vs -0.5 -> norm picks 1 (right)
    scores = [(-1.0, 1), (-2.0, 2), (-0.5, 1), (-3.0, 1)]
    m = summarize(items, scores, per_item=True)
    assert m["accuracy"] == 0.5 and m["accuracy_norm"] == 1.0
    assert m["correct"] == [0, 1] and m["correct_norm"] == [1, 1]
    assert m["choice_logprobs"] == [[-1.0, -2.0], [-0.5, -3.0]]
    assert "correct" not in summarize(items, scores)
    assert m["loss"] == pytest.approx((2.0 + 0.5) / 3) and m["n_tokens"] == 3


@pytest.mark.gpu
def test_cuda_matches_cpu(fact_model, colour_task):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paw.evaluate.train import train_lora

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    tok = AutoTokenizer.from_pretrained(fact_model)
    cpu = evaluate(AutoModelForCausalLM.from_pretrained(fact_model), tok, colour_task, progress=False)
    gpu = evaluate(AutoModelForCausalLM.from_pretrained(fact_model), tok, colour_task, device="cuda", progress=False)
    assert gpu["accuracy"] == cpu["accuracy"] and gpu["loss"] == pytest.approx(cpu["loss"], rel=1e-3)
    _, metrics = train_lora(AutoModelForCausalLM.from_pretrained(fact_model), tok, colour_task, rank=8, alpha=16,
                            steps=120, batch_size=8, lr=3e-3, device="cuda", eval_items=colour_task, progress=False)
    assert metrics["test/accuracy"] >= 0.9
