"""``paw.io.lm.load_tokenizer``: a model folder's tokenizer tokenizes as its ``tokenizer.json`` says."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("kind", ["sentencepiece-bpe", "byte-bpe"])
def test_loaded_tokenizer_follows_the_file_whatever_the_model_type(tmp_path, arch, kind):
    # transformers builds Qwen2Tokenizer for a qwen2 folder and swaps in its own normaliser and
    # pre-tokenizer: a SentencePiece-style tokenizer.json then loses every space
    from tokenizers import Tokenizer

    from paw import zoo
    from paw.data import sample_texts
    from paw.io.lm import load_lm, load_tokenizer

    tok = zoo.train_tokenizer(sample_texts("multi"), 300, kind=kind)
    model = zoo.build_model(arch, seed=0, vocab_size=len(tok), hidden_size=32, num_layers=1, num_heads=4,
                            num_kv_heads=2)
    zoo.save_model(model, tmp_path, tokenizer=tok)
    own = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts = ["Fact: the colour of X is red.", "  two  spaces\n\tand a tab", "naïve café 東京 12 345"]
    loaded = load_tokenizer(tmp_path)
    for text in texts:
        assert loaded.encode(text, add_special_tokens=False) == own.encode(text, add_special_tokens=False).ids
    assert loaded.decode(loaded.encode(texts[0], add_special_tokens=False)) == texts[0]
    _, from_lm = load_lm(tmp_path, device="cpu")
    assert from_lm.encode(texts[1], add_special_tokens=False) == own.encode(texts[1], add_special_tokens=False).ids
    assert (loaded.bos_token, loaded.eos_token, loaded.pad_token) == ("<|bos|>", "<|eos|>", "<|pad|>")
