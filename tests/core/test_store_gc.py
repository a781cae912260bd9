"""A store dropped without close() is closed when garbage-collected: its lock is released (another
process can open it), its writers' pending events are appended; the handles it gave out keep it
open while they are referenced (storecore)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest

import pravega_embedded as pe
from pravega_embedded import errors, storecore


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
    code = ("import pravega_embedded as pe, sys, time\n"
            "deadline = time.monotonic() + 60\n"
            "while True:  # the reaper closes the dropped store: wait for its lock to be free\n"
            "    try:\n"
            "        s = pe.open(sys.argv[1], exclusive=True)\n"
            "        break\n"
            "    except pe.errors.StoreLockedError:\n"
            "        assert time.monotonic() < deadline\n"
            "        time.sleep(0.01)\n"
            "with s:\n"
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


def test_a_writer_collected_in_a_reference_cycle_still_appends_its_events(tmp_path):
    """The collector clears weakrefs before it calls __del__: the store dropped with its writer
    must still append what the writer had pending."""
    path = tmp_path / "s"
    _setup(path)
    store = pe.open(path)
    w = store.create_writer("a", "b", writer_id="w", linger=60)
    w.write_events([b"c1", b"c2"], routing_key="k")
    holder: dict = {"w": w}
    holder["self"] = holder  # the writer is reachable only from a cycle
    del w, holder, store
    gc.collect()
    assert _events(path) == [b"c1", b"c2"]


def test_a_second_open_in_this_process_keeps_working_after_the_first_is_dropped(tmp_path):
    path = tmp_path / "s"
    _setup(path)
    first = pe.open(path)
    second = pe.open(path)  # a client of the first (it owns the store)
    assert isinstance(second, pe.RemoteStore)
    del first
    gc.collect()  # the owner stays open while a client is connected
    with second.create_writer("a", "b", writer_id="w2") as w:
        w.write_event(b"via-client", routing_key="k")
    assert [e.event for e in second.read_slice("a", "b")] == [b"via-client"]
    second.close()  # the last client gone, the dropped owner closes
    assert _events(path) == [b"via-client"]


def test_a_watcher_keeps_its_store_open(tmp_path):
    path = tmp_path / "s"
    _setup(path)
    watcher = pe.open(path).watch_segments("a", "b")
    gc.collect()
    first = next(iter(watcher))
    assert first.segment_count == 1 and not watcher.closed
    watcher.close()
    del watcher
    gc.collect()
    with _open_exclusive(path):
        pass


def test_a_program_that_ends_right_after_dropping_its_store_appends_pending_events(tmp_path):
    path = tmp_path / "s"
    _setup(path)
    code = ("import pravega_embedded as pe, sys\n"
            "s = pe.open(sys.argv[1])\n"
            "w = s.create_writer('a', 'b', writer_id='w', linger=60)\n"
            "for i in range(1000):\n"
            "    w.write_event(b'%d' % i, routing_key='k')\n"
            "del w, s\n")  # and the interpreter exits at once
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert _events(path) == [b"%d" % i for i in range(1000)]


def test_a_forked_child_that_drops_its_copy_leaves_the_parents_store_open():
    """Only the process that opened a store closes it from the collector: a temporary store
    closed by a child would delete the parent's directory."""
    store = pe.open_temporary()
    store.create_scope("a")
    store.create_stream("a", "b")
    pid = os.fork()
    if pid == 0:  # the child: a reaper of its own runs; drop the copy; work the queue off
        code = 1
        try:
            other = pe.open_temporary()
            del store
            gc.collect()
            storecore._finish_at_exit()  # what interpreter exit does
            other.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.path.isdir(store.path)
    with store.create_writer("a", "b", writer_id="w") as w:  # the parent's store is unharmed
        w.write_event(b"after-fork", routing_key="k")
    assert [e.event for e in store.read_slice("a", "b")] == [b"after-fork"]
    store.close()
