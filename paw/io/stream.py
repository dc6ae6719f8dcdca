"""Walk several checkpoints tensor by tensor, in step; read ahead of a consumer on a second thread.

Task vectors and merges both read ``base`` and ``models`` side by side; which names are comparable
is decided by :func:`paw.taskvec.align.align`, and :func:`iter_aligned` yields their tensors one
name at a time, so memory holds one tensor per model whatever the model size.

:class:`ReadAhead` takes the list of reads a consumer is going to make, in order (a whole tensor,
or rows of one), and makes them on a reader thread while the consumer computes, holding a bounded
number of bytes: reading the next block then costs the consumer no time when a core is free.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence

from paw.io.lazy_checkpoint import Checkpoint

READ_AHEAD_BYTES = 64 << 20  # what the reader may hold beyond the read in progress


def iter_aligned(checkpoints: Sequence[Checkpoint], names: Sequence[str], *, device=None,
                 dtype=None) -> Iterator[tuple[str, list]]:
    """Yield ``(name, [tensor of each checkpoint])``, moved to ``device`` and cast to ``dtype`` if given."""
    for name in names:
        tensors = []
        for ckpt in checkpoints:
            t = ckpt[name]
            if device is not None or dtype is not None:
                t = t.to(device=device, dtype=dtype)
            tensors.append(t)
        yield name, tensors


Read = tuple[Checkpoint, str, "tuple[int, int] | None"]  # (checkpoint, tensor name, rows or None: all)


class ReadAhead:
    """Make the reads in ``plan`` on a reader thread, in order, ahead of :meth:`get`.

    ``get(ckpt, name, rows)`` returns the tensor ``ckpt[name]`` (or ``ckpt.rows(name, *rows)``):
    the read made ahead when it is the next one of the plan, else a read made now (counted in
    ``misses``), so a consumer that leaves the plan stays correct, only slower. The reader holds
    at most ``budget`` bytes beyond the read in progress; a read that fails is raised by the
    :meth:`get` that asks for it. Use as a context manager: leaving it stops the thread.

        with ReadAhead([(base, "w", None), (ft, "w", None)]) as ahead:
            delta = ahead.get(ft, "w") - ahead.get(base, "w")    # out of order: one miss
    """

    def __init__(self, plan: Iterable[Read], *, budget: int = READ_AHEAD_BYTES):
        self.misses = 0
        self._plan = iter(plan)
        self._budget = budget
        self._ready: deque = deque()     # (read, tensor or None, error or None), in plan order
        self._held = 0                   # bytes in _ready
        self._done = False               # the reader has made every read of the plan
        self._stop = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="paw-read-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for read in self._plan:
                with self._cond:
                    self._cond.wait_for(lambda: self._stop or not self._ready or self._held < self._budget)
                    if self._stop:
                        return
                try:
                    tensor, error = _read(*read), None
                except Exception as err:  # noqa: BLE001  (handed to the consumer that asks for this read)
                    tensor, error = None, err
                with self._cond:
                    self._ready.append((read, tensor, error))
                    self._held += _nbytes(tensor)
                    self._cond.notify_all()
        finally:  # also when the plan itself fails: the consumer then reads for itself
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def get(self, ckpt: Checkpoint, name: str, rows: tuple[int, int] | None = None):
        """The tensor ``name`` of ``ckpt`` (rows ``[start, stop)`` if given)."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._done)
            if self._ready:
                (c, n, r), tensor, error = self._ready[0]
                if c is ckpt and n == name and r == rows:
                    self._ready.popleft()
                    self._held -= _nbytes(tensor)
                    self._cond.notify_all()
                    if error is not None:
                        raise error
                    return tensor
            self.misses += 1
        return _read(ckpt, name, rows)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._ready.clear()
            self._cond.notify_all()
        self._thread.join()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read(ckpt: Checkpoint, name: str, rows: tuple[int, int] | None):
    return ckpt[name] if rows is None else ckpt.rows(name, *rows)


def _nbytes(tensor) -> int:
    return 0 if tensor is None else tensor.numel() * tensor.element_size()
