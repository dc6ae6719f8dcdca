"""The tiktoken twin of a byte-level BPE is only used when tiktoken can encode every byte."""

from __future__ import annotations


def test_vocabulary_missing_single_bytes_gets_no_tiktoken_twin(tmp_path):
    """SmolLM2 lacks 21 single bytes; tiktoken panicked ('no entry found for key') on text with one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from paw.data import sample_texts
    from paw.io.tokenizer import open_tokenizer

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    ascii_text = [t for t in sample_texts("en") if t.isascii()]
    tok.train_from_iterator(ascii_text, trainers.BpeTrainer(vocab_size=400, show_progress=False))
    tok.save(str(tmp_path / "tokenizer.json"))
    info = open_tokenizer(tmp_path)
    assert info.kind == "byte-level" and bytes([0xC3]) not in set(info.vocab)
    assert info.fast is None
    ids = info.encode("the café costs 5 €")  # bytes the vocabulary lacks are dropped, not a crash
    assert ids and ids == info.backend.encode("the café costs 5 €", add_special_tokens=False).ids
