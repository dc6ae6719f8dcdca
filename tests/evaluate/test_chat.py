"""``paw eval --apply-chat-template``: contexts rendered as lm-eval 0.4.13 renders them, choices without the delimiter.

The expected strings are written out by hand from lm-eval's ``fewshot_context`` / ``build_qa_turn`` /
``multiturn_to_singleturn`` and the template of ``tests/evaluate/conftest.py``
(``{{ bos_token }}<|role|>\\ncontent<|eos|>\\n ... <|assistant|>\\n``).
"""

from __future__ import annotations

import json

import pytest

from paw.errors import PawError
from paw.evaluate.chat import ChatFormat, chat_pairs, prompt_of, renderer
from paw.evaluate.fewshot import with_examples
from paw.evaluate.items import GenItem, MCItem
from tests.evaluate.conftest import chat_tokenizer

EXAMPLE = MCItem("Q: 1 + 1 =", (" 2", " 3"), 0)
ITEM = MCItem("Q: 2 + 2 =", (" 4", " 5"), 0)
SINGLE = "<|bos|><|system|>\nBe brief.<|eos|>\n<|user|>\nQ: 1 + 1 = 2\n\nQ: 2 + 2 =<|eos|>\n<|assistant|>\n"
MULTI = "<|bos|><|user|>\nQ: 1 + 1 =<|eos|>\n<|assistant|>\n2<|eos|>\n<|user|>\nQ: 2 + 2 =<|eos|>\n<|assistant|>\n"


@pytest.fixture(scope="module")
def tok(chat_model):
    from paw.io.lm import load_tokenizer

    return load_tokenizer(chat_model)


def _one_shot(item=ITEM, example=EXAMPLE):
    shot, drawn = with_examples([item], [example], 1, seed=0)
    assert drawn == [[0]]
    return shot[0]


def test_one_user_turn_holds_the_examples_and_the_question(tok):
    """lm-eval without --fewshot_as_multiturn: ``Q1 A1\\n\\nQ`` in one user message, after the system message;
    the choices lose the target delimiter."""
    chat = ChatFormat(renderer(tok), system="Be brief.", multiturn=False)
    assert chat_pairs(_one_shot(), chat) == [(SINGLE, "4"), (SINGLE, "5")]


def test_multiturn_examples_are_a_user_and_an_assistant_turn(tok):
    chat = ChatFormat(renderer(tok), multiturn=True)
    assert chat_pairs(_one_shot(), chat) == [(MULTI, "4"), (MULTI, "5")]
    zero_shot = "<|bos|><|user|>\nQ: 2 + 2 =<|eos|>\n<|assistant|>\n"
    assert chat_pairs(ITEM, chat) == [(zero_shot, "4"), (zero_shot, "5")]


def test_winogrande_renders_one_context_per_choice(tok):
    """lm-eval's ``multiple_input_context``: each filled-in sentence is its own user turn; the rest of the
    sentence is scored without its leading space."""
    item = MCItem("Sam hugged Ann because _ was sad.", ("Sam", "Ann"), 1, fill_blank=True)
    pairs = chat_pairs(item, ChatFormat(renderer(tok)))
    assert pairs == [("<|bos|><|user|>\nSam hugged Ann because Sam<|eos|>\n<|assistant|>\n", "was sad."),
                     ("<|bos|><|user|>\nSam hugged Ann because Ann<|eos|>\n<|assistant|>\n", "was sad.")]


def test_generation_prompt_is_the_rendered_context(tok):
    shot, _ = with_examples([GenItem("Q: 2 + 2 =", ("4",))], [GenItem("Q: 1 + 1 =", ("2", "two"))], 1, seed=0)
    assert prompt_of(shot[0], ChatFormat(renderer(tok), multiturn=True)) == MULTI
    assert prompt_of(shot[0], None) == "Q: 1 + 1 = 2\n\nQ: 2 + 2 ="


def test_bos_written_by_the_template_is_not_added_again(tok):
    """The tokenizer adds BOS before any text (as Llama's does); a context that starts with the BOS text gets
    none added (lm-eval's ``tok_encode``), and the newline that ends the context moves into the continuation."""
    from paw.evaluate.encode import encode_pair

    bos = tok.bos_token_id
    assert tok.encode("Q: 2 + 2 =")[0] == bos
    enc = encode_pair(tok, MULTI, "4", start="tokenizer")
    assert enc.ids[0] == bos and enc.ids.count(bos) == 1
    assert tok.decode(enc.ids[-enc.n_cont:]) == "\n4"
    assert list(enc.ids[:-enc.n_cont]) == tok.encode(MULTI.rstrip("\n"), add_special_tokens=False)


def test_scores_under_the_template_are_those_of_the_rendered_pairs(chat_model):
    from paw.evaluate.mc import evaluate
    from paw.io.lm import load_lm

    model, tok = load_lm(chat_model)
    chat = ChatFormat(renderer(tok), multiturn=True)
    items = [_one_shot(), MCItem("Q: 3 + 3 =", (" 6", " 7", " 8"), 0)]
    rendered = [MCItem(pairs[0][0], tuple(c for _, c in pairs), item.answer)
                for item, pairs in zip(items, [chat_pairs(i, chat) for i in items], strict=True)]
    scored = evaluate(model, tok, items, chat=chat, per_item=True, progress=False)
    direct = evaluate(model, tok, rendered, per_item=True, progress=False)
    assert scored["choice_logprobs"] == direct["choice_logprobs"]
    plain = evaluate(model, tok, items, per_item=True, progress=False)
    assert scored["choice_logprobs"] != plain["choice_logprobs"]


def test_a_template_that_refuses_a_system_message_is_rendered_without_it(capsys):
    """lm-eval catches the TemplateError and renders the messages again without the system role."""
    template = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant]")
    tok = chat_tokenizer(["some text to learn from"] * 4, template)
    render = renderer(tok)
    text = render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert text == "[user] Hi\n[assistant]"
    assert "refuses a system message" in capsys.readouterr().err
    broken = chat_tokenizer(["some text"] * 4, "{{ raise_exception('no') }}")
    with pytest.raises(PawError, match="cannot render these messages"):
        renderer(broken)([{"role": "user", "content": "Hi"}])


def _quiz(tmp_path):
    data, shots = tmp_path / "quiz.jsonl", tmp_path / "shots.jsonl"
    data.write_text(json.dumps({"question": "Q: 2 + 2 =", "choices": ["4", "5"], "answer": 0}) + "\n")
    shots.write_text(json.dumps({"question": "Q: 1 + 1 =", "choices": ["2", "3"], "answer": 0}) + "\n")
    return data, shots


@pytest.mark.parametrize("flags, context", [
    ((), MULTI),   # lm-eval 0.4.13's default under a chat template: the examples as turns
    (("--no-fewshot-as-multiturn", "--system-instruction", "Be brief."), SINGLE),
    (("--fewshot-as-multiturn",), MULTI),
])
def test_cli_apply_chat_template(cli, chat_model, tmp_path, flags, context):
    data, shots = _quiz(tmp_path)
    items, results = tmp_path / "items.jsonl", tmp_path / "m.json"
    run = cli("eval", "--model", chat_model, "--data", data, "--num-fewshot", "1", "--fewshot-data", shots,
              "--apply-chat-template", *flags, "--per-item", items, "--output", results)
    assert run.exit_code == 0, run.stderr
    record = json.loads(items.read_text())
    assert record["pairs"] == [[context, "4"], [context, "5"]]
    saved = json.loads(results.read_text())
    assert saved["apply_chat_template"] is True and saved["fewshot_as_multiturn"] is (context == MULTI)
    assert saved.get("system_instruction") == ("Be brief." if context == SINGLE else None)


def test_cli_model_without_a_chat_template_is_one_line(cli, fact_model, tmp_path):
    data, _ = _quiz(tmp_path)
    run = cli("eval", "--model", fact_model, "--data", data, "--apply-chat-template")
    assert run.exit_code == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"error: {fact_model}: the tokenizer has no chat template")
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("flags, message", [
    (("--system-instruction", "Be brief."), "--system-instruction is a chat template's system message"),
    (("--fewshot-as-multiturn",), "--fewshot-as-multiturn is how a chat template shows the few-shot examples"),
    (("--apply-chat-template", "--system-instruction", " "), "--system-instruction is empty"),
    (("--apply-chat-template", "--proxy-base", "b", "--proxy-adapter", "a"), "does not go with proxy-tuning"),
])
def test_cli_chat_flags_refused_before_any_work(cli, tmp_path, flags, message):
    data, _ = _quiz(tmp_path)
    run = cli("eval", "--model", tmp_path / "no-model", "--data", data, *flags)
    assert run.exit_code == 2 and run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


def test_cli_chat_template_is_not_for_text(cli, tmp_path):
    (tmp_path / "t.txt").write_text("some text")
    run = cli("eval", "--model", tmp_path / "m", "--text", tmp_path / "t.txt", "--apply-chat-template")
    assert run.exit_code == 2 and "--apply-chat-template is for --data" in run.stderr, run.stderr
