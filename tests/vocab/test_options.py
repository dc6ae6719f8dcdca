"""Options first for the tokenizer commands: each reads ``--config FILE.yaml`` (keys: the flags without ``--``),
a flag typed beside the file wins, and a bad value is refused naming its key."""

from __future__ import annotations

import json

from safetensors import safe_open


def _yaml(path, **values) -> str:
    """A flat YAML mapping written by hand (paths as plain scalars, lists in flow style)."""
    def show(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list | tuple):
            return "[" + ", ".join(json.dumps(str(x)) for x in v) + "]"
        return json.dumps(v) if isinstance(v, str) and v.strip() != v else str(v)

    path.write_text("".join(f"{k}: {show(v)}\n" for k, v in values.items()), encoding="utf-8")
    return path


def _tensors(folder) -> dict:
    with safe_open(folder / "model.safetensors", "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


def test_analyze_tokenizers_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tiny_qwen, tmp_path):
    config = _yaml(tmp_path / "cmp.yaml", source=tiny_llama, target=tiny_qwen, outdir=tmp_path / "a", plots=True)
    by_file = cli("analyze-tokenizers", "--config", config, "--no-plots")   # the typed --no-plots wins
    assert by_file.exit_code == 0, by_file.stderr
    assert not (tmp_path / "a" / "length_ratio.png").exists()
    by_flags = cli("analyze-tokenizers", "-s", tiny_llama, "-t", tiny_qwen, "-o", tmp_path / "b", "--no-plots")
    assert by_flags.exit_code == 0, by_flags.stderr
    a, b = (json.loads((tmp_path / d / "report.json").read_text()) for d in "ab")
    assert a.pop("command") != b.pop("command") and a == b
    _yaml(config, source=tiny_llama, outdir=tmp_path / "c")
    missing = cli("analyze-tokenizers", "--config", config)
    assert missing.exit_code == 2 and "missing option '--target'" in missing.stderr, missing.stderr


def test_align_vocab_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tiny_qwen, tmp_path):
    config = _yaml(tmp_path / "align.yaml", source=tiny_llama, target=tiny_qwen, output=tmp_path / "a.json",
                   method=["exact"], anchors=4)
    by_file = cli("align-vocab", "--config", config, "--method", "exact,decompose")
    assert by_file.exit_code == 0, by_file.stderr
    by_flags = cli("align-vocab", "-s", tiny_llama, "-t", tiny_qwen, "-o", tmp_path / "b.json")  # default chain
    assert by_flags.exit_code == 0, by_flags.stderr
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    _yaml(config, source=tiny_llama, target=tiny_qwen, output=tmp_path / "c.json", anchors=0)
    bad = cli("align-vocab", "--config", config)
    assert bad.exit_code == 2 and f"--config {config}: anchors: 0 is below its minimum 1" in bad.stderr, bad.stderr


def test_transplant_tokenizer_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, tiny_qwen, tmp_path):
    config = _yaml(tmp_path / "move.yaml", model=tiny_llama, tokenizer=tiny_qwen, output=tmp_path / "a",
                   check=False, init="zero", method="exact,decompose")
    by_file = cli("transplant-tokenizer", "--config", config, "--init", "mean")   # the typed --init wins
    assert by_file.exit_code == 0, by_file.stderr
    by_flags = cli("transplant-tokenizer", "--model", tiny_llama, "--tokenizer", tiny_qwen, "-o", tmp_path / "b",
                   "--no-check")
    assert by_flags.exit_code == 0, by_flags.stderr
    a, b = _tensors(tmp_path / "a"), _tensors(tmp_path / "b")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert json.loads((tmp_path / "a" / "paw_transplant.json").read_text())["init"] == "mean"
    _yaml(config, model=tiny_llama, tokenizer=tiny_qwen, output=tmp_path / "c", head="sideways")
    bad = cli("transplant-tokenizer", "--config", config)
    assert bad.exit_code == 2 and "head: 'sideways' is not one of mapping, first" in bad.stderr, bad.stderr
    _yaml(config, model=tiny_llama, tokenizer=tiny_qwen, output=tmp_path / "c", heal_steps=3)
    bad = cli("transplant-tokenizer", "--config", config)
    assert bad.exit_code == 2 and "--heal-steps needs --heal-corpus FILE" in bad.stderr, bad.stderr


def test_heal_transplant_reads_a_config_file_and_typed_flags_win(cli, tiny_llama, trained, tmp_path):
    from paw.data import sample_texts

    moved = tmp_path / "moved"   # on a SentencePiece tokenizer: many rows decomposed, to heal
    assert cli("transplant-tokenizer", "--model", tiny_llama, "--tokenizer", trained["sentencepiece-bpe"], "-o", moved,
               "--no-check").exit_code == 0
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sample_texts("multi") * 2), encoding="utf-8")
    config = _yaml(tmp_path / "heal.yaml", model=moved, corpus=[corpus], output=tmp_path / "a", steps=3, seq_len=8,
                   batch=2, eval_texts=4)
    by_file = cli("heal-transplant", "--config", config, "--steps", "2")   # the typed --steps wins
    assert by_file.exit_code == 0, by_file.stderr
    by_flags = cli("heal-transplant", "--model", moved, "--corpus", corpus, "-o", tmp_path / "b", "--steps", "2",
                   "--seq-len", "8", "--batch", "2", "--eval-texts", "4")
    assert by_flags.exit_code == 0, by_flags.stderr
    a, b = _tensors(tmp_path / "a"), _tensors(tmp_path / "b")
    assert all(a[k].equal(b[k]) for k in a)
    assert json.loads((tmp_path / "a" / "paw_heal.json").read_text())["steps"] == 2
    _yaml(config, model=moved, output=tmp_path / "c")
    missing = cli("heal-transplant", "--config", config)
    assert missing.exit_code == 2 and "missing option '--corpus'" in missing.stderr, missing.stderr
