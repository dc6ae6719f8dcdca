"""Tokenizer comparison, vocabulary alignment and embedding remapping (pure functions, no disk access).

- :mod:`paw.vocab.compare`  vocabulary and encoding diffs of two tokenizers
- :mod:`paw.vocab.align`    the alignment methods registry (exact, decompose, nearest-string, semantic, frequency)
- :mod:`paw.vocab.embed`    apply a mapping to an embedding matrix; orthogonal matching pursuit
- :mod:`paw.vocab.roles`    roles of special tokens (declared, else known by name)
- :mod:`paw.vocab.tokenizer_edit`  new BPE vocabulary (with merges) or added tokens in a ``tokenizer.json``
"""
