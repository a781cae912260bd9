"""Segments: the unit of storage and parallelism, and their in-memory tail.

Owns: per-segment state (key range, length, sealed flag), the in-memory index of the sections
appended since the last checkpoint, and the tail cache (the framed bytes of recent sections,
so tail reads are served from memory).

Invariants:
  1. ``length`` is the segment's byte length: the sum of its sections' framed bytes. Sections
     are added in offset order with no gap (each starts at the previous length).
  2. ``entries[i] = [start, end, journal_pos, data, persisted, visible_at, n_events]``;
     ``starts[i] == entries[i][0]``; ``data`` is the section's bytes while cached, else None;
     ``persisted`` is True once the entry is in the LMDB index; ``visible_at`` is the journal
     position that must be durable before readers may see the section (its own end, or for a
     section merged in by reference the end of the MERGE record, ``staging``); ``n_events``
     counts the events starting in it (0: the continuation of a large event, or byte-stream
     bytes). ``visible_at`` only grows along the list. Entries are dropped only when both
     evicted and persisted.
  3. Segment id = ``epoch << 32 | number``; ``uid`` is the store-wide number used in the journal.
  4. ``preds``/``succs`` link the segments of a stream across scalings: a scale seals segments
     (``sealed_epoch`` = the new epoch) and creates successors whose key ranges cover exactly
     the sealed ranges; a successor's ``preds`` are the sealed segments its range overlaps.

Thread-safety: ``length``/``sealed`` are written by the store under its append lock; the index
lists are read and written under the store's index lock (``Store._index_lock``).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from .streamcut import format_segment_id

__all__ = ["Segment", "SegmentInfo"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentInfo:
    """A snapshot of one segment of a stream."""

    segment_id: int
    key_low: float
    key_high: float
    head: int
    length: int
    sealed: bool
    predecessors: tuple[int, ...] = ()
    successors: tuple[int, ...] = ()
    created_ns: int = 0

    @property
    def number(self) -> int:
        return self.segment_id & 0xFFFFFFFF

    @property
    def epoch(self) -> int:
        return self.segment_id >> 32


class Segment:
    """Mutable state of one segment (see the module invariants)."""

    __slots__ = ("uid", "segment_id", "low", "high", "length", "sealed", "starts", "entries", "stream",
                 "preds", "succs", "sealed_epoch", "created_ns", "events_in", "bytes_in")

    def __init__(self, uid: int, segment_id: int, low: float, high: float, length: int,
                 sealed: bool, stream: Any, *, preds: tuple[int, ...] = (),
                 sealed_epoch: int | None = None, created_ns: int = 0) -> None:
        self.uid = uid
        self.segment_id = segment_id
        self.low = low
        self.high = high
        self.length = length
        self.sealed = sealed
        self.preds = preds  # segment ids of the predecessors (sealed by the scale that made this)
        self.succs: tuple[int, ...] = ()  # filled in when this segment is scaled away
        self.sealed_epoch = sealed_epoch  # the epoch whose scale sealed it (None: not scaled away)
        self.created_ns = created_ns
        self.events_in = 0  # appended events and bytes, sampled by the auto-scaler
        self.bytes_in = 0
        self.starts: list[int] = []
        self.entries: list[list[Any]] = []
        self.stream = stream

    @property
    def name(self) -> str:
        return f"{self.stream.scope}/{self.stream.name}/{format_segment_id(self.segment_id)}"

    def add_section(self, start: int, nbytes: int, pos: int, data: Any, visible_at: int | None = None,
                    n_events: int = 1) -> list[Any]:
        entry = [start, start + nbytes, pos, data, False,
                 pos + nbytes if visible_at is None else visible_at, n_events]
        self.starts.append(start)
        self.entries.append(entry)
        return entry

    def find(self, offset: int) -> list[Any] | None:
        """The in-memory entry containing ``offset``, or None if it is older than memory."""
        starts = self.starts
        if not starts or offset < starts[0]:
            return None
        i = bisect_right(starts, offset) - 1
        e = self.entries[i]
        return e if offset < e[1] else None

    def trim(self) -> None:
        """Drop leading entries that are both evicted and persisted (invariant 2)."""
        entries = self.entries
        k = 0
        while k < len(entries) - 1 and entries[k][3] is None and entries[k][4]:
            k += 1
        if k:
            del entries[:k]
            del self.starts[:k]

    def info(self, head: int) -> SegmentInfo:
        return SegmentInfo(
            segment_id=self.segment_id, key_low=self.low, key_high=self.high, head=head,
            length=self.length, sealed=self.sealed, predecessors=self.preds,
            successors=self.succs, created_ns=self.created_ns,
        )

    def record(self) -> dict[str, Any]:
        """The segment's record in the metadata store (docs/format.md, "segments")."""
        return {"stream": self.stream.key, "id": self.segment_id, "low": self.low, "high": self.high,
                "sealed": self.sealed, "preds": list(self.preds), "sealed_epoch": self.sealed_epoch,
                "created_ns": self.created_ns}
