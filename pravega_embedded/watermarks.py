"""Watermarks: event time for streams (writers note time, readers get a time window).

Owns: each open writer's latest noted time and the stream position it noted it at, the
watermarks computed from them (kept in LMDB, table ``watermarks``), and the time window of a
reader position.

Semantics (docs/event-time.md). A writer calls ``note_time(t)`` to say "every event I write from
now on has time >= t" (times are integers in any unit the application chooses; automatic
noting uses milliseconds since the Unix epoch). The note is taken after the writer's pending
events are appended, at the stream's tail then. Every maintenance tick the store turns the
latest notes of a stream's open writers into a **watermark** ``(lower, upper, cut)``: ``lower``
is the smallest and ``upper`` the largest noted time, ``cut`` the furthest noted position. A
reader at position ``p`` gets ``TimeWindow(lower, upper)``: ``lower`` from the newest watermark
whose cut is at or behind ``p`` (the reader has passed the point after which every noting writer
wrote only events of time >= lower), ``upper`` from the oldest watermark whose cut is at or
ahead of ``p`` (None when the reader is past every watermark).

Invariants:
  1. A stream's watermarks are in order and both bounds only grow along the list (a new
     watermark takes the max with the previous one), and each cut is at or past the previous
     one, so a reader moving forward sees both bounds of its window only move forward.
  2. A watermark's cut names only appended data that is durable before the watermark is
     written to LMDB (the store syncs the journal first).
  3. At most ``MAX_WATERMARKS`` are kept per stream; the oldest are dropped first.

Thread-safety: ``note`` and ``forget`` from any writer thread; ``tick`` on the maintenance
thread; ``window`` from any reader thread (watermark lists are replaced, never mutated).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from .topology import expand, frontier, upper_bound

if TYPE_CHECKING:
    from .engine import Engine
    from .stream import StreamState

__all__ = ["TimeWindow", "Watermarks", "MAX_WATERMARKS"]

MAX_WATERMARKS = 1000


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Bounds on the event time at a reader's position: every event before ``lower`` has been
    read, none after ``upper`` has (None: not known yet)."""

    lower: int | None
    upper: int | None


class Watermarks:
    """The notes, watermarks and windows of one store."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._notes: dict[str, dict[str, tuple[int, dict[int, int]]]] = {}
        self.marks: dict[str, list[tuple[int, int, dict[int, int]]]] = {
            key: [(lo, hi, {int(k): v for k, v in cut.items()}) for lo, hi, cut in lst]
            for key, lst in engine.meta.watermarks()
        }

    def note(self, st: "StreamState", writer_id: str, t: int) -> None:
        """Writer ``writer_id`` will write only events of time >= ``t`` from now on."""
        with self.engine.append_lock:
            full = {sid: s.length for sid, s in st.segments.items()}
        with self._lock:
            self._notes.setdefault(st.key, {})[writer_id] = (t, full)

    def forget(self, stream_key: str, writer_id: str | None = None) -> None:
        """A writer closed (or, with no id, the stream was deleted)."""
        with self._lock:
            if writer_id is None:
                self._notes.pop(stream_key, None)
                self.marks.pop(stream_key, None)
            else:
                self._notes.get(stream_key, {}).pop(writer_id, None)

    def tick(self) -> None:
        """Turn each stream's current notes into a watermark if it moves time forward."""
        with self._lock:
            notes = {k: dict(v) for k, v in self._notes.items() if v}
        changed = {}
        for key, per_writer in notes.items():
            st = self.engine.streams.get(key)
            if st is None:
                continue
            lower = min(t for t, _ in per_writer.values())
            upper = max(t for t, _ in per_writer.values())
            cut: dict[int, int] = {}
            for _, full in per_writer.values():
                cut = upper_bound(cut, full)
            marks = self.marks.get(key, [])
            if marks:
                plo, phi, pcut = marks[-1]
                segs = dict(st.segments)
                prev_full = expand(segs, pcut)
                cut = upper_bound(prev_full, cut)  # invariant 1
                lower, upper = max(lower, plo), max(upper, phi)
                if (lower, upper) == (plo, phi) and cut == prev_full:
                    continue
            front = frontier(dict(st.segments), cut)
            self.marks[key] = (marks + [(lower, upper, front)])[-MAX_WATERMARKS:]
            changed[key] = self.marks[key]
        if changed:
            self.engine.sync_all("watermarks")  # invariant 2
            self.engine.meta.put_watermarks(changed)

    def window(self, st: "StreamState", position: Mapping[int, int], only: set[int] | None = None) -> TimeWindow:
        """The time window at ``position`` (a full map of the stream; ``only``: compare just
        these segments, a group reader's own)."""
        marks = self.marks.get(st.key, [])
        if not marks:
            return TimeWindow(None, None)
        segs = dict(st.segments)
        lower = upper = None
        for lo, hi, cut in marks:
            full = expand(segs, cut) if all(s in segs for s in cut) else None
            if full is None:
                continue
            keys = full.keys() if only is None else only & full.keys()
            behind = all(full[s] <= position.get(s, 0) for s in keys)
            if behind:
                lower = lo
            elif upper is None and all(full[s] >= position.get(s, 0) for s in keys):
                upper = hi
        return TimeWindow(lower, upper)
