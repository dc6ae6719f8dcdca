"""What the adapter changed: the teacher's excess, the agreement weighed by it, token focus, the
automatic budget and the report's 'still falling' warning, on hand-built cases."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from paw.evaluate.encode import Encoded
from paw.transfer.distill import fit
from paw.transfer.distill import lora as distill_lora
from paw.transfer.distill import report as distill_report
from paw.transfer.distill import train as distill_train
from paw.transfer.distill.byte_align import spread
from paw.transfer.distill.loss import sequence_nll, weighted_mean
from paw.transfer.distill.prompts import Prompt

VOCAB = 12


class Memoriser(torch.nn.Module):
    """A fake causal LM that predicts, after each prefix of ``sequences``, the token that follows it,
    except after the prefixes listed in ``wrong``, where it predicts token 0."""

    def __init__(self, sequences, wrong=()):
        super().__init__()
        self.next = {tuple(s[:p + 1]): s[p + 1] for s in sequences for p in range(len(s) - 1)}
        self.wrong = {tuple(w) for w in wrong}
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask, position_ids=None, logits_to_keep=None):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            real = [i for i, m in zip(ids, mask, strict=True) if m]
            pad = len(ids) - len(real)
            row = torch.full((len(ids), VOCAB), -10.0)
            for p in range(len(real)):
                prefix = tuple(real[:p + 1])
                row[pad + p, 0 if prefix in self.wrong else self.next.get(prefix, 0)] = 10.0
            rows.append(row)
        logits = torch.stack(rows)
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


SEQ = (1, 5, 6, 7, 8)                      # context (1, 5), continuation (6, 7, 8)
EXCESS = [0.1, 3.0, -0.2]                  # the adapter taught the second continuation token (7)


def _examples():
    return [distill_train.Example(Prompt("q"), "c", sequence=Encoded(SEQ, 3), excess=list(EXCESS))]


def _agreement(wrong):
    model = Memoriser([SEQ], wrong=wrong)
    return fit.agreement(model, None, _examples(), distill_train.Vocab(), "cpu")


def test_agreement_weighed_by_the_excess_falls_when_only_generic_text_was_learned():
    generic = _agreement(wrong=[SEQ[:3]])          # right everywhere but where the adapter taught (token 7)
    taught = _agreement(wrong=[SEQ[:2], SEQ[:4]])  # right only where the adapter taught
    perfect = _agreement(wrong=[])
    assert generic["top1_agreement"] == pytest.approx(2 / 3, abs=1e-6) and generic["adapter_agreement"] == pytest.approx(0.1 / 3.1, abs=1e-6)
    assert taught["top1_agreement"] == pytest.approx(1 / 3, abs=1e-6) and taught["adapter_agreement"] == pytest.approx(3.0 / 3.1, abs=1e-6)
    assert perfect["top1_agreement"] == 1.0 and perfect["adapter_agreement"] == 1.0


def test_probe_score_and_stop_rule_use_that_agreement():
    model = Memoriser([SEQ], wrong=[SEQ[:3]])
    assert fit.probe_score(model, None, _examples(), distill_train.Vocab(), "cpu") == pytest.approx(0.1 / 3.1, abs=1e-6)
    stop = fit.Stop([], every=10, patience=2, min_gain=0.01, min_steps=0)
    assert not stop.done([0.1, 0.5]) and not stop.done([0.1, 0.5, 0.6, 0.6])
    assert stop.done([0.1, 0.5, 0.6, 0.605, 0.6]) and not stop.done([0.1, 0.5, 0.6, 0.605, 0.62])
    flat_start = [0.3, 0.3, 0.3, 0.3, 0.3]                     # a slow start is not a plateau ...
    assert not fit.Stop([], every=10).done(flat_start)          # ... before 100 steps
    assert fit.Stop([], every=10).done(flat_start * 2)


def test_token_focus_keeps_the_tokens_the_adapter_changed_most():
    examples = _examples() + [distill_train.Example(Prompt("r"), "d", sequence=Encoded((1, 9, 10), 2), excess=[2.0, 0.5])]
    mask = torch.tensor([[True, True, True], [False, True, True]])
    kept = distill_train._focus_mask(examples, mask, 0.4, "cpu")   # 40% of 5 tokens -> the 2 largest: 3.0 and 2.0
    assert kept.tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    assert distill_train._focus_mask(examples, mask, 1.0, "cpu").sum() == 5
    examples[1].excess = None
    assert distill_train._focus_mask(examples, mask, 0.4, "cpu") is None


def test_weighted_losses_against_hand_values():
    values, mask = torch.tensor([[1.0, 3.0, 5.0]]), torch.tensor([[True, True, False]])
    assert float(weighted_mean(values, mask, torch.tensor([[1.0, 3.0, 9.0]]))) == pytest.approx(2.5)
    assert float(weighted_mean(values, mask)) == pytest.approx(2.0)
    assert float(weighted_mean(values, mask, torch.zeros(1, 3))) == 0.0
    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.25, 0.75]]]))
    targets, both = torch.tensor([[0, 1]]), torch.tensor([[True, True]])
    want = (1.0 * -torch.log(torch.tensor(0.5)) + 3.0 * -torch.log(torch.tensor(0.75))) / 4
    assert float(sequence_nll(logits, targets, both, torch.tensor([[1.0, 3.0]]))) == pytest.approx(float(want))


def test_excess_is_shared_out_by_bytes_across_tokenizations():
    assert spread([2.0, 4.0], [b"ab", b"cd"], [b"a", b"bc", b"d"]) == [1.0, 3.0, 2.0]
    assert spread([1.0, 2.0], [b"", b"xy"], [b"x", b"y"]) == [2.0, 1.0]   # a special token's value goes on
    assert spread([1.0], [b"ab"], [b"abc"]) is None                        # not the same text
    assert sum(spread([0.3, 1.7, -0.5], [b"a", b"bcd", b"e"], [b"ab", b"c", b"de"])) == pytest.approx(1.5)


def test_automatic_budget_and_probe_interval():
    assert (distill_lora.auto_steps(16, 8), distill_lora.auto_steps(300, 16), distill_lora.auto_steps(10**6, 8)) == (200, 563, 3000)
    assert (distill_lora.check_every(16, 8), distill_lora.check_every(2000, 8), distill_lora.check_every(10**6, 8)) == (10, 100, 100)


@pytest.mark.parametrize(("fall", "budget", "falling"), [
    ((0.20, 0.4), {}, True),                            # 2.0 -> 1.6 nats over the last fifth: still learning
    ((0.20, 0.0012), {}, False),                        # 0.006 -> 0.0048: a converged near-zero loss
    ((0.03, 0.06), {}, False),                          # levelled off
    ((0.20, 0.4), {"stopped": "levelled off"}, False),  # the automatic budget saw the agreement level off
    (None, {}, False),                                  # too few steps to tell
])
def test_still_falling_needs_a_real_fall(fall, budget, falling):
    assert distill_report.still_falling(fall, budget) is falling
    drop = None if fall is None else fall[0]
    warned = distill_report.warnings(drop if falling else None, {"train_used": 10, "train": 10})
    assert bool(warned) is falling


class ChatTokenizer:
    """A stand-in with a chat template, as an instruct model's tokenizer has; ``adds_bos``: whether
    it puts its BOS (id 1) before every text itself, as Llama's does and SmolLM2's does not."""

    chat_template = "{{ messages }}"
    bos_token, bos_token_id = "<s>", 1

    def __init__(self, adds_bos: bool = True):
        self.adds_bos = adds_bos

    def encode(self, text, add_special_tokens=True):
        return ([1] if add_special_tokens and self.adds_bos else []) + [ord(c) for c in text]

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        return "<s><user>" + messages[0]["content"] + "</user><assistant>"


def test_synthesis_asks_an_instruct_teacher_in_its_chat_format():
    import random

    from paw.transfer.distill.synthesis import chat_context

    seeds = [Prompt("Word: road. Again:"), Prompt("Word: tree. Again:")]
    text = chat_context(ChatTokenizer(), seeds, random.Random(0))
    assert text.startswith("<user>Here are examples") and text.endswith("</user><assistant>")  # BOS added by generate
    # a tokenizer that never adds its BOS (SmolLM2: BOS is "<|im_start|>") keeps the template's: the turn is whole
    assert chat_context(ChatTokenizer(adds_bos=False), seeds, random.Random(0)) == "<s>" + text
    assert "Word: road. Again:\n" in text and "Word: tree. Again:\n" in text and "Reply with the input only." in text
    assert chat_context(SimpleNamespace(chat_template=None), seeds, random.Random(0)) is None
