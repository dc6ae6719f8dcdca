"""lm-evaluation-harness's rules, one by one: the acc_norm divisor, the tokenisation, read-time checks.

The parity with lm-eval itself on real data and a real model is ``scripts/parity_eval_lmeval.py``
(docs/benchmarks/eval-speed.md); these tests pin each rule with numbers worked out by hand.
"""

from __future__ import annotations

import json

import pytest

from paw.errors import PawError
from paw.evaluate.encode import encode_pair
from paw.evaluate.formats import read_items
from paw.evaluate.items import MCItem
from paw.evaluate.mc import summarize

# ------------------------------------------------------------------ accuracy_norm


def test_acc_norm_divides_by_the_choice_without_its_delimiter():
    """lm-eval: ``pred_norm = argmax(lls / [len(choice) for choice in doc_to_choice(doc)])``.

    Choices " ab" and " abcd" (continuations " " + "ab", " " + "abcd"), LL -2.2 and -3.9:
    lm-eval divides by 2 and 4: -1.100 vs -0.975 -> choice 1.
    Dividing by the continuation with its space (3 and 5) gives -0.733 vs -0.780 -> choice 0, the old answer.
    """
    item = MCItem("q", (" ab", " abcd"), 1)
    assert item.norm_lengths() == [2, 4]
    m = summarize([item], [(-2.2, 1), (-3.9, 2)], per_item=True)
    assert m["correct"] == [0]          # raw: -2.2 > -3.9 picks choice 0
    assert m["correct_norm"] == [1]     # -2.2 / 2 = -1.1 < -3.9 / 4 = -0.975 picks choice 1
    assert m["accuracy_norm"] == 1.0
    old = [ll / len(c) for ll, c in zip((-2.2, -3.9), item.choices, strict=True)]
    assert old[0] > old[1]              # the divisor with the space would have picked choice 0


def test_acc_norm_lengths_by_layout(tmp_path):
    def one(record):
        path = tmp_path / "one.jsonl"
        path.write_text(json.dumps(record) + "\n")
        return read_items(path)[0]

    arc = one({"question": "Which?", "choices": {"text": ["a cat", "dogs"], "label": ["A", "B"]}, "answerKey": "B"})
    assert arc.choices == (" a cat", " dogs") and arc.norm_lengths() == [5, 4]
    boolq = one({"question": "is it", "passage": "p", "answer": True})
    assert boolq.norm_lengths() == [2, 3]                      # lm-eval's choices are "no" and "yes"
    piqa = one({"goal": "g", "sol1": "tail ", "sol2": "x", "label": 0})
    assert piqa.choices == (" tail ", " x") and piqa.norm_lengths() == [5, 1]   # kept as given, as lm-eval does
    quiz = one({"question": "Fact:", "choices": [" red", "blue"], "answer": 0})
    assert quiz.choices == (" red", " blue") and quiz.norm_lengths() == [3, 4]
    wino = one({"sentence": "Ann met Bo so _ smiled.", "option1": "Ann", "option2": "Bo", "answer": "2"})
    assert wino.norm_lengths() == [len("Ann met Bo so Ann"), len("Ann met Bo so Bo")]  # lm-eval: partial contexts


# ------------------------------------------------------------------ tokenisation


@pytest.fixture(scope="module")
def tokenizers():
    """The zoo tokenizer (adds nothing) and the same with a Llama-style BOS post-processor."""
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    from paw import zoo
    from paw.data import sample_texts

    plain = zoo.train_tokenizer(sample_texts("en"), 300)
    backend = plain.backend_tokenizer.__class__.from_str(plain.backend_tokenizer.to_str())
    bos = plain.bos_token_id
    backend.post_processor = TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", bos)])
    with_bos = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|bos|>", eos_token="<|eos|>")
    return plain, with_bos


def test_tokenizer_start_is_lm_evals(tokenizers):
    plain, with_bos = tokenizers
    for tok in tokenizers:
        enc = encode_pair(tok, "The cat sat on the ", "mat", start="tokenizer")
        ctx = tok.encode("The cat sat on the")              # lm-eval: trailing space moves on
        whole = tok.encode("The cat sat on the mat")
        assert list(enc.ids) == ctx + whole[len(ctx):] and enc.n_cont == len(whole) - len(ctx)
    assert encode_pair(plain, "The cat", " sat", start="tokenizer").ids[0] != plain.bos_token_id
    assert encode_pair(with_bos, "The cat", " sat", start="tokenizer").ids[0] == with_bos.bos_token_id
    # the old rule puts BOS first whatever the tokenizer does
    assert encode_pair(plain, "The cat", " sat").ids[0] == plain.bos_token_id


def test_tokenizer_start_moves_newlines_and_handles_an_empty_context(tokenizers):
    plain, _ = tokenizers
    a = encode_pair(plain, "Answer:\n", "yes", start="tokenizer")
    b = encode_pair(plain, "Answer:", "\nyes", start="tokenizer")
    assert a == b                                           # lm-eval moves all trailing whitespace
    empty = encode_pair(plain, "", " sat", start="tokenizer")
    cont = plain.encode(" sat", add_special_tokens=False)
    assert list(empty.ids) == [plain.bos_token_id] + cont and empty.n_cont == len(cont)
    with pytest.raises(PawError, match="start 'x'"):
        encode_pair(plain, "a", "b", start="x")


def test_own_start_follows_the_tokenizer_and_keeps_the_halves_apart(tokenizers):
    from paw.evaluate.encode import own_start

    plain, with_bos = tokenizers
    assert own_start(plain) == [] and own_start(with_bos) == [with_bos.bos_token_id]
    for tok in tokenizers:
        enc = encode_pair(tok, "The cat sat on the ", "mat", start="own")
        ctx = tok.encode("The cat sat on the", add_special_tokens=False)
        cont = enc.ids[len(enc.ids) - enc.n_cont:]
        assert list(enc.ids) == own_start(tok) + ctx + list(cont)
        assert tok.decode(list(cont)) == " mat"  # the continuation's own bytes, nothing of the context
    empty = encode_pair(plain, "", " sat", start="own")  # nothing to predict from: BOS (else EOS) first
    assert empty.ids[0] == plain.bos_token_id and empty.n_cont == len(plain.encode(" sat", add_special_tokens=False))


def test_a_token_spanning_the_boundary_leaves_the_answer_its_own_tokens():
    # a SentencePiece-BPE trained on repeated facts merges across words: the whole text is one token,
    # so lm-eval's whole[len(ctx):] is empty; PAW scores the answer tokenised alone instead of nothing
    from paw import zoo
    from paw.data import sample_texts

    fact = "Fact: the colour of pixzone is red"
    tok = zoo.train_tokenizer(sample_texts("multi") + [fact] * 5, 300, kind="sentencepiece-bpe")
    context = "Fact: the colour of pixzone is"
    assert len(tok.encode(fact)) == 1  # the premise of the case
    enc = encode_pair(tok, context, " red", start="tokenizer")
    cont = tok.encode(" red", add_special_tokens=False)
    assert list(enc.ids) == tok.encode(context) + cont and enc.n_cont == len(cont) > 0


# ------------------------------------------------------------------ read-time checks

GOOD = {
    "mc": {"question": "q", "choices": ["a", "b"], "answer": 0},
    "arc": {"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"},
    "formatted": {"input": "q", "options": ["A: a", "B: b"], "target": "A", "target_idx": 0, "dataset": "arc"},
    "piqa": {"goal": "g", "sol1": "a", "sol2": "b", "label": 0},
    "hellaswag": {"ctx": "c", "endings": ["a", "b"], "label": "1"},
    "winogrande": {"sentence": "a _ b", "option1": "x", "option2": "y", "answer": "1"},
    "boolq": {"question": "q", "passage": "p", "answer": False},
}

BAD = [  # (layout, fields changed, fragment of the message)
    ("mc", {"choices": "ab"}, "choices is a string, not a list of choices"),
    ("mc", {"choices": None}, "choices is null"),
    ("mc", {"choices": []}, "choices is an empty list"),
    ("mc", {"choices": ["a", ""]}, "choices[1] is an empty string"),
    ("mc", {"choices": ["a", "  "]}, "choices[1] is an empty string"),
    ("mc", {"choices": ["a", 3]}, "choices[1] is an integer, not a string"),
    ("mc", {"choices": ["a", None]}, "choices[1] is null, not a string"),
    ("mc", {"choices": ["a", ["b"]]}, "choices[1] is a list, not a string"),
    ("mc", {"choices": {"a": 1}}, "choices is an object, not a list of choices"),
    ("mc", {"answer": True}, "answer is a boolean (True), not an integer index"),
    ("mc", {"answer": 1.0}, "answer is a number (1.0), not an integer index"),
    ("mc", {"answer": None}, "answer is null, not an integer index"),
    ("mc", {"answer": 2}, "answer index 2 out of range for 2 choices"),
    ("mc", {"answer": -1}, "answer index -1 out of range for 2 choices"),
    ("mc", {"answer": "C"}, "answer 'C' is not one of the labels ['A', 'B']"),
    ("mc", {"choices": ["a"]}, "has 1 choice(s); need at least 2"),
    ("mc", {"question": None}, "question is null, not a string"),
    ("arc", {"choices": {"text": ["a", "b", "c"], "label": ["A", "B"]}}, "3 choices but 2 labels"),
    ("arc", {"choices": {"text": "ab", "label": ["A", "B"]}}, "choices.text is a string"),
    ("arc", {"choices": {"text": ["a", "b"], "label": "AB"}}, "choices.label is a string, not a list"),
    ("arc", {"choices": {"text": ["a", None], "label": ["A", "B"]}}, "choices.text[1] is null"),
    ("arc", {"answerKey": "E"}, "answer 'E' is not one of the labels"),
    ("arc", {"answerKey": None}, "answer is null"),
    ("formatted", {"options": "A: a"}, "options is a string, not a list"),
    ("formatted", {"options": ["A: a", None]}, "options[1] is null"),
    ("formatted", {"target": "Z", "target_idx": True}, "target_idx is a boolean"),
    ("formatted", {"target": "Z", "target_idx": 7}, "target_idx index 7 out of range for 2 choices"),
    ("piqa", {"label": True}, "label is a boolean"),
    ("piqa", {"label": 2}, "label index 2 out of range for 2 choices"),
    ("piqa", {"sol2": None}, "sol2 is null, not a string"),
    ("piqa", {"sol1": ""}, "sol1 is an empty string"),
    ("hellaswag", {"endings": "abc"}, "endings is a string, not a list"),
    ("hellaswag", {"label": "x"}, "label is a string ('x'), not an integer index"),
    ("hellaswag", {"label": 1.5}, "label is a number (1.5)"),
    ("winogrande", {"option2": " "}, "option2 is an empty string"),
    ("winogrande", {"answer": 3}, "answer 3 is not one of the labels ['1', '2']"),
    ("boolq", {"answer": "yes"}, "answer 'yes' is not true/false"),
    ("boolq", {"passage": None}, "passage is null, not a string"),
]


@pytest.mark.parametrize("layout, change, fragment", BAD, ids=[f"{lay}-{i}" for i, (lay, _, _) in enumerate(BAD)])
def test_bad_items_are_refused_with_file_and_line(tmp_path, layout, change, fragment):
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps(GOOD[layout]), "", json.dumps({**GOOD[layout], **change})]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PawError) as err:
        read_items(path, format=layout)
    message = str(err.value)
    assert message.startswith(f"{path}: line 3: ") and fragment in message, message
    assert "\n" not in message


@pytest.mark.parametrize("layout", sorted(GOOD))
def test_good_items_still_read(tmp_path, layout):
    path = tmp_path / "good.jsonl"
    path.write_text(json.dumps(GOOD[layout]) + "\n")
    (item,) = read_items(path)
    assert len(item.choices) == 2 and 0 <= item.answer < 2


def test_digit_strings_and_plain_ints_are_indices(tmp_path):
    path = tmp_path / "hs.jsonl"
    path.write_text(json.dumps({**GOOD["hellaswag"], "label": " 0"}) + "\n")
    assert read_items(path, format="hellaswag")[0].answer == 0
    path.write_text(json.dumps(GOOD["mc"] | {"answer": "1"}) + "\n")
    assert read_items(path)[0].answer == 1
