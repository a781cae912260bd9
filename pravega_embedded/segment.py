"""Segments: the unit of storage and parallelism.

Owns: per-segment state: key range, length, sealed flag, links to predecessors and successors,
and the segment's in-memory sections (a ``SectionList``, kept by the store's segment index,
``segindex``).

Invariants:
  1. ``length`` is the segment's byte length: the end of its last section. It is changed only
     by the segment index, under the store's append lock.
  2. Segment id = ``epoch << 32 | number``; ``uid`` is the store-wide number used in the journal.
  3. ``preds``/``succs`` link the segments of a stream across scalings: a scale seals segments
     (``sealed_epoch`` = the new epoch) and creates successors whose key ranges cover exactly
     the sealed ranges; a successor's ``preds`` are the sealed segments its range overlaps.

Thread-safety: ``length``/``sealed`` are written by the store under its append lock and read
without a lock (one store each); ``sections`` is guarded by the segment index's lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .segindex import SectionList
from .streamcut import format_segment_id, segment_name

if TYPE_CHECKING:
    from .stream import StreamState

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
    events: int | None = None  # events from head to length (None: a byte stream's segment)

    @property
    def number(self) -> int:
        return self.segment_id & 0xFFFFFFFF

    @property
    def name(self) -> str:
        """``number#epoch``, as tables and pictures show the segment (``segment_name``)."""
        return segment_name(self.segment_id)

    @property
    def epoch(self) -> int:
        return self.segment_id >> 32


class Segment:
    """Mutable state of one segment (see the module invariants)."""

    __slots__ = ("uid", "segment_id", "low", "high", "length", "sealed", "sections", "stream",
                 "preds", "succs", "sealed_epoch", "created_ns", "events_in", "bytes_in", "counted")

    def __init__(self, uid: int, segment_id: int, low: float, high: float, length: int,
                 sealed: bool, stream: "StreamState", *, preds: tuple[int, ...] = (),
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
        self.sections = SectionList()
        self.stream = stream
        self.counted: tuple[int, int, int] | None = None  # eventcount's memo: (lo, hi, events)

    @property
    def name(self) -> str:
        return f"{self.stream.scope}/{self.stream.name}/{format_segment_id(self.segment_id)}"

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
