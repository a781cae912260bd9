"""Shared helpers of the transaction tests: tagged payloads, reading a stream back, and the
checks every test repeats (exactly once, per-key order, contiguity per segment, key ownership).

A tagged payload is ``<tag>|<key>|<seq>|<filler>``: ``tag`` names the writer or transaction,
``seq`` counts per (tag, key) from 0, so per-key order is checkable after any routing.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import pravega_embedded as pe
from pravega_embedded.routing import key_point

NOKEY = "-"  # the key field of a keyless event


def payload(tag: str, key: str | None, seq: int, size: int = 0) -> bytes:
    head = f"{tag}|{NOKEY if key is None else key}|{seq}|".encode()
    return head + b"x" * max(0, size - len(head))


def parse(event: bytes) -> tuple[str, str | None, int]:
    tag, key, seq, _ = event.split(b"|", 3)
    k = key.decode()
    return tag.decode(), None if k == NOKEY else k, int(seq)


def make_stream(store: pe.Store, scope: str, stream: str, segments: int) -> None:
    store.create_scope(scope, exist_ok=True)
    store.create_stream(scope, stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))


def slice_events(store: pe.Store, scope: str, stream: str) -> list[pe.EventRead]:
    """Every visible event, per segment in offset order (segments in id order)."""
    return list(store.read_slice(scope, stream))


def reader_events(store: pe.Store, scope: str, stream: str) -> list[pe.EventRead]:
    """Every visible event, read by a standalone reader bounded at the current tail."""
    tail = store.stream_info(scope, stream).tail
    with store.create_reader(scope, stream, end=tail) as r:
        return list(r)


def tags(events) -> Counter:
    """How many events each tag has."""
    return Counter(parse(ev.event)[0] for ev in events)


def assert_exactly_once(events) -> None:
    dup = [e for e, n in Counter(ev.event for ev in events).items() if n > 1]
    assert not dup, f"{len(dup)} events seen more than once, e.g. {dup[:3]}"


def assert_key_order(events, *, gap_free: bool = True) -> None:
    """Per (tag, key): seqs strictly increase in read order (and are 0, 1, 2, ... if gap_free).
    Keyless events are not ordered and are skipped."""
    seqs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for ev in events:
        tag, key, seq = parse(ev.event)
        if key is not None:
            seqs[(tag, key)].append(seq)
    for tk, s in seqs.items():
        assert all(a < b for a, b in itertools.pairwise(s)), f"per-key order broken for {tk}: {s[:20]}"
        if gap_free:
            assert s == list(range(len(s))), f"{tk}: a gap or a loss: {s[:20]}"


def per_segment(events) -> dict[int, list[pe.EventRead]]:
    out: dict[int, list[pe.EventRead]] = defaultdict(list)
    for ev in events:
        out[ev.segment_id].append(ev)
    for evs in out.values():
        evs.sort(key=lambda e: e.offset)
    return out


def assert_contiguous(events, is_txn) -> int:
    """In every segment (offset order), the events with ``is_txn(tag)`` true for one tag form one
    unbroken run. Returns how many (segment, tag) runs were checked."""
    runs = 0
    for sid, evs in per_segment(events).items():
        where: dict[str, list[int]] = defaultdict(list)
        for i, ev in enumerate(evs):
            tag = parse(ev.event)[0]
            if is_txn(tag):
                where[tag].append(i)
        for tag, idx in where.items():
            assert idx == list(range(idx[0], idx[0] + len(idx))), (
                f"segment {sid:#x}: the events of {tag} are interleaved with others "
                f"(positions {idx[:5]}...{idx[-5:]})")
            runs += 1
    return runs


def assert_owned(store: pe.Store, scope: str, stream: str, events) -> None:
    """Every keyed event is in a segment whose key range holds its key."""
    segs = {s.segment_id: s for s in store.stream_info(scope, stream).segments}
    for ev in events:
        key = ev.routing_key
        if key is None:
            continue
        p = key_point(key)
        s = segs[ev.segment_id]
        assert s.key_low <= p < s.key_high, (
            f"event {ev.event[:40]!r} with key {key!r} ({p:.4f}) is in segment {ev.segment_id:#x} "
            f"owning [{s.key_low:.4f}, {s.key_high:.4f})")
