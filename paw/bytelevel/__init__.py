"""How byte-level BPE is spelled in files: the ground floor that ``paw.io`` and ``paw.bpe`` share.

Pure, standard library only, and importing nothing of ``paw`` but itself:

- :mod:`paw.bytelevel.alphabet`: GPT-2's byte-to-unicode alphabet (``b" hi"`` <-> ``"Ġhi"``) and the
  rank order of the 256 single bytes;
- :mod:`paw.bytelevel.patterns`: the pre-tokenization regexes of the production tokenizers, by name,
  and their spelling for Hugging Face ``tokenizers`` (Oniguruma);
- :mod:`paw.bytelevel.ranks`: tiktoken's rank tables <-> Hugging Face's merge lists.
"""
