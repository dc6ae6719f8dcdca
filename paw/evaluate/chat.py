"""The model's chat template around each context, as lm-evaluation-harness's ``--apply_chat_template`` renders it.

lm-eval 0.4 (``ConfigurableTask.fewshot_context``) builds a context as chat messages and renders them with
the tokenizer's template, ``apply_chat_template(messages, tokenize=False, add_generation_prompt=True)``:

- a system message first when ``--system_instruction`` is given;
- by default every few-shot example and the question collapse into **one** user message, the text they make
  without a template (``Q1 A1\\n\\nQ2 A2\\n\\nQ``: lm-eval's ``multiturn_to_singleturn``);
- with ``--fewshot_as_multiturn`` each example is a user turn (its question) and an assistant turn (its
  answer, without the space that joins it to the question), then the question as the last user turn.

A multiple-choice item's choices are then scored as continuations of the rendered text **without** the
target delimiter: `` " red"`` becomes ``"red"`` (lm-eval drops the delimiter under a chat template when the
task has no ``gen_prefix``, and PAW's layouts have none). The rendered text usually ends in a newline
(``<|im_start|>assistant\\n``), which tokenisation moves into the continuation, as lm-eval's ``_encode_pair``
moves any trailing whitespace (:func:`paw.evaluate.encode.encode_pair`). Winogrande's partial scoring
renders one context per choice (lm-eval's ``multiple_input_context``). A generation item's prompt is the
rendered text; the model answers after the generation prompt.

A template that refuses a system message (a ``TemplateError``) is rendered again without it, as lm-eval
does, and PAW says so once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from paw.errors import PawError
from paw.evaluate.items import GenItem, MCItem
from paw.progress import status

Render = Callable[[list[dict]], str]


@dataclass(frozen=True)
class ChatFormat:
    """How contexts are rendered: ``render(messages) -> text`` (:func:`renderer`), an optional system message,
    and whether few-shot examples are turns of their own."""

    render: Render
    system: str | None = None
    multiturn: bool = False


def renderer(tokenizer, *, model: str | Path | None = None) -> Render:
    """``render(messages)``: the tokenizer's chat template with the generation prompt, as text.

    A tokenizer without a template is refused, naming ``model``.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise PawError("the tokenizer has no chat template (no chat_template in tokenizer_config.json, no "
                       "chat_template.jinja): --apply-chat-template needs one", path=model)
    warned = []

    def render(messages: list[dict]) -> str:
        try:
            return _apply(tokenizer, messages)
        except PawError:
            if not any(m["role"] == "system" for m in messages):
                raise
        if not warned:
            warned.append(True)
            status("chat template: it refuses a system message; rendered without it (as lm-eval does)")
        return _apply(tokenizer, [m for m in messages if m["role"] != "system"])

    return render


def _apply(tokenizer, messages: list[dict]) -> str:
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             continue_final_message=False)
    except Exception as err:  # jinja2's TemplateError, or what the template raises itself
        raise PawError(f"the chat template cannot render these messages ({_first_line(err)})") from None
    if not isinstance(text, str):
        raise PawError(f"the chat template gave {type(text).__name__}, not text")
    return text


def _first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:200] if lines else type(err).__name__


def messages(question: str, item: MCItem | GenItem, chat: ChatFormat) -> list[dict]:
    """The chat messages of ``question`` (one context of ``item``) with ``item``'s few-shot examples.

    >>> chat = ChatFormat(render=str, system="Be brief.")
    >>> item = MCItem("Q: 1 + 1 =", (" 2", " 3"), 0, prefix="Q: 2 + 2 = 4\\n\\n", shots=(("Q: 2 + 2 =", " 4"),))
    >>> messages(item.question, item, chat)
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Q: 2 + 2 = 4\\n\\nQ: 1 + 1 ='}]
    >>> messages(item.question, item, ChatFormat(render=str, multiturn=True))  # doctest: +NORMALIZE_WHITESPACE
    [{'role': 'user', 'content': 'Q: 2 + 2 ='}, {'role': 'assistant', 'content': '4'},
     {'role': 'user', 'content': 'Q: 1 + 1 ='}]
    """
    out = [{"role": "system", "content": chat.system}] if chat.system else []
    if not chat.multiturn:
        return out + [{"role": "user", "content": item.prefix + question}]
    for context, answer in item.shots:
        out += [{"role": "user", "content": context}, {"role": "assistant", "content": _undelimited(answer)}]
    return out + [{"role": "user", "content": question}]


def _undelimited(continuation: str) -> str:
    """A continuation without lm-eval's target delimiter, the one space PAW's layouts put before a choice."""
    return continuation.removeprefix(" ")


def chat_pairs(item: MCItem, chat: ChatFormat) -> list[tuple[str, str]]:
    """``[(rendered context, continuation), ...]``, one per choice: :meth:`MCItem.pairs` under the chat template.

    >>> item = MCItem("Q: 1 + 1 =", (" 2", " 3"), 0)
    >>> chat_pairs(item, ChatFormat(render=lambda m: f"<user>{m[-1]['content']}</user>\\n<bot>\\n"))
    [('<user>Q: 1 + 1 =</user>\\n<bot>\\n', '2'), ('<user>Q: 1 + 1 =</user>\\n<bot>\\n', '3')]
    """
    rendered: dict[str, str] = {}
    out = []
    for context, continuation in item.own_pairs():
        if context not in rendered:
            rendered[context] = chat.render(messages(context, item, chat))
        out.append((rendered[context], _undelimited(continuation)))
    return out


def pairs_of(items: Sequence[MCItem], chat: ChatFormat | None) -> list[list[tuple[str, str]]]:
    """Every item's scored pairs: :meth:`MCItem.pairs`, or :func:`chat_pairs` under a chat template."""
    return [chat_pairs(item, chat) if chat is not None else item.pairs() for item in items]


def prompt_of(item: GenItem, chat: ChatFormat | None) -> str:
    """What the model continues for a generation item: its context, rendered when ``chat`` is given."""
    return item.context() if chat is None else chat.render(messages(item.question, item, chat))
