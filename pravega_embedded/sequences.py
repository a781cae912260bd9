"""Writer sequences: the last sequence number of every writer, for exactly-once resumption.

Owns: the writers' last sequence numbers noted since the store opened (from appends and
replay) and which of them the next checkpoint must write to LMDB (``writers`` table).

Invariants:
  1. A writer's noted sequence only grows (its batches reach the journal in sequence order,
     writer invariant 2); ``note`` keeps the larger one.
  2. The sequence a re-created writer resumes from is the noted one, else the checkpointed one
     in LMDB: never older than what the journal holds.

Thread-safety: ``note``, ``take_dirty`` and ``restore`` are called with the store's append lock
held; ``last`` from any thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .metadata import Metadata

__all__ = ["WriterSequences"]

WriterKey = tuple[str, str]  # (scope/stream, writer id)


class WriterSequences:
    """The writer sequences of one store (module docstring)."""

    def __init__(self, meta: "Metadata") -> None:
        self._meta = meta
        self._last: dict[WriterKey, int] = {}
        self._dirty: dict[WriterKey, int] = {}

    def last(self, stream_key: str, writer_id: str) -> int | None:
        """The writer's last durable-or-appended sequence (None: it never wrote)."""
        seq = self._last.get((stream_key, writer_id))
        return self._meta.writer_seq(stream_key, writer_id) if seq is None else seq

    def note(self, stream_key: str, writer_id: str, seq: int) -> None:
        key = (stream_key, writer_id)
        if seq > self._last.get(key, -1):
            self._last[key] = seq
            self._dirty[key] = seq

    def take_dirty(self) -> dict[WriterKey, int]:
        dirty, self._dirty = self._dirty, {}
        return dirty

    def restore(self, dirty: dict[WriterKey, int]) -> None:
        for k, v in dirty.items():
            if v > self._dirty.get(k, -1):
                self._dirty[k] = v

    def forget_stream(self, stream_key: str) -> None:
        for k in [k for k in self._last if k[0] == stream_key]:
            self._last.pop(k, None)
            self._dirty.pop(k, None)
