"""The target bases of the transfer benchmark, one builder per kind users meet (registry :data:`TARGETS`).

Every builder gets the trained source and returns a new trained model (and its tokenizer):

- ``upgrade-mild``: the source's continued pre-training on a mix of its old corpus and a new one, same
  shapes, moving the weights by 5-15% (what version upgrades such as Llama-3 -> 3.1 look like).
- ``upgrade``: the harsh version: trained further on the *shifted* corpus only, ~34% weight change.
- ``pruned``: hidden channels, KV groups, MLP neurons and one layer removed by weight-norm importance
  (:func:`paw.bench.surgery.prune_by_importance`), then healed by brief training (Minitron, Sheared-LLaMA).
- ``grown``: widened and deepened by function-preserving expansion
  (:func:`paw.bench.surgery.grow_state_dict`), then trained further (LLaMA Pro, Net2Net).
- ``distilled``: another shape, from scratch, trained on the source's next-token distributions.
- ``tokenizer``: the source given another tokenizer (:func:`paw.vocab.pipelines.transplant_tokenizer`),
  then healed.
- ``unrelated``: the source's shape, another initialisation, the same pretraining (negative control).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from paw import arch
from paw.bench.lm import Schedule, token_stream, train_lm
from paw.bench.models import model_from_state_dict
from paw.bench.surgery import Dims, grow_state_dict, prune_by_importance
from paw.errors import Skipped
from paw.registry import Registry
from paw.zoo import build_model, train_tokenizer


@dataclass
class Built:
    """A target base: the model, its tokenizer, and what was done to make it."""

    model: Any
    tokenizer: Any
    info: dict = field(default_factory=dict)


@dataclass
class Workshop:
    """What every builder may use: the trained source, corpora, schedules and a seed."""

    source: Any
    tokenizer: Any
    source_stream: Any
    shifted_texts: list[str]
    source_texts: list[str]
    pretrain: Schedule
    heal_fraction: float = 0.25   # healing / further training steps as a fraction of pretraining
    seed: int = 0
    device: Any = None
    progress: bool = True
    transplant: Callable | None = None  # (model_dir-free) callable: (model, tokenizer, new_tokenizer) -> model

    def heal(self, steps: float | None = None, lr_scale: float = 0.3) -> Schedule:
        n = max(1, int(round(self.pretrain.steps * (steps if steps is not None else self.heal_fraction))))
        return replace(self.pretrain, steps=n, lr=self.pretrain.lr * lr_scale, warmup=min(self.pretrain.warmup, n))


TARGETS: Registry[Callable[[Workshop], Built]] = Registry("benchmark target")


def target(name: str):
    return TARGETS.register(name)


def _config(model) -> dict:
    return model.config.to_dict()


def relative_change(a, b) -> float | None:
    """``||W_b - W_a|| / ||W_a||`` over same-shape 2-D weights outside embeddings and head, else None."""
    sa, sb = a.state_dict(), b.state_dict()
    num = den = 0.0
    for name, w in sa.items():
        if (w.ndim == 2 and name in sb and sb[name].shape == w.shape
                and arch.module_kind(name) not in ("embed", "head")):
            num += float((sb[name].float() - w.float()).pow(2).sum())
            den += float(w.float().pow(2).sum())
    return (num / den) ** 0.5 if den else None


MILD_UPGRADE = dict(steps=0.25, lr_scale=0.2)  # 100 steps at 0.2x the peak rate: 5-15% drift (measured)


@target("upgrade-mild")
def upgrade_mild(ws: Workshop) -> Built:
    import random

    model = copy.deepcopy(ws.source)
    rng = random.Random(ws.seed + 10)
    shifted = rng.sample(list(ws.shifted_texts), min(len(ws.shifted_texts), len(ws.source_texts)))
    texts = list(ws.source_texts) + shifted  # old and new corpus, as many texts of each
    rng.shuffle(texts)
    schedule = ws.heal(MILD_UPGRADE["steps"], lr_scale=MILD_UPGRADE["lr_scale"])
    train_lm(model, token_stream(ws.tokenizer, texts), schedule, seed=ws.seed + 10, device=ws.device,
             description="mild upgrade", progress=ws.progress)
    return Built(model, ws.tokenizer, {"steps": schedule.steps, "lr": schedule.lr, "corpus": "old + shifted, mixed",
                                       "relative_weight_change": relative_change(ws.source, model)})


@target("upgrade")
def upgrade(ws: Workshop) -> Built:
    model = copy.deepcopy(ws.source)
    stream = token_stream(ws.tokenizer, ws.shifted_texts)
    schedule = ws.heal(0.5, lr_scale=0.5)
    train_lm(model, stream, schedule, seed=ws.seed + 11, device=ws.device, description="upgrade", progress=ws.progress)
    return Built(model, ws.tokenizer, {"steps": schedule.steps, "corpus": "shifted",
                                       "relative_weight_change": relative_change(ws.source, model)})


def _sizes(cfg: dict, factor: float, multiple: int) -> int:
    return max(multiple, int(round(cfg * factor / multiple)) * multiple)


@target("pruned")
def pruned(ws: Workshop) -> Built:
    cfg = _config(ws.source)
    d = Dims.of(cfg)
    sizes = dict(hidden=_sizes(d.hidden, 0.75, 8), heads=max(d.group, d.heads // 2 // d.group * d.group),
                 neurons=_sizes(d.neurons, 0.75, 8), layers=max(1, d.layers - 1))
    sd, new_cfg = prune_by_importance({k: v.detach().cpu() for k, v in ws.source.state_dict().items()}, cfg, **sizes)
    model, steps = _healed(ws, sd, new_cfg, seed=ws.seed + 12, description="healing pruned")
    return Built(model, ws.tokenizer, {"pruned_to": sizes, "heal_steps": steps})


@target("grown")
def grown(ws: Workshop) -> Built:
    cfg = _config(ws.source)
    d = Dims.of(cfg)
    sizes = dict(hidden_size=_sizes(d.hidden, 1.25, 8), intermediate_size=_sizes(d.neurons, 1.25, 8),
                 num_layers=d.layers + 2)
    sd, new_cfg = grow_state_dict({k: v.detach().cpu() for k, v in ws.source.state_dict().items()}, cfg,
                                  seed=ws.seed + 13, **sizes)
    model, steps = _healed(ws, sd, new_cfg, seed=ws.seed + 13, description="training grown")
    return Built(model, ws.tokenizer, {"grown_to": sizes, "steps": steps})


def _healed(ws: Workshop, sd: dict, cfg: dict, *, seed: int, description: str):
    """A model cut or grown from the source, trained on for the healing schedule: ``(model, steps)``."""
    model = model_from_state_dict(sd, cfg)
    schedule = ws.heal()
    train_lm(model, ws.source_stream, schedule, seed=seed, device=ws.device, description=description,
             progress=ws.progress)
    return model, schedule.steps


@target("distilled")
def distilled(ws: Workshop) -> Built:
    cfg = _config(ws.source)
    hidden = _sizes(cfg["hidden_size"], 0.75, 8)
    dims = dict(hidden_size=hidden, num_layers=max(1, cfg["num_hidden_layers"] - 1), num_heads=3 if hidden % 3 == 0 else 2,
                num_kv_heads=1, intermediate_size=_sizes(cfg["intermediate_size"], 0.75, 8),
                vocab_size=cfg["vocab_size"], max_position_embeddings=cfg["max_position_embeddings"])
    model = build_model("llama", seed=ws.seed + 14, init_std=0.02, **dims)
    schedule = replace(ws.pretrain)
    train_lm(model.to(ws.device or "cpu"), ws.source_stream, schedule, seed=ws.seed + 14, teacher=ws.source,
             device=ws.device, description="distilling", progress=ws.progress)
    return Built(model, ws.tokenizer, {"shape": dims, "steps": schedule.steps})


@target("tokenizer")
def new_tokenizer(ws: Workshop) -> Built:
    if ws.transplant is None:
        raise Skipped("no tokenizer transplant was given to the workshop")
    other = train_tokenizer(ws.source_texts[::2], max(64, int(len(ws.tokenizer) * 0.75)), kind="sentencepiece-bpe")
    model, how = ws.transplant(ws.source, ws.tokenizer, other)
    schedule = ws.heal()
    train_lm(model, token_stream(other, ws.source_texts), schedule, seed=ws.seed + 15, device=ws.device,
             description="healing transplant", progress=ws.progress)
    return Built(model, other, {"tokenizer": f"sentencepiece-bpe, {len(other)} tokens", "transplant": how,
                                "heal_steps": schedule.steps})


@target("unrelated")
def unrelated(ws: Workshop) -> Built:
    cfg = _config(ws.source)
    dims = dict(hidden_size=cfg["hidden_size"], num_layers=cfg["num_hidden_layers"],
                num_heads=cfg["num_attention_heads"], num_kv_heads=cfg["num_key_value_heads"],
                intermediate_size=cfg["intermediate_size"], vocab_size=cfg["vocab_size"],
                max_position_embeddings=cfg["max_position_embeddings"])
    model = build_model("llama", seed=ws.seed + 1000, init_std=0.02, **dims)
    train_lm(model.to(ws.device or "cpu"), ws.source_stream, ws.pretrain, seed=ws.seed + 1016, device=ws.device,
             description="pretraining unrelated", progress=ws.progress)
    return Built(model, ws.tokenizer, {"init_seed": ws.seed + 1000, "steps": ws.pretrain.steps,
                                       "relative_weight_change": relative_change(ws.source, model)})
