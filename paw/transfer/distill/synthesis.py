"""New task inputs written by the teacher from a handful of seeds, and the filter that keeps the task-like ones.

:func:`synthesize` prompts the teacher with at most :data:`MAX_SEEDS` seed inputs, one per line,
sampling the next line (Trans-LoRA's few-shot generator; Wang et al. 2024, arXiv 2405.17258),
de-duplicated, optionally filtered by :func:`task_likeness`.

Trans-LoRA filters with a discriminator LoRA trained to tell the seeds from synthetic samples. PAW
keeps that role without training anything: a candidate is kept when the seeds make the teacher find
it more likely than generic text does, at least as much as for the least such seed (a likelihood
ratio calibrated on the seeds, leave-one-out).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

from paw.errors import PawError
from paw.evaluate.encode import encode_pair, own_start, pad_id_of
from paw.evaluate.mc import score_encoded
from paw.progress import track
from paw.transfer.distill import generation
from paw.transfer.distill.prompts import START, Prompt

MAX_SEEDS = 5          # Trans-LoRA's budget of real examples
MAX_ATTEMPT_ROUNDS = 8  # synthesis stops after this many batches of candidates per batch of requested inputs
BARREN_ROUNDS = 4       # ... or after this many batches without one usable candidate
SYNTHESIS_VERSION = 1   # part of a kept synthesis's key: raise it when what the teacher is shown or what is cut changes


def check_seeds(seeds: Sequence[Prompt]) -> list[Prompt]:
    if not seeds:
        raise PawError("--synthesize needs seed examples (--seed-examples FILE)")
    if len(seeds) > MAX_SEEDS:
        raise PawError(f"{len(seeds)} seed examples: at most {MAX_SEEDS} are allowed (a handful of real "
                       "inputs is the point of synthesis; pass more as --prompts instead)")
    return list(seeds)


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
    that BOS before any text itself (:func:`~paw.transfer.distill.generation.generate` adds the
    tokenizer's own start tokens): Llama's
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
        lines = generation.generate(model, tokenizer, contexts, max_new_tokens=max_new_tokens, sample=True,
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
