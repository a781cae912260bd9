"""The contract suite, continued: reader groups and checkpoints, transactions, byte streams,
slices and segment watchers behave the same through the owner's store and through a client
connected to it (``handle`` runs each test both ways)."""

from __future__ import annotations

import io
import threading
import time
import uuid

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _stream(store, segments=2, stream="s"):
    store.create_scope("a", exist_ok=True)
    store.create_stream("a", stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))


def _fill(store, n, stream="s", keys=5):
    w = store.create_writer("a", stream)
    for i in range(n):
        w.write_event(b"e%05d" % i, routing_key=f"k{i % keys}")
    w.close()


def _group(store, name="g", stream="s", **cfg):
    config = pe.ReaderGroupConfig(streams=[("a", stream)], automatic_checkpoint_interval=None, **cfg)
    return store.create_reader_group(name, config)


def _events(r, n=None, timeout=0.5):
    """Events (not markers) of ``r`` until ``n`` of them or ``timeout`` without one."""
    out = []
    while n is None or len(out) < n:
        ev = r.read_next_event(timeout)
        if ev is None:
            break
        if not (ev.is_checkpoint or ev.is_read_completed):
            out.append(ev)
    return out


def _per_key_in_order(events):
    last = {}
    for ev in events:
        i = int(ev.event[1:])
        assert last.get(ev.routing_key, -1) < i, f"out of order for {ev.routing_key}"
        last[ev.routing_key] = i


def test_a_group_reads_every_event_once_in_order_per_key(handle):
    _stream(handle)
    _fill(handle, 2000)
    g = _group(handle)
    r1, r2 = g.create_reader("r1"), g.create_reader("r2")
    got = []
    for _ in range(200):
        got += _events(r1, 50, 0.05) + _events(r2, 50, 0.05)
        if len(got) >= 2000:
            break
    assert sorted(ev.event for ev in got) == [b"e%05d" % i for i in range(2000)]
    for rid in ("r1", "r2"):  # each reader's events, per key, in write order
        _per_key_in_order([ev for ev in got if ev.position is not None])
    assert sorted(g.online_readers()) == ["r1", "r2"]
    assert g.unread_bytes() == 0
    dist = g.segment_distribution()
    assert isinstance(dist, pe.SegmentDistribution) and set(dist.readers) == {"r1", "r2"}
    r1.close(), r2.close()
    assert g.online_readers() == []
    assert handle.list_reader_groups() == ["g"]
    handle.delete_reader_group("g")
    with pytest.raises(errors.ReaderGroupNotFoundError):
        handle.get_reader_group("g")


def test_a_closed_reader_releases_just_after_what_it_returned(handle):
    """A client's reader holds a batch it did not hand out: closing it must give those events
    back to the group, not skip them."""
    _stream(handle, segments=1)
    _fill(handle, 500)
    g = _group(handle)
    r1 = g.create_reader("r1")
    first = _events(r1, 10)
    pos = r1.position()
    assert pos == first[-1].position
    r1.close()
    r2 = g.create_reader("r2")
    rest = _events(r2)
    assert sorted(ev.event for ev in first + rest) == [b"e%05d" % i for i in range(500)]
    _per_key_in_order(first + rest)


def test_reader_offline_at_a_position_and_a_new_reader_resumes_there(handle):
    _stream(handle, segments=1)
    _fill(handle, 300)
    g = _group(handle)
    r1 = g.create_reader("r1")
    first = _events(r1, 120)
    g.reader_offline("r1", first[-1].position)
    with pytest.raises(errors.ReaderNotInGroupError):  # a client's reader hands out what it
        for _ in range(2000):                         # fetched first (docs/multiprocess.md)
            r1.read_next_event(0)
    r2 = g.create_reader("r2")
    both = first + _events(r2)
    assert sorted(ev.event for ev in both) == [b"e%05d" % i for i in range(300)]
    _per_key_in_order(both)


def test_checkpoints_markers_and_reset_to_a_checkpoint(handle):
    _stream(handle)
    _fill(handle, 400)
    g = _group(handle)
    r = g.create_reader("r1")
    before = _events(r, 100)
    fut = g.initiate_checkpoint("cp1")
    assert g.outstanding_checkpoints() == ["cp1"]
    seen, marker = [], None
    while marker is None:
        ev = r.read_next_event(2)
        assert ev is not None
        if ev.is_checkpoint:
            marker = ev
        else:
            seen.append(ev)
    assert marker.checkpoint_name == "cp1" and marker.event is None
    after = _events(r)
    cp = fut.result(5)
    assert isinstance(cp, pe.Checkpoint) and cp.name == "cp1"
    assert g.last_checkpoint() == cp
    assert sorted(ev.event for ev in before + seen + after) == sorted(b"e%05d" % i for i in range(400))
    r.close()
    g.reset(cp)  # read again from the checkpoint: exactly the events after the marker
    r = g.create_reader("r2")
    assert sorted(ev.event for ev in _events(r)) == sorted(ev.event for ev in after)
    cuts = g.get_stream_cuts()
    assert set(cuts) == {("a", "s")} and isinstance(cuts[("a", "s")], pe.StreamCut)
    r.close()


def test_group_errors_are_the_library_classes(handle):
    _stream(handle)
    with pytest.raises(errors.ReaderGroupNotFoundError):
        handle.get_reader_group("nope")
    g = _group(handle)
    g.create_reader("r1")
    with pytest.raises(errors.ReaderExistsError):
        g.create_reader("r1")
    with pytest.raises(errors.ReaderNotFoundError):
        g.reader_offline("ghost")
    with pytest.raises(errors.InvalidNameError):
        g.initiate_checkpoint("")
    g.close()
    with pytest.raises(errors.ReaderGroupClosedError):
        g.online_readers()


def test_transactions_commit_abort_and_expire(handle):
    _stream(handle)
    tw = handle.create_transactional_writer("a", "s", "tw")
    with tw.begin_txn() as tx:
        for i in range(100):
            tx.write_event(b"t%03d" % i, f"k{i % 3}")
        assert tx.status() == pe.TxnStatus.OPEN
        assert isinstance(tx.txn_id, uuid.UUID)
    assert tx.status() == pe.TxnStatus.COMMITTED
    t2 = tw.begin_txn()
    t2.write_events([b"x1", b"x2"], "k")
    t2.abort()
    assert t2.status() == pe.TxnStatus.ABORTED
    assert tw.get_txn(str(tx.txn_id)).status() == pe.TxnStatus.COMMITTED
    got = sorted(ev.event for ev in _events(handle.create_reader("a", "s")))
    assert got == [b"t%03d" % i for i in range(100)]
    t3 = tw.begin_txn(lease=0.2)
    t3.write_event(b"late", "k")
    deadline = time.monotonic() + 30
    while t3.status() == pe.TxnStatus.OPEN and time.monotonic() < deadline:
        time.sleep(0.05)
    assert t3.status() == pe.TxnStatus.ABORTED
    with pytest.raises(errors.TxnFailedError):
        t3.commit()
    tw.close()
    with pytest.raises(errors.WriterClosedError):
        tw.begin_txn()


def test_byte_streams_write_seek_read_truncate_seal(handle):
    handle.create_scope("a")
    bs = handle.create_byte_stream("a", "b")
    assert bs.write(b"hello ") == 6 and bs.write(memoryview(b"world" * 1000)) == 5000
    bs.flush()
    assert bs.tail_offset() == 5006 and bs.head_offset() == 0
    assert bs.seek(0) == 0 and bs.read(6) == b"hello " and bs.tell() == 6
    assert bs.read() == b"world" * 1000
    bs.truncate_before(6)
    assert bs.head_offset() == 6
    bs.seek(0)
    with pytest.raises(errors.TruncatedDataError):
        bs.read(1)
    with pytest.raises(io.UnsupportedOperation):
        bs.truncate(0)
    bs.seal()
    with pytest.raises(errors.StreamSealedError):
        bs.write(b"more")
        bs.flush()
    bs.close()
    bs.close()
    with pytest.raises(ValueError):
        bs.read(1)


def test_slices_to_arrow_and_iteration(handle):
    _stream(handle)
    _fill(handle, 1000)
    sl = handle.read_slice("a", "s")
    table = sl.to_arrow()
    assert table.num_rows == 1000 and table.column_names == ["event", "routing_key", "segment_id", "offset"]
    assert sorted(table.column("event").to_pylist()) == [b"e%05d" % i for i in range(1000)]
    evs = list(sl)
    assert len(evs) == 1000 and sl.nbytes == sum(hi - lo for _, lo, hi in sl.ranges)
    assert [ev.event for ev in evs] == table.column("event").to_pylist()  # per segment, in order
    assert sl.to_arrow().equals(table) and len(list(sl)) == 1000  # again: the same snapshot
    _fill(handle, 10)
    assert len(list(sl)) == 1000  # a snapshot: later events are not in it
    assert handle.read_slice("a", "s", serializer="text").to_pandas().shape[0] == 1010


def test_segment_watchers_see_scalings(handle):
    _stream(handle, segments=1)
    w = handle.watch_segments("a", "s")
    first = w.get(5)
    assert first.segment_count == 1
    seen = []
    done = threading.Event()
    cw = handle.watch_segments("a", "s", lambda c: (seen.append(c), done.set()), initial=False)
    handle.scale_stream("a", "s", [0], [(0.0, 0.5), (0.5, 1.0)])
    change = w.get(5)
    assert change.segment_count == 2 and change.previous_count == 1
    assert done.wait(5) and seen[0].segment_count == 2
    assert w.get(0.05) is None
    w.close(), cw.close()
    assert w.get(0) is None


def test_large_events_written_and_read_whole(handle):
    """Events over 8 MiB: written by a client's writer, read by readers, group readers and
    fetch_event, between small ones, in order (each travels in parts)."""
    _stream(handle, segments=1)
    big = bytes(range(256)) * (20 << 12)  # 20 MiB
    w = handle.create_writer("a", "s", writer_id="lw")
    w.write_event(b"small-0", routing_key="k")
    assert w.write_event(big, routing_key="k") == 1
    w.write_event(b"small-2", routing_key="k")
    w.flush()
    with pytest.raises(errors.EventTooLargeError):  # as in process: not in a batch
        w.write_events([big], "k")
    w.close()
    w = handle.create_writer("a", "s", writer_id="lw")
    assert w.last_sequence == 2
    assert w.write_event(big, routing_key="k", sequence=1) == 1  # a resend: dropped
    w.close()
    r = handle.create_reader("a", "s")
    evs = _events(r)
    assert [ev.event for ev in evs] == [b"small-0", big, b"small-2"]
    assert handle.fetch_event(evs[1].event_pointer).event == big
    g = _group(handle)
    gr = g.create_reader("r")
    got = _events(gr)
    assert [ev.event for ev in got] == [b"small-0", big, b"small-2"]
    assert got[1].position == gr.position() or got[2].position == gr.position()
    gr.close()
