"""Checkpoints: moving what the journal says into LMDB, so recovery replays only the tail.

Owns: the checkpoint (segment lengths, writer sequences, pending section-index entries and the
files-table rows they change, written in one LMDB transaction after the journal is durable up
to the checkpoint's position), its lock, and the queue of metadata writes that must land with
the checkpoint that passes a given journal record.

Invariants:
  1. Everything a checkpoint writes was appended before its position: the pending entries, the
     segment lengths and writer sequences are taken under the append lock together with reading
     that position. LMDB is written only after the journal is durable there (metadata
     invariant 2).
  2. On failure nothing pending is lost: it is put back in front of what arrived meanwhile.
  3. A section's entry counts as persisted only after the LMDB commit (segment index
     invariant 3).
  4. ``queue(fn)`` holds metadata writes that must land together with the checkpoint that
     passes a journal record (a committed transaction's MERGE, ``transactions``): they are
     queued under the append lock right after that record is appended, so the checkpoint whose
     position is past the record runs them in its own LMDB transaction.

Thread-safety: ``run`` takes the checkpoint lock, then the append lock (briefly); ``queue`` is
called with the append lock held.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import lmdb

    from .journal import Journal
    from .journalfiles import JournalFiles
    from .metadata import Metadata
    from .segindex import SegmentIndex
    from .sequences import WriterSequences

__all__ = ["Checkpointer"]

MetaWrite = Callable[["lmdb.Transaction"], None]


class Checkpointer:
    """Writes the checkpoints of one store (module docstring)."""

    def __init__(self, journal: "Journal", meta: "Metadata", index: "SegmentIndex",
                 files: "JournalFiles", seqs: "WriterSequences", append_lock: threading.Lock) -> None:
        self.lock = threading.Lock()
        self._journal, self._meta, self._index = journal, meta, index
        self._files, self._seqs, self._append_lock = files, seqs, append_lock
        self._queue: list[MetaWrite] = []

    def queue(self, fn: MetaWrite) -> None:
        """Run ``fn(txn)`` in the LMDB transaction of the next checkpoint (invariant 4; append
        lock held)."""
        self._queue.append(fn)

    def run(self) -> int:
        """Write one checkpoint up to the current journal position; returns that position."""
        with self.lock:
            with self._append_lock:
                written = self._journal.written()
                pending = self._index.take_pending()
                writers = self._seqs.take_dirty()
                extra, self._queue = self._queue, []
            try:
                rows = self._files.rows_for(pending.entries)
                self._journal.make_durable(written, "checkpoint")
                self._meta.checkpoint(
                    written, pending.lengths, writers,
                    ((seg.uid, e.start, e.pos, e.nbytes, e.n_events, e.write_ns) for seg, e in pending.entries),
                    rows, extra,
                )
            except BaseException:
                with self._append_lock:
                    self._queue[:0] = extra
                    self._seqs.restore(writers)
                    self._index.restore(pending)
                raise
            self._index.persisted(pending)
            return written
