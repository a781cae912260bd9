"""close() while the linger thread is handing over an earlier batch: the events written after
that batch are appended too (a refusal that is not a failed store never drops pending events),
and a failed store makes every write raise."""

from __future__ import annotations

import errno
import threading

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded._native import lib
from pravega_embedded.writer import EventStreamWriter


def test_close_racing_a_linger_drain_loses_nothing(tmp_path, monkeypatch):
    with pe.open(tmp_path / "s") as store:
        store.create_scope("a")
        store.create_stream("a", "b")
        w = store.create_writer("a", "b", writer_id="w", linger=0.001)
        in_submit, release = threading.Event(), threading.Event()
        real = EventStreamWriter._submit

        def submit(self, lists, first, last):
            if threading.current_thread().name == "pe-linger" and not in_submit.is_set():
                in_submit.set()
                assert release.wait(30)
            return real(self, lists, first, last)

        monkeypatch.setattr(EventStreamWriter, "_submit", submit)
        w.write_event(b"first", routing_key="k")  # the linger thread takes this batch
        assert in_submit.wait(30), "the linger thread never drained"
        for i in range(100):  # pending while the linger thread holds the writer's I/O lock
            w.write_event(b"more-%d" % i, routing_key="k")
        closer = threading.Thread(target=w.close)
        closer.start()  # sets the refusal, then waits for the I/O lock
        closer.join(0.2)
        release.set()
        closer.join(30)
        assert not closer.is_alive()
        got = [e.event for e in store.read_slice("a", "b")]
    assert got == [b"first"] + [b"more-%d" % i for i in range(100)]


def _store_with_one_durable_event(tmp_path):
    store = pe.open(tmp_path / "s")
    store.create_scope("a")
    store.create_stream("a", "b")
    w = store.create_writer("a", "b", writer_id="w", linger=60)
    w.write_event(b"ok", routing_key="k")
    w.flush()
    return store, w


def test_after_a_failed_sync_every_write_raises(tmp_path):
    store, w = _store_with_one_durable_event(tmp_path)
    lib.pe_journal_inject_fault(store._engine.journal.handle, lib.PE_FAULT_SYNC, errno.EIO, 1)
    w.write_event(b"lost", routing_key="k")
    with pytest.raises(errors.StorageError):
        w.flush()
    with pytest.raises(errors.StorageError):
        w.write_event(b"refused", routing_key="k")
    with pytest.raises(errors.StorageError):
        w.flush()
    store.close()
    with pe.open(tmp_path / "s") as store:
        got = [e.event for e in store.read_slice("a", "b")]
    assert got[0] == b"ok" and b"refused" not in got


def test_a_trip_seen_by_a_drain_before_its_listener_ran_still_refuses(tmp_path, monkeypatch):
    """The latch trips in another thread while this writer's drain holds its I/O lock, and the
    drain's clean-up swaps the batch out before the store's listener set the writer's refusal
    (the listener then cannot take the lock): later writes must raise all the same (CI caught
    ``write_event`` accepting an event after a failed flush)."""
    store, w = _store_with_one_durable_event(tmp_path)
    latch = store._engine.latch
    gate = threading.Event()
    latch._listeners.insert(0, lambda err: gate.wait(30))  # runs before the store's listener
    main = threading.current_thread()
    tripper = threading.Thread(target=latch.trip, args=(errno.EIO, "injected sync failure"))
    real_take, real_submit = EventStreamWriter._take, EventStreamWriter._submit

    def submit(self, lists, first, last):
        tripper.start()  # the failure lands while this drain holds the I/O lock
        while not latch.failed:
            threading.Event().wait(0.001)
        raise latch.fresh()

    def take(self):
        got = real_take(self)
        if latch.failed and threading.current_thread() is main:  # the drain's clean-up
            gate.set()  # now the store's listener runs; it cannot take the I/O lock
            tripper.join(30)
        return got

    monkeypatch.setattr(EventStreamWriter, "_submit", submit)
    monkeypatch.setattr(EventStreamWriter, "_take", take)
    w.write_event(b"lost", routing_key="k")
    with pytest.raises(errors.StorageError):
        w.flush()
    assert not tripper.is_alive()
    with pytest.raises(errors.StorageError):
        w.write_event(b"refused", routing_key="k")
    monkeypatch.undo()
    store.close()
