"""Disk faults injected into the live C journal: a full disk loses nothing; a failed fsync is never
retried and nothing acknowledged before it is lost."""

from __future__ import annotations

import errno

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded._native import lib


def _setup(store, n=2):
    store.create_scope("f", exist_ok=True)
    store.create_stream("f", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n)), exist_ok=True)


def _inject(store, which, err, countdown=1):
    assert lib.pe_journal_inject_fault(store._engine.journal.handle, which, err, countdown) == lib.PE_OK


def _per_key(store):
    out: dict[str | None, list[bytes]] = {}
    for e in store.read_slice("f", "t"):
        out.setdefault(e.routing_key, []).append(e.event)
    return out


@pytest.mark.parametrize("durability", ["fsync", "os", "none"])
def test_disk_full_raises_storage_full_and_loses_nothing(store_path, durability):
    s = pe.open(store_path, durability=durability)
    try:
        _setup(s)
        w = s.create_writer("f", "t", writer_id="w", linger=60)  # no background drain
        w.write_events([b"a0", b"a1"], routing_key="a")
        assert w.flush() == 1
        _inject(s, lib.PE_FAULT_WRITE, errno.ENOSPC)
        assert w.write_events([b"a2", b"a3", b"a4"], routing_key="a") == 4
        w.write_event(b"b0", routing_key="b")
        with pytest.raises(errors.StorageFullError) as info:
            w.flush()
        exc = info.value
        assert exc.errno == errno.ENOSPC and isinstance(exc, errors.StorageError) and isinstance(exc, OSError)
        assert "f/t" in str(exc) or "'w'" in str(exc)
        assert w.last_sequence == 5 and w.durable_sequence == 1  # not acknowledged, but kept
        assert _per_key(s) == {"a": [b"a0", b"a1"]}  # nothing half-written is visible
        w.write_event(b"a5", routing_key="a")  # written after the failure: goes after the kept batch
        assert w.flush() == 6  # the disk has space again: the kept batch goes in first
        assert w.durable_sequence == w.last_sequence == 6
        expected = {"a": [b"a0", b"a1", b"a2", b"a3", b"a4", b"a5"], "b": [b"b0"]}
        assert _per_key(s) == expected
        w.close()
    finally:
        s.close()
    with pe.open(store_path, durability=durability) as s:  # and so after recovery
        assert _per_key(s) == expected
        assert s.create_writer("f", "t", writer_id="w").last_sequence == 6


def test_disk_full_affects_only_the_writer_that_hit_it(durable_store):
    s = durable_store
    _setup(s)
    w1 = s.create_writer("f", "t", writer_id="w1", linger=60)
    w2 = s.create_writer("f", "t", writer_id="w2", linger=60)
    w1.write_events([b"one-%d" % i for i in range(3)], routing_key="k1")
    w2.write_events([b"two-%d" % i for i in range(3)], routing_key="k2")
    _inject(s, lib.PE_FAULT_WRITE, errno.ENOSPC)
    with pytest.raises(errors.StorageFullError):
        w1.flush()
    assert w2.flush() == 2
    assert _per_key(s) == {"k2": [b"two-0", b"two-1", b"two-2"]}
    assert w1.flush() == 2
    assert _per_key(s) == {"k1": [b"one-0", b"one-1", b"one-2"], "k2": [b"two-0", b"two-1", b"two-2"]}


def test_disk_full_during_write_event_keeps_the_event(durable_store):
    """A write_event that fills its batch drains it; if that append fails the event is still
    buffered (its sequence number is taken) and the next flush writes it exactly once."""
    s = durable_store
    _setup(s, 1)
    w = s.create_writer("f", "t", writer_id="w", linger=60, batch_bytes=64)
    _inject(s, lib.PE_FAULT_WRITE, errno.ENOSPC)
    with pytest.raises(errors.StorageFullError):
        w.write_event(b"x" * 100, routing_key="k")
    assert w.last_sequence == 0
    assert w.flush() == 0
    assert _per_key(s) == {"k": [b"x" * 100]}


def test_disk_full_then_close_flushes_the_kept_batch(store_path):
    s = pe.open(store_path)
    _setup(s)
    w = s.create_writer("f", "t", writer_id="w", linger=60)
    w.write_events([b"e%d" % i for i in range(10)], routing_key="k")
    _inject(s, lib.PE_FAULT_WRITE, errno.ENOSPC)
    with pytest.raises(errors.StorageFullError):
        w.flush()
    s.close()  # close flushes writers: the disk has space again
    with pe.open(store_path) as s:
        assert _per_key(s) == {"k": [b"e%d" % i for i in range(10)]}


def test_failed_fsync_is_not_retried_and_acknowledged_events_survive(store_path):
    s = pe.open(store_path)  # durability="fsync"
    _setup(s)
    w = s.create_writer("f", "t", writer_id="w", linger=60)
    acked = [b"acked-%d" % i for i in range(20)]
    w.write_events(acked[:10], routing_key="a")
    w.write_events(acked[10:], routing_key="b")
    assert w.flush() == 19
    _inject(s, lib.PE_FAULT_SYNC, errno.EIO)
    w.write_events([b"unacked-0", b"unacked-1"], routing_key="a")
    with pytest.raises(errors.StorageError) as info:
        w.flush()
    assert info.value.errno == errno.EIO
    assert w.durable_sequence == 19
    for _ in range(3):  # the journal stays failed: no silent retry of fsync
        with pytest.raises(errors.StorageError):
            w.write_events([b"later"], routing_key="a")
            w.flush()
    assert w.durable_sequence == 19
    w2 = None
    try:
        w2 = s.create_writer("f", "t", writer_id="other", linger=60)
    except errors.StorageError:
        pass
    if w2 is not None:
        with pytest.raises(errors.StorageError):
            w2.write_event(b"other", routing_key="c")
            w2.flush()
    try:
        s.close()
    except errors.StorageError:
        pass
    assert s.closed
    with pe.open(store_path) as s2:  # recovery: the acknowledged events are there, once, in order
        got = _per_key(s2)
        assert got["a"][:10] == acked[:10] and got["b"] == acked[10:]
        assert set(got) <= {"a", "b", "c"}
        # the record whose fsync failed may or may not have reached the disk, but as a whole;
        # appends refused after the failure never appear
        assert got["a"][10:] in ([], [b"unacked-0", b"unacked-1"])
        assert s2.create_writer("f", "t", writer_id="w").last_sequence >= 19
        with s2.create_writer("f", "t", writer_id="fresh") as w3:  # the store works again
            w3.write_event(b"fresh", routing_key="z")
        assert _per_key(s2)["z"] == [b"fresh"]


def test_failed_fsync_fails_readers_waiting_for_durability_not_silently(store_path):
    s = pe.open(store_path)
    _setup(s, 1)
    w = s.create_writer("f", "t", writer_id="w", linger=60)
    w.write_event(b"acked", routing_key="k")
    w.flush()
    r = s.create_reader("f", "t")
    _inject(s, lib.PE_FAULT_SYNC, errno.EIO)
    w.write_event(b"never-durable", routing_key="k")
    with pytest.raises(errors.StorageError):
        w.flush()
    with pytest.raises(errors.StorageError):  # fail-stop: no new work until the store is reopened
        s.create_reader("f", "t")
    assert r.read_next_event(timeout=0).event == b"acked"  # acknowledged before the failure
    # the unsynced event is never shown as if it were durable
    try:
        nxt = r.read_next_event(timeout=0.2)
    except errors.StorageError:
        nxt = None
    assert nxt is None
    try:
        s.close()
    except errors.StorageError:
        pass
    with pe.open(store_path) as s2:
        assert _per_key(s2)["k"][0] == b"acked"
