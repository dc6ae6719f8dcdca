"""Bad input to ``paw extract-lora``: one ``error:`` line naming the flag or file, exit code 2, nothing written."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def narrow_llama(zoo_root):
    """A llama of hidden size 16: the tensors of tiny_llama, in other shapes (no tokenizer needed)."""
    from paw import zoo

    return zoo.save_model(zoo.build_model("llama", hidden_size=16, num_layers=2, vocab_size=300),
                          zoo_root / "extract-narrow")


@pytest.mark.parametrize("flags, message", [
    (["--rank", "0"], "--rank must be an integer of at least 1"),
    (["--energy", "0"], "--energy must lie in (0, 1]"),
    (["--energy", "1.5"], "--energy must lie in (0, 1]"),
    (["--embed-energy", "-1"], "--embed-energy must lie in (0, 1]"),
    (["--rank", "4", "--energy", "0.9"], "give --rank or --energy, not both"),
    (["--rank", "8", "--max-rank", "4"], "--rank 8 is above --max-rank 4"),
    (["--max-rank", "0", "--energy", "0.5"], "--max-rank must be an integer of at least 1"),
    (["--device", "tpu"], "--device 'tpu'"),
])
def test_bad_flags(cli, tmp_path, tiny_llama, flags, message):
    out = tmp_path / "out"
    res = cli("extract-lora", "--base", tiny_llama, "--finetune", tiny_llama, "--output", out, *flags)
    assert res.exit_code == 2 and res.stderr.startswith("error: ") and message in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not out.exists()


def test_bad_inputs(cli, tmp_path, tiny_llama, tiny_qwen, narrow_llama):
    def run(base, ft, out):
        res = cli("extract-lora", "--base", base, "--finetune", ft, "--output", out, "--device", "cpu")
        assert res.exit_code == 2 and res.stderr.startswith("error: "), res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
        return res.stderr

    assert "has shape [300, 16] in the fine-tune but [300, 32]" in run(tiny_llama, narrow_llama, tmp_path / "a")
    assert "is a qwen2 model but the base is llama" in run(tiny_llama, tiny_qwen, tmp_path / "b")
    assert "the output lies inside the input" in run(tiny_llama, tiny_llama, tiny_llama / "lora")
    assert "every delta is zero" in run(tiny_llama, tiny_llama, tmp_path / "c")
    assert str(tmp_path / "missing") in run(tiny_llama, tmp_path / "missing", tmp_path / "d")
    assert not any((tmp_path / n).exists() for n in "abcd") and not (tiny_llama / "lora").exists()
