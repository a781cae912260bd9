"""Staging: data written where no reader looks, then spliced into segments in one record.

Owns: staging segments (hidden segments that hold a transaction's events, ``transactions``;
large events stage their chunks under uid 0, ``largeevents``), pins that keep retention from
deleting journal files holding staged data, gathering a staging segment's sections, the MERGE
append (sections appended to segments *by reference*: index entries pointing at journal data
already written, so nothing is copied) and BYTES appends to visible segments (byte streams).

Invariants:
  1. A MERGE is written under the store's append lock, after the data it references (so the
     journal makes that data durable no later than the MERGE: one sync to the MERGE's end
     covers both), with each part at its segment's current length: its sections land
     contiguously in each segment, and the record is atomic, so after any crash either every
     part is in its segment or none is.
  2. A merged section is visible only once the MERGE record itself is durable (its
     ``visible_at`` is the record's end, segment invariant 2), though its data was durable
     before.
  3. A staging segment's id has ``STAGING_BIT`` set; it is in ``store._seg_by_uid`` (so
     replay and checkpoints keep its sections) but never in its stream's segment map (so no
     reader, cut or retention policy sees it).
  4. Journal files at or after the lowest pinned position are never reclaimed; staged data is
     pinned from before its first byte is written until the merge that references it has
     updated the files table in memory (``store._file_ends``), which protects it from then on.

Thread-safety: every function may be called from any thread; they take the store's locks.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from ._native import lib
from .errors import CorruptDataError, StreamNotFoundError, StreamSealedError
from .records import NO_SEQUENCE, build_bytes_header, build_merge
from .segment import Segment

__all__ = ["STAGING_BIT", "Parts", "pinned", "staged_sections", "merge", "append_bytes",
           "apply_parts", "stage", "CHUNK"]

STAGING_BIT = 1 << 63
Parts = list[tuple[Segment, list[tuple[int, int, int]]]]  # (segment, [(pos, bytes, events)])
_pin_ids = itertools.count(1)
_pin_lock = threading.Lock()


@contextmanager
def pinned(store: Any) -> Iterator[None]:
    """Keep every journal file from the current write position on (invariant 4)."""
    key = next(_pin_ids)
    with _pin_lock:
        store._pins[key] = store._journal.state()[0]
    try:
        yield
    finally:
        with _pin_lock:
            store._pins.pop(key, None)


def staged_sections(store: Any, seg: Segment) -> list[tuple[int, int, int]]:
    """Every section of staging segment ``seg`` in offset order, as (journal position, bytes,
    events): the checkpointed ones from LMDB and the rest from memory."""
    with store._ckpt_lock:  # no checkpoint moves entries from memory to LMDB meanwhile
        found = {start: (pos, nbytes, nev) for start, pos, nbytes, nev in store._meta.index_entries(seg.uid)}
        with store._index_lock:
            for e in seg.entries:
                found[e[0]] = (e[2], e[1] - e[0], e[6])
            length = seg.length
    out = []
    at = 0
    for start in sorted(found):
        pos, nbytes, nev = found[start]
        if start != at:
            raise CorruptDataError(f"staging segment {seg.uid}: a gap at offset {at} (next section at {start})")
        out.append((pos, nbytes, nev))
        at = start + nbytes
    if at != length:
        raise CorruptDataError(f"staging segment {seg.uid}: sections end at {at}, length {length}")
    return out


def apply_parts(store: Any, parts: Parts, visible_at: int | None) -> list[tuple[Segment, list[Any], int]]:
    """Append merged sections to their segments in memory (append and index locks held by the
    caller, or replay); returns the new index entries."""
    added = []
    for seg, refs in parts:
        length = seg.length
        for pos, nbytes, nev in refs:
            e = seg.add_section(length, nbytes, pos, None, visible_at, nev)
            store._idx_pending.append((seg, e, nev))
            added.append((seg, e, nev))
            length += nbytes
            seg.events_in += nev
            seg.bytes_in += nbytes
        seg.length = length  # one store: a lock-free reader never sees half a part
        store._dirty_lengths.add(seg.uid)
    return added


def merge(store: Any, st: Any, plan: Callable[[], Parts | None], *, txn_id: uuid.UUID | None = None,
          writer_id: str = "", last_seq: int = NO_SEQUENCE,
          on_append: Callable[[int], None] | None = None) -> int:
    """Write one MERGE record appending the parts ``plan()`` returns (called under the append
    lock; None means "a segment was sealed meanwhile, plan again outside the lock" and makes
    this return -1) and apply it; returns the record's end position. ``on_append(end)`` runs
    under the append lock as soon as the record is appended (before it is applied), so a
    caller learns that its record exists even if something after it raises. The caller holds ``store._ckpt_lock``
    (for the files table) and makes the record durable before relying on it (invariant 1)."""
    wid = writer_id.encode("utf-8", "surrogateescape")
    with store._append_lock:
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
        payload = build_merge(time.time_ns(), last_seq, txn_id, wid,
                              [(seg.uid, seg.length, refs) for seg, refs in parts])
        _, end = store._journal.append_record(lib.PE_RECORD_MERGE, payload, f"commit to {st.key}")
        if on_append is not None:  # first: from here on the MERGE is in the journal
            on_append(end)
        with store._index_lock:
            added = apply_parts(store, parts, end)
        if writer_id and last_seq != NO_SEQUENCE:
            wk = (st.key, writer_id)
            store._writer_seqs[wk] = last_seq
            store._dirty_writers[wk] = last_seq
    store._file_rows(added)  # the files table protects the data from now on (invariant 4)
    st.notify()
    return end


def stage(store: Any, pieces: Iterable[tuple[Any, int]], what: str) -> list[tuple[int, int, int]]:
    """Write ``pieces`` (bytes-like, events starting in it) as BYTES records staged under uid 0
    (attached to no segment); returns their references (journal position,
    bytes, events) for a MERGE. The caller holds a pin (invariant 4)."""
    journal = store._journal
    refs = []
    off = 0
    end = 0
    for piece, nev in pieces:
        n = len(piece)
        _, end = journal.append_record(lib.PE_RECORD_BYTES, build_bytes_header(0, off, nev, n), what, piece)
        refs.append((end - n, n, nev))
        off += n
    return refs  # durable with the MERGE that references them (invariant 1)


def append_bytes(store: Any, st: Any, seg: Segment, data: bytes | memoryview, what: str) -> tuple[int, int]:
    """Append raw bytes to a visible segment (a byte stream), atomically: up to ``CHUNK`` bytes
    as one BYTES record (cached in the tail cache like events), more as staged chunks and one
    MERGE. Returns (journal end of the last record, segment offset after the bytes)."""
    view = memoryview(data).cast("B")
    if len(view) > CHUNK:
        with pinned(store):
            refs = stage(store, ((view[a : a + CHUNK], 0) for a in range(0, len(view), CHUNK)), what)
            at: list[int] = []

            def plan() -> Parts:
                at.append(seg.length + len(view))
                return [(seg, refs)]

            with store._ckpt_lock:
                end = merge(store, st, plan)
        if end < 0:  # only a sealed stream seals its one segment, and merge raises for that
            raise StreamSealedError(f"stream {st.key} is sealed")
        return end, at[-1]
    end = -1
    length = seg.length
    for a in range(0, len(view), CHUNK):
        piece = view[a : a + CHUNK]
        with store._append_lock:
            if st.deleted:
                raise StreamNotFoundError(f"stream {st.key} was deleted")
            if seg.sealed:
                raise StreamSealedError(f"stream {st.key} is sealed")
            payload = build_bytes_header(seg.uid, seg.length, 0, len(piece)) + piece
            pos, end = store._journal.append_record(lib.PE_RECORD_BYTES, payload, what)
            body = memoryview(payload)[len(payload) - len(piece):]
            with store._index_lock:
                e = seg.add_section(seg.length, len(piece), end - len(piece), body, end, 0)
                store._idx_pending.append((seg, e, 0))
                seg.length += len(piece)
                length = seg.length
                seg.bytes_in += len(piece)
                store._dirty_lengths.add(seg.uid)
                store._tail.append((len(payload), [e]))
                store._tail_bytes += len(payload)
                while store._tail_bytes > store.tail_cache_bytes and len(store._tail) > 1:
                    nb, old = store._tail.popleft()
                    store._tail_bytes -= nb
                    for x in old:
                        x[3] = None
        st.notify()
    return end, length


CHUNK = 4 << 20  # bytes per BYTES record
