"""``paw eval --generate``: greedy, cached, batched generation; stop sequences; exact match; the data layout.

Two kinds of model: a real tiny Llama checked against ``transformers``' own ``generate`` one prompt at a time
(the reference for the batching, the cache and the padding), and :class:`Scripted`, the same Llama made to
write a chosen text after each prompt, so that where generation stops can be checked by hand.
"""

from __future__ import annotations

import json
import re

import pytest

from paw.errors import PawError
from paw.evaluate.exact import Rules
from paw.evaluate.gendata import read_gen_items
from paw.evaluate.generate import encode_prompt, generate, score
from paw.evaluate.items import GenItem

torch = pytest.importorskip("torch")


class Scripted(torch.nn.Module):
    """A causal LM that writes ``scripts[prompt]`` after each prompt, token by token, then EOS.

    It wraps a real model, whose cache, masks and positions go through ``transformers`` as usual; only the
    logits are replaced: a one-hot at the script's next token. A row is told by its real (unpadded) tokens.
    """

    def __init__(self, inner, tokenizer, scripts: dict[str, str]):
        super().__init__()
        self.inner, self.eos = inner, tokenizer.eos_token_id
        self.scripts = {tuple(encode_prompt(tokenizer, p)): tokenizer.encode(s, add_special_tokens=False)
                        for p, s in scripts.items()}
        self.config, self.generation_config = inner.config, inner.generation_config
        self.rows: list[list[int]] = []
        self.step = 0

    def get_base_model(self):   # where paw.evaluate.generate.cache_argument reads the forward signature
        return self.inner

    def forward(self, input_ids, attention_mask, **kwargs):
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        if not any(k in kwargs for k in ("cache", "past_key_values")):   # the prompt: which script each row reads
            self.rows = [self.scripts[tuple(ids[mask.bool()].tolist())] for ids, mask in zip(input_ids, attention_mask,
                                                                                              strict=True)]
            self.step = 0
        else:
            self.step += 1
        logits = torch.full((len(self.rows), 1, self.config.vocab_size), -1e4)
        for r, script in enumerate(self.rows):
            logits[r, 0, script[self.step] if self.step < len(script) else self.eos] = 0.0
        out.logits = logits
        return out


@pytest.fixture(scope="module")
def llama(tiny_llama):
    from paw.io.lm import load_lm

    return load_lm(tiny_llama)


PROMPTS = {"Question: the capital of France?\nAnswer:": " Paris.\n\nQuestion: the capital of Peru?",
           "Question: who wrote Hamlet?\nAnswer:": " william shakespeare!",
           "Q: 2 + 2 =": " 4, of course. 4\n\n"}


def test_batched_cached_generation_equals_transformers_generate_one_prompt_at_a_time(llama):
    """The reference: ``model.generate`` greedy on each prompt alone, no padding; PAW in batches of 1 and 3
    (rows of different lengths, padded), with no stop sequence and no end-of-sequence token."""
    model, tok = llama
    prompts = ["The colour of the sea is", "A", "Numbers: 1 2 3 4 5 6 7 8 9 10 and then", "def f(x):"]
    expected = []
    for p in prompts:
        ids = torch.tensor([encode_prompt(tok, p)])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                             pad_token_id=tok.pad_token_id, eos_token_id=None)
        expected.append(out[0, ids.shape[1]:].tolist())
    for batch_size in (1, 3):
        got = generate(model, tok, prompts, max_new_tokens=12, until=(), batch_size=batch_size, stops=frozenset(),
                       progress=False)
        assert [g.text for g in got] == [tok.decode(e, skip_special_tokens=True) for e in expected]
        assert all(g.tokens == 12 and g.stop == "length" for g in got)


class IdPrompts:
    """What :func:`generate` reads of a tokenizer, for prompts that are the indices of token lists."""

    bos_token, eos_token_id, pad_token_id, model_max_length = None, None, 0, 64
    rows = [[1, 5, 6, 7, 8, 9], [1, 9], [1, 12, 13, 14]]

    def encode(self, text, **_):
        return self.rows[int(text)]

    def decode(self, ids, **_):
        return " ".join(map(str, ids))


def _batched_and_alone(model) -> tuple[list, list]:
    prompts = [str(k) for k in range(len(IdPrompts.rows))]
    batched = generate(model, IdPrompts(), prompts, max_new_tokens=5, until=(), batch_size=3, stops=frozenset(),
                       progress=False)
    alone = [generate(model, IdPrompts(), [p], max_new_tokens=5, until=(), stops=frozenset(), progress=False)[0]
             for p in prompts]
    return batched, alone


def _tiny(arch: str = "llama", **overrides):
    from paw import zoo

    model = zoo.build_model(arch, seed=0, vocab_size=64, hidden_size=32, num_layers=2, **overrides).eval()
    model.config._attn_implementation = "sdpa"
    return model


def test_padded_batches_under_cuda_like_attention_and_a_sliding_window(monkeypatch):
    """CUDA's SDPA gives NaN to a query with no key: the layout keeps every row's first token in column 0
    (tests/evaluate/test_padding.py emulates that kernel). A sliding window of 4 counts columns, so such a
    batch is generated a row at a time; both give what each prompt gives alone."""
    from tests.evaluate.test_padding import cuda_like_sdpa

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", cuda_like_sdpa)
    for arch, extra in (("llama", {}), ("mistral", {"sliding_window": 4})):
        batched, alone = _batched_and_alone(_tiny(arch, **extra))
        assert batched == alone, arch


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch, overrides", [("llama", {}), ("mistral", {"sliding_window": 4}),
                                             ("llama", {"num_key_value_heads": 1})])
def test_generation_on_cuda_batched_equals_one_prompt_at_a_time(arch, overrides):
    """The real CUDA kernels: padded batches generate what each prompt generates alone, with no NaN."""
    batched, alone = _batched_and_alone(_tiny(arch, **overrides).to("cuda"))
    assert batched == alone and all(g.tokens == 5 for g in batched)


@pytest.mark.parametrize("until, texts, stops", [
    (("\n\n",), [" Paris.", " william shakespeare!", " 4, of course. 4"], ["until", "eos", "until"]),
    (("\n\n", "."), [" Paris", " william shakespeare!", " 4, of course"], ["until", "eos", "until"]),
    ((",", "!"), [" Paris.\n\nQuestion: the capital of Peru?", " william shakespeare", " 4"],
     ["eos", "until", "until"]),
])
def test_generation_stops_at_the_first_stop_sequence(llama, until, texts, stops):
    model, tok = llama
    scripted = Scripted(model, tok, PROMPTS)
    got = generate(scripted, tok, list(PROMPTS), until=until, batch_size=2, progress=False)
    assert [g.text for g in got] == texts
    assert [g.stop for g in got] == stops
    for g, prompt in zip(got, PROMPTS, strict=True):   # tokens produced: up to the stop, EOS counted
        script = tok.encode(PROMPTS[prompt], add_special_tokens=False)
        if g.stop == "eos":
            assert g.tokens == len(script) + 1
        else:
            done = next(k for k in range(1, len(script) + 1)
                        if any(s in tok.decode(script[:k]) for s in until))
            assert g.tokens == done


def test_generation_stops_at_max_new_tokens(llama):
    model, tok = llama
    got = generate(Scripted(model, tok, PROMPTS), tok, list(PROMPTS), max_new_tokens=2, progress=False)
    script = [tok.encode(PROMPTS[p], add_special_tokens=False)[:2] for p in PROMPTS]
    assert [g.text for g in got] == [tok.decode(s) for s in script]
    assert {g.stop for g in got} == {"length"} and {g.tokens for g in got} == {2}


def test_auto_batch_halves_on_out_of_memory_and_generates_the_same(llama, monkeypatch):
    """Under ``--batch-size auto`` a prompt batch that does not fit is halved (here: more than 3 rows), and
    every prompt gets what a fixed batch gives it; a fixed batch that does not fit is one error."""
    from paw.evaluate.mc import AUTO_BATCH

    model, tok = llama
    prompts = [f"Question {i}: which colour is item {i}?" for i in range(11)]
    fixed = generate(model, tok, prompts, max_new_tokens=4, batch_size=1, progress=False)
    forward, seen = model.forward, []

    def small_memory(*args, **kwargs):
        rows = kwargs["input_ids"].shape[0]
        if kwargs["input_ids"].shape[1] > 1:   # the prompt's pass: one per batch
            seen.append(rows)
        if rows > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", small_memory)
    assert generate(model, tok, prompts, max_new_tokens=4, batch_size="auto", progress=False) == fixed
    assert seen[:3] == [AUTO_BATCH["cpu"], 4, 2] and max(seen[3:]) <= 2
    with pytest.raises(PawError, match="out of memory on cpu generating for 8 prompts.*--batch-size auto"):
        generate(model, tok, prompts, max_new_tokens=4, batch_size=8, progress=False)


def test_generate_refuses_what_cannot_run(llama):
    model, tok = llama
    with pytest.raises(PawError, match="--max-gen-tokens 30 leaves no room for a prompt in a sequence of at most 30"):
        generate(model, tok, ["hi"], max_new_tokens=30, max_length=30, progress=False)
    with pytest.raises(PawError, match="no prompts"):
        generate(model, tok, [], progress=False)


def test_score_is_exact_match_with_lm_evals_stderr(llama):
    """Matches [1, 0, 1, 1]: 0.75 and sqrt(0.75 * 0.25 / 3) = 0.25 (lm-eval's n - 1 stderr)."""
    model, tok = llama
    items = [GenItem(p, refs) for p, refs in zip(PROMPTS, [("Paris",), ("William Shakespeare",), ("4, of course",)],
                                                    strict=True)]
    items.append(GenItem(list(PROMPTS)[0], ("Lima", "Paris")))
    got = generate(Scripted(model, tok, PROMPTS), tok, [i.question for i in items], until=("\n\n", "."),
                   progress=False)
    metrics, hits = score(items, got, Rules(ignore_case=True, ignore_punctuation=True))
    assert hits == [1, 1, 1, 1]
    metrics, hits = score(items, got)
    assert hits == [1, 0, 1, 1]
    assert metrics["exact_match"] == 0.75 and metrics["stderr"] == pytest.approx(0.25)
    assert metrics["stopped"] == {"until": 3, "eos": 1, "length": 0} and metrics["n"] == 4


# --------------------------------------------------------------------------- the data layout

def test_reader_takes_a_string_a_list_or_aliases(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"question": "Q: capital of France?\nA:", "answer": "Paris", "id": "a"},
        {"question": "Q: Hamlet?\nA:", "answer": ["Shakespeare", "William Shakespeare"]},
        {"question": "Q: largest planet?\nA:", "answer": {"aliases": ["Jupiter", "jupiter"], "value": "Jupiter"}},
    ]) + "\n")
    items = read_gen_items(path)
    assert items == [GenItem("Q: capital of France?\nA:", ("Paris",), "a"),
                     GenItem("Q: Hamlet?\nA:", ("Shakespeare", "William Shakespeare")),
                     GenItem("Q: largest planet?\nA:", ("Jupiter", "jupiter"))]
    assert read_gen_items(path, limit=1) == items[:1]
    assert items[1].solved() == "Q: Hamlet?\nA: Shakespeare"


@pytest.mark.parametrize("record, message", [
    ({"question": "Q?"}, "line 2: a --generate item lacks field(s) answer"),
    ({"answer": "x"}, "line 2: a --generate item lacks field(s) question"),
    ({"question": "", "answer": "x"}, "line 2: 'question' must be a non-empty string"),
    ({"question": "Q?", "answer": []}, "line 2: 'answer' must be a non-empty string, a list of them"),
    ({"question": "Q?", "answer": ["x", 3]}, "line 2: 'answer' must be"),
    ({"question": "Q?", "answer": " "}, "line 2: 'answer' must be"),
    ({"question": "Q?", "answer": {"value": "x"}}, "line 2: 'answer' must be"),
])
def test_reader_refuses_a_bad_item_naming_the_line(tmp_path, record, message):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "Q?", "answer": "A"}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(PawError, match=re.escape(message)):
        read_gen_items(path)


# --------------------------------------------------------------------------- the command

@pytest.fixture
def scripted_eval(monkeypatch, llama):
    """``paw eval`` loads :class:`Scripted` (over the tiny Llama) whatever --model says."""
    model, tok = llama

    def use(scripts: dict[str, str]):
        monkeypatch.setattr("paw.evaluate.pipeline.load_lm", lambda *a, **k: (Scripted(model, tok, scripts), tok))

    return use


def _qa(tmp_path, rows):
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


def _run(cli, tmp_path, data, *flags, model=None):
    """``paw eval --generate`` on ``data``: the run and its per-item rows (``model``: the scripted one by default)."""
    items = tmp_path / "items.jsonl"
    run = cli("eval", "--model", model or tmp_path / "scripted", "--data", data, "--generate", "--per-item", items, "--overwrite",
              *flags)
    assert run.exit_code == 0, run.stderr
    return run, [json.loads(line) for line in items.read_text().splitlines()]


def test_cli_generate_default_stops_at_a_blank_line(cli, scripted_eval, tmp_path):
    scripted_eval(PROMPTS)
    data = _qa(tmp_path, [(p, a) for p, a in zip(PROMPTS, ["Paris.", "william shakespeare!", "4"], strict=True)])
    run, rows = _run(cli, tmp_path, data, "--output", tmp_path / "m.json")
    assert [r["generated"] for r in rows] == [" Paris.", " william shakespeare!", " 4, of course. 4"]
    assert [r["match"] for r in rows] == [1, 1, 0] and [r["stop"] for r in rows] == ["until", "eos", "until"]
    assert rows[0]["prompt"] == list(PROMPTS)[0] and rows[0]["references"] == ["Paris."]
    assert "exact_match    0.6667 ± 0.3333   (n=3)" in run.stdout
    assert "stopped by --until 2, by end of sequence 1, at --max-gen-tokens 0" in run.stdout
    saved = json.loads((tmp_path / "m.json").read_text())
    assert saved["metrics"]["exact_match"] == pytest.approx(2 / 3) and saved["until"] == ["\n\n"]
    assert saved["max_gen_tokens"] == 256


def test_cli_until_reads_escapes_and_takes_several(cli, scripted_eval, tmp_path):
    scripted_eval(PROMPTS)
    data = _qa(tmp_path, [(p, "Paris") for p in PROMPTS])
    _, rows = _run(cli, tmp_path, data, "--until", "\\n", ".")
    assert [r["generated"] for r in rows] == [" Paris", " william shakespeare!", " 4, of course"]
    assert rows[0]["match"] == 1


def test_cli_max_gen_tokens(cli, scripted_eval, tmp_path, llama):
    scripted_eval(PROMPTS)
    _, rows = _run(cli, tmp_path, _qa(tmp_path, [(p, "x") for p in PROMPTS]), "--max-gen-tokens", "1")
    tok = llama[1]
    assert [r["generated"] for r in rows] == [tok.decode(tok.encode(s, add_special_tokens=False)[:1])
                                              for s in PROMPTS.values()]
    assert {r["stop"] for r in rows} == {"length"}


@pytest.mark.parametrize("script, reference, flags", [
    (" paris", "Paris", ("--ignore-case",)),
    (" Paris!", "Paris", ("--ignore-punctuation",)),
    (" B2", "B", ("--ignore-numbers",)),
    (" the Moon", "Moon", ("--regexes-to-ignore", "\\bthe ")),
    (" The moon", "Moon", ("--regexes-to-ignore", "^The ", "--ignore-case")),
])
def test_cli_exact_match_rules(cli, scripted_eval, tmp_path, script, reference, flags):
    """Each rule turns a miss into a match."""
    scripted_eval({"Q:": script})
    data = _qa(tmp_path, [("Q:", reference)])
    assert _run(cli, tmp_path, data)[1][0]["match"] == 0
    run, rows = _run(cli, tmp_path, data, *flags, "--output", tmp_path / "m.json")
    assert rows[0]["match"] == 1 and "exact_match    1.0000 ± N/A   (n=1)" in run.stdout
    saved = json.loads((tmp_path / "m.json").read_text())
    assert all(saved[f.removeprefix("--").replace("-", "_")] for f in flags if f.startswith("--"))


def test_cli_generate_few_shot(cli, scripted_eval, tmp_path):
    """lm-eval's few-shot generation context: ``Q1 A1\\n\\nQ``; the draw is recorded per item."""
    scripted_eval({"Q: 1 + 1 = 2\n\nQ: 2 + 2 =": " 4\n\nQ: 3 + 3 = 6"})
    data, shots = _qa(tmp_path, [("Q: 2 + 2 =", "4")]), tmp_path / "shots.jsonl"
    shots.write_text(json.dumps({"question": "Q: 1 + 1 =", "answer": ["2", "two"]}) + "\n")
    _, rows = _run(cli, tmp_path, data, "--num-fewshot", "1", "--fewshot-data", shots)
    assert rows[0]["prompt"] == "Q: 1 + 1 = 2\n\nQ: 2 + 2 =" and rows[0]["fewshot"] == [0]
    assert rows[0]["generated"] == " 4" and rows[0]["match"] == 1


def test_cli_generate_with_the_chat_template(cli, chat_model, tmp_path):
    """A real model and template end to end: the prompt is the rendered chat, the generation whatever the
    untrained model writes, cut before the stop sequence."""
    data = _qa(tmp_path, [("Q: 2 + 2 =", "4"), ("Q: the colour of the sea?", "blue")])
    _, rows = _run(cli, tmp_path, data, "--apply-chat-template", "--max-gen-tokens", "6", model=chat_model)
    assert rows[0]["prompt"] == "<|bos|><|user|>\nQ: 2 + 2 =<|eos|>\n<|assistant|>\n"
    assert all(0 < r["tokens"] <= 6 and "\n\n" not in r["generated"] for r in rows)


@pytest.mark.parametrize("flags, message", [
    (("--generate", "--until", ""), "--until: a stop sequence must not be empty"),
    (("--generate", "--format", "arc"), "--generate reads prompts and answers from --data; --format"),
    (("--generate", "--regexes-to-ignore", "("), "--regexes-to-ignore '(': not a regular expression"),
    (("--ignore-case",), "--ignore-case is for --generate"),
    (("--until", "."), "--until is for --generate"),
    (("--max-gen-tokens", "9"), "--max-gen-tokens is for --generate"),
    (("--regexes-to-ignore", "x"), "--regexes-to-ignore is for --generate"),
    (("--ignore-numbers",), "--ignore-numbers is for --generate"),
    (("--ignore-punctuation",), "--ignore-punctuation is for --generate"),
])
def test_cli_generation_flags_refused_in_one_line(cli, tmp_path, flags, message):
    data = _qa(tmp_path, [("Q:", "A")])
    run = cli("eval", "--model", tmp_path / "no-model", "--data", data, *flags)
    assert run.exit_code == 2 and run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


def test_cli_bad_generation_data_is_one_line(cli, tiny_llama, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"question": "Q: 2 + 2 =", "answer": "4"}) + "\n" + json.dumps({"question": "Q?"}) + "\n")
    run = cli("eval", "--model", tiny_llama, "--data", data, "--generate")
    assert run.exit_code == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"error: {data}: line 2: a --generate item lacks field(s) answer")
