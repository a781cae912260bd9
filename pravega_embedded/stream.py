"""Streams: the in-memory state of one stream and the StreamInfo snapshot users see.

Owns: a stream's segments (by id and the open ones in key order), its head (truncation point),
its sealed flag, the condition readers wait on, and the set of writers open on it.

Invariants:
  1. The open segments' key ranges partition [0, 1); ``lows`` holds their lower bounds sorted,
     so ``routing.owner_index(lows, point)`` finds the owner of a key.
  2. ``head[sid] <= segment.length`` for every segment; the head only moves forward.
  3. A sealed stream accepts no appends; a deleted stream is removed from the store's maps.
  4. ``head`` holds a consistent full map (see ``topology``): a segment truncated away
     completely has its length there; the head cut users see is its frontier.
  5. ``epochs`` lists (epoch, start time) in order; epoch ``e``'s segments are those created
     in an epoch <= e and not sealed by a scale at or before e.

Thread-safety: mutated by the store under its locks; ``cond`` guards nothing but the wake-ups
(readers re-check state after waking). ``watchers`` holds further conditions to wake (a reader
group's, whose readers wait on one condition for several streams); a watcher counts itself in
``waiters`` while it waits, so an append with nobody waiting costs one integer test.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from .config import StreamConfiguration
from .segment import Segment, SegmentInfo
from .streamcut import StreamCut
from .topology import frontier

__all__ = ["StreamInfo", "StreamState", "EpochInfo", "SegmentWithRange"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentWithRange:
    """One segment of an epoch: its id and key range [key_low, key_high)."""

    segment_id: int
    key_low: float
    key_high: float


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochInfo:
    """One epoch of a stream's scaling history: when it began and its segments in key order."""

    epoch: int
    time_ns: int
    segments: tuple[SegmentWithRange, ...]

    @property
    def segment_count(self) -> int:
        return len(self.segments)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamInfo:
    """A snapshot of a stream: configuration, segments, head and tail cuts, sealed flag."""

    scope: str
    stream: str
    config: StreamConfiguration
    segments: tuple[SegmentInfo, ...]
    head: StreamCut
    tail: StreamCut
    sealed: bool
    created_ns: int
    history: tuple[EpochInfo, ...] = ()
    kind: str = "events"  # "bytes" for a byte stream (store.create_byte_stream)

    @property
    def current_segments(self) -> tuple[SegmentInfo, ...]:
        """The segments of the current epoch (not scaled away), in key order."""
        return tuple(sorted((s for s in self.segments if not s.successors), key=lambda s: s.key_low))

    @property
    def events(self) -> int | None:
        """Events from head to tail over all segments (Redis's XLEN); None for a byte stream."""
        counts = [s.events for s in self.segments]
        return None if not counts or None in counts else sum(c for c in counts if c is not None)

    @property
    def epoch(self) -> int:
        """The current epoch (0 until the first scaling)."""
        return self.history[-1].epoch if self.history else 0

    def history_svg(self, width: int = 640, height: int = 240, *, now_ns: int | None = None,
                    colour_by: str | None = None) -> str:
        """The scaling history as an SVG picture: key space vs time, one box per segment
        coloured by data rate (with ``now_ns``, e.g. ``time.time_ns()``: the current epoch
        ends there) or size (``colour_by="size"``; the default without ``now_ns``)."""
        from .history import history_svg
        return history_svg(self, width=width, height=height, now_ns=now_ns, colour_by=colour_by)

    def history_text(self, width: int = 72) -> str:
        """The scaling history as text (one line per epoch)."""
        from .history import history_text
        return history_text(self, width=width)

    @property
    def length(self) -> int:
        """Bytes between head and tail over all segments."""
        return sum(s.length - s.head for s in self.segments)

    def _repr_html_(self) -> str:
        from .notebook import stream_info_html
        return stream_info_html(self, now_ns=time.time_ns())


class StreamState:
    """Mutable state of one stream (see the module invariants)."""

    def __init__(self, scope: str, name: str, config: StreamConfiguration, created_ns: int,
                 sealed: bool, head: dict[int, int], epochs: list[tuple[int, int]] | None = None,
                 next_number: int = 0) -> None:
        self.scope = scope
        self.name = name
        self.key = f"{scope}/{name}"
        self.names = (scope, name)
        self.config = config
        self.created_ns = created_ns
        self.sealed = sealed
        self.deleted = False
        self.head = head
        self.segments: dict[int, Segment] = {}
        self.open_segments: list[Segment] = []
        self.lows: list[float] = []
        self.routing: tuple[list[float], list[Segment]] = ([], [])  # (lows, open) replaced as one
        self.cond = threading.Condition(threading.Lock())
        self.waiters = 0
        self.watchers: set[threading.Condition] = set()
        self.writers: set[Any] = set()
        self.version = 0  # bumped on every append, seal, truncate, delete
        self.epochs: list[tuple[int, int]] = epochs or [(0, created_ns)]  # (epoch, start ns)
        self.next_number = next_number  # segment number of the next segment created
        self.topology = 0  # bumped by every scaling: writers re-route, readers look again
        self.scale_watchers: list[Any] = []  # SegmentWatcher objects (store.watch_segments)
        self._history: tuple[tuple[int, int], tuple[EpochInfo, ...]] | None = None  # cache
        self.kind = "events"  # or "bytes": a byte stream (one segment, raw bytes, no frames)

    @property
    def epoch(self) -> int:
        return self.epochs[-1][0]

    def add_segment(self, seg: Segment) -> None:
        """Add a segment (at load or creation, in ascending id order: predecessors first);
        links it to its predecessors."""
        self._link(seg)
        if not seg.sealed:
            self._set_open(self.open_segments + [seg])

    def _link(self, seg: Segment) -> None:
        self.segments[seg.segment_id] = seg
        self.head.setdefault(seg.segment_id, 0)
        for p in seg.preds:
            pred = self.segments.get(p)
            if pred is not None and seg.segment_id not in pred.succs:
                pred.succs = tuple(sorted(pred.succs + (seg.segment_id,)))

    def _set_open(self, segs: list[Segment]) -> None:
        segs = sorted(segs, key=lambda s: s.low)
        lows = [s.low for s in segs]
        self.open_segments, self.lows = segs, lows
        self.routing = (lows, segs)  # one store: a writer never sees half a scaling

    def scaled(self, sealed: list[Segment], new: list[Segment], epoch: int, now_ns: int) -> None:
        """Apply a committed scaling (caller holds the store's append lock)."""
        gone = {s.segment_id for s in sealed}
        for seg in new:  # every successor is in the map before any predecessor names it
            self.segments[seg.segment_id] = seg
            self.head.setdefault(seg.segment_id, 0)
        for p in sealed:  # one store per predecessor: a reader sees none or all successors
            p.succs = tuple(sorted(t.segment_id for t in new if p.segment_id in t.preds))
        self._set_open([s for s in self.open_segments if s.segment_id not in gone] + new)
        self.epochs.append((epoch, now_ns))
        self.topology += 1

    def full_head(self) -> dict[int, int]:
        return {sid: self.head.get(sid, 0) for sid in self.segments}

    def head_cut(self) -> StreamCut:
        return StreamCut.of(self.scope, self.name, frontier(self.segments, self.full_head()))

    def tail_cut(self) -> StreamCut:
        full = {sid: s.length for sid, s in self.segments.items()}
        return StreamCut.of(self.scope, self.name, frontier(self.segments, full))

    def history(self) -> tuple[EpochInfo, ...]:
        """Every epoch with its segments (a segment is in the epochs from its creation to the
        scale that sealed it)."""
        cached = self._history
        if cached is not None and cached[0] == (self.topology, len(self.epochs)):
            return cached[1]
        out = []
        segs = sorted(self.segments.values(), key=lambda s: s.low)
        for epoch, ns in self.epochs:
            members = tuple(
                SegmentWithRange(segment_id=s.segment_id, key_low=s.low, key_high=s.high)
                for s in segs
                if (s.segment_id >> 32) <= epoch and (s.sealed_epoch is None or epoch < s.sealed_epoch)
            )
            out.append(EpochInfo(epoch=epoch, time_ns=ns, segments=members))
        result = tuple(out)
        self._history = ((self.topology, len(self.epochs)), result)
        return result

    def notify(self) -> None:
        self.version += 1
        if self.waiters:
            with self.cond:
                self.cond.notify_all()
            for c in tuple(self.watchers):
                with c:
                    c.notify_all()

    def info(self) -> StreamInfo:
        segs = tuple(
            s.info(self.head.get(sid, 0)) for sid, s in sorted(self.segments.items())
        )
        return StreamInfo(
            scope=self.scope, stream=self.name, config=self.config, segments=segs,
            head=self.head_cut(), tail=self.tail_cut(), sealed=self.sealed,
            created_ns=self.created_ns, history=self.history(), kind=self.kind,
        )

    def record(self) -> dict[str, Any]:
        """The stream's record in the metadata store (docs/format.md, "streams")."""
        return {"config": self.config.to_json(), "created_ns": self.created_ns, "sealed": self.sealed,
                "head": {str(k): v for k, v in self.head.items()},
                "epochs": [list(e) for e in self.epochs], "next_number": self.next_number,
                **({"kind": self.kind} if self.kind != "events" else {})}
