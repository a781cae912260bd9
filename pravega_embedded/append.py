"""The append path: one writer batch becomes one journal record, shared by all writers.

Owns: building a batch's section and group descriptors for the C journal, assigning segment
offsets, the tail cache and pending index entries of appended sections, and re-routing a batch
whose segment a scaling sealed meanwhile.

Invariants:
  1. Under the store's append lock a batch's segment offsets are assigned and its record reaches
     the journal in the same order, so segment offsets match journal order (store invariant 2).
  2. A batch routed to a segment sealed by a scaling is re-routed (each key to the open segment
     owning it now, keyless groups spread) and tried again; a stream seal raises instead. So no
     append ever reaches a sealed segment and a key's events never reach two open segments.

Thread-safety: ``append_events`` may be called from any writer thread at once.
"""

from __future__ import annotations

import time
from array import array
from typing import Any

from ._native import check, ffi, lib
from .errors import StreamNotFoundError, StreamSealedError
from .routing import key_point, owner_index

__all__ = ["append_events", "reroute", "try_append"]

Batch = dict[Any, list[tuple[bytes | None, list[bytes]]]]
_REC_FIXED = lib.PE_RECORD_HEADER_SIZE + lib.PE_EVENTS_HEADER_SIZE
_SEC = lib.PE_SECTION_HEADER_SIZE
_FRAME = lib.PE_FRAME_HEADER_SIZE
_NO_KEY = lib.PE_NO_KEY
_new_uncleared = ffi.new_allocator(should_clear_after_alloc=False)


def reroute(st: Any, by_seg: Batch) -> Batch:
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


def append_events(store: Any, st: Any, wid: bytes, first: int, last: int, by_seg: Batch) -> int:
    """Append one writer batch (``{segment: [(key bytes or None, [event, ...]), ...]}``) as one
    journal record; re-route it while a scaling has sealed one of its segments. Returns the
    record's end position."""
    while True:
        end = try_append(store, st, wid, first, last, by_seg)
        if end is not None:
            return end
        by_seg = reroute(st, by_seg)  # a scaling sealed a target meanwhile (invariant 2)


def try_append(store: Any, st: Any, wid: bytes, first: int, last: int, by_seg: Batch,
               out_entries: list[Any] | None = None) -> int | None:
    """Append one batch as one record unless one of its segments is sealed (then None). An
    empty ``wid`` writes a transaction's staged events: no writer sequence is kept;
    ``out_entries`` collects the (segment, index entry) pairs appended."""
    nsec = len(by_seg)
    ngroups = sum(map(len, by_seg.values()))
    sections = ffi.new("pe_section[]", nsec)
    groups = ffi.new("pe_group[]", ngroups)
    keys: list[bytes] = []
    evs: list[bytes] = []
    extra = 0
    gi = 0
    segs = list(by_seg)
    for si, seg in enumerate(segs):
        glist = by_seg[seg]
        sections[si].segment_uid = seg.uid
        sections[si].n_groups = len(glist)
        for kb, lst in glist:
            g = groups[gi]
            gi += 1
            n = len(lst)
            g.n_events = n
            if kb is None:
                g.key_len = _NO_KEY
                extra += _FRAME * n
            else:
                g.key_len = len(kb)
                keys.append(kb)
                extra += (_FRAME + len(kb)) * n
            evs += lst
    payload = b"".join(evs)
    lens = array("I", map(len, evs))
    keys_b = b"".join(keys)
    size = _REC_FIXED + len(wid) + _SEC * nsec + extra + len(payload)
    out = _new_uncleared("char[]", size)  # C writes every byte: no zero-fill pass
    outs = ffi.new("uint64_t[3]")
    with store._append_lock:
        if st.deleted:
            raise StreamNotFoundError(f"stream {st.key} was deleted")
        for si, seg in enumerate(segs):
            if seg.sealed:
                if st.sealed:
                    raise StreamSealedError(f"segment {seg.name} is sealed")
                return None
            sections[si].segment_offset = seg.length
        with store._journal.use() as handle:
            status = lib.pe_journal_append_events(
                handle, wid, len(wid), first, last, time.time_ns(), sections, nsec, groups,
                ngroups, keys_b, len(keys_b), ffi.from_buffer("uint32_t[]", lens), len(evs),
                payload, len(payload), out, size, outs, outs + 1, outs + 2)
        if status != lib.PE_OK:
            check(status, f"append to {st.key}")
        rec_pos = outs[1]
        view = memoryview(ffi.buffer(out))  # keeps `out` alive for the tail cache
        entries = []
        with store._index_lock:
            for si, seg in enumerate(segs):
                sec = sections[si]
                nbytes = sec.n_bytes
                rel = sec.data_pos - rec_pos
                entry = seg.add_section(seg.length, nbytes, sec.data_pos, view[rel : rel + nbytes],
                                        None, sec.n_events)
                entries.append(entry)
                if out_entries is not None:
                    out_entries.append((seg, entry))
                store._idx_pending.append((seg, entry, sec.n_events))
                seg.length += nbytes
                seg.events_in += sec.n_events
                seg.bytes_in += nbytes
                store._dirty_lengths.add(seg.uid)
            store._tail.append((size, entries))
            store._tail_bytes += size
            while store._tail_bytes > store.tail_cache_bytes and len(store._tail) > 1:
                nb, old = store._tail.popleft()
                store._tail_bytes -= nb
                for e in old:
                    e[3] = None
        if wid:
            wk = (st.key, wid.decode("utf-8", "surrogateescape"))
            store._writer_seqs[wk] = last
            store._dirty_writers[wk] = last
        end = outs[2]
    st.notify()
    return end
