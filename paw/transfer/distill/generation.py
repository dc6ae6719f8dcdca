"""What the teacher writes: continuations of a batch of texts, and its likeliest next words.

:func:`generate` continues texts greedily or by seeded sampling (batched, left-padded, with a KV
cache); :func:`next_words` gives prompts without choices the teacher's likeliest next tokens as
choices, so the student can match a distribution over text across tokenizers.
"""

from __future__ import annotations

from collections.abc import Sequence

from paw.evaluate.encode import _prefix, own_start, pad_id_of, sliding_window_of
from paw.evaluate.generate import cache_argument, left_padded, padded_chunks
from paw.transfer.distill.prompts import Prompt


def generate(model, tokenizer, texts: Sequence[str], *, max_new_tokens: int, sample: bool = False,
             temperature: float = 1.0, seed: int = 0, batch_size: int = 16, device=None,
             stop: str = "\n") -> list[str]:
    """The model's continuation of each text, cut before the first ``stop`` (a line break) or at end of sequence.

    Greedy unless ``sample``; sampling draws from a generator seeded with ``seed`` per batch, so
    the same inputs give the same texts on one device. Batches are left-padded with a KV cache; the
    tokenizer's own leading special tokens come first, as in :data:`paw.transfer.distill.prompts.START`
    (BOS, else EOS, before an empty text).
    """
    import torch

    device = device or next(model.parameters()).device
    own, pad, eos = own_start(tokenizer), pad_id_of(tokenizer), tokenizer.eos_token_id
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        chunk = [(own if own or t else _prefix(tokenizer)) + tokenizer.encode(t, add_special_tokens=False)
                 for t in texts[start:start + batch_size]]
        gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + start)
        rows = [r for part in padded_chunks(chunk, sliding_window_of(model), max_new_tokens)
                for r in _generate_batch(model, part, pad, eos, max_new_tokens, sample, temperature, gen, device,
                                         lambda ids: stop in tokenizer.decode(ids, skip_special_tokens=True))]
        for ids in rows:
            out.append(tokenizer.decode(ids, skip_special_tokens=True).split(stop, 1)[0])
    return out


def _generate_batch(model, chunk, pad, eos, max_new_tokens, sample, temperature, gen, device, ends_line) -> list[list[int]]:
    import torch

    ids, mask, positions = left_padded(chunk, pad, device)
    new: list[list[int]] = [[] for _ in chunk]
    done = [False] * len(chunk)
    past = None
    key = cache_argument(model)
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
        ids, mask, positions = left_padded(chunk, pad, device)
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
