"""Reader-group contract: exactly-once delivery, per-key order, balancing, checkpoints, stream
cuts, bounded reads, reset, offline readers, lag figures and group administration."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

import pytest
from rg_helpers import cfg, drain, events, write

import pravega_embedded as pe
from pravega_embedded import errors


def per_key(evs):
    out = defaultdict(list)
    for e in evs:
        out[e.routing_key].append(e.event)
    return out


def test_two_readers_read_every_event_exactly_once_in_per_key_order(store):
    written = write(store, "iot", "sensors", 2000)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r1, r2 = g.create_reader("r1"), g.create_reader("r2")
    got = drain([r1, r2])
    evs = events(got)
    assert Counter(e.event for e in evs) == Counter(written)
    assert got["r1"] and got["r2"], "both readers read"
    # a key lives in one segment, read by one reader at a time, in write order
    for key, lst in per_key(evs).items():
        assert lst == [w for w in written if w.split(b":")[1] == key.encode()]
    dist = g.segment_distribution()
    assert sorted(dist.counts.values()) == [2, 2] and dist.unassigned == ()
    assert g.unread_bytes() == 0


def test_several_streams_in_one_group(store):
    store.create_stream("iot", "other", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    a = write(store, "iot", "sensors", 300)
    b = write(store, "iot", "other", 200, writer="v")
    g = store.create_reader_group("both", cfg("iot/sensors", ("iot", "other")))
    readers = [g.create_reader(f"r{i}") for i in range(3)]
    evs = events(drain(readers))
    assert Counter(e.event for e in evs) == Counter(a + b)
    assert {(e.scope, e.stream) for e in evs} == {("iot", "sensors"), ("iot", "other")}
    assert sorted(g.segment_distribution().counts.values()) == [2, 2, 3]
    assert set(g.get_stream_cuts()) == {("iot", "sensors"), ("iot", "other")}


def test_a_joining_reader_gets_its_share_from_readers_blocked_at_the_tail(store):
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r1 = g.create_reader("r1")
    assert r1.read_next_event(timeout=0) is None
    assert g.segment_distribution().counts == {"r1": 4}
    stop = threading.Event()
    t = threading.Thread(target=lambda: [r1.read_next_event(timeout=5) for _ in iter(stop.is_set, True)])
    t.start()
    try:
        r2 = g.create_reader("r2")
        deadline = time.monotonic() + 60  # the loop ends at the rebalance; the cap bounds a hang
        while time.monotonic() < deadline:
            r2.read_next_event(timeout=0.01)
            if g.segment_distribution().counts == {"r1": 2, "r2": 2}:
                break
        assert g.segment_distribution().counts == {"r1": 2, "r2": 2}
    finally:
        stop.set()
        write(store, "iot", "sensors", 8)  # wake r1
        t.join(10)
    assert not t.is_alive()


def test_a_closed_reader_releases_at_its_exact_position(store):
    written = write(store, "iot", "sensors", 400)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r1, r2 = g.create_reader("r1"), g.create_reader("r2")
    first = [r1.read_next_event(0) for _ in range(30)] + [r2.read_next_event(0) for _ in range(30)]
    r1.close()
    r1.close()  # idempotent
    with pytest.raises(errors.ReaderClosedError):
        r1.read_next_event(0)
    rest = events(drain([r2]))
    assert Counter(e.event for e in first + rest if e is not None and not e.is_checkpoint) == Counter(written)
    assert g.online_readers() == ["r2"]
    assert g.segment_distribution().counts == {"r2": 4}


def test_checkpoint_markers_then_completion_with_positions(store):
    write(store, "iot", "sensors", 400)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r1, r2 = g.create_reader("r1"), g.create_reader("r2")
    for _ in range(50):
        r1.read_next_event(0)
        r2.read_next_event(0)
    fut = g.initiate_checkpoint("cp-1")
    assert g.outstanding_checkpoints() == ["cp-1"]
    m1 = r1.read_next_event(0)
    assert m1.is_checkpoint and m1.checkpoint_name == "cp-1" and m1.event is None
    assert m1.event_pointer is None and not m1.is_read_completed
    assert not fut.done()
    m2 = r2.read_next_event(0)
    assert m2.is_checkpoint
    assert not fut.done(), "positions are recorded on the call after the marker"
    e1 = r1.read_next_event(0)
    e2 = r2.read_next_event(0)
    cp = fut.result(timeout=1)
    assert cp.name == "cp-1" and g.outstanding_checkpoints() == []
    cut = cp.stream_cut("iot", "sensors")
    # the cut is where the readers stood at their markers: the next events are at its offsets
    pos = cut.as_dict()
    assert pos[e1.segment_id] == e1.offset and pos[e2.segment_id] == e2.offset
    assert g.get_stream_cuts() == {("iot", "sensors"): cut}
    assert g.last_checkpoint() == cp
    # each marker's position is the reader's position at that point
    assert set(m1.position.as_dict()) | set(m2.position.as_dict()) == {f"iot/sensors/{s}" for s in range(4)}


def test_a_reader_without_segments_answers_checkpoints(store):
    """Pravega #1152: a reader that owns no segment must not block a checkpoint."""
    write(store, "iot", "sensors", 40)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    readers = [g.create_reader(f"r{i}") for i in range(6)]
    drain(readers)
    counts = g.segment_distribution().counts
    assert sorted(counts.values()) == [0, 0, 1, 1, 1, 1]
    fut = g.initiate_checkpoint("cp")
    got = drain(readers)
    assert all(any(e.is_checkpoint for e in got[r.reader_id]) for r in readers)
    assert fut.result(timeout=1).stream_cut("iot", "sensors") == store.stream_info("iot", "sensors").tail


def test_bounded_read_stops_at_the_end_cut_and_checkpoints_still_complete(store):
    """Pravega #6651: a checkpoint completes after a bounded read completed."""
    before = write(store, "iot", "sensors", 300)
    end = store.stream_info("iot", "sensors").tail
    write(store, "iot", "sensors", 100, start=300)
    g = store.create_reader_group("bounded", cfg("iot/sensors", end=end))
    r1, r2 = g.create_reader("r1"), g.create_reader("r2")
    evs = events(drain([r1, r2]))
    assert Counter(e.event for e in evs) == Counter(before)
    done1, done2 = r1.read_next_event(0), r2.read_next_event(0)
    assert done1.is_read_completed and done2.is_read_completed and done1.event is None
    assert list(r1) == [], "iteration ends at read completed"
    fut = g.initiate_checkpoint("after")
    assert r1.read_next_event(0).is_checkpoint and r2.read_next_event(0).is_checkpoint
    assert r1.read_next_event(0).is_read_completed and r2.read_next_event(0).is_read_completed
    assert fut.result(timeout=1).stream_cut("iot", "sensors") == end
    assert g.unread_bytes() == 0


def test_start_and_end_cuts_bound_a_slice(store):
    write(store, "iot", "sensors", 100)
    start = store.stream_info("iot", "sensors").tail
    middle = write(store, "iot", "sensors", 100, start=100)
    end = store.stream_info("iot", "sensors").tail
    write(store, "iot", "sensors", 100, start=200)
    g = store.create_reader_group("slice", cfg("iot/sensors", start=start, end={"iot/sensors": end}))
    assert g.get_stream_cuts()[("iot", "sensors")] == start
    assert Counter(e.event for e in events(drain([g.create_reader("r")]))) == Counter(middle)


def test_reset_to_a_checkpoint_replays_the_identical_remainder(store):
    write(store, "iot", "sensors", 1000)
    store.seal_stream("iot", "sensors")
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r1, r2 = g.create_reader("r1"), g.create_reader("r2")
    for _ in range(120):
        r1.read_next_event(0)
        r2.read_next_event(0)
    fut = g.initiate_checkpoint("cp")
    first = drain([r1, r2])
    cp = fut.result(timeout=1)

    def remainder(got):
        # per segment, the events after each reader's marker, in order
        out = defaultdict(list)
        for lst in got.values():
            after = False
            for e in lst:
                if e.is_checkpoint:
                    after = True
                elif after:
                    out[e.segment_id].append((e.offset, e.event))
        return dict(out)

    expected = remainder(first)
    assert sum(map(len, expected.values())) > 500
    g.reset(cp)
    with pytest.raises(errors.ReinitializationRequiredError):
        r1.read_next_event(0)
    with pytest.raises(errors.ReaderClosedError):
        r1.read_next_event(0)  # once, then closed
    with pytest.raises(errors.ReinitializationRequiredError):
        r2.read_next_event(0)
    n1, n2 = g.create_reader("r1"), g.create_reader("r2")
    again = defaultdict(list)
    for e in events(drain([n1, n2])):
        again[e.segment_id].append((e.offset, e.event))
    assert dict(again) == expected
    # after a reset, the group's stream cuts are its new start until a checkpoint completes
    assert g.last_checkpoint() is None
    assert g.get_stream_cuts() == dict(cp.stream_cuts)


def test_reset_with_a_new_config_and_failed_checkpoints(store):
    write(store, "iot", "sensors", 50)
    store.create_stream("iot", "other")
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r = g.create_reader("r")
    fut = g.initiate_checkpoint("never")
    g.reset(cfg("iot/other"))
    with pytest.raises(errors.CheckpointFailedError):
        fut.result(timeout=1)
    assert g.config.streams == (("iot", "other"),)
    with pytest.raises(errors.ReinitializationRequiredError):
        r.read_next_event(0)
    r2 = g.create_reader("r")  # the id is free again
    assert r2.read_next_event(0) is None
    with pytest.raises(errors.InvalidConfigurationError):
        g.reset("iot/sensors")


def test_reader_offline_without_position_redelivers_from_the_last_checkpoint(store):
    write(store, "iot", "sensors", 400)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r1, r2 = g.create_reader("r1"), g.create_reader("r2")
    drain([r1, r2], idle_rounds=0)  # no-op: nothing read yet
    for _ in range(20):
        r1.read_next_event(0)
        r2.read_next_event(0)
    fut = g.initiate_checkpoint("cp")
    drain([r1, r2], idle_rounds=1)
    cp = fut.result(timeout=1)
    after_cp = [r1.read_next_event(0) for _ in range(40)]
    after_cp = [e for e in after_cp if e is not None and not e.is_checkpoint]
    mine = set(r1.position().as_dict())
    g.reader_offline("r1")  # None: at its last checkpoint
    with pytest.raises(errors.ReaderNotInGroupError):
        r1.read_next_event(0)
    assert r1.closed
    assert g.online_readers() == ["r2"]
    redelivered = events(drain([r2]))
    # everything r1 read after the checkpoint is read again, starting at the checkpoint
    assert {e.event for e in after_cp} <= {e.event for e in redelivered}
    cut = cp.stream_cut("iot", "sensors").as_dict()
    first_offsets = {}
    for e in redelivered:
        first_offsets.setdefault(e.segment_id, e.offset)
    for k in mine:
        sid = int(k.rsplit("/", 1)[1])
        assert first_offsets[sid] == cut[sid]


def test_reader_offline_at_a_position_loses_and_duplicates_nothing(store):
    written = write(store, "iot", "sensors", 400)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r1, r2 = g.create_reader("r1"), g.create_reader("r2")
    got = []
    last = None
    for _ in range(60):
        e = r1.read_next_event(0)
        if e is not None and not e.is_checkpoint:
            got.append(e)
            last = e
        e = r2.read_next_event(0)
        if e is not None and not e.is_checkpoint:
            got.append(e)
    g.reader_offline("r1", last.position)
    got += events(drain([r2]))
    assert Counter(e.event for e in got) == Counter(written)


def test_lag_figures(store):
    write(store, "iot", "sensors", 100)
    store.create_stream("iot", "other")
    write(store, "iot", "other", 10, writer="v")
    g = store.create_reader_group("dash", cfg("iot/sensors", "iot/other"))
    tail = store.stream_info("iot", "sensors").tail.as_dict()
    other = store.stream_info("iot", "other").tail.as_dict()
    assert g.unread_bytes("iot", "sensors") == sum(tail.values())
    assert g.unread_bytes() == sum(tail.values()) + sum(other.values())
    r = g.create_reader("r")
    drain([r])
    assert g.unread_bytes() == 0
    write(store, "iot", "sensors", 10, start=100)
    assert g.unread_bytes("iot", "sensors") > 0 and g.unread_bytes("iot", "other") == 0
    with pytest.raises(errors.InvalidConfigurationError):
        g.unread_bytes("iot")
    with pytest.raises(errors.StreamNotFoundError):
        g.unread_bytes("iot", "elsewhere")
    with pytest.raises(errors.InvalidNameError):
        g.unread_bytes("iot", "bad/name")


def test_generate_stream_cuts_from_reader_threads(store):
    write(store, "iot", "sensors", 200)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    readers = [g.create_reader(f"r{i}") for i in range(2)]
    stop = threading.Event()
    seen = []

    def run(r):
        while not stop.is_set():
            e = r.read_next_event(timeout=0.05)
            if e is not None:
                seen.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in readers]
    for t in threads:
        t.start()
    try:
        cuts = g.generate_stream_cuts(timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not any(t.is_alive() for t in threads), "a reader thread hung"
    assert not any(e.is_checkpoint for e in seen), "generate_stream_cuts is silent"
    cut = cuts[("iot", "sensors")]
    assert cut <= store.stream_info("iot", "sensors").tail
    with pytest.raises(TimeoutError):
        g.generate_stream_cuts(timeout=0.05)  # nobody reads now


def test_with_no_readers_checkpoints_complete_at_once(store):
    write(store, "iot", "sensors", 20)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    head = store.stream_info("iot", "sensors").head
    assert g.initiate_checkpoint("cp").result(timeout=0).stream_cut("iot", "sensors") == head
    assert g.generate_stream_cuts(timeout=0)[("iot", "sensors")] == head


def test_automatic_checkpoints_are_silent(store):
    write(store, "iot", "sensors", 100)
    g = store.create_reader_group("auto", cfg("iot/sensors", automatic_checkpoint_interval=0.05))
    r = g.create_reader("r")
    seen = []
    deadline = time.monotonic() + 60  # the loop ends at the first checkpoint; the cap bounds a hang
    while g.last_checkpoint() is None and time.monotonic() < deadline:
        e = r.read_next_event(timeout=0.02)
        if e is not None:
            seen.append(e)
    assert g.last_checkpoint() is not None and g.last_checkpoint().name.startswith("_auto-")
    assert not any(e.is_checkpoint for e in seen)
    assert g.outstanding_checkpoints() == []


def test_cancel_outstanding_checkpoints(store):
    write(store, "iot", "sensors", 50)
    g = store.create_reader_group("dash", cfg("iot/sensors", max_outstanding_checkpoints=1))
    r = g.create_reader("r")
    a = g.initiate_checkpoint("a")
    assert r.read_next_event(0).is_checkpoint  # a marker was handed out already
    assert g.cancel_outstanding_checkpoints() == 1
    with pytest.raises(errors.CheckpointFailedError, match="cancelled"):
        a.result(timeout=1)
    assert g.outstanding_checkpoints() == [] and g.cancel_outstanding_checkpoints() == 0
    e = r.read_next_event(0)  # recording the cancelled checkpoint is a no-op; reading goes on
    assert e is not None and not e.is_checkpoint
    b = g.initiate_checkpoint("b")  # the slot is free again
    drain([r])
    assert b.result(timeout=1).name == "b"


def test_checkpoint_limits_and_names(store):
    g = store.create_reader_group("dash", cfg("iot/sensors", max_outstanding_checkpoints=2))
    g.create_reader("r")
    g.initiate_checkpoint("a")
    with pytest.raises(errors.CheckpointExistsError):
        g.initiate_checkpoint("a")
    g.initiate_checkpoint("b")
    with pytest.raises(errors.MaxCheckpointsExceededError):
        g.initiate_checkpoint("c")
    assert g.outstanding_checkpoints() == ["a", "b"]
    for bad in ["", "_x", "a/b", 3, None]:
        with pytest.raises(errors.InvalidNameError):
            g.initiate_checkpoint(bad)


def test_event_pointers_and_positions_of_group_reads(store):
    write(store, "iot", "sensors", 50)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r = g.create_reader("r")
    e = r.read_next_event(0)
    p = pe.EventPointer.from_bytes(e.event_pointer.to_bytes())
    assert store.fetch_event(p).event == e.event
    pos = e.position.as_dict()
    assert pos[f"iot/sensors/{e.segment_id}"] == e.next_offset
    assert set(pos) == {f"iot/sensors/{s}" for s in range(4)}
    assert isinstance(e.position, pe.Position) and "iot/sensors" in str(e.position)
    assert r.position().as_dict()[f"iot/sensors/{e.segment_id}"] == e.next_offset


def test_truncation_under_a_group_reader(store):
    write(store, "iot", "sensors", 100)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r = g.create_reader("r")
    r.read_next_event(0)
    store.truncate_stream("iot", "sensors", store.stream_info("iot", "sensors").tail)
    raised = 0
    for _ in range(200):
        try:
            r.read_next_event(0)
        except errors.TruncatedDataError:
            raised += 1
    assert raised == 1, "once for all truncated segments, then on from the head"
    assert r.read_next_event(0) is None
    write(store, "iot", "sensors", 5, start=100)
    assert len(events(drain([r]))) == 5


def test_group_administration_and_bad_inputs(store):
    assert store.list_reader_groups() == []
    g = store.create_reader_group("a", [("iot", "sensors")])
    assert store.create_reader_group("a", cfg("iot/sensors"), exist_ok=True).name == "a"
    store.create_reader_group("b", "iot/sensors")
    assert store.list_reader_groups() == ["a", "b"]
    with pytest.raises(errors.ReaderGroupExistsError):
        store.create_reader_group("a", cfg("iot/sensors"))
    with pytest.raises(errors.ReaderGroupNotFoundError):
        store.get_reader_group("nope")
    with pytest.raises(errors.ReaderGroupNotFoundError):
        store.delete_reader_group("nope")
    for bad in ["", "_x", "a/b", "a b", None, 7]:
        with pytest.raises(errors.InvalidNameError):
            store.create_reader_group(bad, cfg("iot/sensors"))
    with pytest.raises(errors.StreamNotFoundError):
        store.create_reader_group("c", cfg("iot/missing"))
    with pytest.raises(errors.InvalidConfigurationError):
        store.create_reader_group("c", 42)
    with pytest.raises(errors.InvalidConfigurationError):
        pe.ReaderGroupConfig(streams=[])
    with pytest.raises(errors.InvalidConfigurationError):
        pe.ReaderGroupConfig(streams=["iot/sensors", "iot/sensors"])
    with pytest.raises(errors.InvalidConfigurationError):
        pe.ReaderGroupConfig(streams=["iot/sensors"], max_outstanding_checkpoints=0)
    with pytest.raises(errors.InvalidConfigurationError):
        pe.ReaderGroupConfig(streams=["iot/sensors"], automatic_checkpoint_interval=-1)
    # a StreamCut of another stream
    store.create_stream("iot", "other")
    other = store.stream_info("iot", "other").tail
    with pytest.raises(errors.InvalidStreamCutError):
        pe.ReaderGroupConfig(streams=["iot/sensors"], start=other)
    with pytest.raises(errors.InvalidStreamCutError):
        pe.ReaderGroupConfig(streams=["iot/sensors"], end={"iot/sensors": other})
    with pytest.raises(errors.InvalidStreamCutError):
        pe.ReaderGroupConfig(streams=["iot/sensors"], start="pe1:iot/sensors:0=0")
    write(store, "iot", "sensors", 10)
    tail = store.stream_info("iot", "sensors").tail
    head = store.stream_info("iot", "sensors").head
    with pytest.raises(errors.InvalidStreamCutError):
        store.create_reader_group("c", cfg("iot/sensors", start=tail, end=head))
    bad_offset = pe.StreamCut.of("iot", "sensors", {0: 1, 1: 0, 2: 0, 3: 0})
    if tail.as_dict()[0] > 1:
        with pytest.raises(errors.InvalidStreamCutError):
            store.create_reader_group("c", cfg("iot/sensors", start=bad_offset))
    # readers
    r = g.create_reader("r1")
    with pytest.raises(errors.ReaderExistsError):
        g.create_reader("r1")
    for bad in ["", "_r", "a/b", None]:
        with pytest.raises(errors.InvalidNameError):
            g.create_reader(bad)
    with pytest.raises(errors.ReaderNotFoundError):
        g.reader_offline("ghost")
    with pytest.raises(errors.InvalidPositionError):
        g.reader_offline("r1", "somewhere")
    r.read_next_event(0)
    with pytest.raises(errors.InvalidPositionError):
        g.reader_offline("r1", pe.Position.of({}))  # does not cover its segments
    while r.read_next_event(0) is not None:
        pass
    with pytest.raises(errors.InvalidConfigurationError):
        r.read_next_event(timeout="soon")
    # closed handle, deleted group
    g2 = store.get_reader_group("a")
    g2.close()
    g2.close()
    with pytest.raises(errors.ReaderGroupClosedError):
        g2.initiate_checkpoint("cp")
    with pytest.raises(errors.ReaderGroupClosedError):
        g2.create_reader("r9")
    fut = g.initiate_checkpoint("pending")
    store.delete_reader_group("a")
    assert store.list_reader_groups() == ["b"]
    with pytest.raises(errors.CheckpointFailedError):
        fut.result(timeout=1)
    with pytest.raises(errors.ReaderGroupNotFoundError):
        r.read_next_event(0)
    with pytest.raises(errors.ReaderGroupNotFoundError):
        g.online_readers()
    # a group of the same name can be created again, fresh
    g3 = store.create_reader_group("a", cfg("iot/sensors"))
    assert g3.online_readers() == []


def test_deleting_a_group_stops_its_readers_at_once(store):
    write(store, "iot", "sensors", 200)
    g = store.create_reader_group("dash", cfg("iot/sensors"))
    r = g.create_reader("r")
    assert r.read_next_event(0) is not None  # events are buffered now
    store.delete_reader_group("dash")
    with pytest.raises(errors.ReaderGroupNotFoundError):
        r.read_next_event(0)
    with pytest.raises(errors.ReaderClosedError):
        r.read_next_event(0)
    r.close()


def test_revisions_grow_and_racing_updates_are_recomputed(store):
    """Optimistic concurrency: many threads join and checkpoint at once; every update lands."""
    g = store.create_reader_group("dash", cfg("iot/sensors", max_outstanding_checkpoints=1000))
    gs = g._gs
    rev0 = gs.revision
    errs = []

    def join(i):
        try:
            g.create_reader(f"r{i}")
            g.initiate_checkpoint(f"c{i}")
        except Exception as exc:  # noqa: BLE001
            errs.append(exc)

    threads = [threading.Thread(target=join, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errs
    assert g.online_readers() == sorted(f"r{i}" for i in range(16))
    assert sorted(g.outstanding_checkpoints()) == sorted(f"c{i}" for i in range(16))
    assert gs.revision == rev0 + 32
    # what LMDB holds is the same revision
    import json
    stored = dict(store._engine.meta.groups())["dash"]
    assert json.loads(stored)["revision"] == gs.revision
