"""The bad-input table: every command, fed what a careless user or an attacker would feed it.

Each case must end with exit code 2 and one line ``error: ...`` on stderr: no traceback, no
"unexpected" library exception, no input changed (``fx`` is hashed before and after), nothing
left at the output path, and no pickle payload run. Commands run in-process through
``paw.cli.main``; the inputs are built once per session (``conftest.py``).
"""

from __future__ import annotations

import pytest

from tests.reliability.conftest import tree_hash

M = ["--device", "cpu"]


def _cases() -> list[tuple[str, list[str], str]]:
    """``(id, argv, fragment expected in the message or '')``; ``{fx}`` and ``{out}`` are filled in."""
    c: list[tuple[str, list[str], str]] = []

    def add(cid: str, argv: str | list[str], expect: str = "") -> None:
        c.append((cid, argv.split() if isinstance(argv, str) else argv, expect))

    bad_models = ["neg_offset", "str_offset", "float_offset", "past_end", "reversed", "bool_offset", "overlap",
                  "bad_dtype", "bad_shape", "str_shape", "meta_nonstr", "trailing", "truncated", "not_json",
                  "not_object", "huge_length", "empty_file", "idx_escape", "idx_abs", "idx_missing", "idx_int",
                  "idx_nomap", "evil_bin", "garbage_bin", "list_bin", "empty_dir", "config_only"]
    # ---- merge: every corrupt model as a fine-tune, a few as the base
    for name in bad_models:
        add(f"merge-model-{name}", f"merge --base {{fx}}/base --models {{fx}}/bad/{name} --output {{out}} --weights 1")
    for name in ("neg_offset", "overlap", "str_offset", "idx_escape", "evil_bin", "truncated"):
        add(f"merge-base-{name}", f"merge --base {{fx}}/bad/{name} --models {{fx}}/ft --output {{out}} --weights 1")
    # ---- merge: mergekit's MODEL+LORA references with broken adapters, and over the adapter itself
    for name in ("r_string", "missing_b", "dora", "a_3d", "bad_weights", "evil_bin", "no_config"):
        add(f"merge-model-plus-{name}", f"merge --base {{fx}}/base --models {{fx}}/base+{{fx}}/adapters/{name} "
            "--output {out} --weights 1")
    add("merge-model-plus-three", "merge --base {fx}/base --models {fx}/base+{fx}/lora+{fx}/lora --output {out}",
        "one '+'")
    add("merge-over-lora", "merge --base {fx}/base --models {fx}/base+{fx}/lora --output {fx}/lora --overwrite",
        "never modifies its inputs")
    add("merge-into-input-folder", "merge --base {fx}/victim/base --models {fx}/victim/finetune --output {fx}/victim "
        "--overwrite", "never modifies its inputs")
    add("merge-into-base", "merge --base {fx}/victim/base --models {fx}/ft --output {fx}/victim/base --overwrite",
        "never modifies its inputs")
    add("merge-inside-model", "merge --base {fx}/base --models {fx}/ft --output {fx}/ft/merged --overwrite",
        "never modifies its inputs")
    add("merge-over-stats-dir", "merge --base {fx}/base --models {fx}/ft --stats-dir {fx}/victim "
        "--output {fx}/victim --overwrite", "never modifies its inputs")
    add("merge-weights-nan", "merge --base {fx}/base --models {fx}/ft {fx}/ft2 --output {out} --weights nan nan",
        "not a finite number")
    add("merge-weights-inf", "merge --base {fx}/base --models {fx}/ft {fx}/ft2 --output {out} --weights inf 1",
        "not a finite number")
    add("merge-scale-inf", "merge --base {fx}/base --models {fx}/ft --output {out} --scale inf", "not a finite")
    add("merge-scale-nan", "merge --base {fx}/base --models {fx}/ft --output {out} --scale nan", "not a finite")
    add("merge-scale-huge", "merge --base {fx}/base --models {fx}/ft --output {out} --scale 1e39", "too large")
    add("merge-weight-huge", "merge --base {fx}/base --models {fx}/ft --output {out} --weights -1e300", "too large")
    add("merge-beta-nan", "merge --base {fx}/base --models {fx}/ft --output {out} --beta nan", "not a finite")
    add("merge-alpha-inf", "merge --base {fx}/base --models {fx}/ft --output {out} --mode power --alpha inf")
    add("merge-density-nan", "merge --base {fx}/base --models {fx}/ft --output {out} --method ties --density nan")
    add("merge-l2-nan", "merge --base {fx}/base --models {fx}/ft --output {out} --l2-norms nan", "not a finite")
    add("merge-l2-negative", "merge --base {fx}/base --models {fx}/ft {fx}/ft2 --output {out} --l2-norms -1 2")
    add("merge-nan-model-equal", "merge --base {fx}/base --models {fx}/nan_ft {fx}/ft --output {out} --mode equal",
        "NaN/Inf")
    add("merge-nan-model-norms", "merge --base {fx}/base --models {fx}/nan_ft {fx}/ft --output {out}", "nan_ft")
    add("merge-inf-model-weights", "merge --base {fx}/base --models {fx}/inf_ft --output {out} --weights 1",
        "NaN/Inf")
    add("merge-nan-model-ties", "merge --base {fx}/base --models {fx}/nan_ft {fx}/ft --output {out} --method ties "
        "--weights 1 1", "NaN/Inf")
    add("merge-nan-base", "merge --base {fx}/nan_ft --models {fx}/ft --output {out} --weights 1", "NaN/Inf")
    add("merge-shard-abc", "merge --base {fx}/base --models {fx}/ft --output {out} --max-shard-size abc",
        "max-shard-size")
    add("merge-shard-zero", "merge --base {fx}/base --models {fx}/ft --output {out} --max-shard-size 0")
    add("merge-shard-negative", "merge --base {fx}/base --models {fx}/ft --output {out} --max-shard-size -5MB")
    add("merge-parent-is-file", "merge --base {fx}/base --models {fx}/ft --output {fx}/data/corpus.txt/out",
        "is a file")
    add("merge-unwritable", "merge --base {fx}/base --models {fx}/ft --output /proc/paw-merge-out --weights 1")
    add("merge-name-too-long", ["merge", "--base", "{fx}/base", "--models", "{fx}/ft", "--output",
                                "{out}/" + "n" * 300, "--weights", "1"], "too long")
    add("merge-shape-mismatch", "merge --base {fx}/base --models {fx}/other --output {out} --weights 1")
    add("merge-bad-config", "merge --base {fx}/base --models {fx}/ft --output {out} --config {fx}/data/bad.yaml")
    add("merge-list-config", "merge --base {fx}/base --models {fx}/ft --output {out} --config {fx}/data/list.yaml")
    add("merge-config-unknown", "merge --base {fx}/base --models {fx}/ft --output {out} "
        "--config {fx}/data/unknown_key.yaml")
    add("merge-config-nan", "merge --base {fx}/base --models {fx}/ft {fx}/ft2 --output {out} "
        "--config {fx}/data/nan_weights.yaml", "not a finite")
    add("merge-config-missing", "merge --base {fx}/base --models {fx}/ft --output {out} --config {fx}/nothing.yaml")
    add("merge-density-abc", "merge --base {fx}/base --models {fx}/ft --output {out} --density abc")
    add("merge-unknown-flag", "merge --base {fx}/base --models {fx}/ft --output {out} --frobnicate")
    add("merge-missing-model", "merge --base {fx}/base --models {fx}/nope --output {out}")
    add("merge-stats-dir-missing", "merge --base {fx}/base --models {fx}/ft --output {out} --stats-dir {fx}/data")

    # ---- task-vectors
    for name in ("neg_offset", "overlap", "str_offset", "float_offset", "truncated", "idx_escape", "evil_bin",
                 "not_json", "bad_dtype"):
        add(f"tv-model-{name}", f"task-vectors --base {{fx}}/base --models {{fx}}/bad/{name} --outdir {{out}}")
    add("tv-outdir-is-model", "task-vectors --base {fx}/victim/base --models {fx}/victim/finetune "
        "--outdir {fx}/victim/finetune --overwrite", "never modifies its inputs")
    add("tv-outdir-contains", "task-vectors --base {fx}/victim/base --models {fx}/victim/finetune "
        "--outdir {fx}/victim --overwrite", "never modifies its inputs")
    add("tv-outdir-file", "task-vectors --base {fx}/base --models {fx}/ft --outdir {fx}/data/corpus.txt",
        "not a folder")
    add("tv-top-k-zero", "task-vectors --base {fx}/base --models {fx}/ft --outdir {out} --top-k 0")
    add("tv-bad-regex", "task-vectors --base {fx}/base --models {fx}/ft --outdir {out} --include [")
    add("tv-shape-mismatch", "task-vectors --base {fx}/base --models {fx}/other --outdir {out}")
    add("tv-unwritable", "task-vectors --base {fx}/base --models {fx}/ft --outdir /proc/paw-tv-out")

    # ---- transfer-lora
    t = "transfer-lora --source-base {fx}/base --target-base {fx}/ft"
    for name in ("r_changed", "r_string", "r_zero", "alpha_nan", "alpha_str", "targets_wrong", "targets_int",
                 "rank_pattern_bad", "dora", "ia3", "config_not_json", "config_list", "missing_b", "a_3d",
                 "bad_weights", "no_config", "no_weights", "evil_bin"):
        add(f"transfer-adapter-{name}", f"{t} --adapter {{fx}}/adapters/{name} -o {{out}}")
    add("transfer-nan-adapter", f"{t} --adapter {{fx}}/adapters/nan_tensor -o {{out}}", "NaN/Inf")
    add("transfer-nan-target", "transfer-lora --adapter {fx}/lora --source-base {fx}/base --target-base "
        "{fx}/nan_ft -o {out} --method lora-x", "NaN/Inf")
    add("transfer-nan-target-auto", "transfer-lora --adapter {fx}/lora --source-base {fx}/base --target-base "
        "{fx}/nan_ft -o {out}", "")
    add("transfer-ridge-nan", f"{t} --adapter {{fx}}/lora -o {{out}} --ridge nan", "not a finite")
    add("transfer-ridge-inf", f"{t} --adapter {{fx}}/lora -o {{out}} --ridge inf", "not a finite")
    add("transfer-ridge-negative", f"{t} --adapter {{fx}}/lora -o {{out}} --ridge -1")
    add("transfer-min-sim-nan", f"{t} --adapter {{fx}}/lora -o {{out}} --min-similarity nan")
    add("transfer-over-adapter", f"{t} --adapter {{fx}}/lora -o {{fx}}/lora --overwrite", "never modifies")
    add("transfer-into-adapter", f"{t} --adapter {{fx}}/lora -o {{fx}}/lora/moved", "never modifies")
    add("transfer-over-target", f"{t} --adapter {{fx}}/lora -o {{fx}}/ft --overwrite", "never modifies")
    for name in ("neg_offset", "overlap", "str_offset", "float_offset", "evil_bin", "idx_escape"):
        add(f"transfer-target-{name}", f"transfer-lora --adapter {{fx}}/lora --source-base {{fx}}/base "
            f"--target-base {{fx}}/bad/{name} -o {{out}}")
    add("transfer-bad-map", f"{t} --adapter {{fx}}/lora -o {{out}} --vocab-map {{fx}}/data/bad_map.json")
    add("transfer-map-not-json", f"{t} --adapter {{fx}}/lora -o {{out}} --vocab-map {{fx}}/data/not_json.json")
    add("transfer-parent-is-file", f"{t} --adapter {{fx}}/lora -o {{fx}}/data/corpus.txt/x", "is a file")
    add("transfer-unwritable", f"{t} --adapter {{fx}}/lora -o /proc/paw-transfer-out")
    add("transfer-unknown-method", f"{t} --adapter {{fx}}/lora -o {{out}} --method magic")

    # ---- adapter check / resize-base
    for name in ("r_changed", "r_string", "alpha_nan", "targets_wrong", "missing_b", "a_3d", "bad_weights",
                 "no_config", "ia3", "evil_bin", "config_not_json"):
        add(f"adapter-check-{name}", f"adapter check --adapter {{fx}}/adapters/{name} --base {{fx}}/base")
    for name in ("neg_offset", "str_offset", "overlap", "idx_escape"):
        add(f"adapter-check-base-{name}", f"adapter check --adapter {{fx}}/lora --base {{fx}}/bad/{name}")
    add("resize-base-into-base", "adapter resize-base --adapter {fx}/lora --base {fx}/victim/base "
        "--output {fx}/victim/base --overwrite")
    add("resize-base-bad-adapter", "adapter resize-base --adapter {fx}/adapters/r_string --base {fx}/base "
        "--output {out}")

    # ---- eval / train-lora
    add("eval-binary-data", "eval --model {fx}/base --data {fx}/data/binary.jsonl", "")
    add("eval-empty-data", "eval --model {fx}/base --data {fx}/data/empty.jsonl")
    add("eval-bad-json", "eval --model {fx}/base --data {fx}/data/bad_json.jsonl")
    add("eval-no-fields", "eval --model {fx}/base --data {fx}/data/no_fields.jsonl")
    add("eval-bad-answer", "eval --model {fx}/base --data {fx}/data/bad_answer.jsonl")
    add("eval-list-line", "eval --model {fx}/base --data {fx}/data/list_line.jsonl")
    add("eval-missing-data", "eval --model {fx}/base --data {fx}/data/nothing.jsonl")
    add("eval-data-is-dir", "eval --model {fx}/base --data {fx}/data")
    for name in ("neg_offset", "truncated", "evil_bin", "garbage_bin", "not_json", "overlap", "bad_config",
                 "empty_dir"):
        add(f"eval-model-{name}", f"eval --model {{fx}}/bad/{name} --data {{fx}}/data/mc.jsonl")
    for name in ("r_changed", "r_string", "evil_bin", "bad_weights"):
        add(f"eval-adapter-{name}", f"eval --model {{fx}}/base --data {{fx}}/data/mc.jsonl "
            f"--adapter {{fx}}/adapters/{name}")
    add("eval-output-over-data", "eval --model {fx}/base --data {fx}/data/mc.jsonl --output {fx}/data/mc.jsonl "
        "--overwrite", "never modifies")
    add("eval-output-in-model", "eval --model {fx}/base --data {fx}/data/mc.jsonl --output {fx}/base/r.json",
        "never modifies")
    add("eval-bad-format", "eval --model {fx}/base --data {fx}/data/mc.jsonl --format nonsense")
    add("eval-bad-dtype", "eval --model {fx}/base --data {fx}/data/mc.jsonl --dtype int3")
    add("eval-bad-track", "eval --model {fx}/base --data {fx}/data/mc.jsonl --track wandb")
    add("eval-limit-zero", "eval --model {fx}/base --data {fx}/data/mc.jsonl --limit 0")
    ev = "eval --model {fx}/base"
    add("eval-text-binary", f"{ev} --text {{fx}}/data/binary.txt", "UTF-8")
    add("eval-text-empty", f"{ev} --text {{fx}}/data/empty.txt", "no text")
    add("eval-text-missing", f"{ev} --text {{fx}}/data/nothing.txt", "nothing.txt")
    add("eval-text-bad-jsonl", f"{ev} --text {{fx}}/data/bad_json.jsonl", "line 1")
    add("eval-text-list-jsonl", f"{ev} --text {{fx}}/data/list_line.jsonl", "line 1")
    add("eval-text-and-data", f"{ev} --text {{fx}}/data/corpus.txt --data {{fx}}/data/mc.jsonl", "--data")
    add("eval-text-fewshot", f"{ev} --text {{fx}}/data/corpus.txt --num-fewshot 2", "--num-fewshot")
    add("eval-max-length-zero", f"{ev} --text {{fx}}/data/corpus.txt --max-length 0")
    add("eval-fewshot-no-source", f"{ev} --data {{fx}}/data/mc.jsonl --num-fewshot 2", "--fewshot-data")
    add("eval-fewshot-source-alone", f"{ev} --data {{fx}}/data/mc.jsonl --fewshot-data {{fx}}/data/mc.jsonl",
        "--num-fewshot")
    add("eval-fewshot-missing", f"{ev} --data {{fx}}/data/mc.jsonl --num-fewshot 2 --fewshot-data "
        "{fx}/data/nothing.jsonl", "nothing.jsonl")
    add("eval-fewshot-too-many", f"{ev} --data {{fx}}/data/mc.jsonl --num-fewshot 6 --fewshot-data "
        "{fx}/data/mc.jsonl", "holds only 5")
    add("eval-fewshot-negative", f"{ev} --data {{fx}}/data/mc.jsonl --num-fewshot -1 --fewshot-data "
        "{fx}/data/mc.jsonl")
    tl = "train-lora --model {fx}/base --data {fx}/data/mc.jsonl --steps 1"
    add("train-lr-nan", f"{tl} --output {{out}} --lr nan", "not a finite")
    add("train-lr-inf", f"{tl} --output {{out}} --lr inf", "not a finite")
    add("train-lr-negative", f"{tl} --output {{out}} --lr -1", "positive")
    add("train-alpha-nan", f"{tl} --output {{out}} --alpha nan", "not a finite")
    add("train-rank-zero", f"{tl} --output {{out}} --rank 0")
    add("train-steps-zero", f"{tl} --output {{out}} --steps 0")
    add("train-into-model", f"{tl} --output {{fx}}/base/lora", "never modifies")
    add("train-over-data", f"{tl} --output {{fx}}/data/mc.jsonl --overwrite", "never modifies")
    add("train-binary-data", "train-lora --model {fx}/base --data {fx}/data/binary.jsonl --output {out}")
    add("train-empty-data", "train-lora --model {fx}/base --data {fx}/data/empty.jsonl --output {out}")
    for name in ("neg_offset", "evil_bin", "truncated", "garbage_bin"):
        add(f"train-model-{name}", f"train-lora --model {{fx}}/bad/{name} --data {{fx}}/data/mc.jsonl "
            f"--output {{out}}")
    add("train-bad-targets", f"{tl} --output {{out}} --target-modules nothing_like_this")
    add("train-unwritable", f"{tl} --output /proc/paw-train-out")

    # ---- bpe
    add("bpe-train-binary", "bpe train {fx}/data/binary.txt --vocab-size 300 --output {out}/tok", "UTF-8")
    add("bpe-train-empty", "bpe train {fx}/data/empty.txt --vocab-size 300 --output {out}/tok", "empty")
    add("bpe-train-missing", "bpe train {fx}/data/nothing.txt --vocab-size 300 --output {out}/tok")
    add("bpe-train-vocab-small", "bpe train {fx}/data/corpus.txt --vocab-size 10 --output {out}/tok")
    add("bpe-train-vocab-absurd", "bpe train {fx}/data/corpus.txt --vocab-size 99999999999 --output {out}/tok",
        "32-bit")
    add("bpe-train-vocab-negative", "bpe train {fx}/data/corpus.txt --vocab-size -5 --output {out}/tok")
    add("bpe-train-over-corpus", "bpe train {fx}/data/text.vocab --vocab-size 300 --output {fx}/data/text "
        "--overwrite", "never modifies")
    add("bpe-train-export-over-input", "bpe train {fx}/data/corpus.txt --vocab-size 300 --output {out}/tok "
        "--export-hf {fx}/data --overwrite", "never modifies")
    add("bpe-train-parent-file", "bpe train {fx}/data/text.vocab --vocab-size 300 --output {fx}/data/corpus.txt/x",
        "is a file")
    add("bpe-train-unwritable", "bpe train {fx}/data/corpus.txt --vocab-size 300 --output /proc/paw-bpe/tok")
    add("bpe-train-bad-pattern", "bpe train {fx}/data/corpus.txt --vocab-size 300 --output {out}/tok --pattern (")
    add("bpe-train-name-too-long", ["bpe", "train", "{fx}/data/corpus.txt", "--vocab-size", "300", "--output",
                                    "{out}/" + "t" * 300], "too long")
    add("bpe-encode-bad-model", "bpe encode --tokenizer {fx}/tok/bad.model --text hi")
    add("bpe-encode-empty-model", "bpe encode --tokenizer {fx}/tok/empty.model --text hi")
    add("bpe-encode-bad-tiktoken", "bpe encode --tokenizer {fx}/tok/bad.tiktoken --text hi --pattern gpt2")
    add("bpe-encode-unigram", "bpe encode --tokenizer {fx}/tok/unigram/tokenizer.json --text hi")
    add("bpe-encode-garbage-json", "bpe encode --tokenizer {fx}/tok/garbage/tokenizer.json --text hi")
    add("bpe-encode-binary-json", "bpe encode --tokenizer {fx}/tok/notjson/tokenizer.json --text hi")
    add("bpe-encode-missing", "bpe encode --tokenizer {fx}/tok/nothing.model --text hi")
    add("bpe-encode-binary-input", "bpe encode --tokenizer {fx}/tok/bad.model --input {fx}/data/binary.txt")
    add("bpe-decode-bad-ids", "bpe decode --tokenizer {fx}/tok/bad.model --ids x y")
    add("bpe-compare-bad-tokenizer", "bpe compare --tokenizers {fx}/tok/bad.model {fx}/data/corpus.txt "
        "--plot {out}/p.png")
    add("bpe-compare-binary-text", "bpe compare --tokenizers {fx}/tok/unigram/tokenizer.json {fx}/data/binary.txt "
        "--plot {out}/p.png")

    # ---- tokenizer commands
    add("analyze-garbage", "analyze-tokenizers -s {fx}/tok/garbage/tokenizer.json -t {fx}/base -o {out}")
    add("analyze-binary-json", "analyze-tokenizers -s {fx}/tok/notjson/tokenizer.json -t {fx}/base -o {out}")
    add("analyze-missing", "analyze-tokenizers -s {fx}/tok/nothing -t {fx}/base -o {out}")
    add("analyze-binary-corpus", "analyze-tokenizers -s {fx}/base -t {fx}/other -o {out} "
        "--corpus {fx}/data/binary.txt")
    add("analyze-into-input", "analyze-tokenizers -s {fx}/victim/base -t {fx}/other -o {fx}/victim --overwrite",
        "never modifies")
    add("align-garbage", "align-vocab -s {fx}/base -t {fx}/tok/garbage/tokenizer.json -o {out}/map.json")
    add("align-bad-method", "align-vocab -s {fx}/base -t {fx}/other -o {out}/map.json --method nonsense")
    add("align-over-input", "align-vocab -s {fx}/base -t {fx}/other -o {fx}/base/tokenizer.json --overwrite",
        "never modifies")
    add("align-binary-corpus", "align-vocab -s {fx}/base -t {fx}/other -o {out}/map.json --method frequency "
        "--corpus {fx}/data/binary.txt")
    tp = "transplant-tokenizer --model {fx}/base"
    add("transplant-garbage", f"{tp} --tokenizer {{fx}}/tok/garbage/tokenizer.json -o {{out}} --no-check")
    add("transplant-bad-map", f"{tp} --tokenizer {{fx}}/other -o {{out}} --vocab-map {{fx}}/data/bad_map.json --no-check")
    add("transplant-over-model", f"{tp} --tokenizer {{fx}}/other -o {{fx}}/base --overwrite --no-check", "never modifies")
    add("transplant-bad-model", "transplant-tokenizer --model {fx}/bad/neg_offset --tokenizer {fx}/other -o {out} --no-check")
    add("transplant-bad-init", f"{tp} --tokenizer {{fx}}/other -o {{out}} --init nonsense")
    ex = "extend-tokenizer --model {fx}/base"
    add("extend-tokens-dict", f"{ex} --output {{out}} --tokens-file {{fx}}/data/tokens_dict.json")
    add("extend-tokens-binary", f"{ex} --output {{out}} --tokens-file {{fx}}/data/binary.txt")
    add("extend-tokens-missing", f"{ex} --output {{out}} --tokens-file {{fx}}/data/nothing.txt")
    add("extend-over-model", f"{ex} --output {{fx}}/base --overwrite --tokens alpha", "never modifies")
    add("extend-bad-model", "extend-tokenizer --model {fx}/bad/overlap --output {out} --tokens alpha")
    add("extend-pad-negative", f"{ex} --output {{out}} --tokens alpha --pad-to-multiple -3")
    add("extend-no-tokens", f"{ex} --output {{out}}")

    # ---- zoo, demo, bench
    add("zoo-hidden-zero", "zoo build {out} --hidden-size 0")
    add("zoo-hidden-odd", "zoo build {out} --hidden-size 33")
    add("zoo-layers-zero", "zoo build {out} --num-layers 0")
    add("zoo-vocab-absurd", "zoo build {out} --vocab-size 99999999999")
    add("zoo-vocab-small", "zoo build {out} --vocab-size 3")
    add("zoo-bad-arch", "zoo build {out} --arch gpt9")
    add("zoo-existing", "zoo build {fx}/base", "already exists")
    add("zoo-parent-file", "zoo build {fx}/data/corpus.txt/zoo", "is a file")
    add("demo-parent-file", "demo --outdir {fx}/data/corpus.txt/demo")
    add("demo-unwritable", "demo --outdir /proc/paw-demo")
    add("bench-parent-file", "bench transfer -o {fx}/data/corpus.txt/b --quick")
    add("bench-bad-targets", "bench transfer -o {out} --targets nothing --quick")
    add("bench-bad-seeds", "bench transfer -o {out} --seeds x,y --quick")
    add("bench-workdir-file", "bench transfer -o {out} --quick --workdir {fx}/data/corpus.txt", "cannot write")
    add("bench-real-no-models", "bench real -o {out} --models {fx} --data {fx}", "real_models.sh")
    add("unknown-command", "frobnicate")
    add("bad-subcommand", "bpe frobnicate")
    return c


CASES = _cases()


def test_the_table_is_big_enough():
    assert len(CASES) >= 150
    assert len({cid for cid, _, _ in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def fx_hash(fx):
    return tree_hash(fx)


@pytest.mark.parametrize("cid,argv,expect", CASES, ids=[cid for cid, _, _ in CASES])
def test_bad_input(cli, fx, fx_hash, tmp_path, cid, argv, expect):
    out = tmp_path / "out"
    args = [a.replace("{fx}", str(fx)).replace("{out}", str(out)) for a in argv]
    res = cli(*args)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2, (cid, res.exit_code, res.stdout[-500:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout, (cid, res.stderr)
    assert lines and lines[-1].startswith("error: ") and "unexpected" not in lines[-1], (cid, res.stderr)
    assert len([x for x in lines if x.startswith("error:")]) == 1, (cid, res.stderr)
    assert expect in lines[-1], (cid, lines[-1])
    if "flag" not in cid and "option" not in cid:  # a misspelt flag in the table would test nothing
        assert "No such option" not in lines[-1], (cid, lines[-1])
    assert not out.exists() or not any(out.iterdir()), (cid, sorted(p.name for p in out.iterdir()))
    assert not (fx / "PWNED").exists(), "a pickle payload ran"
    assert tree_hash(fx) == fx_hash, f"{cid} changed an input"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not leftovers, (cid, leftovers)
