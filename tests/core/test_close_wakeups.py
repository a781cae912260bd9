"""Closing a store while other threads are blocked in it: they wake with a clear error."""

from __future__ import annotations

import threading

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def test_close_wakes_a_blocked_reader(store_path):
    store = pe.open(store_path)
    store.create_scope("s")
    store.create_stream("s", "t")
    reader = store.create_reader("s", "t")
    outcome: list[object] = []
    started = threading.Event()

    def blocked_read():
        started.set()
        try:
            outcome.append(reader.read_next_event(timeout=None))
        except errors.ClosedError as exc:
            outcome.append(exc)

    t = threading.Thread(target=blocked_read)
    t.start()
    started.wait(5)
    store.close()
    t.join(10)
    assert not t.is_alive(), "the blocked reader was not woken by close()"
    assert len(outcome) == 1 and isinstance(outcome[0], errors.ClosedError)


def test_close_while_another_thread_writes_and_flushes(store_path):
    store = pe.open(store_path)
    store.create_scope("s")
    store.create_stream("s", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    writer = store.create_writer("s", "t", writer_id="w")
    acked: list[int] = []
    stop = threading.Event()
    failure: list[BaseException] = []

    def write_loop():
        i = 0
        try:
            while not stop.is_set():
                writer.write_event(b"e%d" % i, routing_key=str(i % 5))
                i += 1
                if i % 100 == 0:
                    acked.append(writer.flush())
        except errors.ClosedError:
            pass
        except BaseException as exc:  # noqa: BLE001
            failure.append(exc)

    t = threading.Thread(target=write_loop)
    t.start()
    while not acked:
        t.join(0.01)
    store.close()
    stop.set()
    t.join(10)
    assert not t.is_alive()
    assert not failure, failure
    with pe.open(store_path) as store:
        seqs = sorted(int(ev.event[1:]) for ev in store.read_slice("s", "t"))
        assert seqs == list(range(len(seqs)))  # a gap-free prefix, each once
        assert len(seqs) >= acked[-1] + 1      # everything acknowledged survived
        assert store.create_writer("s", "t", writer_id="w").last_sequence == len(seqs) - 1


def test_operations_after_close_raise(store_path):
    store = pe.open(store_path)
    store.create_scope("s")
    store.create_stream("s", "t")
    w = store.create_writer("s", "t")
    r = store.create_reader("s", "t")
    store.close()
    store.close()  # idempotent
    with pytest.raises(errors.StoreClosedError):
        store.create_stream("s", "u")
    with pytest.raises(errors.ClosedError):
        w.write_event(b"x")
    with pytest.raises(errors.ClosedError):
        r.read_next_event(timeout=0)
