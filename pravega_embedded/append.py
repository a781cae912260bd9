"""The append path: one writer batch becomes one journal record, shared by all writers.

Owns: building a batch's section and group descriptors for the C journal, assigning segment
offsets, handing the appended sections to the segment index (with the record as their cached
bytes), and re-routing a batch whose segment a scaling sealed meanwhile.

Invariants:
  1. Under the engine's append lock a batch's segment offsets are assigned and its record
     reaches the journal in the same order, so segment offsets match journal order.
  2. A batch routed to a segment sealed by a scaling is re-routed (each key to the open segment
     owning it now, keyless groups spread) and tried again; a stream seal raises instead. So no
     append ever reaches a sealed segment and a key's events never reach two open segments.

Thread-safety: ``append_events`` may be called from any writer thread at once.
"""

from __future__ import annotations

import time
from array import array
from typing import TYPE_CHECKING

from ._native import ffi, lib
from .errors import StreamNotFoundError, StreamSealedError
from .routing import key_point, owner_index
from .segindex import IndexEntry
from .segment import Segment

if TYPE_CHECKING:
    from .engine import Engine
    from .stream import StreamState

__all__ = ["append_events", "reroute", "try_append", "Batch"]

Batch = dict[Segment, list[tuple[bytes | None, list[bytes]]]]
_REC_FIXED = lib.PE_RECORD_HEADER_SIZE + lib.PE_EVENTS_HEADER_SIZE
_SEC = lib.PE_SECTION_HEADER_SIZE
_FRAME = lib.PE_FRAME_HEADER_SIZE
_NO_KEY = lib.PE_NO_KEY
_new_uncleared = ffi.new_allocator(should_clear_after_alloc=False)
# A batch of at least this many payload bytes, averaging at least _BIG_EVENT per event, is
# written from the events' own buffers (pe_journal_append_events_v: no copy, no tail cache).
_BIG_BATCH = 1 << 20
_BIG_EVENT = 64 << 10


def reroute(st: "StreamState", by_seg: Batch) -> Batch:
    """Move the groups of sealed segments to the open segments now owning their keys (keyless
    groups spread over them)."""
    lows, open_segs = st.routing
    out: Batch = {}
    spread = 0
    for seg, glist in by_seg.items():
        for kb, lst in glist:
            if not seg.sealed:
                target = seg
            elif kb is None:
                target = open_segs[spread % len(open_segs)]
                spread += 1
            else:
                target = open_segs[owner_index(lows, key_point(kb.decode("utf-8")))]
            out.setdefault(target, []).append((kb, lst))
    return out


def append_events(engine: "Engine", st: "StreamState", wid: bytes, first: int, last: int,
                  by_seg: Batch) -> int:
    """Append one writer batch (``{segment: [(key bytes or None, [event, ...]), ...]}``) as one
    journal record; re-route it while a scaling has sealed one of its segments. Returns the
    record's end position."""
    engine.admit_bytes(f"a batch for {st.key}")  # the local budget (budget invariant 1)
    while True:
        end = try_append(engine, st, wid, first, last, by_seg)
        if end is not None:
            return end
        by_seg = reroute(st, by_seg)  # a scaling sealed a target meanwhile (invariant 2)


class _Described:
    """A batch as the C journal takes it: section and group descriptors, keys, events."""

    __slots__ = ("segs", "sections", "groups", "ngroups", "keys", "evs", "framing")

    def __init__(self, by_seg: Batch) -> None:
        self.segs = list(by_seg)
        self.ngroups = sum(map(len, by_seg.values()))
        self.sections = ffi.new("pe_section[]", len(self.segs))
        self.groups = ffi.new("pe_group[]", self.ngroups)
        keys: list[bytes] = []
        evs: list[bytes] = []
        framing = 0  # frame headers and keys
        gi = 0
        for si, seg in enumerate(self.segs):
            glist = by_seg[seg]
            self.sections[si].segment_uid = seg.uid
            self.sections[si].n_groups = len(glist)
            for kb, lst in glist:
                g = self.groups[gi]
                gi += 1
                n = len(lst)
                g.n_events = n
                if kb is None:
                    g.key_len = _NO_KEY
                    framing += _FRAME * n
                else:
                    g.key_len = len(kb)
                    keys.append(kb)
                    framing += (_FRAME + len(kb)) * n
                evs += lst
        self.keys, self.evs, self.framing = b"".join(keys), evs, framing


def try_append(engine: "Engine", st: "StreamState", wid: bytes, first: int, last: int,
               by_seg: Batch, out_entries: list[tuple[Segment, IndexEntry]] | None = None) -> int | None:
    """Append one batch as one record unless one of its segments is sealed (then None). An
    empty ``wid`` writes a transaction's staged events: no writer sequence is kept;
    ``out_entries`` collects the (segment, index entry) pairs appended."""
    d = _Described(by_seg)
    evs, sections = d.evs, d.sections
    lens = array("I", map(len, evs))
    total = sum(lens)
    head = _REC_FIXED + len(wid) + _SEC * len(d.segs) + d.framing
    big = total >= _BIG_BATCH and total >= _BIG_EVENT * len(evs)
    if big:  # written from the events' own buffers, kept alive until the call returns
        ptrs = ffi.new("char *[]", [ffi.from_buffer(e) for e in evs])
        size = head
    else:
        payload = b"".join(evs)
        size = head + total
    out = _new_uncleared("char[]", size)  # C writes every byte: no zero-fill pass
    outs = ffi.new("uint64_t[3]")
    now = time.time_ns()
    args = (wid, len(wid), first, last, now, sections, len(d.segs), d.groups, d.ngroups,
            d.keys, len(d.keys), ffi.from_buffer("uint32_t[]", lens))
    with engine.append_lock:
        if st.deleted:
            raise StreamNotFoundError(f"stream {st.key} was deleted")
        for si, seg in enumerate(d.segs):
            if seg.sealed:
                if st.sealed:
                    raise StreamSealedError(f"segment {seg.name} is sealed")
                return None
            sections[si].segment_offset = seg.length
        if big:
            engine.journal.append_events_v(*args, ptrs, len(evs), out, size, outs + 1, outs + 2,
                                           what=f"append to {st.key}")
            cached = [None] * len(d.segs)
        else:
            engine.journal.append_events(*args, len(evs), payload, total, out, size, outs,
                                         outs + 1, outs + 2, what=f"append to {st.key}")
            view = memoryview(ffi.buffer(out))  # keeps `out` alive for the tail cache
            rel = [sections[si].data_pos - outs[1] for si in range(len(d.segs))]
            cached = [view[r : r + sections[si].n_bytes] for si, r in enumerate(rel)]
        entries = engine.index.append(
            [(seg, sections[si].n_bytes, sections[si].data_pos, cached[si], sections[si].n_events)
             for si, seg in enumerate(d.segs)], size, now)
        if out_entries is not None:
            out_entries.extend(zip(d.segs, entries))
        if wid:
            engine.seqs.note(st.key, wid.decode("utf-8", "surrogateescape"), last)
        end = outs[2]
    st.notify()
    return end
