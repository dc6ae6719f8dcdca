"""How the student's ids relate to the teacher's, for :func:`paw.transfer.distill.lora.distill_lora`: a shared
vocabulary (token KL), shared tokens at shared cuts (byte-aligned KL), or nothing matched
(:class:`paw.transfer.distill.train.Vocab`).
"""

from __future__ import annotations

from typing import Any

from paw.data import sample_texts
from paw.transfer.distill import train as distill_train
from paw.transfer.distill.train import LM
from paw.vocab.align import AlignContext, exact, match_specials


def token_columns(teacher_info, student_info, rows: int) -> Any:
    """Student id -> teacher id of the same canonical bytes (``exact`` alignment, special tokens by
    role): a LongTensor of ``rows``, -1 where the teacher has no such token."""
    import torch

    mapping = dict(match_specials(teacher_info, student_info))
    todo = [i for i in range(student_info.size) if student_info.vocab[i] is not None and i not in mapping]
    mapping.update({t: src[0] for t, (src, _) in exact(AlignContext(teacher_info, student_info), todo).items()})
    columns = torch.full((max(rows, student_info.size),), -1, dtype=torch.long)
    for t, s in mapping.items():
        columns[t] = s
    return columns[:rows]


def shared_vocabulary(teacher_info, student_info, columns) -> bool:
    """Whether the teacher can read the student's ids: every student token (``columns``) has a teacher
    token of the same bytes, and both tokenizers encode the embedded sample text to the same ids."""
    needed = [i for i in range(min(student_info.size, len(columns)))
              if student_info.vocab[i] is not None or i in student_info.specials]
    if any(int(columns[i]) < 0 for i in needed):
        return False
    probe = sample_texts("multi")
    for s_ids, t_ids in zip(student_info.encode_batch(probe), teacher_info.encode_batch(probe), strict=True):
        if [int(columns[i]) if i < len(columns) else -1 for i in s_ids] != list(t_ids):
            return False
    return True


def vocabulary(teacher: LM, student: LM, byte_kl: bool) -> distill_train.Vocab:
    """Shared vocabulary (token KL), shared tokens at shared cuts (byte-aligned KL), or nothing matched."""
    t_info, s_info = teacher.tokenizer_info, student.tokenizer_info
    if t_info is None or s_info is None:
        return distill_train.Vocab(why="no tokenizer files to align")
    columns = token_columns(t_info, s_info, student.model.get_input_embeddings().weight.shape[0])
    if shared_vocabulary(t_info, s_info, columns):
        return distill_train.Vocab(columns, shared=True)
    if not byte_kl:
        return distill_train.Vocab(why="byte-aligned KL not asked for (--byte-kl)")
    if not bool((columns >= 0).any()):
        return distill_train.Vocab(why="no target token has a source token of the same bytes")
    return distill_train.Vocab(columns, student_bytes=s_info.vocab, teacher_bytes=t_info.vocab)
