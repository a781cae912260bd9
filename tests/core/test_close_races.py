"""Calls racing a store's close (found by the torture run): each is told the store is closed
(StoreClosedError), never an LMDB error and never a tripped fail-stop latch; close() waits for
the metadata calls in flight instead of closing LMDB under them (py-lmdb then blocked close
for good when a write transaction was open); a writer's close() racing another close() of it
returns only when the writer is closed and its events are durable."""

from __future__ import annotations

import threading

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _store_with_events(path, n=3000):
    store = pe.open(path)
    store.create_scope("s")
    store.create_stream("s", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    with store.create_writer("s", "t", writer_id="w") as w:
        for i in range(n):
            w.write_event(b"x%d" % i, routing_key=f"k{i % 7}")
    store.close()
    return pe.open(path)  # the section index is now read from LMDB


def test_a_slice_read_after_the_store_closed_is_store_closed(store_path):
    store = _store_with_events(store_path)
    sl = store.read_slice("s", "t")
    store.close()
    with pytest.raises(errors.StoreClosedError):
        list(sl)


def test_close_waits_for_a_metadata_write_in_flight_and_later_writes_are_refused(store_path):
    store = _store_with_events(store_path, 10)
    meta = store._engine.meta
    inside, release = threading.Event(), threading.Event()
    outcome: list = []

    def slow_write():
        try:
            with meta.write("a slow write") as txn:
                inside.set()
                release.wait(10)
                meta.put_scope(txn, "extra", {})
            outcome.append("committed")
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    t = threading.Thread(target=slow_write)
    t.start()
    assert inside.wait(10)
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close() closed LMDB under a write transaction in flight"
    release.set()
    t.join(10)
    closer.join(10)
    assert not closer.is_alive() and outcome == ["committed"]
    with pytest.raises(errors.StoreClosedError):
        with meta.write("a write after close"):
            pass
    assert not store._engine.latch.tripped
    with pe.open(store_path) as again:  # the write in flight was kept; the store is sound
        assert "extra" in again.list_scopes()


def test_a_writer_close_racing_another_close_returns_when_it_is_closed(store_path, monkeypatch):
    with pe.open(store_path) as store:
        store.create_scope("s")
        store.create_stream("s", "t")
        w = store.create_writer("s", "t", writer_id="w")
        for i in range(100):
            w.write_event(b"y%d" % i, routing_key="a")
        journal = store._engine.journal
        real_wait, in_flush, release = journal.wait_acked, threading.Event(), threading.Event()

        def slow_wait(*args, **kwargs):
            in_flush.set()
            release.wait(10)
            return real_wait(*args, **kwargs)

        monkeypatch.setattr(journal, "wait_acked", slow_wait)
        first = threading.Thread(target=w.close)
        first.start()
        assert in_flush.wait(10)
        second = threading.Thread(target=w.close)
        second.start()
        second.join(0.3)
        assert second.is_alive(), "a second close() returned while the first was still flushing"
        release.set()
        second.join(10)
        first.join(10)
        assert w.closed and w.durable_sequence == w.last_sequence == 99
        store.create_writer("s", "t", writer_id="w").close()  # the id is free again


def test_a_reader_closed_from_another_thread_resumes_exactly_after_what_it_returned(store_path):
    """A reader's close() from another thread (as store.close() does) racing the reading
    thread: every event the reading thread got is before position(), every other one after it
    (found by the torture run: close() rebuilt the buffered chunk's iterator while the reading
    thread could still take an event from it, so position() fell before an event already
    returned and the resumed reader returned it again)."""
    import random
    import sys
    events = [b"e%05d" % i for i in range(3000)]
    with pe.open(store_path, durability="none") as s:
        s.create_scope("sc")
        s.create_stream("sc", "st", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
        with s.create_writer("sc", "st") as w:
            w.write_events(events[:1500], routing_key="k")
            w.write_events(events[1500:], routing_key="k")
        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible
        rnd = random.Random(7)
        try:
            for trial in range(150):
                r = s.create_reader("sc", "st")
                got: list[bytes] = []
                started = threading.Event()

                def read() -> None:
                    try:
                        while True:
                            ev = r.read_next_event(timeout=0)
                            if ev is None:
                                return
                            got.append(ev.event)
                            started.set()
                    except errors.ReaderClosedError:
                        pass

                t = threading.Thread(target=read)
                t.start()
                started.wait()
                for _ in range(rnd.randrange(200)):
                    pass
                r.close()
                t.join()
                with s.create_reader("sc", "st", start=r.position()) as again:
                    rest = [e.event for e in iter(lambda: again.read_next_event(timeout=0), None)]
                assert got + rest == events, f"trial {trial}: {len(got)} returned, resumed at " \
                    f"{rest[:1]} (a duplicate or a gap at the close)"
        finally:
            sys.setswitchinterval(old)


def test_a_group_reader_created_while_the_store_closes_never_has_its_events_read_again(
        store_path, monkeypatch):
    """A reader created after store.close() took its list of readers to close (found by the
    torture run): it read and returned events, close never recorded its position in the group,
    and after the reopen the group returned those events again. Now the close refuses readers
    and writers from its first step on, so whatever a late reader returned stays read."""
    events = [b"g%04d" % i for i in range(400)]
    store = pe.open(store_path)
    store.create_scope("sc")
    store.create_stream("sc", "st", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
    with store.create_writer("sc", "st", writer_id="w") as w:
        w.write_events(events, routing_key="k")
    store.create_reader_group("g", [("sc", "st")])
    bg = store._bg
    real_stop, stopping, release = bg.stop, threading.Event(), threading.Event()

    def slow_stop(*args, **kwargs):  # the close is past its readers, still open for reads
        stopping.set()
        release.wait(10)
        return real_stop(*args, **kwargs)

    monkeypatch.setattr(bg, "stop", slow_stop)
    closer = threading.Thread(target=store.close)
    closer.start()
    assert stopping.wait(10)
    late: list[bytes] = []
    r = None
    try:  # the application reads on until it is told the store closed (it is not closed)
        r = store.get_reader_group("g").create_reader("late")
        for ev in iter(lambda: r.read_next_event(timeout=0), None):
            if not ev.is_checkpoint:
                late.append(ev.event)
    except errors.StoreClosedError:
        pass
    admitted = []
    for what, call in (("a writer", lambda: store.create_writer("sc", "st", writer_id="w2")),
                       ("a reader", lambda: store.create_reader("sc", "st"))):
        try:
            call()
            admitted.append(what)
        except errors.StoreClosedError:
            pass
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    if r is not None:
        with pytest.raises(errors.ClosedError):
            r.read_next_event(timeout=0)
        r.close()
    with pe.open(store_path) as again:
        with again.get_reader_group("g").create_reader("late") as r:  # resumes where it was
            rest = [ev.event for ev in iter(lambda: r.read_next_event(timeout=0), None)
                    if not ev.is_checkpoint]
    assert late + rest == events, f"{len(late)} read during the close, then {len(rest)} " \
        f"after the reopen starting at {rest[:1]}"
    assert admitted == [], f"{admitted} created while the store was closing"
