"""Hostile and unbounded input files (issue 24): refused at once, from what the file really holds.

Each case runs a command in-process through ``paw.cli.main`` and must end like a row of the
bad-input table (``test_bad_inputs.py``): exit code 2, exactly one ``error: ...`` line naming the
file, no traceback, no ``unexpected`` exception, nothing at the output path, the inputs
byte-identical. The classes:

- GGUF headers whose counts, lengths or alignment lie (``paw eval``): a 2^31 - 1 block count used
  to grow past 2.5 GB for minutes, ``general.alignment = 0`` divided by zero;
- safetensors headers that are deeply nested JSON, 5,000-digit integers or 64 huge dimensions;
- BPE rank files that contradict themselves (``paw bpe encode``);
- distill prompt files with a 10 MB line, NUL bytes, non-UTF-8 or no text
  (``paw transfer-lora --method distill --prompts``), refused before a model is loaded;
- vocabulary maps with non-positive sizes or nesting deeper than the JSON parser's recursion.
"""

from __future__ import annotations

import base64
import json
import shutil
import struct
from pathlib import Path

import pytest

from tests.reliability.conftest import tree_hash

gguf = pytest.importorskip("gguf")

from tests.io.test_gguf import HOSTILE_HEADERS, write_gguf  # noqa: E402


def _patch_u32(raw: bytes, key: bytes, value: int) -> bytes:
    at = raw.index(key) + len(key)
    return raw[:at + 4] + value.to_bytes(4, "little") + raw[at + 8:]


def _st(path: Path, header_json: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(header_json)) + header_json + b"\0" * 4)


@pytest.fixture(scope="module")
def hx(tmp_path_factory, tiny_llama, tiny_lora):
    """The hostile inputs, built once; every command reads them and none may write here."""
    from paw.bpe import PATTERNS, train_tokenizer
    from paw.io.bpe_paw_model import write_paw_model
    from paw.io.bpe_tiktoken import write_tiktoken_ranks
    from paw.io.bpe_tokenizer_json import write_hf_tokenizer_json

    root = tmp_path_factory.mktemp("hostile") / "hx"
    root.mkdir()
    shutil.copytree(tiny_llama, root / "base")
    shutil.copytree(tiny_lora, root / "lora")
    (root / "mc.jsonl").write_text(json.dumps({"question": "Which is red?", "choices": ["red", "sky"], "answer": 0})
                                   + "\n")

    g = root / "gguf"
    g.mkdir()
    good = Path(write_gguf(tiny_llama, g / "good.gguf")).read_bytes()
    (g / "good.gguf").unlink()  # only the hostile ones stay
    (g / "blocks.gguf").write_bytes(_patch_u32(good, b"llama.block_count", 2**31 - 1))
    (g / "wide.gguf").write_bytes(_patch_u32(good, b"llama.embedding_length", 2**20))
    (g / "tensors.gguf").write_bytes(good[:8] + struct.pack("<Q", 2**31 - 1) + good[16:])
    (g / "kvs.gguf").write_bytes(good[:16] + struct.pack("<Q", 2**31 - 1) + good[24:])
    for name in ("alignment-zero", "string-array", "dims-overflow", "key-length", "overlap"):
        (g / f"{name}.gguf").write_bytes(HOSTILE_HEADERS[name][0])

    st = root / "st"
    _st(st / "deep" / "model.safetensors", b"[" * 100_000)
    _st(st / "bigint" / "model.safetensors", b'{"a": {"dtype": "F32", "shape": [1' + b"0" * 5000 + b'], '
                                                 b'"data_offsets": [0, 4]}}')
    dims = ",".join(["9" * 4000] * 64).encode()
    _st(st / "dims" / "model.safetensors", b'{"a": {"dtype": "F32", "shape": [' + dims + b'], "data_offsets": [0, 4]}}')
    for name in ("deep", "bigint", "dims"):
        shutil.copy(tiny_llama / "config.json", st / name / "config.json")

    tok = root / "tok"
    tok.mkdir()
    text = "the quick brown fox jumps over the lazy dog, 1234 times! " * 40
    bpe = train_tokenizer([text], 300, pattern=PATTERNS["gpt2"])
    write_tiktoken_ranks(tok / "good.tiktoken", bpe.mergeable_ranks)
    lines = (tok / "good.tiktoken").read_text().splitlines()
    (tok / "good.tiktoken").unlink()
    extra = base64.b64encode(b"zzqq").decode()
    (tok / "dup_rank.tiktoken").write_text("\n".join(lines + [f"{extra} 280"]) + "\n")
    (tok / "dup_token.tiktoken").write_text("\n".join(lines + [f"{lines[280].split()[0]} {len(lines)}"]) + "\n")
    (tok / "no_byte.tiktoken").write_text("\n".join(lines[:65] + lines[66:]) + "\n")
    model = write_paw_model(tok / "good", mergeable_ranks=bpe.mergeable_ranks, pattern=bpe.pattern,
                            special_tokens={}, merges=bpe.merges)
    mlines = model.read_text().splitlines()
    (tok / "rank_beyond.model").write_text("\n".join(mlines[:5] + ["0 99999"] + mlines[6:]) + "\n")
    (tok / "dup_byte.model").write_text("\n".join(mlines[:3] + ["bytes " + " ".join(["0"] * 256)] + mlines[4:]) + "\n")
    for p in (model, tok / "good.vocab"):
        p.unlink()
    hf = write_hf_tokenizer_json(tok / "hf" / "tokenizer.json", mergeable_ranks=bpe.mergeable_ranks,
                                 pattern=bpe.pattern, special_tokens={})
    data = json.loads(hf.read_text())
    data["model"]["merges"].append(["Ġzzq", "a"])
    hf.write_text(json.dumps(data))

    pr = root / "prompts"
    pr.mkdir()
    (pr / "long_line.txt").write_bytes(b"first prompt\n" + b"x" * (10 << 20) + b"\nlast\n")
    (pr / "nul.txt").write_bytes(b"a prompt\n" + b"\0" * 4096)
    (pr / "latin1.txt").write_bytes("one\ncaf\u00e9 au lait\n".encode("latin-1"))
    (pr / "empty.txt").write_bytes(b"")
    (pr / "blank.txt").write_bytes(b"\n   \n\t\n")

    vm = root / "maps"
    vm.mkdir()
    head = {"format": "paw-vocab-map", "version": 1, "source": "s", "target": "t", "entries": []}
    (vm / "neg_size.json").write_text(json.dumps({**head, "source_size": -5, "target_size": 300}))
    (vm / "deep.json").write_text('{"format": "paw-vocab-map", "version": 1, "entries": ' + "[" * 100_000)
    return root


def _cases() -> list[tuple[str, str, str]]:
    """``(id, argv, (file, fragment) the message must hold)``; ``{hx}`` and ``{out}`` are filled in."""
    c = []
    ev = "eval --device cpu --data {hx}/mc.jsonl --output {out} --model {hx}/gguf/"
    for name, expect in [("blocks", "llama.block_count: 2147483647, but the tensor table holds tensors for"),
                         ("wide", "but the metadata implies"),
                         ("tensors", "tensor_count: claims 2,147,483,647 tensors"),
                         ("kvs", "kv_count: claims 2,147,483,647 entries"),
                         ("alignment-zero", "general.alignment: 0 is not a positive power of two"),
                         ("string-array", "claims 1,152,921,504,606,846,976 entries"),
                         ("dims-overflow", "more elements than a signed 64-bit"),
                         ("key-length", "at most 65,535 allowed"),
                         ("overlap", "its data overlaps")]:
        c.append((f"eval-gguf-{name}", ev + f"{name}.gguf", f"{name}.gguf", expect))
    m = "merge --base {hx}/base --weights 1 --output {out} --models {hx}/st/"
    c.append(("merge-st-deep-json", m + "deep", "deep/model.safetensors", "RecursionError"))
    c.append(("merge-st-5000-digits", m + "bigint", "bigint/model.safetensors", "not JSON"))
    c.append(("merge-st-64-huge-dims", m + "dims", "dims/model.safetensors", "more than 2^64"))
    enc = "bpe encode --text hello --pattern gpt2 --tokenizer {hx}/tok/"
    c.append(("bpe-dup-rank", enc + "dup_rank.tiktoken", "dup_rank.tiktoken", "rank 280 is already the rank"))
    c.append(("bpe-dup-token", enc + "dup_token.tiktoken", "dup_token.tiktoken", "already has rank 280"))
    c.append(("bpe-missing-byte", enc + "no_byte.tiktoken", "no_byte.tiktoken", "single bytes are not tokens"))
    c.append(("bpe-merge-rank-beyond", enc + "rank_beyond.model", "rank_beyond.model",
              "line 6: the merge names rank 99999, which is not a token of the vocabulary"))
    c.append(("bpe-dup-byte", enc + "dup_byte.model", "dup_byte.model", "line 4 must list each of the bytes"))
    c.append(("bpe-hf-merge-not-token", enc + "hf/tokenizer.json", "tokenizer.json", "'Ġzzq' is not a token"))
    d = ("transfer-lora --method distill --adapter {hx}/lora --source-base {hx}/base --target-base {hx}/base "
         "--device cpu --output {out} --prompts {hx}/prompts/")
    c.append(("distill-10mb-line", d + "long_line.txt", "long_line.txt", "line 2 of the prompt file is longer than 65,536"))
    c.append(("distill-nul-bytes", d + "nul.txt", "nul.txt", "line 2 of the prompt file holds a NUL byte"))
    c.append(("distill-latin1", d + "latin1.txt", "latin1.txt", "line 2 of the prompt file is not UTF-8"))
    c.append(("distill-empty", d + "empty.txt", "empty.txt", "empty prompt file"))
    c.append(("distill-blank", d + "blank.txt", "blank.txt", "empty prompt file"))
    c.append(("distill-eval-prompts-nul", d.replace("--prompts {hx}/prompts/", "--prompts {hx}/mc.jsonl "
                                                    "--eval-prompts {hx}/prompts/") + "nul.txt", "nul.txt",
              "line 2 of the evaluation prompt file holds a NUL byte"))
    t = "transfer-lora --adapter {hx}/lora --source-base {hx}/base --target-base {hx}/base -o {out} --vocab-map "
    c.append(("vocab-map-negative-size", t + "{hx}/maps/neg_size.json", "neg_size.json",
              "source_size is -5, not a positive integer"))
    c.append(("vocab-map-deep-json", t + "{hx}/maps/deep.json", "deep.json", "not valid JSON"))
    return c


CASES = _cases()


@pytest.fixture(scope="module")
def hx_hash(hx):
    return tree_hash(hx)


@pytest.mark.parametrize("cid,argv,file,expect", CASES, ids=[c[0] for c in CASES])
def test_hostile_file(cli, hx, hx_hash, tmp_path, cid, argv, file, expect):
    out = tmp_path / "out"
    res = cli(*[a.replace("{hx}", str(hx)).replace("{out}", str(out)) for a in argv.split()])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2, (cid, res.exit_code, res.stdout[-500:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout, (cid, res.stderr)
    assert len([x for x in lines if x.startswith("error:")]) == 1 and lines[-1].startswith("error: "), (cid, lines)
    assert "unexpected" not in lines[-1], (cid, lines[-1])
    assert file in lines[-1] and expect in lines[-1], (cid, lines[-1])
    assert len(lines[-1]) < 600, (cid, len(lines[-1]))  # one readable line, not a dump of the header
    assert not out.exists(), cid
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], cid
    assert tree_hash(hx) == hx_hash, f"{cid} changed an input"


def test_a_10_mb_prompt_line_is_refused_with_bounded_memory(tmp_path):
    """The reader holds one line of at most 64 KiB + 3 bytes, whatever the file holds."""
    import tracemalloc

    from paw.errors import PawError
    from paw.io.distill_files import MAX_LINE_BYTES, read_prompt_lines

    path = tmp_path / "p.txt"
    path.write_bytes(b"ok\n" + b"y" * (10 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(PawError, match=f"line 2 .* longer than {MAX_LINE_BYTES:,} bytes"):
            read_prompt_lines(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_LINE_BYTES, peak


def test_the_prompt_line_limit_is_inclusive_and_crlf_is_a_line_end(tmp_path):
    from paw.errors import PawError
    from paw.io.distill_files import MAX_LINE_BYTES, read_prompt_lines

    path = tmp_path / "p.txt"
    path.write_bytes(b"a" * MAX_LINE_BYTES + b"\r\n" + "é".encode() * 3 + b"\n")
    assert read_prompt_lines(path) == ["a" * MAX_LINE_BYTES, "ééé"]
    path.write_bytes(b"a" * (MAX_LINE_BYTES + 1))
    with pytest.raises(PawError, match="line 1 "):
        read_prompt_lines(path)
