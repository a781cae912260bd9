"""Large events (over pe.MAX_EVENT_SIZE, up to store.large_event_limit): written atomically in
key order with the small events around them, read back whole by every read path, counted once
by exactly-once resumption, refused where the contract refuses them."""

from __future__ import annotations

import functools
import itertools
import random
import subprocess
import sys
import threading
from collections import Counter, defaultdict

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.staging import CHUNK

MiB = 1 << 20
MAX = pe.MAX_EVENT_SIZE
SCOPE = "le"


def blob(tag: str, n: int) -> bytes:
    """``n`` bytes starting with ``tag`` and continuing with bytes derived from it, so any two
    events differ and a misplaced chunk shows."""
    head = f"{tag}|".encode()
    assert len(head) <= n
    return head + random.Random(tag).randbytes(n - len(head))


def framed(n: int, key: str | None) -> int:
    return 6 + (0 if key is None else len(key.encode())) + n


def drain_reader(r, timeout: float = 0.2) -> list:
    out = []
    while True:
        ev = r.read_next_event(timeout=timeout)
        if ev is None:
            return out
        out.append(ev)


def per_key(evs) -> dict:
    out = defaultdict(list)
    for e in evs:
        out[e.routing_key].append(bytes(e.event))
    return dict(out)


def write_mix(w, plan) -> list[tuple[str | None, bytes]]:
    """Write (key, event) pairs one by one; return them."""
    out = []
    for key, ev in plan:
        w.write_event(ev, routing_key=key)
        out.append((key, ev))
    return out


@functools.cache
def mixed_plan() -> list[tuple[str | None, bytes]]:
    """Small and large events on three keys plus keyless ones, with the large sizes on the
    chunk edges (CHUNK = 4 MiB of frame per BYTES record): just over the limit, frames of exactly
3 and 4 chunks and one byte either side."""
    sizes = {
        "a": [MAX + 1, 3 * CHUNK - framed(0, "a"), 3 * CHUNK - framed(0, "a") + 1],
        "bb": [3 * CHUNK - framed(0, "bb") - 1, MAX + 12345],
        "ccc": [4 * CHUNK - framed(0, "ccc")],
        None: [MAX + 7, 2 * CHUNK + 3],
    }
    plan: list[tuple[str | None, bytes]] = []
    rnd = random.Random(7)
    i = 0
    pending = {k: list(v) for k, v in sizes.items()}
    while any(pending.values()):
        key = rnd.choice([k for k, v in pending.items() if v])
        for _ in range(rnd.randint(0, 3)):
            plan.append((key, blob(f"small:{key}:{i}", rnd.randint(30, 3000))))
            i += 1
        n = pending[key].pop(0)
        plan.append((key, blob(f"large:{key}:{i}", n)))
        i += 1
    for key in sizes:  # a small event after the last large one of every key
        plan.append((key, blob(f"small:{key}:{i}", 40)))
        i += 1
    return plan


@pytest.fixture
def store(pe_store):
    pe_store.create_scope(SCOPE)
    pe_store.create_stream(SCOPE, "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    return pe_store


def check_all(evs, written) -> None:
    """Every written event exactly once, keyed events in write order per key, frame lengths
    consistent with the event and key sizes."""
    assert Counter(bytes(e.event) for e in evs) == Counter(ev for _, ev in written)
    got = per_key(evs)
    for key in {k for k, _ in written if k is not None}:
        assert got[key] == [ev for k, ev in written if k == key], f"per-key order broken for {key}"
    for e in evs:
        assert e.length == framed(len(e.event), e.routing_key)


# --------------------------------------------------------------------- writing and reading


def test_interleaved_large_and_small_events_every_read_path(store):
    w = store.create_writer(SCOPE, "s", writer_id="w")
    written = write_mix(w, mixed_plan())
    assert w.flush() == len(written) - 1, "a large event takes one sequence number like any event"
    n_large = sum(len(ev) > MAX for _, ev in written)
    assert n_large == 8

    with store.create_reader(SCOPE, "s") as r:
        evs = drain_reader(r)
    check_all(evs, written)
    # consecutive events of a segment tile it: offset + frame length = next offset
    by_seg = defaultdict(list)
    for e in evs:
        by_seg[e.segment_id].append(e)
    for seg_evs in by_seg.values():
        assert seg_evs[0].offset == 0
        for a, b in itertools.pairwise(seg_evs):
            assert a.offset + a.length == b.offset
    # keyless large events are spread over the segments, not all in one
    keyless_segs = {e.segment_id for e in evs if e.routing_key is None and len(e.event) > MAX}
    assert len(keyless_segs) == 2

    # fetch_event by pointer returns the whole event, with its key
    for e in evs:
        if len(e.event) > MAX:
            f = store.fetch_event(e.event_pointer)
            assert f.event == e.event and f.routing_key == e.routing_key
            assert (f.segment_id, f.offset, f.length) == (e.segment_id, e.offset, e.length)

    # read_slice: iteration and Arrow
    sl = list(store.read_slice(SCOPE, "s"))
    check_all(sl, written)
    assert [(e.segment_id, e.offset) for e in sorted(sl, key=lambda e: (e.segment_id, e.offset))] == \
        sorted((e.segment_id, e.offset) for e in evs)
    table = store.read_slice(SCOPE, "s").to_arrow()
    assert table.num_rows == len(written)
    col = table.column("event").to_pylist()
    keys = table.column("routing_key").to_pylist()
    assert Counter(col) == Counter(ev for _, ev in written)
    assert {(k, len(v)) for k, v in zip(keys, col) if len(v) > MAX} == \
        {(k, len(ev)) for k, ev in written if len(ev) > MAX}
    offsets = table.column("offset").to_pylist()
    segs = table.column("segment_id").to_pylist()
    assert sorted(zip(segs, offsets)) == sorted((e.segment_id, e.offset) for e in evs)


def test_reader_group_readers_get_large_events_whole_once_in_key_order(store):
    with store.create_writer(SCOPE, "s", writer_id="w") as w:
        written = write_mix(w, mixed_plan())
    g = store.create_reader_group("g", pe.ReaderGroupConfig(streams=[f"{SCOPE}/s"],
                                                            automatic_checkpoint_interval=None))
    readers = [g.create_reader("r1"), g.create_reader("r2")]
    got: dict[str, list] = {r.reader_id: [] for r in readers}
    idle = 0
    while idle < 3:
        progressed = False
        for r in readers:
            ev = r.read_next_event(timeout=0.05)
            if ev is not None and not ev.is_checkpoint and not ev.is_read_completed:
                got[r.reader_id].append(ev)
                progressed = True
        idle = 0 if progressed else idle + 1
    assert got["r1"] and got["r2"], "both readers read"
    check_all([e for lst in got.values() for e in lst], written)
    # a key is in one segment, read by one reader: its order holds within that reader
    for lst in got.values():
        for key, evs in per_key(lst).items():
            if key is not None:
                assert evs == [ev for k, ev in written if k == key]
    for r in readers:
        r.close()


def test_large_events_survive_reopen_and_sequence_resumes(store_path):
    plan = mixed_plan()
    with pe.open(store_path) as s:
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        w = s.create_writer(SCOPE, "s", writer_id="w")
        written = write_mix(w, plan)
        assert w.flush() == len(written) - 1
        w.close()
        with s.create_reader(SCOPE, "s") as r:
            before = [(e.segment_id, e.offset, e.length, e.routing_key, e.event) for e in drain_reader(r)]
    with pe.open(store_path) as s:
        with s.create_reader(SCOPE, "s") as r:
            evs = drain_reader(r)
        check_all(evs, written)
        assert sorted((e.segment_id, e.offset, e.length, e.routing_key, e.event) for e in evs) == sorted(before)
        check_all(list(s.read_slice(SCOPE, "s")), written)
        for e in evs:
            if len(e.event) > MAX:
                assert s.fetch_event(e.event_pointer).event == e.event
        w = s.create_writer(SCOPE, "s", writer_id="w")
        assert w.last_sequence == len(written) - 1
        # later writes append after the large events, large and small
        big = blob("after-reopen", MAX + 99)
        assert w.write_event(big, routing_key="a") == len(written)
        assert w.write_event(b"tail", routing_key="a") == len(written) + 1
        w.close()
        with s.create_reader(SCOPE, "s") as r:
            evs2 = drain_reader(r)
        assert per_key(evs2)["a"][-2:] == [big, b"tail"]


def test_pending_small_events_go_before_the_large_event(store):
    w = store.create_writer(SCOPE, "s", writer_id="w", linger=60, batch_bytes=64 * MiB)
    w.write_event(b"s1", routing_key="k")
    w.write_event(b"other", routing_key="z")
    w.write_events([b"s2", b"s3"], routing_key="k")
    big = blob("big", MAX + 1000)
    assert w.write_event(big, routing_key="k") == 4
    w.write_event(b"s4", routing_key="k")
    assert w.flush() == 5
    with store.create_reader(SCOPE, "s") as r:
        evs = drain_reader(r)
    assert per_key(evs) == {"k": [b"s1", b"s2", b"s3", big, b"s4"], "z": [b"other"]}


def test_bytes_like_large_events(store):
    w = store.create_writer(SCOPE, "s", writer_id="w")
    a, b = blob("ba", MAX + 1), blob("mv", MAX + 2)
    w.write_event(bytearray(a), routing_key="k")
    w.write_event(memoryview(b), routing_key="k")
    w.flush()
    with store.create_reader(SCOPE, "s") as r:
        assert [e.event for e in drain_reader(r)] == [a, b]


def test_large_event_with_the_longest_routing_key(store):
    key = "é" * 2048  # 4096 bytes of UTF-8, the limit
    big = blob("longkey", 2 * CHUNK + 1)
    with store.create_writer(SCOPE, "s", writer_id="w") as w:
        w.write_event(big, routing_key=key)
        w.write_event(b"next", routing_key=key)
    evs = list(store.read_slice(SCOPE, "s"))
    assert [(e.routing_key, e.event) for e in evs] == [(key, big), (key, b"next")]
    assert evs[0].length == 6 + 4096 + len(big)
    assert store.fetch_event(evs[0].event_pointer).routing_key == key


def test_a_reader_waiting_at_the_tail_gets_the_large_event_whole(store):
    big = blob("live", 5 * CHUNK + 17)
    got = []
    with store.create_reader(SCOPE, "s") as r:
        assert r.read_next_event(timeout=0) is None

        def read():
            while len(got) < 3:
                ev = r.read_next_event(timeout=10)
                if ev is None:
                    return
                got.append(ev)

        t = threading.Thread(target=read)
        t.start()
        with store.create_writer(SCOPE, "s", writer_id="w") as w:
            for i in range(3):
                w.write_event(big if i == 1 else b"small%d" % i, routing_key="k")
                w.flush()
        t.join(20)
        assert not t.is_alive()
    assert [e.event for e in got] == [b"small0", big, b"small2"]


def test_concurrent_writers_of_large_events(store):
    """Writers in several threads interleave large and small events on a shared key and their
    own: every event whole, each writer's events in its order per key."""
    failures: list[BaseException] = []
    plans = {f"w{t}": [(key, blob(f"w{t}-{key}-{i}", MAX + 1 + (t * 3 + i) * 100_000 if i % 2 else 50 + i))
                       for i in range(6) for key in ("shared", f"own{t}")]
             for t in range(3)}

    def run(wid):
        try:
            with store.create_writer(SCOPE, "s", writer_id=wid) as w:
                for key, ev in plans[wid]:
                    w.write_event(ev, routing_key=key)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(wid,)) for wid in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a writer thread hung"
    assert not failures, failures
    evs = list(store.read_slice(SCOPE, "s"))
    assert Counter(e.event for e in evs) == Counter(ev for p in plans.values() for _, ev in p)
    got = per_key(evs)
    for wid, plan in plans.items():
        for key in ("shared", f"own{wid[1:]}"):
            mine = [e for e in got[key] if e.startswith(f"{wid}-".encode())]
            assert mine == [ev for k, ev in plan if k == key], f"{wid} order on {key}"


def test_large_events_keep_key_order_across_scaling(store):
    w = store.create_writer(SCOPE, "s", writer_id="w")
    written = []
    for epoch in range(3):
        for i in range(3):
            ev = blob(f"e{epoch}-{i}", MAX + 1 if i == 1 else 100)
            w.write_event(ev, routing_key="k")
            written.append(("k", ev))
        cur = store.stream_info(SCOPE, "s").current_segments
        seg = cur[0]
        mid = (seg.key_low + seg.key_high) / 2
        store.scale_stream(SCOPE, "s", seal=[seg.segment_id],
                           new_ranges=[(seg.key_low, mid), (mid, seg.key_high)])
        big = blob(f"nokey{epoch}", MAX + 3)
        w.write_event(big)
        written.append((None, big))
    w.flush()
    with store.create_reader(SCOPE, "s") as r:
        check_all(drain_reader(r), written)
    check_all(list(store.read_slice(SCOPE, "s")), written)


# --------------------------------------------------------------------- exactly-once


def test_explicit_sequences_count_large_events_once(store_path):
    big1, big2 = blob("seq5", MAX + 5), blob("seq9", 2 * CHUNK)
    with pe.open(store_path) as s:
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, "s")
        w = s.create_writer(SCOPE, "s", writer_id="app")
        assert w.write_event(b"one", routing_key="k", sequence=1) == 1
        assert w.write_event(big1, routing_key="k", sequence=5) == 5
        assert w.last_sequence == 5
        # a retry of the large event, and an older one: dropped, nothing written
        assert w.write_event(big1, routing_key="k", sequence=5) == 5
        assert w.write_event(blob("old", MAX + 1), routing_key="k", sequence=3) == 3
        assert w.duplicates_dropped == 2
        assert w.write_event(b"six", routing_key="k", sequence=6) == 6
        assert w.write_event(big2, routing_key="k", sequence=9) == 9
        assert w.flush() == 9
        # implicit numbering continues after the explicit large one
        assert w.write_event(blob("ten", MAX + 10), routing_key="k") == 10
        w.close()
    with pe.open(store_path) as s:
        w = s.create_writer(SCOPE, "s", writer_id="app")
        assert w.last_sequence == 10
        assert w.write_event(big2, routing_key="k", sequence=9) == 9  # a replay after restart
        assert w.write_event(blob("ten", MAX + 10), routing_key="k", sequence=10) == 10
        assert w.duplicates_dropped == 2
        assert w.write_event(b"eleven", routing_key="k", sequence=11) == 11
        w.close()
        with s.create_reader(SCOPE, "s") as r:
            evs = [e.event for e in drain_reader(r)]
        assert evs == [b"one", big1, b"six", big2, blob("ten", MAX + 10), b"eleven"]


def test_large_event_sequence_is_durable_without_a_clean_checkpoint(store_path):
    """The MERGE carries the sequence: a writer's last_sequence after reopen counts the large
    event even when the writer was never closed (flushed only)."""
    s = pe.open(store_path, checkpoint_interval=3600)
    s.create_scope(SCOPE)
    s.create_stream(SCOPE, "s")
    w = s.create_writer(SCOPE, "s", writer_id="app")
    w.write_event(b"x", routing_key="k", sequence=3)
    w.write_event(blob("big", MAX + 1), routing_key="k", sequence=7)
    assert w.flush() == 7
    s.close()
    with pe.open(store_path) as s:
        w = s.create_writer(SCOPE, "s", writer_id="app")
        assert w.last_sequence == 7
        assert w.write_event(blob("big", MAX + 1), routing_key="k", sequence=7) == 7
        w.close()
        assert [len(e.event) for e in s.read_slice(SCOPE, "s")] == [1, MAX + 1]


def test_large_events_replayed_from_the_journal_after_a_kill(tmp_path):
    """Flushed large events of a process killed before any checkpoint come back by replaying
    their BYTES and MERGE records: whole, in key order, counted in last_sequence."""
    path = tmp_path / "s"
    code = f"""
import os, random, pravega_embedded as pe
s = pe.open({str(path)!r}, checkpoint_interval=3600)
s.create_scope({SCOPE!r})
s.create_stream({SCOPE!r}, "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
s.checkpoint()
w = s.create_writer({SCOPE!r}, "s", writer_id="w")
for i in range(3):
    w.write_event(b"small%d" % i, routing_key="k")
    w.write_event(random.Random(i).randbytes({MAX} + 1 + i * {CHUNK}), routing_key="k")
w.write_event(random.Random(9).randbytes({MAX} + 9))
print(w.flush(), flush=True)
os.kill(os.getpid(), 9)
"""
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout.split() == ["6"]
    expect = []
    for i in range(3):
        expect += [b"small%d" % i, random.Random(i).randbytes(MAX + 1 + i * CHUNK)]
    with pe.open(path) as s:
        with s.create_reader(SCOPE, "s") as r:
            evs = drain_reader(r)
        assert per_key(evs) == {"k": expect, None: [random.Random(9).randbytes(MAX + 9)]}
        with s.create_writer(SCOPE, "s", writer_id="w") as w:
            assert w.last_sequence == 6
        for e in evs:
            assert s.fetch_event(e.event_pointer).event == e.event


def test_reader_position_after_a_large_event_is_a_valid_cut(store):
    big = blob("pos", MAX + 5)
    with store.create_writer(SCOPE, "s", writer_id="w") as w:
        for ev in (b"x", big, b"y"):
            w.write_event(ev, routing_key="k")
    with store.create_reader(SCOPE, "s") as r:
        assert [r.read_next_event(1).event for _ in range(2)] == [b"x", big]
        pos = r.position()
    with store.create_reader(SCOPE, "s", start=pos) as r2:
        assert [e.event for e in drain_reader(r2, 0.05)] == [b"y"]
    assert [e.event for e in store.read_slice(SCOPE, "s", end=pos)] == [b"x", big]
    store.truncate_stream(SCOPE, "s", pos)
    assert [e.event for e in store.read_slice(SCOPE, "s")] == [b"y"]


# --------------------------------------------------------------------- limits and refusals


def test_large_event_limit_refusal_and_exactly_at_the_limit(tmp_path):
    limit = MAX + 3 * MiB + 5
    with pe.open(tmp_path / "st", durability="none", large_event_limit=limit) as s:
        assert s.large_event_limit == limit
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, "s")
        w = s.create_writer(SCOPE, "s", writer_id="w")
        assert w.write_event(b"first", routing_key="k") == 0
        w.flush()
        tail = s.stream_info(SCOPE, "s").tail
        with pytest.raises(errors.EventTooLargeError):
            w.write_event(bytes(limit + 1), routing_key="k")
        with pytest.raises(errors.EventTooLargeError):
            w.write_event(bytes(limit + 1))
        assert w.last_sequence == 0, "a refused event takes no sequence number"
        w.flush()
        assert s.stream_info(SCOPE, "s").tail == tail, "nothing of a refused event is written"
        at = blob("at-limit", limit)
        assert w.write_event(at, routing_key="k") == 1
        assert w.write_event(b"last", routing_key="k") == 2
        w.close()
        assert [e.event for e in s.read_slice(SCOPE, "s")] == [b"first", at, b"last"]


def test_default_limit_and_invalid_limits(tmp_path):
    with pe.open_temporary() as s:
        assert s.large_event_limit == 1 << 30
    for bad in (MAX - 1, 0, -1, True, float(MAX + 1), "16MiB", (1 << 32) - (1 << 16) + 1):
        with pytest.raises(errors.InvalidConfigurationError):
            pe.open(tmp_path / "bad", durability="none", large_event_limit=bad)
    # tier 2 holds an event as one Parquet value (under 2 GiB): refused with tiering on only
    with pytest.raises(errors.InvalidConfigurationError, match="tier2=False"):
        pe.open(tmp_path / "bad", durability="none", large_event_limit=1 << 31)
    with pe.open(tmp_path / "untiered", durability="none", large_event_limit=1 << 31, tier2=False) as s:
        assert s.large_event_limit == 1 << 31
    # at the minimum, large events are off: every event over MAX_EVENT_SIZE is refused
    with pe.open(tmp_path / "min", durability="none", large_event_limit=MAX) as s:
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, "s")
        with s.create_writer(SCOPE, "s") as w:
            w.write_event(bytes(MAX), routing_key="k")
            with pytest.raises(errors.EventTooLargeError):
                w.write_event(bytes(MAX + 1), routing_key="k")
        assert [len(e.event) for e in s.read_slice(SCOPE, "s")] == [MAX]


def test_write_events_batch_with_a_large_event_is_refused_whole(store):
    w = store.create_writer(SCOPE, "s", writer_id="w")
    w.write_event(b"a", routing_key="k")
    with pytest.raises(errors.EventTooLargeError):
        w.write_events([b"x", bytes(MAX + 1), b"y"], routing_key="k")
    assert w.last_sequence == 0
    w.write_events([b"b", bytes(MAX)], routing_key="k")  # exactly MAX is an ordinary event
    assert w.flush() == 2
    assert [len(e.event) for e in store.read_slice(SCOPE, "s")] == [1, 1, MAX]


def test_bad_routing_key_of_a_large_event_writes_nothing(store):
    w = store.create_writer(SCOPE, "s", writer_id="w")
    big = bytes(MAX + 1)
    with pytest.raises(errors.InvalidRoutingKeyError):
        w.write_event(big, routing_key="x" * 5000)
    with pytest.raises(errors.InvalidRoutingKeyError):
        w.write_event(big, routing_key="\ud800")
    with pytest.raises((errors.InvalidRoutingKeyError, TypeError)):
        w.write_event(big, routing_key=42)
    assert w.flush() == -1
    assert list(store.read_slice(SCOPE, "s")) == []


def test_large_event_on_a_sealed_stream_or_closed_writer(store):
    w = store.create_writer(SCOPE, "s", writer_id="w")
    w.close()
    with pytest.raises(errors.WriterClosedError):
        w.write_event(bytes(MAX + 1), routing_key="k")
    w2 = store.create_writer(SCOPE, "s", writer_id="w2")
    store.seal_stream(SCOPE, "s")
    with pytest.raises(errors.StreamSealedError):
        w2.write_event(bytes(MAX + 1), routing_key="k")
    assert list(store.read_slice(SCOPE, "s")) == []


def test_large_events_are_refused_in_transactions(store):
    tw = store.create_transactional_writer(SCOPE, "s", writer_id="tw")
    txn = tw.begin_txn()
    txn.write_event(b"ok", routing_key="k")
    with pytest.raises(errors.EventTooLargeError):
        txn.write_event(bytes(MAX + 1), routing_key="k")
    with pytest.raises(errors.EventTooLargeError):
        txn.write_events([b"a", bytes(MAX + 1)], routing_key="k")
    txn.commit()
    assert [e.event for e in store.read_slice(SCOPE, "s")] == [b"ok"]


# --------------------------------------------------------------------- cuts and truncation


def _one_large(store, key="k"):
    with store.create_writer(SCOPE, "s", writer_id="w") as w:
        w.write_event(b"before", routing_key=key)
        big = blob("cut", 3 * CHUNK + 100)
        w.write_event(big, routing_key=key)
        w.write_event(b"after", routing_key=key)
    evs = list(store.read_slice(SCOPE, "s"))
    assert [e.event for e in evs] == [b"before", big, b"after"]
    return evs


def test_stream_cuts_inside_a_large_event_are_refused(store):
    before, large, after = _one_large(store)
    sid = large.segment_id
    inside = [large.offset + 1, large.offset + 6, large.offset + 1000, large.offset + CHUNK - 1,
              large.offset + CHUNK, large.offset + CHUNK + 1, large.offset + 2 * CHUNK,
              after.offset - 1]
    for off in inside:
        cut = pe.StreamCut.of(SCOPE, "s", {**{s.segment_id: 0 for s in store.stream_info(SCOPE, "s").segments},
                                           sid: off})
        with pytest.raises(errors.InvalidStreamCutError):
            store.create_reader(SCOPE, "s", start=cut)
        with pytest.raises(errors.InvalidStreamCutError):
            store.read_slice(SCOPE, "s", start=cut)
        with pytest.raises(errors.InvalidStreamCutError):
            store.read_slice(SCOPE, "s", end=cut)
        with pytest.raises(errors.InvalidStreamCutError):
            store.truncate_stream(SCOPE, "s", cut)
        with pytest.raises(errors.InvalidEventPointerError):
            store.fetch_event(pe.EventPointer(scope=SCOPE, stream="s", segment_id=sid, offset=off, length=after.offset - off))
    # nothing was truncated by the refused cuts
    assert [e.event for e in store.read_slice(SCOPE, "s")] == [before.event, large.event, after.event]
    # cuts at the large event's edges are fine
    zero = {s.segment_id: 0 for s in store.stream_info(SCOPE, "s").segments}
    at_start = pe.StreamCut.of(SCOPE, "s", {**zero, sid: large.offset})
    at_end = pe.StreamCut.of(SCOPE, "s", {**zero, sid: after.offset})
    assert [e.event for e in store.read_slice(SCOPE, "s", start=at_start, end=at_end)] == [large.event]
    with store.create_reader(SCOPE, "s", start=at_end) as r:
        assert [e.event for e in drain_reader(r, 0.05)] == [b"after"]


def test_truncation_at_and_past_a_large_event(store):
    before, large, after = _one_large(store)
    sid = large.segment_id
    zero = {s.segment_id: 0 for s in store.stream_info(SCOPE, "s").segments}
    store.truncate_stream(SCOPE, "s", pe.StreamCut.of(SCOPE, "s", {**zero, sid: large.offset}))
    assert [e.event for e in store.read_slice(SCOPE, "s")] == [large.event, after.event]
    assert store.fetch_event(large.event_pointer).event == large.event
    with pytest.raises(errors.TruncatedDataError):
        store.fetch_event(before.event_pointer)
    store.truncate_stream(SCOPE, "s", pe.StreamCut.of(SCOPE, "s", {**zero, sid: after.offset}))
    store.reclaim()
    assert [e.event for e in store.read_slice(SCOPE, "s")] == [after.event]
    with pytest.raises(errors.TruncatedDataError):
        store.fetch_event(large.event_pointer)
    with store.create_reader(SCOPE, "s") as r:
        assert [e.event for e in drain_reader(r, 0.05)] == [b"after"]


def _bad_lengths(store, lengths):
    _, large, _ = _one_large(store)
    p = large.event_pointer
    for length in lengths(large.length):
        bad = pe.EventPointer(scope=p.scope, stream=p.stream, segment_id=p.segment_id, offset=p.offset,
                              length=length)
        with pytest.raises(errors.InvalidEventPointerError):
            store.fetch_event(bad)
    assert store.fetch_event(p).event == large.event


def test_fetch_event_with_a_longer_length_is_refused(store):
    _bad_lengths(store, lambda n: (n + 1, n + 7))


def test_fetch_event_with_a_shorter_length_is_refused(store):
    _bad_lengths(store, lambda n: (n - 1, 6, CHUNK))
