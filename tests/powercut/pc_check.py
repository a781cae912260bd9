"""Checkers of the power-cut tests: reopen the store after a cut and check the workload's
guarantees against what the children acknowledged (pc_common.AckLog).

Every checker opens the store with the default durability ("fsync"), checks, then proves the
store keeps working: it appends one event to the probe stream, flushes, closes, reopens and
reads it back. ``check(workload, store_dir, log)`` returns how many acknowledged items it verified
(events, transactions' events, bytes, scopes). A broken guarantee raises AssertionError; a store
that does not open raises whatever ``pe.open`` raised (the caller reports both with the seed).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import pravega_embedded as pe
from pravega_embedded.errors import TxnNotFoundError
from pravega_embedded.routing import key_point  # the key -> [0, 1) hash (as tests/scaling uses)

from pc_common import (
    BYTE_STREAMS,
    PROBE_STREAM,
    SCOPE,
    STREAM,
    TXN_EVENTS,
    TXN_STREAM,
    AckLog,
    is_large,
    key_of,
    large_key,
    large_payload,
    parse,
    payload,
    stream_bytes,
    txn_key,
    txn_parse,
)

CHUNK = 8 << 20


def _streams(store: pe.Store, scope: str) -> list[str]:
    return store.list_streams(scope) if scope in store.list_scopes() else []


# ------------------------------------------------------------------------ keyed events
def check_keyed(events: Iterable[pe.EventRead], what: str) -> dict[str, list[int]]:
    """Events written by pc_child.writer: each undamaged, with its own routing key, once, and
    in sequence order per key. Returns each writer's sequence numbers in read order."""
    seqs: dict[str, list[int]] = defaultdict(list)
    last_of_key: dict[str, int] = {}
    for ev in events:
        wid, seq = parse(ev.event)
        key = key_of(wid, seq)
        assert ev.routing_key == key, f"{what}: event {wid}:{seq} has routing key {ev.routing_key!r}, not {key!r}"
        assert seq > last_of_key.get(key, -1), (
            f"{what}: per-key order broken for {key}: {seq} after {last_of_key[key]} (or a duplicate)")
        last_of_key[key] = seq
        seqs[wid].append(seq)
    return seqs


def check_prefixes(store: pe.Store, stream: str, seqs: dict[str, list[int]], writers: Iterable[str],
                   log: AckLog, what: str) -> int:
    """Each writer's events are a gap-free prefix 0..last with no duplicate, last >= its last
    acknowledged sequence, and a re-created writer's last_sequence is last. Returns the number of
    acknowledged events verified."""
    verified = 0
    for wid in writers:
        s = sorted(seqs.get(wid, []))
        dups = [x for x, n in Counter(s).items() if n > 1]
        assert not dups, f"{what}: {wid}: events present twice: {dups[:10]}"
        gaps = sorted(set(range(s[-1] + 1)) - set(s)) if s else []
        assert not gaps, f"{what}: {wid}: events missing before its last present one {s[-1]}: {gaps[:20]}"
        last = s[-1] if s else -1
        acked = log.acked.get(wid, -1)
        assert last >= acked, (
            f"{what}: {wid}: acknowledged up to {acked} but only 0..{last} survived "
            f"({acked - last} acknowledged events lost)")
        with store.create_writer(SCOPE, stream, writer_id=wid) as w:
            assert w.last_sequence >= acked, (
                f"{what}: {wid}: last_sequence {w.last_sequence} < last acknowledged {acked}")
            assert w.last_sequence == last, (
                f"{what}: {wid}: last_sequence {w.last_sequence} but the events end at {last}")
        verified += acked + 1
    return verified


def read_with_reader(store: pe.Store, scope: str, stream: str) -> list[pe.EventRead]:
    """Every event from head to the current tail with a standalone reader (successors after
    predecessors), checked to be the same events as a slice reads."""
    tail = store.stream_info(scope, stream).tail
    with store.create_reader(scope, stream, end=tail) as r:
        events = list(r)
    sliced = Counter(ev.event for ev in store.read_slice(scope, stream))
    assert Counter(ev.event for ev in events) == sliced, f"{scope}/{stream}: a reader and a slice read different events"
    return events


def check_writes(store: pe.Store, log: AckLog) -> int:
    seqs = check_keyed(store.read_slice(SCOPE, STREAM), "writes")
    return check_prefixes(store, STREAM, seqs, ("w0", "w1", "w2"), log, "writes")


def check_scaling(store: pe.Store, log: AckLog) -> int:
    info = store.stream_info(SCOPE, STREAM)
    cur = info.current_segments
    bounds = [(s.key_low, s.key_high) for s in cur]
    assert bounds and bounds[0][0] == 0.0 and bounds[-1][1] == 1.0 and all(
        a[1] == b[0] for a, b in itertools.pairwise(bounds)), f"scaling: current segments do not partition [0, 1): {bounds}"
    assert all(s.sealed for s in info.segments if s.successors), "scaling: a scaled-away segment is not sealed"
    assert info.epoch >= log.scaled, f"scaling: epoch {info.epoch} but scale to epoch {log.scaled} was acknowledged"
    assert info.epoch <= log.scaling, f"scaling: epoch {info.epoch} but no scale to it ever began"
    by_id = {s.segment_id: s for s in info.segments}
    events = read_with_reader(store, SCOPE, STREAM)
    for ev in events:
        seg = by_id[ev.segment_id]
        p = key_point(ev.routing_key)
        assert seg.key_low <= p < seg.key_high, (
            f"scaling: event with key {ev.routing_key} in segment {seg.segment_id:#x} "
            f"owning [{seg.key_low}, {seg.key_high})")
    seqs = check_keyed(events, "scaling")
    return check_prefixes(store, STREAM, seqs, ("w0", "w1"), log, "scaling")


# ------------------------------------------------------------------------ transactions
def check_txn(store: pe.Store, log: AckLog) -> int:
    if TXN_STREAM not in _streams(store, SCOPE):
        assert not log.begun, "txn: the stream is gone but transactions were begun on it"
        return 0
    events = read_with_reader(store, SCOPE, TXN_STREAM)
    dup = [e[:40] for e, n in Counter(ev.event for ev in events).items() if n > 1]
    assert not dup, f"txn: events visible twice: {dup[:5]}"
    per_tag: Counter[str] = Counter()
    last_j: dict[tuple[str, str], int] = {}
    for ev in events:
        tag, j = txn_parse(ev.event)
        per_tag[tag] += 1
        key = txn_key(j)
        assert ev.routing_key == key, f"txn: {tag}/{j} has routing key {ev.routing_key!r}"
        if key is not None:
            assert j > last_j.get((tag, key), -1), f"txn: per-key order broken in {tag} for {key}"
            last_j[(tag, key)] = j
    torn = {t: n for t, n in per_tag.items() if n != TXN_EVENTS}
    assert not torn, f"txn: transactions visible in part (tag: events visible of {TXN_EVENTS}): {torn}"
    visible = set(per_tag)
    lost = log.committed - visible
    assert not lost, f"txn: acknowledged commits not visible: {sorted(lost)[:10]}"
    ghosts = visible - log.committing
    assert not ghosts, f"txn: visible but never committed: {sorted(ghosts)[:10]}"
    undead = visible & log.aborting
    assert not undead, f"txn: visible though aborted: {sorted(undead)[:10]}"
    tw = store.create_transactional_writer(SCOPE, TXN_STREAM, writer_id="pc-checker")
    for tag, tid in log.begun.items():
        try:
            status = tw.get_txn(tid).status()
        except TxnNotFoundError as exc:
            raise AssertionError(f"txn: {tag} ({tid}) was begun (acknowledged) but is unknown: {exc}") from exc
        if tag in visible:
            assert status == pe.TxnStatus.COMMITTED, f"txn: {tag} is visible but {status.value}"
        elif tag in log.aborted:
            assert status == pe.TxnStatus.ABORTED, f"txn: {tag} was aborted (acknowledged) but is {status.value}"
        else:
            assert status in (pe.TxnStatus.OPEN, pe.TxnStatus.ABORTED), f"txn: {tag} is invisible but {status.value}"
            if status == pe.TxnStatus.OPEN:
                tw.get_txn(tid).abort()  # what a crash left open; the next run starts clean
    tw.close()
    return len(log.committed) * TXN_EVENTS + len(log.aborted)


# ------------------------------------------------------------------------ truncation
def check_truncate(store: pe.Store, log: AckLog) -> int:
    """Events before a truncation cut that was begun may be gone; every other event up to each
    writer's last_sequence (which is at least its last acknowledged one) is present once; per
    key, what is present is one unbroken run ending at the writer's last event of that key."""
    seqs = check_keyed(store.read_slice(SCOPE, STREAM), "truncate")
    verified = 0
    for wid in ("w0", "w1"):
        present = seqs.get(wid, [])
        assert len(present) == len(set(present)), f"truncate: {wid}: an event present twice"
        have = set(present)
        with store.create_writer(SCOPE, STREAM, writer_id=wid) as w:
            last = w.last_sequence
        acked = log.acked.get(wid, -1)
        assert last >= acked, f"truncate: {wid}: last_sequence {last} < last acknowledged {acked}"
        assert not have or max(have) <= last, f"truncate: {wid}: event {max(have)} beyond last_sequence {last}"
        cut = log.trunc_begun.get(wid, {})
        seen_key: set[str] = set()
        for s in range(last + 1):
            key = key_of(wid, s)
            if s in have:
                seen_key.add(key)
                verified += s <= acked
                continue
            assert key not in seen_key, (
                f"truncate: {wid}: event {s} (key {key}) missing after a present event of its key")
            assert s <= cut.get(key, -1), (
                f"truncate: {wid}: event {s} (key {key}, {'acknowledged' if s <= acked else 'durable: <= last_sequence'}) "
                f"is missing but no truncation began past it (truncations began up to {cut.get(key, -1)} for that key)")
    return verified


# ------------------------------------------------------------------------ large events
def check_large(store: pe.Store, log: AckLog) -> int:
    seqs: list[int] = []
    last_of_key: dict[str | None, int] = {}
    for ev in store.read_slice(SCOPE, STREAM):
        head = ev.event[:40]
        try:
            seq = int(head[1:head.index(b":")])
        except ValueError as exc:
            raise AssertionError(f"large: unparsable event {head!r}") from exc
        assert ev.event == large_payload(seq), f"large: damaged event {seq} ({len(ev.event)} bytes, large={is_large(seq)})"
        key = large_key(seq)
        assert ev.routing_key == key, f"large: event {seq} has routing key {ev.routing_key!r}"
        if key is not None:
            assert seq > last_of_key.get(key, -1), f"large: per-key order broken for {key}"
            last_of_key[key] = seq
        seqs.append(seq)
    return check_prefixes(store, STREAM, {"w": seqs}, ("w",), log, "large")


# ------------------------------------------------------------------------ byte streams
def check_bytes(store: pe.Store, log: AckLog) -> int:
    verified = 0
    streams = _streams(store, SCOPE)
    for name in BYTE_STREAMS:
        acked = log.bytes_acked.get(name, 0)
        if name not in streams:
            assert acked == 0, f"bytes: {name} is gone but {acked} bytes were acknowledged"
            continue
        with store.create_byte_stream(SCOPE, name) as bs:
            head, tail = bs.head_offset(), bs.tail_offset()
            assert head == 0, f"bytes: {name}: head moved to {head}"
            assert tail >= acked, f"bytes: {name}: holds {tail} bytes but {acked} were acknowledged"
            pos = 0
            while pos < tail:
                data = bs.read(min(CHUNK, tail - pos))
                assert data, f"bytes: {name}: read at {pos} returned nothing before the tail {tail}"
                want = stream_bytes(name, pos, pos + len(data))
                if data != want:
                    bad = next(i for i, (a, b) in enumerate(zip(data, want)) if a != b)
                    raise AssertionError(f"bytes: {name}: wrong byte at offset {pos + bad} "
                                         f"(tail {tail}, acknowledged {acked})")
                pos += len(data)
        verified += acked
    return verified


# ------------------------------------------------------------------------ create / delete
def check_createdelete(store: pe.Store, log: AckLog) -> int:
    seqs = check_keyed(store.read_slice(SCOPE, STREAM), "createdelete live stream")
    verified = check_prefixes(store, STREAM, seqs, ("w0",), log, "createdelete live stream")
    scopes = set(store.list_scopes())
    unknown = scopes - {SCOPE} - set(log.cd)
    assert not unknown, f"createdelete: scopes nobody created: {sorted(unknown)}"
    for name, steps in log.cd.items():
        exists = name in scopes
        whole = [payload(name, s) for s in range(5)]
        if "D" in steps:
            assert not exists, f"createdelete: scope {name} was deleted (acknowledged) but exists"
            verified += 1
            continue
        if "C" in steps and "DB" not in steps:
            assert exists, f"createdelete: scope {name} was created (acknowledged) but is gone"
            assert store.list_streams(name) == ["x"], f"createdelete: {name}: streams {store.list_streams(name)}"
            got = [ev.event for ev in store.read_slice(name, "x")]
            assert got == whole, f"createdelete: {name}/x holds {len(got)} events, not its 5 acknowledged ones"
            verified += 1
            continue
        if exists:  # creation or deletion was in flight: any state between, all-or-nothing data
            streams = store.list_streams(name)
            assert set(streams) <= {"x"}, f"createdelete: {name}: streams {streams}"
            if streams:
                got = Counter(ev.event for ev in store.read_slice(name, "x"))
                assert got in (Counter(), Counter(whole)), f"createdelete: {name}/x holds part of one atomic batch"
    return verified


CHECKERS: dict[str, Callable[[pe.Store, AckLog], int]] = {
    "writes": check_writes, "scaling": check_scaling, "txn": check_txn, "truncate": check_truncate,
    "large": check_large, "bytes": check_bytes, "createdelete": check_createdelete,
}


# ------------------------------------------------------------------------ keeps working
def probe(store_dir: Path) -> None:
    """Append one event to the probe stream, flush, close, reopen: it is there, after all the
    earlier probes (the checker's own writes survive cuts: it closed the store cleanly)."""
    with pe.open(store_dir) as store:
        store.create_scope(SCOPE, exist_ok=True)
        store.create_stream(SCOPE, PROBE_STREAM, exist_ok=True)
        with store.create_writer(SCOPE, PROBE_STREAM, writer_id="probe") as w:
            seq = w.last_sequence + 1
            assert w.write_event(payload("probe", seq), routing_key=key_of("probe", seq)) == seq
            assert w.flush() == seq
    with pe.open(store_dir) as store:
        seqs = check_keyed(store.read_slice(SCOPE, PROBE_STREAM), "probe")
        assert sorted(seqs.get("probe", [])) == list(range(seq + 1)), (
            f"probe: the checker's events 0..{seq} did not all survive a clean close: {sorted(seqs.get('probe', []))[-5:]}")


def check(workload: str, store_dir: Path, log: AckLog) -> int:
    """Open the store, check ``workload``'s guarantees, probe that it keeps working. Returns
    how many acknowledged items were verified."""
    with pe.open(store_dir) as store:
        verified = CHECKERS[workload](store, log)
    probe(store_dir)
    return verified
