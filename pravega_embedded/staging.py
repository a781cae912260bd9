"""Staging: data written where no reader looks, then spliced into segments in one record.

Owns: staging segments (hidden segments that hold a transaction's events, ``transactions``;
large events stage their chunks under uid 0, ``largeevents``), the MERGE append (sections
appended to segments *by reference*: index entries pointing at journal data already written,
so nothing is copied) and BYTES appends to visible segments (byte streams).

Invariants:
  1. A MERGE is written under the engine's append lock, after the data it references (so the
     journal makes that data durable no later than the MERGE: one sync to the MERGE's end
     covers both), with each part at its segment's current length: its sections land
     contiguously in each segment, and the record is atomic, so after any crash either every
     part is in its segment or none is.
  2. A merged section is visible only once the MERGE record itself is durable (its
     ``visible_at`` is the record's end, segment index invariant 2), though its data was
     durable before.
  3. A staging segment's id has ``STAGING_BIT`` set; it is in the engine's segment registry
     (so replay and checkpoints keep its sections) but never in its stream's segment map (so
     no reader, cut or retention policy sees it).
  4. Staged data is pinned (``JournalFiles.pinned``) from before its first byte is written
     until the merge that references it has updated the files table in memory.

Thread-safety: every function may be called from any thread; they take the engine's locks.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ._native import lib
from .errors import StreamNotFoundError, StreamSealedError
from .records import NO_SEQUENCE, build_merge
from .segment import Segment

if TYPE_CHECKING:
    from .engine import Engine
    from .stream import StreamState

__all__ = ["STAGING_BIT", "Parts", "merge", "append_bytes", "stage", "CHUNK"]

STAGING_BIT = 1 << 63
CHUNK = 4 << 20  # bytes per BYTES record
Parts = list[tuple[Segment, list[tuple[int, int, int]]]]  # (segment, [(pos, bytes, events)])


def merge(engine: "Engine", st: "StreamState", plan: Callable[[], Parts | None], *,
          txn_id: uuid.UUID | None = None, writer_id: str = "", last_seq: int = NO_SEQUENCE,
          on_append: Callable[[int], None] | None = None) -> int:
    """Write one MERGE record appending the parts ``plan()`` returns (called under the append
    lock; None means "a segment was sealed meanwhile, plan again outside the lock" and makes
    this return -1) and apply it; returns the record's end position. ``on_append(end)`` runs
    under the append lock as soon as the record is appended (before it is applied), so a
    caller learns that its record exists even if something after it raises. The caller makes
    the record durable before relying on it (invariant 1)."""
    wid = writer_id.encode("utf-8", "surrogateescape")
    with engine.append_lock:
        if st.deleted:
            raise StreamNotFoundError(f"stream {st.key} was deleted")
        parts = plan()
        if parts is None:
            return -1
        for seg, _ in parts:
            if seg.sealed:
                if st.sealed:
                    raise StreamSealedError(f"stream {st.key} is sealed")
                return -1
        now = time.time_ns()
        payload = build_merge(now, last_seq, txn_id, wid,
                              [(seg.uid, seg.length, refs) for seg, refs in parts])
        _, end = engine.journal.append_record(lib.PE_RECORD_MERGE, payload, f"commit to {st.key}")
        if on_append is not None:  # first: from here on the MERGE is in the journal
            on_append(end)
        added = engine.index.merge(parts, end, now)
        if writer_id and last_seq != NO_SEQUENCE:
            engine.seqs.note(st.key, writer_id, last_seq)
    engine.files.rows_for(added)  # the files table protects the data from now on (invariant 4)
    st.notify()
    return end


def stage(engine: "Engine", pieces: Iterable[tuple[Any, int]], what: str) -> list[tuple[int, int, int]]:
    """Write ``pieces`` (bytes-like, events starting in it) as BYTES records staged under uid 0
    (attached to no segment); returns their references (journal position, bytes, events) for a
    MERGE. The caller holds a pin (invariant 4)."""
    refs = []
    off = 0
    for piece, nev in pieces:
        n = len(piece)
        _, end = engine.journal.append_section(0, off, nev, piece, time.time_ns(), what)
        refs.append((end - n, n, nev))
        off += n
    return refs  # durable with the MERGE that references them (invariant 1)


def append_bytes(engine: "Engine", st: "StreamState", seg: Segment, data: bytes | memoryview,
                 what: str) -> tuple[int, int]:
    """Append raw bytes to a visible segment (a byte stream), atomically: up to ``CHUNK`` bytes
    as one BYTES record (cached in the tail cache like events), more as staged chunks and one
    MERGE. Returns (journal end of the last record, segment offset after the bytes)."""
    view = memoryview(data).cast("B")
    engine.admit_bytes(what)  # the local budget
    if len(view) > CHUNK:
        with engine.files.pinned():
            refs = stage(engine, ((view[a : a + CHUNK], 0) for a in range(0, len(view), CHUNK)), what)
            at: list[int] = []

            def plan() -> Parts:
                at.append(seg.length + len(view))
                return [(seg, refs)]

            end = merge(engine, st, plan)
        if end < 0:  # only a sealed stream seals its one segment, and merge raises for that
            raise StreamSealedError(f"stream {st.key} is sealed")
        return end, at[-1]
    # the tail cache keeps the bytes: they must not change after the write
    piece = data if type(data) is bytes else bytes(view)
    with engine.append_lock:
        if st.deleted:
            raise StreamNotFoundError(f"stream {st.key} was deleted")
        if seg.sealed:
            raise StreamSealedError(f"stream {st.key} is sealed")
        now = time.time_ns()
        _, end = engine.journal.append_section(seg.uid, seg.length, 0, piece, now, what)
        engine.index.append([(seg, len(piece), end - len(piece), memoryview(piece), 0)],
                            len(piece) + lib.PE_BYTES_DATA_OFFSET, now, visible_at=end)
        length = seg.length
    st.notify()
    return end, length
