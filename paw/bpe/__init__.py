"""From-scratch byte-level BPE: exact against tiktoken, trained like Hugging Face's BpeTrainer.

>>> from paw.bpe import train_tokenizer, PATTERNS
>>> bpe = train_tokenizer(["low lower lowest"] * 3, 260, pattern=PATTERNS["gpt2"])
>>> enc = bpe.encoder()
>>> enc.decode(enc.encode("lowest low")) == "lowest low"
True
"""

from paw.bpe.compare import Compression, compression
from paw.bpe.encoder import BpeEncoder
from paw.bpe.patterns import resolve_pattern
from paw.bpe.tokenizer import TrainedBpe, train_tokenizer
from paw.bpe.train import train_bpe
from paw.bytelevel.patterns import PATTERNS, register_pattern

__all__ = ["PATTERNS", "BpeEncoder", "Compression", "TrainedBpe", "compression", "register_pattern",
           "resolve_pattern", "train_bpe", "train_tokenizer"]
