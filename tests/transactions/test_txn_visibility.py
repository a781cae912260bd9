"""Visibility of transactions: nothing before the commit, everything after it, atomically.

- Reader threads poll the stream (standalone readers at the tail, and a thread taking
  read_slice snapshots) while a transaction stages keyed and keyless events with several
  flushes, and a plain writer writes to the same segments all along: no reader sees an event of
  the transaction before commit() was called, every reader sees each of them exactly once after
  it; a snapshot taken before commit() holds none of them, one taken after it all of them.
- A snapshot (read_slice) taken at the very moment a commit is applied holds all of the
  transaction or none of it (a forced interleaving; xfail: it can hold part of it).
- Per segment, the transaction's events are one unbroken run (no plain event between them)
  although the plain writer was appending to that segment before and after the commit.
- An aborted transaction's events are never visible, also after reopening the store; a
  transaction left OPEN at close is still invisible after reopening, and commits its flushed
  events then.
- An empty transaction commits and changes nothing.
"""

from __future__ import annotations

import threading
import time

import pytest
from txn_helpers import (
    assert_contiguous,
    assert_exactly_once,
    assert_key_order,
    make_stream,
    parse,
    payload,
    per_segment,
    reader_events,
    slice_events,
    tags,
)

import pravega_embedded as pe
from pravega_embedded import staging
from pravega_embedded.routing import key_point

SCOPE, STREAM = "vis", "s"
SEGMENTS = 4
KEYED, KEYLESS, TXN_KEYS = 1200, 300, 12


def plain_keys() -> list[str]:
    """Keys of the plain writer: at least two in every segment of a fixed(4) stream."""
    keys = [f"p{i}" for i in range(16)]
    owners = [int(key_point(k) * SEGMENTS) for k in keys]
    assert all(owners.count(s) >= 2 for s in range(SEGMENTS)), owners
    return keys


class PlainWriter(threading.Thread):
    """Writes ``plain|<key>|<seq>`` events to every segment until stopped."""

    def __init__(self, store: pe.Store) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.written = 0

    def run(self) -> None:
        try:
            keys = plain_keys()
            seq = dict.fromkeys(keys, 0)
            with self.store.create_writer(SCOPE, STREAM, writer_id="plain", linger=0) as w:
                while not self.stop.is_set():
                    for k in keys:
                        w.write_event(payload("plain", k, seq[k]), routing_key=k)
                        seq[k] += 1
                        self.written += 1
                    w.flush()
                    time.sleep(0.001)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


class Watcher(threading.Thread):
    """A standalone reader at the tail; notes each transaction event and whether commit() had
    been called when it was seen."""

    def __init__(self, store: pe.Store, phase: dict, expected: int) -> None:
        super().__init__(daemon=True)
        self.store, self.phase, self.expected = store, phase, expected
        self.seen: list[bytes] = []
        self.early: list[bytes] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 60
            with self.store.create_reader(SCOPE, STREAM) as r:
                while len(self.seen) < self.expected and time.monotonic() < deadline:
                    ev = r.read_next_event(0.01)
                    if ev is None or parse(ev.event)[0] != "txn":
                        continue
                    if not self.phase["committing"]:
                        self.early.append(ev.event)
                    self.seen.append(ev.event)
        except BaseException as exc:  # noqa: BLE001
            self.error = exc


class Snapshotter(threading.Thread):
    """Takes read_slice snapshots until stopped; notes how many transaction events each held
    and the phase of the commit before and after the snapshot was taken."""

    def __init__(self, store: pe.Store, phase: dict) -> None:
        super().__init__(daemon=True)
        self.store, self.phase = store, phase
        self.stop = threading.Event()
        self.snaps: list[tuple[str, str, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                before = self.phase["now"]
                sl = self.store.read_slice(SCOPE, STREAM)
                after = self.phase["now"]
                self.snaps.append((before, after, tags(sl)["txn"]))
        except BaseException as exc:  # noqa: BLE001
            self.error = exc


@pytest.mark.parametrize("durability", ["none", "fsync"])
def test_invisible_until_commit_then_all_at_once_and_contiguous(tmp_path, durability):
    with pe.open(tmp_path / "store", durability=durability) as store:
        make_stream(store, SCOPE, STREAM, SEGMENTS)
        phase = {"committing": False, "now": "open"}
        expected = KEYED + KEYLESS
        plain = PlainWriter(store)
        plain.start()
        while plain.written < 200 and plain.is_alive():  # plain events before the transaction
            time.sleep(0.001)
        watchers = [Watcher(store, phase, expected) for _ in range(3)]
        snap = Snapshotter(store, phase)
        for t in watchers + [snap]:
            t.start()

        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id="tx")
        txn = tw.begin_txn()
        seq = dict.fromkeys(range(TXN_KEYS), 0)
        written = 0
        for chunk in range(5):
            for i in range(KEYED // 5):
                k = i % TXN_KEYS
                txn.write_event(payload("txn", f"k{k}", seq[k], 40), routing_key=f"k{k}")
                seq[k] += 1
            txn.write_events([payload("txn", None, written + i, 40) for i in range(KEYLESS // 5)])
            written += KEYLESS // 5
            txn.flush()
            time.sleep(0.01)  # give the readers time to (wrongly) see something
        assert txn.status() == pe.TxnStatus.OPEN
        # a snapshot taken wholly before commit() (the snapshotter may not have run yet)
        deadline = time.monotonic() + 60
        while not any(a == "open" for _b, a, _n in snap.snaps):
            assert snap.is_alive() and time.monotonic() < deadline, "no snapshot before the commit"
            time.sleep(0.01)
        phase["committing"], phase["now"] = True, "committing"
        txn.commit()
        phase["now"] = "committed"
        assert txn.status() == pe.TxnStatus.COMMITTED
        deadline = time.monotonic() + 60
        while sum(1 for s in snap.snaps if s[0] == "committed") < 3 and time.monotonic() < deadline:
            time.sleep(0.01)

        for t in watchers:
            t.join(120)
        snap.stop.set()
        snap.join(120)
        mark = plain.written  # plain events after the transaction in every segment too
        deadline = time.monotonic() + 60
        while plain.written < mark + 64 and plain.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        plain.stop.set()
        plain.join(120)
        for t in watchers + [snap, plain]:
            assert not t.is_alive(), f"{type(t).__name__} thread hung"
            assert t.error is None, repr(t.error)

        for t in watchers:
            assert t.early == [], f"{len(t.early)} events seen before commit(), e.g. {t.early[:2]}"
            assert len(t.seen) == expected, f"a reader saw {len(t.seen)} of {expected} events"
            assert len(set(t.seen)) == expected, "a reader saw an event twice"
        # a snapshot begun and taken before commit() holds nothing of the transaction, one
        # begun after commit() returned holds all of it (one taken during the commit: see
        # test_a_slice_taken_while_a_commit_is_applied_holds_all_of_it_or_none)
        before = [n for b, a, n in snap.snaps if a == "open"]
        after = [n for b, a, n in snap.snaps if b == "committed"]
        assert before and after, "no snapshot before or after the commit"
        assert set(before) == {0}, f"snapshots before commit() held {sorted(set(before))} events"
        assert set(after) == {expected}, f"snapshots after commit() held {sorted(set(after))} events"

        events = slice_events(store, SCOPE, STREAM)
        txn_events = [ev for ev in events if parse(ev.event)[0] == "txn"]
        assert len(txn_events) == expected
        assert_exactly_once(events)
        assert_key_order(events)
        assert sorted(parse(ev.event)[2] for ev in txn_events if ev.routing_key is None) == list(range(KEYLESS))
        assert_contiguous(events, lambda tag: tag == "txn")
        # the plain writer really was appending around the transaction in each segment it used
        for sid, evs in per_segment(events).items():
            kinds = [parse(ev.event)[0] for ev in evs]
            if "txn" in kinds:
                first, last = kinds.index("txn"), len(kinds) - 1 - kinds[::-1].index("txn")
                assert "plain" in kinds[:first] and "plain" in kinds[last + 1:], (
                    f"segment {sid:#x}: no plain events on both sides of the transaction")
        assert len({ev.segment_id for ev in txn_events}) == SEGMENTS
        assert sorted(ev.event for ev in reader_events(store, SCOPE, STREAM)) == sorted(ev.event for ev in events)


def test_abort_never_visible_also_after_reopen(store_path):
    with pe.open(store_path) as store:
        make_stream(store, SCOPE, STREAM, 3)
        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id="tx")
        with store.create_writer(SCOPE, STREAM, writer_id="plain") as w:
            for i in range(30):
                w.write_event(payload("plain", f"p{i % 5}", i // 5), routing_key=f"p{i % 5}")
        aborted = tw.begin_txn()
        for i in range(500):
            aborted.write_event(payload("aborted", f"k{i % 7}", i // 7), routing_key=f"k{i % 7}")
        aborted.write_events([payload("aborted", None, i) for i in range(50)])
        aborted.flush()
        with store.create_reader(SCOPE, STREAM) as r:
            aborted.abort()
            assert aborted.status() == pe.TxnStatus.ABORTED
            seen = []
            while (ev := r.read_next_event(0.2)) is not None:
                seen.append(ev)
        assert tags(seen) == {"plain": 30}
        # one left OPEN with flushed events at close, one committed
        left_open = tw.begin_txn()
        left_open.write_events([payload("open", "k", i) for i in range(20)], routing_key="k")
        left_open.flush()
        committed = tw.begin_txn()
        committed.write_events([payload("committed", "k", i) for i in range(20)], routing_key="k")
        committed.commit()
        assert tags(slice_events(store, SCOPE, STREAM)) == {"plain": 30, "committed": 20}
        ids = aborted.txn_id, left_open.txn_id, committed.txn_id

    with pe.open(store_path) as store:
        assert tags(slice_events(store, SCOPE, STREAM)) == {"plain": 30, "committed": 20}
        assert tags(reader_events(store, SCOPE, STREAM)) == {"plain": 30, "committed": 20}
        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id="tx")
        statuses = [tw.get_txn(i).status() for i in ids]
        assert statuses == [pe.TxnStatus.ABORTED, pe.TxnStatus.OPEN, pe.TxnStatus.COMMITTED]
        tw.get_txn(ids[1]).commit()  # the flushed events of the txn left open survive and commit
        events = slice_events(store, SCOPE, STREAM)
        assert tags(events) == {"plain": 30, "committed": 20, "open": 20}
        assert_key_order(events)
        assert_contiguous(events, lambda tag: tag != "plain")

    with pe.open(store_path) as store:
        assert tags(slice_events(store, SCOPE, STREAM)) == {"plain": 30, "committed": 20, "open": 20}


@pytest.mark.parametrize("flush", [False, True])
def test_commit_of_an_empty_transaction(pe_store, flush):
    make_stream(pe_store, SCOPE, STREAM, 2)
    with pe_store.create_writer(SCOPE, STREAM, writer_id="plain") as w:
        w.write_events([payload("plain", "k", i) for i in range(5)], routing_key="k")
    before = pe_store.stream_info(SCOPE, STREAM).tail
    tw = pe_store.create_transactional_writer(SCOPE, STREAM)
    txn = tw.begin_txn()
    txn.write_events([], routing_key="k")  # nothing
    if flush:
        txn.flush()
    txn.commit()
    assert txn.status() == pe.TxnStatus.COMMITTED
    assert pe_store.stream_info(SCOPE, STREAM).tail == before
    assert tags(slice_events(pe_store, SCOPE, STREAM)) == {"plain": 5}
    with tw.begin_txn() as empty:  # the context manager commits an empty one too
        pass
    assert empty.status() == pe.TxnStatus.COMMITTED
    assert pe_store.stream_info(SCOPE, STREAM).tail == before


def test_a_slice_taken_while_a_commit_is_applied_holds_all_of_it_or_none(pe_store, monkeypatch):
    """Forces the interleaving the race needs: the MERGE record is written (and durable, as the
    group commit may make it at any moment), a slice is created and has looked at its first
    segment, then the commit tries to apply its parts, then the slice looks at the other
    segments (the pause is at the slicer's first release of the index lock). The slice takes
    every segment's visible length under one hold of that lock, so the commit cannot apply in
    between: the slice holds all of it or none of it."""
    from pravega_embedded import segindex
    from pravega_embedded._native import lib

    make_stream(pe_store, SCOPE, STREAM, 4)
    txn = pe_store.create_transactional_writer(SCOPE, STREAM).begin_txn()
    for i in range(8):  # keyless: two in each of the 4 segments
        txn.write_event(payload("txn", None, i))
    txn.flush()
    merge_written, first_looked, applied = threading.Event(), threading.Event(), threading.Event()
    journal, index = pe_store._engine.journal, pe_store._engine.index
    real_append, real_visible, real_apply = (journal.append_record, segindex.SectionList.visible_length,
                                             index.merge)
    got: list = []

    def append_record(rtype, payload_, what):
        pos, end = real_append(rtype, payload_, what)
        if rtype == lib.PE_RECORD_MERGE:
            journal.wait_acked(end, None, "test")
            merge_written.set()
            first_looked.wait(2)
        return pos, end

    looked = []

    def visible(sections, length, acked):
        if threading.current_thread() is slicer:
            looked.append(sections)
        return real_visible(sections, length, acked)

    class PausingLock:
        """The index lock; when the slicer lets go of it after looking at its first segment,
        it waits for the commit to apply (which it can, now) before going on."""

        def __init__(self, lock):
            self.lock = lock

        def __enter__(self):
            return self.lock.__enter__()

        def __exit__(self, *exc):
            out = self.lock.__exit__(*exc)
            if threading.current_thread() is slicer and looked and not first_looked.is_set():
                first_looked.set()
                applied.wait(2)
            return out

    def apply_parts(*args):
        out = real_apply(*args)
        applied.set()
        return out

    def take_slice() -> None:
        merge_written.wait(10)
        got.append(list(pe_store.read_slice(SCOPE, STREAM)))

    monkeypatch.setattr(journal, "append_record", append_record)
    monkeypatch.setattr(segindex.SectionList, "visible_length", visible)
    monkeypatch.setattr(index, "lock", PausingLock(index.lock))
    monkeypatch.setattr(index, "merge", apply_parts)
    slicer = threading.Thread(target=take_slice, daemon=True)
    slicer.start()
    txn.commit()
    slicer.join(120)
    monkeypatch.undo()
    assert not slicer.is_alive(), "the slicer thread hung"
    assert merge_written.is_set() and first_looked.is_set(), "the interleaving was not forced"
    assert len(slice_events(pe_store, SCOPE, STREAM)) == 8
    n = tags(got[0])["txn"]
    assert n in (0, 8), f"a slice taken during the commit holds {n} of its 8 events"
