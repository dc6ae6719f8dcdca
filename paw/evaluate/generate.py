"""Greedy generation in batches, scored by exact match (``paw eval --generate``): lm-eval's ``generate_until``.

Each prompt is tokenised as lm-eval's ``hf`` model tokenises a generation context (the tokenizer's own
special tokens, none when the text already starts with the BOS text, as a chat template writes it) and
keeps its last ``max_length - max_new_tokens`` tokens. The model then appends its most likely token, one
at a time, until

- the text generated so far holds one of the stop sequences ``until`` (lm-eval's default for a task that
  names none: the few-shot delimiter ``"\\n\\n"``),
- it produces an end-of-sequence token (the tokenizer's EOS and those of the model's
  ``generation_config``, which ``transformers.generate`` stops on), or
- ``max_new_tokens`` are generated (lm-eval's ``max_gen_toks``, 256 by default).

The text is decoded without special tokens and cut before the first stop sequence, as lm-eval's
``postprocess_generated_text`` cuts it. Greedy decoding is per row, so a row that has stopped is fed padding
while the others go on, and what one row generates does not depend on the others.

Batches: prompts sorted longest first (then by text, lm-eval's order, so equal batch sizes give equal batches),
laid out as :func:`paw.evaluate.encode.left_columns` lays out a scored batch: each row's first token in
column 0, the rest at the right end, so every row continues at the last column and no query attends to
nothing (which gives NaN on CUDA); position ids count real tokens. Keys and values are cached, so each new
token costs one position. A model with sliding-window attention generates one row at a time when a batch
would outgrow its window (the window counts columns, padding included).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

from paw.device import guard_cuda_attention
from paw.errors import PawError
from paw.evaluate.encode import left_columns, pad_id_of, sliding_window_of
from paw.evaluate.exact import Rules, matches
from paw.evaluate.items import GenItem
from paw.evaluate.mc import AUTO_BATCH, model_device
from paw.evaluate.perplexity import context_length
from paw.evaluate.stats import mean_stderr
from paw.progress import track

MAX_GEN_TOKENS = 256     # lm-eval's max_gen_toks
UNTIL = ("\n\n",)        # lm-eval's default stop sequence: the few-shot delimiter
STOPS = ("until", "eos", "length")   # why a row stopped


@dataclass(frozen=True)
class Generated:
    """What the model generated after one prompt: ``text`` cut before the first stop sequence, the ``tokens``
    it produced (an end-of-sequence token counted) and why it stopped (one of :data:`STOPS`)."""

    text: str
    tokens: int
    stop: str


def cut(text: str, until: Sequence[str]) -> str:
    """``text`` before the first of the stop sequences (lm-eval's ``postprocess_generated_text``).

    >>> cut(" Paris.\\n\\nQuestion: ...", ["\\n\\n", "."])
    ' Paris'
    """
    for stop in until:
        if stop:
            text = text.split(stop)[0]
    return text


def encode_prompt(tokenizer, text: str) -> list[int]:
    """The prompt's tokens as lm-eval's ``tok_batch_encode`` makes them (no special tokens added when the text
    starts with the BOS text)."""
    bos = getattr(tokenizer, "bos_token", None)
    special = {"add_special_tokens": False} if bos and text.startswith(str(bos)) else {}
    return [int(t) for t in tokenizer.encode(text, **special)]


def stop_tokens(model, tokenizer) -> frozenset[int]:
    """The end-of-sequence ids: the tokenizer's and the model's ``generation_config.eos_token_id`` (one or a list)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for token in eos if isinstance(eos, list | tuple) else [eos]:
        if isinstance(token, int):
            ids.add(token)
    return frozenset(ids)


def generate(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int = MAX_GEN_TOKENS,
             until: Sequence[str] = UNTIL, batch_size: int | str = 8, max_length: int | None = None,
             stops: frozenset[int] | None = None, progress: bool = True) -> list[Generated]:
    """Greedy continuations of ``prompts``, in their order (module docstring).

    ``max_length``: the longest sequence, prompt and generation (default: the model's, as lm-eval finds it);
    ``stops``: end-of-sequence ids (default :func:`stop_tokens`); ``batch_size="auto"``: :data:`AUTO_BATCH`
    rows, halved when a batch runs out of memory.
    """
    import torch

    ids, order = _prompt_ids(tokenizer, prompts, room=_room(model, tokenizer, max_length, max_new_tokens))
    device = model_device(model)
    guard_cuda_attention(model)
    step = _Stepper(model, tokenizer, pad_id=pad_id_of(tokenizer), max_new=max_new_tokens, until=tuple(until),
                    stops=stop_tokens(model, tokenizer) if stops is None else stops,
                    window=sliding_window_of(model), device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return _in_batches(step, ids, order, batch_size=batch_size, device=device, progress=progress)
    finally:
        model.train(was_training)


def _room(model, tokenizer, max_length: int | None, max_new_tokens: int) -> int:
    """The prompt tokens kept: the longest sequence less the new tokens (lm-eval's ``max_length - max_gen_toks``)."""
    length = max_length or context_length(model, tokenizer)
    if length - max_new_tokens < 1:
        raise PawError(f"--max-gen-tokens {max_new_tokens} leaves no room for a prompt in a sequence of at most "
                       f"{length} tokens (--max-length)")
    return length - max_new_tokens


def _prompt_ids(tokenizer, prompts: Sequence[str], *, room: int) -> tuple[list[list[int]], list[int]]:
    """Every prompt's last ``room`` tokens, and the order they are generated in: longest first, then by text
    (lm-eval's ``Collator`` order, on the untruncated lengths)."""
    if not prompts:
        raise PawError("no prompts to generate from")
    full = [encode_prompt(tokenizer, p) for p in prompts]
    empty = next((k for k, x in enumerate(full) if not x), None)
    if empty is not None:
        raise PawError(f"item {empty}: the prompt encodes to no tokens")
    order = sorted(range(len(full)), key=lambda i: (-len(full[i]), prompts[i]))
    return [x[-room:] for x in full], order


def _in_batches(step: _Stepper, ids: list[list[int]], order: list[int], *, batch_size: int | str, device,
                progress: bool) -> list[Generated]:
    """``step.rows`` over batches of ``order``, results in input order; under ``batch_size="auto"`` a batch that
    runs out of memory is halved, and so is every later one."""
    import torch

    auto = batch_size == "auto"
    size = AUTO_BATCH.get(device.type, AUTO_BATCH["cpu"]) if auto else int(batch_size)
    cap = size   # what fits: lowered when a batch runs out of memory under "auto"
    results: dict[int, Generated] = {}
    starts = range(0, len(order), size)
    for start in track(starts, "generating", total=len(starts), unit="batches") if progress else starts:
        pending = [order[start:start + size]]
        while pending:
            rows = pending.pop()
            if len(rows) > cap:   # a smaller batch fitted since this one was queued
                pending += [rows[i:i + cap] for i in range(0, len(rows), cap)][::-1]
                continue
            try:
                results.update(zip(rows, step.rows([ids[i] for i in rows]), strict=True))
            except _out_of_memory() as err:
                if not auto or len(rows) == 1:
                    raise PawError(f"out of memory on {device.type} generating for {len(rows)} prompts of up to "
                                   f"{max(len(ids[i]) for i in rows)} tokens; try a smaller --batch-size, or "
                                   "--batch-size auto") from err
                cap = len(rows) // 2
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                pending += [rows[cap:], rows[:cap]]
    return [results[i] for i in range(len(ids))]


def _out_of_memory() -> type[BaseException]:
    import torch

    return getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


class _Stepper:
    """Greedy decoding of one batch of token lists, with the key/value cache."""

    def __init__(self, model, tokenizer, *, pad_id: int, max_new: int, until: tuple[str, ...], stops: frozenset[int],
                 window: int | None, device):
        self.model, self.tokenizer, self.pad_id, self.max_new = model, tokenizer, pad_id, max_new
        self.until, self.stops, self.window, self.device = until, stops, window, device
        self.cache = cache_argument(model)

    def rows(self, rows: list[list[int]]) -> list[Generated]:
        return [g for part in padded_chunks(rows, self.window, self.max_new) for g in self._batch(part)]

    def _batch(self, rows: list[list[int]]) -> list[Generated]:
        """Greedy continuations of ``rows`` (token lists), laid out as the module docstring says."""
        import torch

        ids, mask, positions = left_padded(rows, self.pad_id, self.device)
        out = self._forward(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        tokens: list[list[int]] = [[] for _ in rows]
        stopped: list[str | None] = [None] * len(rows)
        following = positions[:, -1:] + 1
        for produced in range(1, self.max_new + 1):
            picked = out.logits[:, -1].float().argmax(-1).tolist()
            for r, token in enumerate(picked):
                if stopped[r] is None:
                    stopped[r] = self._take(tokens[r], int(token))
            if all(stopped) or produced == self.max_new:
                break
            feed = torch.tensor([[t if s is None else self.pad_id] for t, s in zip(picked, stopped, strict=True)],
                                device=self.device)
            mask = torch.cat([mask, torch.ones_like(feed)], dim=-1)
            out = self._forward(input_ids=feed, attention_mask=mask, position_ids=following, use_cache=True,
                                **{self.cache: getattr(out, self.cache)})
            following = following + 1
        return [Generated(cut(self._text(t), self.until), len(t) + (s == "eos"), s or "length")
                for t, s in zip(tokens, stopped, strict=True)]

    def _take(self, tokens: list[int], token: int) -> str | None:
        """Add ``token`` to a row; why the row stops there, or None while it goes on."""
        if token in self.stops:
            return "eos"
        tokens.append(token)
        text = self._text(tokens)
        return "until" if any(stop and stop in text for stop in self.until) else None

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _forward(self, **inputs):
        """The model's outputs, the logits of the last position only; a NaN/Inf logit is refused."""
        import torch

        try:
            out = self.model(**inputs, logits_to_keep=1)
        except TypeError:  # models without logits_to_keep
            out = self.model(**inputs)
        if not bool(torch.isfinite(out.logits[:, -1]).all()):
            raise PawError(f"the model gave NaN/Inf logits while generating on {self.device.type}; try --dtype "
                           "float32, or another --device to compare")
        return out


def left_padded(chunk: Sequence[Sequence[int]], pad: int, device):
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


def padded_chunks(chunk: list, window: int | None, max_new_tokens: int) -> list[list]:
    """``chunk`` as one batch, or one row at a time where padding would move a row's first token out
    of a sliding window it falls inside unpadded (windows count columns, padding adds columns)."""
    width = max(len(c) for c in chunk)
    if window is None or width + max_new_tokens <= window or all(len(c) == width for c in chunk):
        return [chunk]
    return [[c] for c in chunk]


def cache_argument(model) -> str:
    """The name under which this transformers version takes and returns the key/value cache: ``cache`` from
    5.24 (``past_key_values`` still works there, with a deprecation warning on every call), before it
    ``past_key_values``. A PEFT model passes its keywords through: its base model's signature decides."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def score(items: Sequence[GenItem], generated: Sequence[Generated], rules: Rules = Rules()) -> tuple[dict, list[int]]:
    """``(metrics, match per item)``: ``exact_match`` (the share of items whose generation matches a reference),
    lm-eval's ``stderr`` of it (:func:`paw.evaluate.stats.mean_stderr`), ``n``, the tokens generated and how
    many rows stopped by a stop sequence, an end-of-sequence token or the length limit."""
    hits = [int(matches(g.text, item.references, rules)) for item, g in zip(items, generated, strict=True)]
    metrics = {"exact_match": sum(hits) / len(hits), "stderr": mean_stderr(hits), "n": len(hits),
               "n_generated_tokens": sum(g.tokens for g in generated),
               "stopped": {why: sum(g.stop == why for g in generated) for why in STOPS}}
    return metrics, hits
