"""GGUF input: a zoo model written as GGUF with the ``gguf`` package reads back as the zoo model.

The writer below does what llama.cpp's converter does to a Llama or Gemma-3 checkpoint (llama.cpp
names, the rotary row permutation of Q and K, Gemma's norms stored as ``w + 1``, the vocabulary as
``tokenizer.ggml.*`` arrays), so reading it back tests PAW's use of transformers' inverse of each.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from paw.errors import PawError  # noqa: E402
from paw.io.checkpoint import open_checkpoint  # noqa: E402


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row order: per head, the two rotary halves interleaved."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(folder, out, *, arch: str = "llama", qtype=None, drop: tuple[str, ...] = ()) -> str:
    """Write the zoo model in ``folder`` as a GGUF file: 2-D weights as ``qtype``, norms as F32."""
    from transformers import AutoModelForCausalLM

    qtype = qtype if qtype is not None else gguf.GGMLQuantizationType.F32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    cfg = model.config
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(arch_id, cfg.num_hidden_layers)
    w = gguf.GGUFWriter(str(out), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = getattr(cfg, "rope_parameters", None) or {}
    rope = rope.get("full_attention", rope)  # Gemma-3: one entry per attention type
    w.add_rope_freq_base(float(getattr(cfg, "rope_theta", None) or rope["rope_theta"]))
    if arch == "gemma3":
        w.add_sliding_window(cfg.sliding_window)
    _add_tokenizer(w, folder)
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings or hf_name in drop:
            continue
        stem, suffix = hf_name.rsplit(".", 1)
        data = tensor.numpy().astype(np.float32)
        if arch == "llama" and ".q_proj." in hf_name:
            data = _permute(data, cfg.num_attention_heads)
        if arch == "llama" and ".k_proj." in hf_name:
            data = _permute(data, cfg.num_key_value_heads)
        if arch == "gemma3" and "norm" in hf_name:
            data = data + 1.0  # llama.cpp stores Gemma's (1 + w) gains as-is
        kind = qtype if data.ndim == 2 else gguf.GGMLQuantizationType.F32
        w.add_tensor(names.get_name(stem) + "." + suffix, gguf.quantize(data, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(out)


def _add_tokenizer(w, folder) -> None:
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = {**data["model"]["vocab"], **{t["content"]: t["id"] for t in data["added_tokens"]}}
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    special = {t["id"] for t in data["added_tokens"] if t["special"]}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in special else 1 for i in range(len(tokens))])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_pad_token_id(2)


@pytest.fixture(scope="module")
def llama_gguf(tiny_llama, tmp_path_factory):
    return write_gguf(tiny_llama, tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf")


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    """A 2-layer Gemma-3 text model (tied embeddings, q/k norms) with the zoo's byte-level tokenizer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from paw import zoo
    from paw.data import sample_texts

    tok = zoo.train_tokenizer(sample_texts("multi"), 300)
    cfg = Gemma3TextConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=16,
                           max_position_embeddings=256, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0, 0.1)
    return zoo.save_model(model, tmp_path_factory.mktemp("g3") / "gemma3", tokenizer=tok)


def _reference(folder):
    return open_checkpoint(folder)


def test_f32_gguf_reads_back_bit_identical_with_config(tiny_llama, llama_gguf):
    ref, got = _reference(tiny_llama), open_checkpoint(llama_gguf)
    assert sorted(got) == sorted(ref)  # untied: lm_head is stored as output.weight
    for name in ref:
        assert got.shape(name) == ref.shape(name)
        assert torch.equal(got[name], ref[name].float()), name  # includes the un-permuted q/k rows
    for key in ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "vocab_size", "tie_word_embeddings"):
        assert got.config[key] == ref.config[key], key
    assert got.dtype("model.embed_tokens.weight") == "float32" and not got.tied_embeddings


def test_f16_is_exact_in_half_and_q8_0_within_its_step(tiny_llama, tmp_path):
    ref = _reference(tiny_llama)
    f16 = open_checkpoint(write_gguf(tiny_llama, tmp_path / "m.F16.gguf", qtype=gguf.GGMLQuantizationType.F16))
    q8 = open_checkpoint(write_gguf(tiny_llama, tmp_path / "m.Q8_0.gguf", qtype=gguf.GGMLQuantizationType.Q8_0))
    worst = 0.0
    for name in ref:
        r = ref[name].float()
        assert torch.equal(f16[name], r.half().float() if r.ndim == 2 else r), name  # norms stay F32
        err = (q8[name] - r).abs()
        if r.ndim == 2:
            # Q8_0: blocks of 32 values as int8 times one fp16 scale d = amax/127. Rounding to the
            # int8 grid costs d/2; storing d in fp16 (relative error 2^-11) up to 127 * d * 2^-11 more.
            step = r.reshape(-1, 32).abs().amax(dim=1) / 127
            assert (err.reshape(-1, 32).amax(dim=1) <= step * (0.5 + 127 * 2**-11) + 1e-9).all(), name
            worst = max(worst, err.max().item())
        else:
            assert err.max().item() == 0.0, name  # norms stay F32
    assert worst > 0  # it really was quantized


def test_gemma3_norm_offset_tied_head_and_model_load(tiny_gemma3, tmp_path):
    from transformers import AutoModelForCausalLM

    from paw.io.gguf import load_gguf_model

    path = write_gguf(tiny_gemma3, tmp_path / "g3.gguf", arch="gemma3")
    ref, got = _reference(tiny_gemma3), open_checkpoint(path)
    assert got.config["model_type"] == "gemma3_text" and got.tied_embeddings
    assert sorted(got) == sorted(n for n in ref if n != "lm_head.weight")
    for name in got:  # norms: (w + 1) - 1 in float32 is within one ulp of 1, not always w itself
        assert torch.allclose(got[name], ref[name].float(), atol=1e-7, rtol=0), name
    model = load_gguf_model(path)
    hf = AutoModelForCausalLM.from_pretrained(tiny_gemma3, dtype=torch.float32).eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([[0, 5, 9, 42, 7]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, hf(ids).logits, atol=1e-5, rtol=1e-5)


def test_tokenizer_from_gguf_encodes_like_the_original(tiny_llama, llama_gguf):
    from paw.data import sample_texts
    from paw.io.tokenizer import open_tokenizer

    ref, got = open_tokenizer(tiny_llama), open_tokenizer(llama_gguf)
    texts = sample_texts("multi")
    assert got.encode_batch(texts) == ref.encode_batch(texts)
    # transformers' GPT-2 builder adds its default '<|endoftext|>' special when a vocabulary lacks it
    assert got.vocab[:ref.size] == ref.vocab and got.kind == "byte-level"
    assert got.embedding_rows == ref.embedding_rows == 300


def test_eval_and_logits_on_gguf_match_the_folder(tiny_llama, llama_gguf, tmp_path, cli):
    from paw.io.lm import load_lm

    lm, tok = load_lm(llama_gguf)
    ref, ref_tok = load_lm(tiny_llama)
    ids = torch.tensor([ref_tok("the cat sat on the mat")["input_ids"]])
    assert tok("the cat sat on the mat")["input_ids"] == ids[0].tolist()
    with torch.no_grad():
        torch.testing.assert_close(lm(ids).logits, ref(ids).logits, atol=1e-5, rtol=1e-5)
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps({"question": f"Which is {w}?", "choices": [w, "stone", "river"], "answer": 0})
                            + "\n" for w in ("red", "blue", "warm", "fast")))
    runs = []
    for model in (llama_gguf, tiny_llama):
        out = tmp_path / f"eval-{len(runs)}.json"
        assert cli("eval", "--model", model, "--data", data, "--output", out, "--device", "cpu").exit_code == 0
        runs.append(json.loads(out.read_text()))
    assert runs[0]["metrics"]["loss"] == pytest.approx(runs[1]["metrics"]["loss"], rel=1e-5)
    assert runs[0]["metrics"]["accuracy"] == runs[1]["metrics"]["accuracy"]


def test_task_vectors_merge_transfer_and_analyze_take_gguf(tiny_llama, llama_gguf, tiny_lora, tmp_path, cli):
    from transformers import AutoModelForCausalLM

    from paw import zoo

    ft = tmp_path / "ft"
    zoo.fine_tune(tiny_llama, ft, seed=5, scale=0.02)
    tv = [tmp_path / "tv-gguf", tmp_path / "tv-folder"]
    for base, out in zip((llama_gguf, tiny_llama), tv, strict=True):
        assert cli("task-vectors", "--base", base, "--models", ft, "--outdir", out, "--device", "cpu").exit_code == 0
    sums = [json.loads(next(p.glob("*/summary.json")).read_text()) for p in tv]
    assert sums[0]["global_l2"] == pytest.approx(sums[1]["global_l2"], rel=1e-6) and sums[0]["global_l2"] > 0

    merged = tmp_path / "merged"
    r = cli("merge", "--base", llama_gguf, "--models", ft, ft, "--output", merged, "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    assert (merged / "config.json").is_file() and (merged / "tokenizer.json").is_file()
    AutoModelForCausalLM.from_pretrained(merged)  # a plain HF folder again

    moved = tmp_path / "moved"
    r = cli("transfer-lora", "--adapter", tiny_lora, "--source-base", tiny_llama, "--target-base", llama_gguf,
            "-o", moved, "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    assert (moved / "adapter_model.safetensors").is_file()

    r = cli("analyze-tokenizers", "-s", llama_gguf, "-t", tiny_llama, "-o", tmp_path / "cmp", "--no-plots")
    assert r.exit_code == 0, r.stderr
    report = json.loads((tmp_path / "cmp" / "report.json").read_text())
    assert _find(report, "jaccard") == 1.0  # the same vocabulary, read from the GGUF


def test_unsupported_type_architecture_and_truncation_are_one_line(tiny_llama, llama_gguf, tmp_path, cli):
    bad_arch = tmp_path / "bloom.gguf"
    w = gguf.GGUFWriter(str(bad_arch), "bloom")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(PawError, match="architecture 'bloom' is not supported"):
        open_checkpoint(bad_arch)

    raw = open(llama_gguf, "rb").read()
    odd = tmp_path / "q8_1.gguf"  # same file, one tensor relabelled as Q8_1 (no dequantizer in gguf)
    info = raw.index(b"output_norm.weight")
    type_at = info + len("output_norm.weight") + 4 + 8  # n_dims (u32) + one dim (u64)
    odd.write_bytes(raw[:type_at] + (9).to_bytes(4, "little") + raw[type_at + 4:])
    with pytest.raises(PawError, match="Q8_1"):
        open_checkpoint(odd)

    short = tmp_path / "short.gguf"
    short.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(PawError, match="truncated"):
        open_checkpoint(short)
    r = cli("task-vectors", "--base", short, "--models", tiny_llama, "--outdir", tmp_path / "x")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "short.gguf" in r.stderr


def _find(obj, key):
    """The first value under ``key`` anywhere in a nested JSON object."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for v in obj:
            if (found := _find(v, key)) is not None:
                return found
    return None


def test_write_hf_folder_is_a_plain_bf16_model_folder(tiny_llama, llama_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paw.io.writer import write_hf_folder

    out = write_hf_folder(llama_gguf, tmp_path / "hf", extra_files={"paw_source.json": {"sha256": "x"}})
    ref = _reference(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(out)  # no gguf needed any more
    assert model.config.model_type == "llama" and json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    got = open_checkpoint(out)
    assert got.dtype("model.embed_tokens.weight") == "bfloat16"
    for name in ref:
        assert torch.equal(got[name], ref[name].to(torch.bfloat16)), name
    assert AutoTokenizer.from_pretrained(out)("the cat")["input_ids"] == \
        AutoTokenizer.from_pretrained(tiny_llama)("the cat")["input_ids"]


# ----- hostile headers: refused from the header alone, before anything big is allocated ----------
_U32, _U64, _STR, _ARR = 4, 10, 8, 9


def gguf_string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(8, "little") + raw


def raw_gguf(kvs=(), tensors=(), *, n_kv: int | None = None, n_tensors: int | None = None, data: bytes = b"",
             pad_to: int = 32) -> bytes:
    """GGUF v3 bytes by hand: ``kvs`` as ``(key, type, payload)``, ``tensors`` as ``(name, dims, type, offset)``.

    The counts default to the lists' lengths; pass ``n_kv``/``n_tensors`` to lie about them.
    """
    import struct

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors,
                                len(kvs) if n_kv is None else n_kv)
    for key, vtype, payload in kvs:
        out += gguf_string(key) + struct.pack("<I", vtype) + payload
    for name, dims, ggml_type, offset in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
    return out + b"\0" * (-len(out) % pad_to) + data


def _u32(v: int) -> bytes:
    return v.to_bytes(4, "little")


_ARCH = ("general.architecture", _STR, gguf_string("llama"))
_ONE_F32 = [("token_embd.weight", (32, 4), 0, 0)]  # 4 x 32 float32: 512 bytes


def _refused(tmp_path, name: str, raw: bytes, match: str):
    """Read ``raw`` as a GGUF: it must be a PawError matching ``match`` that names the file, with a
    small allocation peak whatever the header claims (tracemalloc counts every Python allocation)."""
    import tracemalloc

    from paw.io.gguf import read_gguf_header

    path = tmp_path / name
    path.write_bytes(raw)
    from gguf import GGML_QUANT_SIZES  # noqa: F401  (imported now: the peak below is the reading alone)

    tracemalloc.start()
    try:
        with pytest.raises(PawError, match=match) as info:
            read_gguf_header(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert peak < 8 << 20, f"{peak:,} bytes allocated to refuse {name}"
    return str(info.value)


HOSTILE_HEADERS = {
    # name: (bytes, expected fragment)
    "kv-count": (raw_gguf([_ARCH], n_kv=2**31 - 1), "kv_count: claims 2,147,483,647 entries"),
    "tensor-count": (raw_gguf([_ARCH], n_tensors=2**31 - 1), "tensor_count: claims 2,147,483,647 tensors"),
    "kv-count-max": (raw_gguf([_ARCH], n_kv=2**64 - 1), "kv_count"),
    "key-length": (b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little")
                   + (2**62).to_bytes(8, "little") + b"x" * 64, "metadata entry 0 key"),
    "string-length": (raw_gguf([("general.name", _STR, (2**40).to_bytes(8, "little") + b"abc")]),
                      "metadata 'general.name': needs 1,099,511,627,776 bytes"),
    "string-array": (raw_gguf([("tokenizer.ggml.tokens", _ARR, _u32(_STR) + (2**60).to_bytes(8, "little"))]),
                     "'tokenizer.ggml.tokens': claims 1,152,921,504,606,846,976 entries"),
    "scalar-array": (raw_gguf([("x.scores", _ARR, _u32(6) + (2**61).to_bytes(8, "little"))]), "'x.scores': claims"),
    "array-of-arrays": (raw_gguf([("x.nested", _ARR, _u32(_ARR) + (1).to_bytes(8, "little"))]), "array of value type 9"),
    "value-type": (raw_gguf([("x.odd", 77, b"\0" * 8)]), "unknown value type 77"),
    "duplicate-key": (raw_gguf([_ARCH, _ARCH]), "'general.architecture': appears twice"),
    "alignment-zero": (raw_gguf([_ARCH, ("general.alignment", _U32, _u32(0))], _ONE_F32, data=b"\0" * 512),
                       "general.alignment: 0 is not a positive power of two"),
    "alignment-three": (raw_gguf([_ARCH, ("general.alignment", _U32, _u32(3))], _ONE_F32, data=b"\0" * 512),
                        "general.alignment: 3 is not"),
    "alignment-string": (raw_gguf([_ARCH, ("general.alignment", _STR, gguf_string("32"))], _ONE_F32),
                         "general.alignment: '32' is not"),
    "five-dims": (raw_gguf([_ARCH], [("t", (1, 1, 1, 1, 1), 0, 0)]), "5 dimensions"),
    "dims-overflow": (raw_gguf([_ARCH], [("t", (2**40, 2**40), 0, 0)]), "more elements than a signed 64-bit"),
    "data-past-end": (raw_gguf([_ARCH], [("t", (2**20, 2**20), 0, 0)]), "ends past the end of the file"),
    "offset-past-end": (raw_gguf([_ARCH], [("t", (32, 4), 0, 2**62)], data=b"\0" * 512), "past the end"),
    "misaligned": (raw_gguf([_ARCH], [("t", (32, 4), 0, 4)], data=b"\0" * 516), "offset: 4 is not a multiple of"),
    "overlap": (raw_gguf([_ARCH], [("a", (32, 4), 0, 0), ("b", (32, 4), 0, 256)], data=b"\0" * 1024),
                "'b' offset: its data overlaps"),
    "duplicate-tensor": (raw_gguf([_ARCH], _ONE_F32 * 2, data=b"\0" * 1024), "appears twice in the tensor table"),
    "long-name": (raw_gguf([_ARCH], [("x" * 64, (32,), 0, 0)], data=b"\0" * 128), "at most 63 allowed"),
    "partial-block": (raw_gguf([_ARCH], [("q", (30, 4), 8, 0)], data=b"\0" * 512), "not whole blocks of 32"),
    "unknown-type": (raw_gguf([_ARCH], [("q", (32,), 99, 0)], data=b"\0" * 512), "unknown ggml type 99"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_HEADERS))
def test_hostile_header_is_refused_before_anything_is_allocated(tmp_path, name):
    raw, match = HOSTILE_HEADERS[name]
    assert len(raw) < 4096
    _refused(tmp_path, f"{name}.gguf", raw, re.escape(match))


def test_a_hand_written_header_that_is_sound_reads(tmp_path):
    from paw.io.gguf import read_gguf_header

    path = tmp_path / "ok.gguf"
    path.write_bytes(raw_gguf([_ARCH, ("general.alignment", _U32, _u32(64))], _ONE_F32, data=b"\0" * 512, pad_to=64))
    header = read_gguf_header(path)
    assert header.tensors["token_embd.weight"].shape == (4, 32) and header.tensors["token_embd.weight"].nbytes == 512
    assert header.metadata["general.alignment"] == 64 and header.tensors["token_embd.weight"].offset % 64 == 0


def _patch_u32(raw: bytes, key: bytes, value: int) -> bytes:
    at = raw.index(key) + len(key)
    assert int.from_bytes(raw[at:at + 4], "little") == _U32
    return raw[:at + 4] + value.to_bytes(4, "little") + raw[at + 8:]


@pytest.mark.parametrize("blocks", [2**31 - 1, 3, 0])
def test_block_count_beyond_the_tensor_table_is_refused_before_a_config_is_built(llama_gguf, tmp_path, blocks):
    """transformers builds per-layer lists and modules from the block count: 2^31 - 1 used to grow past 2.5 GB."""
    import tracemalloc

    path = tmp_path / "blocks.gguf"
    path.write_bytes(_patch_u32(open(llama_gguf, "rb").read(), b"llama.block_count", blocks))
    open_checkpoint(llama_gguf)  # imports and caches warmed up: the peak below is the refusal alone
    tracemalloc.start()
    try:
        with pytest.raises(PawError, match=f"llama.block_count: {blocks}, but the tensor table holds tensors for 2"):
            open_checkpoint(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak


def test_metadata_sizes_that_disagree_with_the_tensors_are_refused_before_the_model_is_allocated(llama_gguf,
                                                                                              tmp_path):
    """A writer-chosen embedding_length must not size the model: the meta model's shapes are checked first."""
    from paw.io.gguf import load_gguf_model

    raw = open(llama_gguf, "rb").read()
    path = tmp_path / "wide.gguf"
    path.write_bytes(_patch_u32(raw, b"llama.embedding_length", 2**20))
    with pytest.raises(PawError, match=r"has shape \[.*\] but the metadata implies \[.*1048576"):
        load_gguf_model(path)


def _probe_tokenizer(merge: bool):
    """A SentencePiece-style vocabulary holding the probe's words; ``merge=False`` splits them into
    characters anyway, as transformers 5.17 built Gemma-3-270M's tokenizer from its GGUF."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from paw.io.gguf import PROBE

    chars = sorted(set(PROBE.replace(" ", "\u2581")) | {"\u2581"})
    words = ["\u2581" + w for w in PROBE.rstrip(".").split()]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(chars + words + ["."]))}
    if merge:
        model = models.WordPiece(vocab, unk_token=chars[0], continuing_subword_prefix="##")
    else:
        model = models.BPE(vocab, merges=[])
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_a_tokenizer_built_from_a_gguf_that_splits_known_words_into_characters_is_refused(tmp_path):
    from paw.io.gguf import PROBE, check_gguf_tokenizer

    good = _probe_tokenizer(merge=True)
    assert len(good(PROBE, add_special_tokens=False)["input_ids"]) < 20   # a token per word: accepted
    check_gguf_tokenizer(good, tmp_path / "m.gguf")
    broken = _probe_tokenizer(merge=False)
    assert len(broken(PROBE, add_special_tokens=False)["input_ids"]) >= 0.8 * len(PROBE)
    with pytest.raises(PawError, match="splits text into single characters .* holds '.*' as tokens"):
        check_gguf_tokenizer(broken, tmp_path / "m.gguf")
