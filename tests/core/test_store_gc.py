"""A store dropped without close() is closed when garbage-collected: its lock is released (another
process can open it), its writers' pending events are appended; the handles it gave out keep it
open while they are referenced (storecore)."""

from __future__ import annotations

import gc
import subprocess
import sys
import time

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _setup(path):
    with pe.open(path, durability="none") as s:
        s.create_scope("a")
        s.create_stream("a", "b")


def _open_exclusive(path, deadline_s=60.0):
    """Open ``path`` exclusively once its lock is free (the GC's close may run on a store
    thread and finish a little later): wait on that condition, not for a time."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return pe.open(path, exclusive=True)
        except errors.StoreLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _events(path):
    with _open_exclusive(path) as s:
        return [e.event for e in s.read_slice("a", "b")]


def test_a_dropped_store_releases_its_lock_to_another_process(tmp_path):
    path = tmp_path / "s"
    _setup(path)
    store = pe.open(path)
    w = store.create_writer("a", "b", writer_id="w")
    w.write_event(b"one", routing_key="k")
    w.flush()
    del store, w
    gc.collect()
    code = ("import pravega_embedded as pe, sys\n"
            "with pe.open(sys.argv[1], exclusive=True) as s:\n"
            "    print([e.event for e in s.read_slice('a', 'b')])\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[b'one']"


def test_a_store_in_a_reference_cycle_is_released_by_the_collector(tmp_path):
    path = tmp_path / "s"
    _setup(path)
    holder: dict = {"store": pe.open(path)}
    holder["self"] = holder
    del holder
    gc.collect()  # closes on a thread of its own and waits for it
    with _open_exclusive(path) as s:
        assert s.list_streams("a") == ["b"]


def test_pending_events_of_a_dropped_store_and_writer_are_appended(tmp_path):
    path = tmp_path / "s"
    _setup(path)
    store = pe.open(path)
    w = store.create_writer("a", "b", writer_id="w", linger=60)
    for i in range(10):
        w.write_event(b"e%d" % i, routing_key="k")
    del store, w  # the writer's batch is still pending (linger 60 s)
    gc.collect()
    assert _events(path) == [b"e%d" % i for i in range(10)]


def test_a_writer_dropped_without_close_is_closed_and_its_events_appended(tmp_path):
    path = tmp_path / "s"
    _setup(path)
    with pe.open(path) as store:
        w = store.create_writer("a", "b", writer_id="w", linger=60)
        w.write_events([b"x", b"y"], routing_key="k")
        del w
        deadline = time.monotonic() + 60
        while True:  # the linger thread closes the dropped writer; its id is then free
            try:
                w = store.create_writer("a", "b", writer_id="w")
                break
            except errors.WriterExistsError:
                assert time.monotonic() < deadline, "the dropped writer was never closed"
                time.sleep(0.01)
        assert w.last_sequence == 1
        assert [e.event for e in store.read_slice("a", "b")] == [b"x", b"y"]
        w.close()


def test_handles_keep_the_store_they_came_from_open(tmp_path):
    path = tmp_path / "s"
    _setup(path)
    w = pe.open(path).create_writer("a", "b", writer_id="w")
    gc.collect()
    w.write_event(b"kept", routing_key="k")
    assert w.flush() == 0
    del w
    gc.collect()
    assert _events(path) == [b"kept"]


@pytest.mark.parametrize("make", ["reader", "slice", "group", "group_reader", "txn_writer", "bytes"])
def test_each_kind_of_handle_keeps_its_store(tmp_path, make):
    path = tmp_path / "s"
    _setup(path)
    with pe.open(path) as s:
        w = s.create_writer("a", "b")
        w.write_event(b"ev", routing_key="k")
        w.close()
    if make == "reader":
        h = pe.open(path).create_reader("a", "b")
        gc.collect()
        assert h.read_next_event(5).event == b"ev"
    elif make == "slice":
        h = pe.open(path).read_slice("a", "b")
        gc.collect()
        assert h.to_arrow().num_rows == 1
    elif make == "group":
        h = pe.open(path).create_reader_group("g", "a", "b")
        gc.collect()
        assert h.unread_events() == 1
    elif make == "group_reader":
        h = pe.open(path).create_reader_group("g", "a", "b").create_reader("r1")
        gc.collect()
        assert h.read_next_event(5).event == b"ev"
    elif make == "txn_writer":
        h = pe.open(path).create_transactional_writer("a", "b")
        gc.collect()
        txn = h.begin_txn()
        txn.write_event(b"t", routing_key="k")
        txn.commit()
        del txn
    else:
        h = pe.open(path).create_byte_stream("a", "bytes")
        gc.collect()
        h.write(b"abc")
        h.flush()
    if hasattr(h, "close"):
        h.close()
    del h
    gc.collect()
    with _open_exclusive(path) as s:  # closing the handle and dropping it let the store go
        assert s.stream_info("a", "b").events == (2 if make == "txn_writer" else 1)


def test_close_then_collect_closes_once(tmp_path):
    path = tmp_path / "s"
    store = pe.open(path)
    store.close()
    del store
    gc.collect()
    with pe.open(path, exclusive=True):
        pass
