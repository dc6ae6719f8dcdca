"""Fixtures for transfer tests: a 3-layer zoo Llama, its LoRA, and helpers to build related targets."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

warnings.filterwarnings("ignore", message=".*save_embedding_layers.*")

HIDDEN, LAYERS, HEADS, KV, INTER = 32, 3, 4, 2, 64
# the distillation world: a source Llama and a wider target Qwen2 with another tokenizer
SOURCE_DIMS = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2)
TARGET_DIMS = dict(hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2)


@pytest.fixture(scope="session")
def troot(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("transfer")


@pytest.fixture(scope="session")
def src(troot) -> Path:
    """Source base: Llama, hidden 32, 3 layers, 4 query heads over 2 KV heads, MLP 64, untied head."""
    from paw import zoo

    return zoo.tiny_model(troot / "src", "llama", seed=11, hidden_size=HIDDEN, num_layers=LAYERS,
                          num_heads=HEADS, num_kv_heads=KV, intermediate_size=INTER)


@pytest.fixture(scope="session")
def src_lora(troot, src) -> Path:
    """Rank-4 LoRA on all seven projections of every layer of ``src``."""
    from paw import zoo

    return zoo.make_lora(src, troot / "src-lora", rank=4, alpha=8, seed=12, scale=0.2)


@pytest.fixture(scope="session")
def state(src):
    """``(state dict, config dict)`` of the source (float32 tensors)."""
    from paw.io.checkpoint import open_checkpoint

    ckpt = open_checkpoint(src)
    return {k: ckpt[k].float().clone() for k in ckpt}, dict(ckpt.config)


@pytest.fixture(scope="session")
def save_state(src):
    """``save_state(sd, cfg, folder)``: a loadable HF folder from a state dict and config (source tokenizer)."""
    def save(sd: dict, cfg: dict, folder: Path) -> Path:
        import transformers

        from paw import zoo

        config = transformers.AutoConfig.for_model(**cfg)
        model = transformers.AutoModelForCausalLM.from_config(config)
        missing, unexpected = model.load_state_dict(sd, strict=False)
        assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
        tokenizer = transformers.AutoTokenizer.from_pretrained(src)
        return zoo.save_model(model.eval(), folder, tokenizer=tokenizer)

    return save


@pytest.fixture(scope="session")
def logits():
    """``logits(base, adapter=None)``: float64 logits of two fixed sequences (PEFT applies the adapter)."""
    def run(base: Path, adapter: Path | None = None):
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
        if adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter).eval()
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(4, 250, (2, 12), generator=gen)
        with torch.no_grad():
            return model(input_ids=ids).logits.double()

    return run


@pytest.fixture(scope="session")
def trained(src):
    """``(state dict, config)`` of ``src`` trained 120 steps on the embedded text: layers with real structure."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paw.bench.lm import Schedule, token_stream, train_lm
    from paw.data import sample_texts
    from paw.device import single_threaded_cpu

    model = AutoModelForCausalLM.from_pretrained(src).float()
    stream = token_stream(AutoTokenizer.from_pretrained(src), sample_texts("en") * 4)
    torch.manual_seed(0)
    with single_threaded_cpu(["cpu"]):  # tiny steps: one thread is several times faster on a busy machine
        train_lm(model, stream, Schedule(steps=120, batch_size=8, seq_len=32, lr=3e-3, warmup=10), seed=0,
                 progress=False)
    return {k: v.detach().float().clone() for k, v in model.state_dict().items()}, model.config.to_dict()


@pytest.fixture(scope="session")
def trained_lora(troot, trained, save_state) -> Path:
    from paw import zoo

    sd, cfg = trained
    return zoo.make_lora(save_state(sd, cfg, troot / "trained"), troot / "trained-lora", rank=4, alpha=8, seed=12,
                         scale=0.2)


def rotate(sd: dict, seed: int = 0) -> dict:
    """The same function in a rotated residual basis: x_t = Q x_s, RMSNorm gains folded into the readers."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    Q = torch.linalg.qr(torch.randn(HIDDEN, HIDDEN, generator=gen)).Q
    out = dict(sd)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        g_in, g_post = sd[p + "input_layernorm.weight"], sd[p + "post_attention_layernorm.weight"]
        for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            out[p + m + ".weight"] = sd[p + m + ".weight"] * g_in @ Q.T
        for m in ("mlp.gate_proj", "mlp.up_proj"):
            out[p + m + ".weight"] = sd[p + m + ".weight"] * g_post @ Q.T
        for m in ("self_attn.o_proj", "mlp.down_proj"):
            out[p + m + ".weight"] = Q @ sd[p + m + ".weight"]
        out[p + "input_layernorm.weight"] = torch.ones(HIDDEN)
        out[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN)
    out["model.embed_tokens.weight"] = sd["model.embed_tokens.weight"] @ Q.T
    out["lm_head.weight"] = sd["lm_head.weight"] * sd["model.norm.weight"] @ Q.T
    out["model.norm.weight"] = torch.ones(HIDDEN)
    return out


@pytest.fixture(scope="session")
def rotated(troot, state, save_state) -> Path:
    sd, cfg = state
    return save_state(rotate(sd), cfg, troot / "rotated")


@pytest.fixture(scope="session")
def drifted(troot, src) -> Path:
    """Continued-training stand-in: every weight moved by 17% of its std."""
    from paw import zoo

    zoo.fine_tune(src, troot / "drifted", seed=21, scale=0.17)
    return troot / "drifted"


@pytest.fixture(scope="session")
def independent(troot) -> Path:
    """Same architecture and tokenizer size, independently initialised."""
    from paw import zoo

    return zoo.tiny_model(troot / "independent", "llama", seed=99, hidden_size=HIDDEN, num_layers=LAYERS,
                          num_heads=HEADS, num_kv_heads=KV, intermediate_size=INTER)


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """Source Llama (byte-level BPE) with a LoRA that learned 16 colour facts; target Qwen2 (SentencePiece, wider)."""
    import copy

    from peft import get_peft_model_state_dict

    from paw import zoo
    from paw.data import sample_texts
    from paw.evaluate.synthetic import fact_task, tokenizer_corpus
    from paw.evaluate.train import train_lora
    from paw.io.adapter import LoraAdapter, lora_config_dict, write_adapter
    from paw.io.mcdata import write_items

    root = tmp_path_factory.mktemp("distill")
    task = fact_task("colour", n=16, seed=0)
    texts = sample_texts("multi") + tokenizer_corpus(task)
    tok_s = zoo.train_tokenizer(texts, 300, kind="byte-bpe")
    tok_t = zoo.train_tokenizer(texts, 300, kind="sentencepiece-bpe")
    source = zoo.build_model("llama", seed=0, init_std=0.2, vocab_size=len(tok_s), **SOURCE_DIMS)
    target = zoo.build_model("qwen2", seed=1, init_std=0.2, vocab_size=len(tok_t), **TARGET_DIMS)
    zoo.save_model(source, root / "source", tokenizer=tok_s)
    zoo.save_model(target, root / "target", tokenizer=tok_t)
    peft_model, _ = train_lora(copy.deepcopy(source), tok_s, task, rank=4, alpha=8, steps=60, batch_size=8, lr=1e-2,
                               seed=0, progress=False)
    tensors = {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
    config = lora_config_dict(r=4, alpha=8, target_modules=zoo.ALL_LINEAR, base_model=str(root / "source"))
    write_adapter(root / "lora", LoraAdapter(config=config, tensors=tensors))
    (root / "questions.txt").write_text("".join(item.question + "\n" for item in task))  # no answers
    write_items(root / "items.jsonl", task)
    return {"root": root, "task": task, "source": root / "source", "target": root / "target", "lora": root / "lora"}
