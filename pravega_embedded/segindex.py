"""The segment index: where each segment's bytes lie in the journal, the recent ones in memory.

Owns: every segment's sections appended since they were checkpointed (``IndexEntry`` values in
a ``SectionList`` per segment), the framed bytes of recent sections (the tail cache, so tail
reads are served from memory), the entries and segment lengths not yet written to LMDB (handed
to the checkpoint), and lookups that fall back to the LMDB index for older sections.

Invariants:
  1. A segment's sections are contiguous and in offset order; its length is the end of its last
     section. Sections are added, and lengths changed, only here, under the store's append lock
     and this index's lock; a length is published in one store after all its entries (a
     lock-free reader never sees half of a MERGE part).
  2. A section is visible once the journal is acknowledged past its ``visible_at`` (its own end;
     for a section merged in by reference, the MERGE record's end). ``visible_at`` only grows
     along a segment's sections, so the visible length is found from the end.
  3. Pending entries go to the checkpoint in append order and are put back in front if it
     fails; an entry leaves memory only once it is persisted (in LMDB) and out of the tail cache.
  4. The tail cache holds at most ``tail_cache_bytes`` of records, and always the newest one.

Thread-safety: the methods take the index lock themselves; ``lock`` is public for callers that
must read several segments in one hold (``visible_lengths`` does). Lock order: the store's
topology lock, then its append lock, then this lock.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from .errors import CorruptDataError

if TYPE_CHECKING:
    from .metadata import Metadata
    from .segment import Segment

__all__ = ["IndexEntry", "SectionList", "SegmentIndex", "PendingIndex"]


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One section of a segment: ``[start, end)`` of the segment at journal position ``pos``."""

    start: int  # segment offset of its first byte
    end: int  # segment offset after it
    pos: int  # journal position of its first byte
    visible_at: int  # journal position that must be acknowledged before readers see it
    n_events: int  # events starting in it (0: a large event's continuation, or raw bytes)
    write_ns: int = 0  # when the record that put it in the segment was appended (0: unknown)

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class PendingIndex:
    """What one checkpoint takes from the index: entries to persist and segment lengths."""

    entries: tuple[tuple["Segment", IndexEntry], ...]
    lengths: dict[int, int]  # segment uid -> length, of the segments whose length changed
    segments: tuple["Segment", ...]  # those segments


class SectionList:
    """The sections of one segment held in memory (invariant 1), with their cached bytes."""

    __slots__ = ("starts", "entries", "cached", "persisted_end")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.entries: list[IndexEntry] = []
        self.cached: dict[int, Any] = {}  # start -> the section's bytes (tail cache)
        self.persisted_end = 0  # every entry ending at or before this is in LMDB

    def add(self, entry: IndexEntry, data: Any) -> None:
        self.starts.append(entry.start)
        self.entries.append(entry)
        if data is not None:
            self.cached[entry.start] = data

    def find(self, offset: int) -> IndexEntry | None:
        """The entry containing ``offset``, or None if it is older than memory."""
        starts = self.starts
        if not starts or offset < starts[0]:
            return None
        e = self.entries[bisect_right(starts, offset) - 1]
        return e if offset < e.end else None

    def visible_length(self, length: int, acked: int) -> int:
        """``length`` less the sections not visible at ``acked`` (invariant 2)."""
        entries = self.entries
        i = len(entries) - 1
        while i >= 0:
            e = entries[i]
            if e.visible_at <= acked:
                break
            length = e.start
            i -= 1
        return length

    def trim(self) -> None:
        """Drop leading entries that are persisted and not cached (invariant 3); the last one
        stays (it says where the segment's memory begins)."""
        entries, cached, done = self.entries, self.cached, self.persisted_end
        k = 0
        while k < len(entries) - 1 and entries[k].end <= done and entries[k].start not in cached:
            k += 1
        if k:
            del entries[:k]
            del self.starts[:k]


class SegmentIndex:
    """The index of every segment of one store (module docstring)."""

    def __init__(self, meta: "Metadata", tail_cache_bytes: int) -> None:
        self.lock = threading.Lock()
        self._meta = meta
        self.tail_cache_bytes = tail_cache_bytes
        self._pending: list[tuple[Segment, IndexEntry]] = []
        self._dirty: dict[int, Segment] = {}  # uid -> segment whose length changed
        self._tail: deque[tuple[int, list[tuple[SectionList, int]]]] = deque()
        self._tail_bytes = 0

    # ------------------------------------------------------------------ adding (append lock held)
    def _add(self, seg: "Segment", nbytes: int, pos: int, data: Any, visible_at: int | None,
             n_events: int, write_ns: int) -> IndexEntry:
        start = seg.length
        e = IndexEntry(start, start + nbytes, pos, pos + nbytes if visible_at is None else visible_at,
                       n_events, write_ns)
        seg.sections.add(e, data)
        self._pending.append((seg, e))
        self._dirty[seg.uid] = seg
        seg.events_in += n_events
        seg.bytes_in += nbytes
        return e

    def append(self, sections: Iterable[tuple["Segment", int, int, Any, int]], record_size: int,
               write_ns: int, visible_at: int | None = None) -> list[IndexEntry]:
        """Add one record's sections ``(segment, bytes, journal position, cached bytes or None,
        events)``, written at ``write_ns``, at their segments' ends, and cache the record
        (``record_size`` bytes) if any of them has bytes. Caller holds the append lock
        (offsets follow journal order)."""
        out = []
        cached = []
        with self.lock:
            for seg, nbytes, pos, data, nev in sections:
                e = self._add(seg, nbytes, pos, data, visible_at, nev, write_ns)
                seg.length = e.end
                out.append(e)
                if data is not None:
                    cached.append((seg.sections, e.start))
            if cached:
                self._cache(record_size, cached)
        return out

    def merge(self, parts: Iterable[tuple["Segment", list[tuple[int, int, int]]]],
              visible_at: int | None, write_ns: int) -> list[tuple["Segment", IndexEntry]]:
        """Append merged sections ``(segment, [(journal position, bytes, events)])`` to their
        segments (a MERGE record written at ``write_ns``: append lock held, or replay); each
        segment's new length is published in one store (invariant 1)."""
        added = []
        with self.lock:
            for seg, refs in parts:
                length = seg.length
                for pos, nbytes, nev in refs:
                    e = IndexEntry(length, length + nbytes, pos,
                                   pos + nbytes if visible_at is None else visible_at, nev, write_ns)
                    seg.sections.add(e, None)
                    self._pending.append((seg, e))
                    added.append((seg, e))
                    length = e.end
                    seg.events_in += nev
                    seg.bytes_in += nbytes
                self._dirty[seg.uid] = seg
                seg.length = length
        return added

    def _cache(self, size: int, entries: list[tuple[SectionList, int]]) -> None:
        self._tail.append((size, entries))
        self._tail_bytes += size
        while self._tail_bytes > self.tail_cache_bytes and len(self._tail) > 1:
            nb, old = self._tail.popleft()
            self._tail_bytes -= nb
            for sl, start in old:
                sl.cached.pop(start, None)

    # ------------------------------------------------------------------ reading
    def lookup(self, seg: "Segment", offset: int) -> tuple[IndexEntry, Any]:
        """The section of ``seg`` containing ``offset`` and its cached bytes (or None): from
        memory, else from the LMDB index. CorruptDataError if no section holds it."""
        sl = seg.sections
        with self.lock:
            e = sl.find(offset)
            if e is not None:
                return e, sl.cached.get(e.start)
        hit = self._meta.index_floor(seg.uid, offset)
        if hit is None or offset >= hit[0] + hit[2]:
            with self.lock:  # it may have been appended meanwhile
                e = sl.find(offset)
                if e is not None:
                    return e, sl.cached.get(e.start)
            raise CorruptDataError(
                f"segment {seg.name}: no data indexed at offset {offset} though its length is "
                f"{seg.length}: the metadata's section index ({self._meta.path}) is damaged or lost "
                "entries; restore meta/ from a backup")
        start, pos, nbytes, nev, write_ns = hit
        return IndexEntry(start, start + nbytes, pos, 0, nev, write_ns), None

    def visible_length(self, seg: "Segment", acked: int) -> int:
        """``seg``'s length counting only sections visible at ``acked`` (invariant 2)."""
        with self.lock:
            return seg.sections.visible_length(seg.length, acked)

    def visible_lengths(self, segs: dict[int, "Segment"], acked: int) -> dict[int, int]:
        """Every segment's visible length under one hold of the lock: a snapshot across
        segments (a MERGE adds all its parts under one hold too)."""
        with self.lock:
            return {sid: seg.sections.visible_length(seg.length, acked) for sid, seg in segs.items()}

    def sections(self, seg: "Segment", offset: int, stop: int) -> list[tuple[int, int, int]]:
        """``entries`` as (start, end, events)."""
        return [(e.start, e.end, e.n_events) for e, _ in self.entries(seg, offset, stop)]

    def entries(self, seg: "Segment", offset: int, stop: int,
                limit: int = 1 << 62) -> list[tuple[IndexEntry, Any]]:
        """``seg``'s sections from the one holding ``offset`` to the one holding ``stop - 1``
        (the first ``limit`` of them) with their cached bytes (or None), in offset order:
        memory first, then LMDB in one read transaction (invariant 3: none is missed)."""
        sl = seg.sections
        with self.lock:
            entries = sl.entries
            i = max(0, bisect_right(sl.starts, offset) - 1)
            found: dict[int, tuple[IndexEntry, Any]] = {}
            while i < len(entries) and entries[i].start < stop and len(found) < limit:
                e = entries[i]
                if e.end > offset:
                    found[e.start] = (e, sl.cached.get(e.start))
                i += 1
        first = min(found, default=stop)
        if first > offset:  # older sections: from LMDB, up to the first one in memory
            for start, pos, nbytes, nev, ns in self._meta.index_run(seg.uid, offset, first, limit):
                found.setdefault(start, (IndexEntry(start, start + nbytes, pos, 0, nev, ns), None))
        return [found[start] for start in sorted(found)[:limit]]

    def staged_sections(self, seg: "Segment") -> list[tuple[int, int, int]]:
        """Every section of (staging) segment ``seg`` in offset order as (journal position,
        bytes, events): memory first, then LMDB (an entry leaves memory only after it is in
        LMDB, invariant 3, so none is missed)."""
        with self.lock:
            found = {e.start: (e.pos, e.nbytes, e.n_events) for e in seg.sections.entries}
            length = seg.length
        for start, pos, nbytes, nev, _ in self._meta.index_entries(seg.uid):
            found.setdefault(start, (pos, nbytes, nev))
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

    # ------------------------------------------------------------------ checkpoints
    def take_pending(self) -> PendingIndex:
        """Hand the pending entries and changed lengths to a checkpoint (append lock held, with
        the checkpoint's position read in the same hold)."""
        with self.lock:
            pending, self._pending = self._pending, []
            dirty, self._dirty = self._dirty, {}
        return PendingIndex(tuple(pending), {uid: seg.length for uid, seg in dirty.items()},
                            tuple(dirty.values()))

    def restore(self, p: PendingIndex) -> None:
        """A checkpoint failed: its entries go back in front (invariant 3)."""
        with self.lock:
            self._pending[:0] = p.entries
            for seg in p.segments:
                self._dirty.setdefault(seg.uid, seg)

    def persisted(self, p: PendingIndex) -> None:
        """A checkpoint committed ``p``: its entries may leave memory once evicted."""
        with self.lock:
            touched = {}
            for seg, e in p.entries:
                sl = seg.sections
                if e.end > sl.persisted_end:
                    sl.persisted_end = e.end
                touched[id(sl)] = sl
            for sl in touched.values():
                sl.trim()

    def forget(self, segs: Iterable["Segment"]) -> None:
        """Deleted segments: their lengths are not written again."""
        with self.lock:
            for seg in segs:
                self._dirty.pop(seg.uid, None)
