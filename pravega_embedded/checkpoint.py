"""Checkpoints: moving what the journal says into LMDB, so recovery replays only the tail.

Owns: the checkpoint (segment lengths, writer sequences, pending section-index entries and the
files-table rows they change, written in one LMDB transaction after the journal is durable up
to the checkpoint's position) and the in-memory files table (``store._file_ends``).

Invariants:
  1. Everything pending was appended before the checkpoint's position (they are swapped out
     under the append lock together with reading that position), and LMDB is written only
     after the journal is durable there (metadata invariant 2).
  2. On failure nothing pending is lost: it is put back in front of what arrived meanwhile.
  3. A section's entry is marked persisted only after the LMDB commit; only persisted entries
     are ever trimmed from memory (segment invariant 2).
  4. ``store._ckpt_extra`` holds metadata writes that must land together with the checkpoint
     that passes a journal record (a committed transaction's final record, ``transactions``):
     they are queued under the append lock right after that record is appended, so the
     checkpoint whose position is past the record runs them in its own LMDB transaction.

Thread-safety: ``write_checkpoint`` takes the store's checkpoint lock (then the append and
index locks); ``file_rows`` is called with the checkpoint lock held.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

__all__ = ["file_rows", "write_checkpoint"]


def file_rows(store: Any, idx: list[tuple[Any, list[Any], int]]) -> dict[int, dict[int, int]]:
    """The files-table rows changed by indexing ``idx`` (metadata invariant 6)."""
    if not idx:
        return {}
    bases = store._journal.files()
    rows: dict[int, dict[int, int]] = {}
    for seg, e, _ in idx:
        i = bisect_right(bases, e[2]) - 1
        if i < 0:
            continue
        base = bases[i]
        row = rows.get(base)
        if row is None:
            row = rows[base] = dict(store._file_ends.get(base, {}))
        if e[1] > row.get(seg.uid, 0):
            row[seg.uid] = e[1]
    store._file_ends.update(rows)
    return rows


def write_checkpoint(store: Any) -> int:
    """Write lengths, writer sequences and the section index to LMDB up to the current
    journal position (after making the journal durable there). Returns that position."""
    with store._ckpt_lock:
        with store._append_lock:
            written = store._journal.state()[0]
            segs = store._seg_by_uid
            lengths = {uid: seg.length for uid in store._dirty_lengths
                       if (seg := segs.get(uid)) is not None}  # one lookup: uids may go meanwhile
            store._dirty_lengths = set()
            writers, store._dirty_writers = store._dirty_writers, {}
            with store._index_lock:
                idx, store._idx_pending = store._idx_pending, []
            extra, store._ckpt_extra = store._ckpt_extra, []
        files = file_rows(store, idx)
        try:
            store._journal.make_durable(written, "checkpoint")
            store._meta.checkpoint(
                written, lengths, writers,
                ((seg.uid, e[0], e[2], e[1] - e[0], nev) for seg, e, nev in idx),
                files, extra,
            )
        except BaseException:
            with store._append_lock:
                store._ckpt_extra[:0] = extra
                store._dirty_lengths |= set(lengths)
                for k, v in writers.items():
                    store._dirty_writers.setdefault(k, v)
                with store._index_lock:
                    store._idx_pending[:0] = idx
            raise
        with store._index_lock:
            touched = set()
            for seg, e, _ in idx:
                e[4] = True
                touched.add(seg)
            for seg in touched:
                seg.trim()
        return written
