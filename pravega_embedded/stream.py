"""Streams: the in-memory state of one stream and the StreamInfo snapshot users see.

Owns: a stream's segments (by id and the open ones in key order), its head (truncation point),
its sealed flag, the condition readers wait on, and the set of writers open on it.

Invariants:
  1. The open segments' key ranges partition [0, 1); ``lows`` holds their lower bounds sorted,
     so ``routing.owner_index(lows, point)`` finds the owner of a key.
  2. ``head[sid] <= segment.length`` for every segment; the head only moves forward.
  3. A sealed stream accepts no appends; a deleted stream is removed from the store's maps.

Thread-safety: mutated by the store under its locks; ``cond`` guards nothing but the wake-ups
(readers re-check state after waking). ``watchers`` holds further conditions to wake (a reader
group's, whose readers wait on one condition for several streams); a watcher counts itself in
``waiters`` while it waits, so an append with nobody waiting costs one integer test.
"""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass
from typing import Any

from .config import StreamConfiguration
from .segment import Segment, SegmentInfo
from .streamcut import StreamCut, format_segment_id

__all__ = ["StreamInfo", "StreamState"]


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

    @property
    def length(self) -> int:
        """Bytes between head and tail over all segments."""
        return sum(s.length - s.head for s in self.segments)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{format_segment_id(s.segment_id)}</td><td>[{s.key_low:.4f}, {s.key_high:.4f})</td>"
            f"<td>{s.head:,}</td><td>{s.length:,}</td><td>{'sealed' if s.sealed else 'open'}</td></tr>"
            for s in self.segments
        )
        return (
            f"<b>Stream</b> {html.escape(self.scope)}/{html.escape(self.stream)}"
            f"{' (sealed)' if self.sealed else ''}<table><tr><th>segment</th><th>key range</th>"
            f"<th>head</th><th>length</th><th>state</th></tr>{rows}</table>"
        )


class StreamState:
    """Mutable state of one stream (see the module invariants)."""

    def __init__(self, scope: str, name: str, config: StreamConfiguration, created_ns: int,
                 sealed: bool, head: dict[int, int]) -> None:
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
        self.cond = threading.Condition(threading.Lock())
        self.waiters = 0
        self.watchers: set[threading.Condition] = set()
        self.writers: set[Any] = set()
        self.version = 0  # bumped on every append, seal, truncate, delete

    def add_segment(self, seg: Segment) -> None:
        self.segments[seg.segment_id] = seg
        self.head.setdefault(seg.segment_id, 0)
        if not seg.sealed:
            self.open_segments.append(seg)
            self.open_segments.sort(key=lambda s: s.low)
            self.lows = [s.low for s in self.open_segments]

    def head_cut(self) -> StreamCut:
        return StreamCut.of(self.scope, self.name, {sid: self.head.get(sid, 0) for sid in self.segments})

    def tail_cut(self) -> StreamCut:
        return StreamCut.of(self.scope, self.name, {sid: s.length for sid, s in self.segments.items()})

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
            created_ns=self.created_ns,
        )
