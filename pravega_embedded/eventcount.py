"""Counting events: how many events lie between two offsets of a segment, and the offset N
events before an end (Redis's XLEN, kcat's ``-o -N``, a reader group's lag in events).

Owns: counting from the section index (every section records how many events start in it,
``IndexEntry.n_events``), reading frames only where a range begins or ends inside a section;
and each segment's memo of its last count (``Segment.counted``), so counting a stream again
costs only the sections added since.

Invariants:
  1. ``count(engine, seg, lo, hi)`` is the number of events that start in ``[lo, hi)``; ``lo``
     and ``hi`` are event boundaries (a head, a length, a StreamCut's offset). A large event
     counts once: its continuation sections start no event.
  2. The memo ``(lo, hi, n)`` says n events start in ``[lo, hi)``. Bytes already written never
     change (a segment only grows; a truncation only moves the head), so the memo answers any
     count from the same ``lo`` to an ``hi`` at or after its own, adding what came since.
  3. ``back(engine, seg, lo, hi, n)`` is the greatest event boundary ``p`` in ``[lo, hi]`` with
     at least ``min(n, count(lo, hi))`` events in ``[p, hi)``: exactly that many.
  4. ``cut_back`` is a valid StreamCut (a ``topology.frontier``): segments scaled away are at
     their end, so reading from it reads the last ``n`` events of each current segment.

Thread-safety: any thread. The memo is one tuple, replaced whole; two counts racing each
compute a right answer and the later one's memo stays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .frames import FRAME_HEAD, frame_length
from .largeevents import LargeFrame
from .segsource import SegmentSource, visible_snapshot
from .streamcut import StreamCut
from .topology import frontier

if TYPE_CHECKING:
    from .engine import Engine
    from .segment import Segment

__all__ = ["count", "back", "cut_back"]


def _starts(engine: "Engine", seg: "Segment", lo: int, hi: int) -> list[int]:
    """The offsets of the events starting in ``[lo, hi)``, read from the segment's bytes."""
    src = SegmentSource(engine, seg)
    out: list[int] = []
    at = lo
    while at < hi:
        data, stop = src.read(at, hi, copy=False)
        if type(data) is LargeFrame:
            out.append(at)
        else:
            pos, size = 0, len(data)
            while pos < size:
                out.append(at + pos)
                pl, kl = FRAME_HEAD.unpack_from(data, pos)
                pos += frame_length(pl, kl)
        at = stop
    return out


def _count(engine: "Engine", seg: "Segment", lo: int, hi: int) -> int:
    n = 0
    for start, end, nev in engine.index.sections(seg, lo, hi):
        if start >= hi:
            break
        if start >= lo and end <= hi:
            n += nev
        elif nev:  # the range begins or ends inside this section: read its frames there
            n += len(_starts(engine, seg, max(start, lo), min(end, hi)))
    return n


def count(engine: "Engine", seg: "Segment", lo: int, hi: int, *, remember: bool = False) -> int:
    """The number of events starting in ``[lo, hi)`` of ``seg`` (invariant 1). With
    ``remember`` (counts from the head) the segment's memo answers, and keeps this count
    (invariant 2)."""
    if hi <= lo:
        return 0
    memo = seg.counted
    if memo is not None and memo[0] == lo and memo[1] <= hi:
        n = memo[2] + (_count(engine, seg, memo[1], hi) if memo[1] < hi else 0)
    else:
        n = _count(engine, seg, lo, hi)
    if remember:
        seg.counted = (lo, hi, n)
    return n


def back(engine: "Engine", seg: "Segment", lo: int, hi: int, n: int) -> int:
    """The offset ``n`` events before ``hi``, not before ``lo`` (invariant 3)."""
    if n <= 0 or hi <= lo:
        return hi
    left = n
    for start, end, nev in reversed(engine.index.sections(seg, lo, hi)):
        if start >= lo and end <= hi:
            if nev < left:
                left -= nev
                continue
            starts = _starts(engine, seg, start, end) if nev else []
        else:
            starts = _starts(engine, seg, max(start, lo), min(end, hi))
            if len(starts) < left:
                left -= len(starts)
                continue
        return starts[len(starts) - left]
    return lo


def cut_back(engine: "Engine", scope: str, stream: str, n: int) -> StreamCut:
    """``Store.get_stream_cut_from_tail``: the tail cut with each segment of the current epoch
    moved back ``n`` events (not before its head); segments scaled away stay at their end."""
    st, segs, head, visible = visible_snapshot(engine, scope, stream)
    pos = {sid: seg.length if seg.succs else back(engine, seg, head[sid], visible.get(sid, 0), n)
           for sid, seg in segs.items()}
    return StreamCut.of(st.scope, st.name, frontier(segs, pos))
