"""What a distillation trains on: label-free task inputs, the teacher's continuations, synthetic inputs.

Inputs are :class:`Prompt` s: a text the teacher continues and, for multiple-choice inputs, the
``(context, continuation)`` pairs of its choices (never which one is right). They come from

- a file of task inputs (:func:`prompts_from`; answers of a multiple-choice file are dropped);
- :func:`generic_prompts`, the embedded sample text cut into sentence prefixes (no task data);
- :func:`synthesize`, the teacher prompted with at most :data:`MAX_SEEDS` seed inputs, one per line,
  sampling the next line (Trans-LoRA's few-shot generator; Wang et al. 2024, arXiv 2405.17258),
  de-duplicated, optionally filtered by :func:`task_likeness`.

Trans-LoRA filters with a discriminator LoRA trained to tell the seeds from synthetic samples. PAW
keeps that role without training anything: a candidate is kept when the seeds make the teacher find
it more likely than generic text does, at least as much as for the least such seed (a likelihood
ratio calibrated on the seeds, leave-one-out).
"""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from paw.errors import PawError
from paw.evaluate.encode import _prefix, encode_pair, left_columns, own_start, pad_id_of, sliding_window_of
from paw.evaluate.items import MCItem
from paw.evaluate.mc import score_encoded
from paw.progress import track

START = "own"  # sequences start with the tokenizer's own special tokens (paw.evaluate.encode.encode_pair)
MAX_SEEDS = 5          # Trans-LoRA's budget of real examples
MAX_ATTEMPT_ROUNDS = 8  # synthesis stops after this many batches of candidates per batch of requested inputs
BARREN_ROUNDS = 4       # ... or after this many batches without one usable candidate
SYNTHESIS_VERSION = 1   # part of a kept synthesis's key: raise it when what the teacher is shown or what is cut changes


@dataclass(frozen=True)
class Prompt:
    """A task input: ``text`` for the teacher to continue; ``pairs`` its choices as (context, continuation)."""

    text: str
    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, value: str | MCItem | Prompt) -> Prompt:
        """From a plain string, or an :class:`MCItem` whose answer is dropped (one choice: the answer, dropped too).

        >>> Prompt.of(MCItem("2 + 2 =", (" 3", " 4"), 1)).pairs
        (('2 + 2 =', ' 3'), ('2 + 2 =', ' 4'))
        """
        if isinstance(value, Prompt):
            return value
        if isinstance(value, MCItem):
            pairs = tuple(value.pairs()) if len(value.choices) >= 2 else ()
            text = value.question.partition("_")[0].rstrip() if value.fill_blank else value.question
            return cls(text, pairs)
        return cls(str(value))


def prompts_from(values: Sequence[str | MCItem | Prompt], *, what: str = "prompts") -> list[Prompt]:
    """Prompts with blank texts dropped and exact duplicates merged (first kept); PawError when none is left."""
    seen: set[Prompt] = set()
    out = []
    for value in values:
        prompt = Prompt.of(value)
        if prompt.text.strip() and prompt not in seen:
            seen.add(prompt)
            out.append(prompt)
    if not out:
        raise PawError(f"no {what}: nothing to distill on")
    return out


def generic_prompts(lines: Sequence[str], *, min_words: int = 3, step: int = 3) -> list[Prompt]:
    """Sentence prefixes of generic text: every ``step``-th word boundary after ``min_words`` words.

    >>> [p.text for p in generic_prompts(["The cat sat on the mat today."], step=2)]
    ['The cat sat', 'The cat sat on the']
    """
    out = []
    for line in lines:
        for sentence in re.split(r"(?<=[.!?])\s+", line.strip()):
            words = sentence.split()
            out += [Prompt(" ".join(words[:k])) for k in range(min_words, len(words) - 1, step)]
    return prompts_from(out, what="generic prompts")


def split_holdout(prompts: list[Prompt], fraction: float, *, seed: int, cap: int = 64) -> tuple[list[Prompt], list[Prompt]]:
    """``(train, held_out)``: a seeded ``fraction`` (at most ``cap``, none when fewer than 10 prompts) set aside."""
    n = min(cap, int(len(prompts) * fraction)) if len(prompts) >= 10 else 0
    order = list(range(len(prompts)))
    random.Random(f"holdout-{seed}").shuffle(order)
    held = set(order[:n])
    return [p for i, p in enumerate(prompts) if i not in held], [p for i, p in enumerate(prompts) if i in held]


def check_seeds(seeds: Sequence[Prompt]) -> list[Prompt]:
    if not seeds:
        raise PawError("--synthesize needs seed examples (--seed-examples FILE)")
    if len(seeds) > MAX_SEEDS:
        raise PawError(f"{len(seeds)} seed examples: at most {MAX_SEEDS} are allowed (a handful of real "
                       "inputs is the point of synthesis; pass more as --prompts instead)")
    return list(seeds)


# ----------------------------------------------------------------------------------- generation

def generate(model, tokenizer, texts: Sequence[str], *, max_new_tokens: int, sample: bool = False,
             temperature: float = 1.0, seed: int = 0, batch_size: int = 16, device=None,
             stop: str = "\n") -> list[str]:
    """The model's continuation of each text, cut before the first ``stop`` (a line break) or at end of sequence.

    Greedy unless ``sample``; sampling draws from a generator seeded with ``seed`` per batch, so
    the same inputs give the same texts on one device. Batches are left-padded with a KV cache; the
    tokenizer's own leading special tokens come first, as in :data:`START` (BOS, else EOS, before an
    empty text).
    """
    import torch

    device = device or next(model.parameters()).device
    own, pad, eos = own_start(tokenizer), pad_id_of(tokenizer), tokenizer.eos_token_id
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        chunk = [(own if own or t else _prefix(tokenizer)) + tokenizer.encode(t, add_special_tokens=False)
                 for t in texts[start:start + batch_size]]
        gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + start)
        rows = [r for part in _padded_chunks(chunk, sliding_window_of(model), max_new_tokens)
                for r in _generate_batch(model, part, pad, eos, max_new_tokens, sample, temperature, gen, device,
                                         lambda ids: stop in tokenizer.decode(ids, skip_special_tokens=True))]
        for ids in rows:
            out.append(tokenizer.decode(ids, skip_special_tokens=True).split(stop, 1)[0])
    return out


def _left_padded(chunk: Sequence[Sequence[int]], pad: int, device):
    """``(ids, mask, positions)`` of id lists left-padded into one batch (positions count real tokens).

    Each row's first token stays in column 0 (:func:`paw.evaluate.encode.left_columns`): a row that
    began with padding would hold queries that attend to nothing, NaN under CUDA's SDPA.
    """
    import torch

    width = max(len(c) for c in chunk)
    ids = torch.full((len(chunk), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, c in enumerate(chunk):
        cols = left_columns(len(c), width)
        ids[row, cols] = torch.tensor(list(c), dtype=torch.long)
        mask[row, cols] = 1
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _padded_chunks(chunk: list, window: int | None, max_new_tokens: int) -> list[list]:
    """``chunk`` as one batch, or one row at a time where padding would move a row's first token out
    of a sliding window it falls inside unpadded (windows count columns, padding adds columns)."""
    width = max(len(c) for c in chunk)
    if window is None or width + max_new_tokens <= window or all(len(c) == width for c in chunk):
        return [chunk]
    return [[c] for c in chunk]


def _cache_argument(model) -> str:
    """The name under which this transformers version takes and returns the key/value cache: ``cache`` from
    5.24 (``past_key_values`` still works there, with a deprecation warning on every call), before it
    ``past_key_values``. A PEFT model passes its keywords through: its base model's signature decides."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _generate_batch(model, chunk, pad, eos, max_new_tokens, sample, temperature, gen, device, ends_line) -> list[list[int]]:
    import torch

    ids, mask, positions = _left_padded(chunk, pad, device)
    new: list[list[int]] = [[] for _ in chunk]
    done = [False] * len(chunk)
    past = None
    key = _cache_argument(model)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            result = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{key: past})
            past = getattr(result, key)
            logits = result.logits[:, -1].float()
            if sample:
                probs = torch.softmax(logits / max(temperature, 1e-6), -1)
                token = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            else:
                token = logits.argmax(-1)
            for row, t in enumerate(token.tolist()):
                if done[row]:
                    continue
                if eos is not None and t == eos:
                    done[row] = True
                    continue
                new[row].append(t)
                done[row] = ends_line(new[row])
            if all(done):
                break
            ids = token[:, None]
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
            positions = positions[:, -1:] + 1
    return new


# ----------------------------------------------------------------------------------- next words

def next_words(model, tokenizer, prompts: Sequence[Prompt], k: int, *, batch_size: int = 16,
               device=None) -> tuple[list[Prompt], int]:
    """Prompts without choices get, as choices, the texts of the teacher's ``k`` likeliest next tokens.

    Greedy text shows the student only the teacher's first pick. Across tokenizers there is no
    token distribution to match, but text is: each of the teacher's likeliest next tokens, as the
    text it writes (a token that is only whitespace takes the teacher's next token with it), becomes
    a candidate, and the student is taught the teacher's distribution over the candidates
    (``choice-kl``, each scored by its summed log-likelihood, under either tokenizer), as for a
    multiple-choice input but with the teacher's own candidates, never a label. Common words are
    one token in a large vocabulary; a rarer word is represented by its first piece. Returns
    ``(prompts, how many got at least two candidates)``.
    """
    import torch

    device = device or next(model.parameters()).device
    prefix, pad, eos = _prefix(tokenizer), pad_id_of(tokenizer), tokenizer.eos_token_id
    out, extended = list(prompts), 0
    todo = [i for i, p in enumerate(prompts) if not p.pairs]
    for start in range(0, len(todo), batch_size):
        rows = todo[start:start + batch_size]
        chunk = [prefix + tokenizer.encode(prompts[i].text, add_special_tokens=False) for i in rows]
        ids, mask, positions = _left_padded(chunk, pad, device)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1].float()
        top = logits.topk(min(k + 2, logits.shape[-1]), dim=-1).indices.tolist()
        # (prompt index, prompt length, prompt ids + one candidate token)
        starts = [(r, len(c), c + [t]) for j, (r, c) in enumerate(zip(rows, chunk, strict=True))
                  for t in top[j] if t != eos]
        blank = [i for i, (_, n, c) in enumerate(starts) if not _decoded_tail(tokenizer, c[:n], c[n:]).strip()]
        if blank:  # a bare space: the text is the space and what the teacher writes after it
            more = _generate_batch(model, [starts[i][2] for i in blank], pad, eos, 1, False, 1.0, None, device,
                                   lambda new_ids: True)
            for i, new in zip(blank, more, strict=True):
                r, n, c = starts[i]
                starts[i] = (r, n, c + new)
        texts: dict[int, list[str]] = {r: [] for r in rows}
        for r, n, c in starts:
            text = _decoded_tail(tokenizer, c[:n], c[n:])
            if text.strip() and "\n" not in text and text not in texts[r] and len(texts[r]) < k:
                texts[r].append(text)
        for r in rows:
            if len(texts[r]) >= 2:
                out[r] = Prompt(prompts[r].text, tuple((prompts[r].text, t) for t in texts[r]))
                extended += 1
    return out, extended


def _decoded_tail(tokenizer, head: list[int], tail: list[int]) -> str:
    """The text ``tail`` adds after ``head``: decoding it alone would drop a SentencePiece word's space."""
    before = tokenizer.decode(head, skip_special_tokens=True)
    whole = tokenizer.decode(head + tail, skip_special_tokens=True)
    return whole[len(before):] if whole.startswith(before) else tokenizer.decode(tail, skip_special_tokens=True)


# ----------------------------------------------------------------------------------- synthesis

def separator(seeds: Sequence[Prompt]) -> str:
    """One line per example, or a blank line between examples when an example spans lines."""
    return "\n\n" if any("\n" in s.text for s in seeds) else "\n"


def few_shot_context(seeds: Sequence[Prompt], rng: random.Random) -> str:
    """The seeds' texts in a shuffled order, each followed by :func:`separator`."""
    texts = [s.text for s in seeds]
    rng.shuffle(texts)
    sep = separator(seeds)
    return sep.join(texts) + sep


CHAT_REQUEST = ("Here are examples of inputs for a task, one per example:\n\n{examples}\n"
                "Write one new input of the same kind. Reply with the input only.")


def chat_context(tokenizer, seeds: Sequence[Prompt], rng: random.Random) -> str | None:
    """The seeds as one user turn of the teacher's chat template asking for one more input, ready for
    the assistant's reply; None when the tokenizer has no chat template (a base model: plain few-shot).

    An instruct model asked in its own format writes a new input; shown a bare list it may answer the
    last one instead. A leading BOS the template writes is dropped only where the tokenizer puts
    that BOS before any text itself (:func:`generate` adds the tokenizer's own start tokens): Llama's
    ``<s>`` is not written twice, and SmolLM2's ``<|im_start|>``, its BOS by name, which its tokenizer
    never adds, is kept (it was dropped, and SmolLM2-Instruct's system turn began ``system\n``).
    """
    if not getattr(tokenizer, "chat_template", None):
        return None
    request = CHAT_REQUEST.format(examples=few_shot_context(seeds, rng))
    text = tokenizer.apply_chat_template([{"role": "user", "content": request}], add_generation_prompt=True,
                                         tokenize=False)
    bos, bos_id = getattr(tokenizer, "bos_token", None), getattr(tokenizer, "bos_token_id", None)
    added = bos_id is not None and bos_id in own_start(tokenizer)
    return text[len(bos):] if added and bos and text.startswith(bos) else text


def template_end(seeds: Sequence[Prompt], *, min_chars: int = 2) -> str:
    """The longest ending every seed shares, from a word boundary on (``'. Again:'``), or ``''`` if short.

    Seeds that are prompts end where the answer begins; a teacher that learned the task writes the
    answer right after, so a synthetic input is cut after this ending (and dropped without it).

    >>> template_end([Prompt("Word: road. Again:"), Prompt("Word: tree. Again:")])
    '. Again:'
    """
    texts = [s.text for s in seeds]
    n = 0
    while n < min(len(t) for t in texts) and len({t[len(t) - n - 1] for t in texts}) == 1:
        n += 1
    end = texts[0][len(texts[0]) - n:] if n else ""
    while end and end[0].isalnum():  # 'r likes the colour' of names ending in r: from the word boundary
        end = end[1:]
    return end if len(end.strip()) >= min_chars else ""


def template_start(seeds: Sequence[Prompt], *, min_chars: int = 2) -> str:
    """The longest beginning every seed shares, up to a word boundary and without trailing space
    (``'Question:'``), or ``''`` if short.

    The teacher's reply is begun with it (:func:`synthesize`): a small model shown a list of
    ``Question: ... Answer:`` seeds otherwise answers the last one, or talks about the list, instead
    of writing the next question.

    >>> template_start([Prompt("Question: why?\\nAnswer:"), Prompt("Question: how?\\nAnswer:")])
    'Question:'
    """
    texts = [s.text for s in seeds]
    n = 0
    while n < min(len(t) for t in texts) and len({t[n] for t in texts}) == 1:
        n += 1
    start = texts[0][:n]
    if any(len(t) > n and t[n].isalnum() for t in texts):   # 'Word: ro' of 'road' and 'rose': to the word boundary
        while start and start[-1].isalnum():
            start = start[:-1]
    start = start.rstrip()
    return start if len(start) >= min_chars else ""


def _cut_after(line: str, ending: str) -> str | None:
    """``line`` up to and including ``ending`` (its answer dropped); None without it; whole if no ending."""
    if not ending:
        return line
    return line[:line.index(ending) + len(ending)] if ending in line else None


def synthesize(model, tokenizer, seeds: Sequence[Prompt], n: int, *, seed: int, max_new_tokens: int = 48,
               batch_size: int = 16, filter_lines: Sequence[str] | None = None, device=None,
               chat: bool = True, progress: bool = False, state: dict | None = None,
               on_round: Callable[[dict], None] | None = None) -> tuple[list[Prompt], dict]:
    """``n`` new task inputs written by the teacher from the seeds, and what happened on the way.

    With ``chat`` and a tokenizer that has a chat template, the teacher is asked for a new input in
    its own chat format (:func:`chat_context`); otherwise the seeds are a plain few-shot list.
    Each candidate is the line the teacher samples after the seeds (shuffled anew per candidate),
    its reply begun with the beginning all seeds share (:func:`template_start`), cut after the
    ending all seeds share (:func:`template_end`; without it, dropped as off-template).
    Blank lines, seeds and repeats are dropped; with ``filter_lines`` (generic text), candidates
    that :func:`task_likeness` scores below every seed's own score are dropped too. ``progress``:
    count the inputs kept on stderr (:func:`paw.progress.track`; a thousand take minutes on a GPU).

    Resuming: after each round of candidates ``on_round`` is handed the whole state (the inputs kept
    so far, every text seen, the counts, the sampler's RNG: JSON values); ``state``, one such state
    of an earlier run with the same arguments, continues from it. The result is the one an
    uninterrupted run gives: round ``r`` samples with seed ``seed + 7919 r`` from the restored RNG.
    """
    seeds = check_seeds(seeds)
    rng = random.Random(f"synth-{seed}")
    known = {_norm(s.text) for s in seeds}
    ending, start = template_end(seeds), template_start(seeds)
    use_chat = chat and chat_context(tokenizer, seeds, random.Random(0)) is not None
    stats = {"requested": n, "generated": 0, "blank": 0, "off_template": 0, "duplicates": 0, "filtered": 0,
             "surplus": 0, "rounds": 0, "template_start": start, "template_end": ending, "prompting": "chat template" if use_chat else "few-shot"}
    threshold = None
    if filter_lines is not None:
        threshold = stats["filter_threshold"] = discriminator_threshold(model, tokenizer, seeds, filter_lines, device=device)
    done = _resume(state, stats, known, rng) if state else []
    written = _written(model, tokenizer, seeds, n, stats, use_chat=use_chat, rng=rng, known=known, start=start,
                       ending=ending, threshold=threshold, filter_lines=filter_lines, seed=seed, max_new_tokens=max_new_tokens,
                       batch_size=batch_size, device=device, done=done, on_round=on_round)
    earlier = [Prompt(line) for line in done]
    kept = earlier + list(track(written, "teacher writing inputs", total=n, unit="inputs", start=len(earlier))
                          if progress else written)
    stats["kept"] = len(kept)
    if not kept:
        raise PawError(f"the teacher wrote no usable input from the {len(seeds)} seed examples "
                       f"({stats['generated']} candidates: {stats['blank']} blank, {stats['off_template']} "
                       f"without the seeds' ending {ending!r}, {stats['duplicates']} repeats, "
                       f"{stats['filtered']} filtered out)")
    return kept, stats


def synthesis_state(done: list[str], known: set[str], stats: dict, rng: random.Random) -> dict:
    """What :func:`synthesize` needs to go on after a round: JSON values only."""
    version, internal, gauss = rng.getstate()
    return {"kept": list(done), "known": sorted(known), "stats": dict(stats), "rng": [version, list(internal), gauss]}


def _resume(state: dict, stats: dict, known: set[str], rng: random.Random) -> list[str]:
    """Restore ``stats``, ``known`` and ``rng`` from a :func:`synthesis_state`; the inputs it had kept."""
    try:
        version, internal, gauss = state["rng"]
        rng.setstate((int(version), tuple(int(x) for x in internal), gauss))
        done = [str(x) for x in state["kept"]]
        seen = {str(x) for x in state["known"]}
        counts = {k: state["stats"][k] for k in stats if k in state["stats"]}
    except (KeyError, TypeError, ValueError) as e:
        raise PawError(f"the saved synthesis state is damaged ({e}); delete it to start again") from None
    known |= seen
    stats.update(counts)
    return done


def _written(model, tokenizer, seeds, n, stats, *, use_chat, rng, known, start, ending, threshold, filter_lines, seed,
             max_new_tokens, batch_size, device, done: list[str], on_round=None) -> Iterator[Prompt]:
    """:func:`synthesize`'s rounds: each usable new input as soon as its round is done (``stats`` counted,
    ``done`` extended, then ``on_round`` told the state)."""
    kept = len(done)
    while kept < n and stats["rounds"] < MAX_ATTEMPT_ROUNDS * max(1, -(-n // batch_size)) \
            and (kept or stats["rounds"] < BARREN_ROUNDS):
        contexts = [(chat_context(tokenizer, seeds, rng) if use_chat else few_shot_context(seeds, rng)) + start
                    for _ in range(batch_size)]
        lines = generate(model, tokenizer, contexts, max_new_tokens=max_new_tokens, sample=True,
                         seed=seed + 7919 * stats["rounds"], batch_size=batch_size, device=device,
                         stop=separator(seeds))
        stats["rounds"] += 1
        stats["generated"] += len(lines)
        fresh = []
        for written in lines:
            body = written.strip()
            line = body if body.startswith(start) else (start + written).strip()   # a teacher that writes it again: once
            cut = _cut_after(line, ending)
            if not body:
                stats["blank"] += 1
            elif cut is None:
                stats["off_template"] += 1
            elif _norm(cut) in known:
                stats["duplicates"] += 1
            else:
                known.add(_norm(cut))
                fresh.append(cut)
        if threshold is not None and fresh:
            scores = task_likeness(model, tokenizer, fresh, seeds, filter_lines, device=device)
            stats["filtered"] += sum(s < threshold for s in scores)
            fresh = [line for line, s in zip(fresh, scores, strict=True) if s >= threshold]
        stats["surplus"] += max(0, len(fresh) - (n - kept))
        taken = fresh[: n - kept]
        done.extend(taken)
        kept += len(taken)
        if on_round is not None:
            on_round(synthesis_state(done, known, stats, rng))
        for line in taken:
            yield Prompt(line)


def task_likeness(model, tokenizer, texts: Sequence[str], seeds: Sequence[Prompt], generic: Sequence[str], *,
                  device=None) -> list[float]:
    """Per text: mean log p(text | seeds, one per line) - mean log p(text | generic lines), per token."""
    rng = random.Random(0)
    task_ctx = few_shot_context(seeds, rng) if seeds else ""
    sep = separator(seeds) if seeds else "\n"
    generic_ctx = sep.join(list(generic)[: max(1, len(seeds))]) + sep
    encoded = [encode_pair(tokenizer, ctx, text, start=START) for text in texts for ctx in (task_ctx, generic_ctx)]
    device = device or next(model.parameters()).device
    scores = score_encoded(model, encoded, pad_id=pad_id_of(tokenizer), device=device, progress=False)
    return [scores[2 * i][0] / max(scores[2 * i][1], 1) - scores[2 * i + 1][0] / max(scores[2 * i + 1][1], 1)
            for i in range(len(texts))]


def discriminator_threshold(model, tokenizer, seeds: Sequence[Prompt], generic: Sequence[str], *, device=None) -> float:
    """The least :func:`task_likeness` of a seed given the other seeds (leave-one-out): a candidate the
    seeds make at least that much more likely than generic text does is task-like (``--discriminator``)."""
    return min(task_likeness(model, tokenizer, [s.text], [x for x in seeds if x != s], generic, device=device)[0]
               for s in seeds)


def discriminator_passes(model, tokenizer, texts: Sequence[str], seeds: Sequence[Prompt], generic: Sequence[str], *,
                         device=None) -> list[int]:
    """1 for each text ``--discriminator`` would keep, 0 for each it would drop (:func:`discriminator_threshold`)."""
    threshold = discriminator_threshold(model, tokenizer, seeds, generic, device=device)
    return [int(x >= threshold) for x in task_likeness(model, tokenizer, texts, seeds, generic, device=device)]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())
