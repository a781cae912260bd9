"""Manual scaling: store.scale_stream and update_stream.

Splits, merges, several non-adjacent segments in one scale, every validation error (each
leaves the stream exactly as it was), min_segments, rescaling by update_stream(fixed(n)), the
epoch history and the segment graph (predecessors/successors), persistence across close and
reopen, and StreamCuts of epoch 0 used as start, end and truncation point after 3 scalings.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.routing import key_point

SCOPE, STREAM = "sc", "x"
EPOCH = 1 << 32


def sid(number: int, epoch: int = 0) -> int:
    return epoch << 32 | number


def config(policy: pe.ScalingPolicy) -> pe.StreamConfiguration:
    return pe.StreamConfiguration(scaling=policy)


@pytest.fixture
def store():
    with pe.open_temporary() as s:
        s.create_scope(SCOPE)
        yield s


def make(store, n: int = 1, policy: pe.ScalingPolicy | None = None, stream: str = STREAM) -> None:
    store.create_stream(SCOPE, stream, config(policy or pe.ScalingPolicy.fixed(n)))


def info(store, stream: str = STREAM) -> pe.StreamInfo:
    return store.stream_info(SCOPE, stream)


def current(store, stream: str = STREAM) -> list[tuple[int, float, float]]:
    return [(s.segment_id, s.key_low, s.key_high) for s in info(store, stream).current_segments]


def seg(store, segment_id: int, stream: str = STREAM) -> pe.SegmentInfo:
    return next(s for s in info(store, stream).segments if s.segment_id == segment_id)


class Keyed:
    """One writer writing ``k<i>:<n>`` events over ``keys`` routing keys; remembers them."""

    def __init__(self, store, keys: int = 40, writer_id: str = "w", stream: str = STREAM) -> None:
        self.w = store.create_writer(SCOPE, stream, writer_id=writer_id)
        self.keys = keys
        self.n = 0
        self.written: list[bytes] = []

    def write(self, count: int) -> list[bytes]:
        out = []
        for _ in range(count):
            key = f"k{self.n % self.keys}"
            ev = f"{key}:{self.n}".encode()
            self.w.write_event(ev, routing_key=key)
            out.append(ev)
            self.n += 1
        self.w.flush()
        self.written += out
        return out

    def close(self) -> None:
        self.w.close()


def assert_per_key_order(evs: list[bytes]) -> None:
    last: dict[bytes, int] = {}
    for ev in evs:
        key, n = ev.split(b":")
        assert int(n) > last.get(key, -1), f"per-key order broken for {key!r}: {n} after {last[key]}"
        last[key] = int(n)


def assert_partition(ranges: list[tuple[float, float]]) -> None:
    ranges = sorted(ranges)
    assert ranges[0][0] == 0.0 and ranges[-1][1] == 1.0, ranges
    for (_, h), (lo, _) in itertools.pairwise(ranges):
        assert h == lo, f"gap or overlap in {ranges}"


def assert_graph(i: pe.StreamInfo) -> None:
    """The segment graph and the history of one stream are consistent."""
    by_id = {s.segment_id: s for s in i.segments}
    for s in i.segments:
        for p in s.predecessors:
            assert s.segment_id in by_id[p].successors
            assert by_id[p].key_low < s.key_high and s.key_low < by_id[p].key_high, "pred must overlap"
            assert (p >> 32) < (s.segment_id >> 32), "a predecessor is of an earlier epoch"
        for t in s.successors:
            assert s.segment_id in by_id[t].predecessors
        if s.successors:
            assert s.sealed
            lo = min(by_id[t].key_low for t in s.successors)
            hi = max(by_id[t].key_high for t in s.successors)
            assert lo <= s.key_low and s.key_high <= hi
            assert_partition_of(
                [(by_id[t].key_low, by_id[t].key_high) for t in s.successors], lo, hi)
    assert [e.epoch for e in i.history] == list(range(len(i.history)))
    assert [e.time_ns for e in i.history] == sorted(e.time_ns for e in i.history)
    for e in i.history:
        assert_partition([(r.key_low, r.key_high) for r in e.segments])
        for r in e.segments:
            assert (r.segment_id >> 32) <= e.epoch
    assert i.epoch == i.history[-1].epoch
    assert [r.segment_id for r in i.history[-1].segments] == [s.segment_id for s in i.current_segments]


def assert_partition_of(ranges, lo, hi) -> None:
    ranges = sorted(ranges)
    assert ranges[0][0] == lo and ranges[-1][1] == hi
    for (_, h), (l2, _) in itertools.pairwise(ranges):
        assert h == l2


def read_all(store, start=None, end=None, stream: str = STREAM) -> list[bytes]:
    return [ev.event for ev in store.read_slice(SCOPE, stream, start=start, end=end)]


def read_with_reader(store, start=None, end=None, stream: str = STREAM) -> list[bytes]:
    with store.create_reader(SCOPE, stream, start=start, end=end) as r:
        return [ev.event for ev in r]


# --------------------------------------------------------------------------- splits and merges
def test_split_one_segment_into_two(store):
    make(store, 1)
    w = Keyed(store)
    before = w.write(200)
    new = store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    assert new == [sid(1, 1), sid(2, 1)]
    after = w.write(200)
    w.close()
    i = info(store)
    assert i.epoch == 1 and len(i.history) == 2
    assert current(store) == [(sid(1, 1), 0.0, 0.5), (sid(2, 1), 0.5, 1.0)]
    old = seg(store, 0)
    assert old.sealed and old.successors == (sid(1, 1), sid(2, 1)) and old.length > 0
    for s in new:
        si = seg(store, s)
        assert si.predecessors == (0,) and not si.sealed and si.successors == ()
        assert si.created_ns == i.history[1].time_ns
    assert_graph(i)
    # the events after the split went to the successor owning their key; none to the old one
    got = list(store.read_slice(SCOPE, STREAM))
    assert Counter(e.event for e in got) == Counter(before + after)
    for e in got:
        s = seg(store, e.segment_id)
        assert s.key_low <= key_point(e.routing_key) < s.key_high
    assert {e.event for e in got if e.segment_id == 0} == set(before)
    assert sum(seg(store, s).length for s in new) > 0 and all(seg(store, s).length for s in new)
    assert_per_key_order(read_with_reader(store, end=i.tail))


def test_merge_adjacent_segments(store):
    make(store, 1)
    w = Keyed(store)
    w.write(100)
    quarters = store.scale_stream(SCOPE, STREAM, seal=[0],
                                  new_ranges=[(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)])
    w.write(100)
    merged = store.scale_stream(SCOPE, STREAM, seal=[quarters[2], quarters[1]], new_ranges=[(0.25, 0.75)])
    assert merged == [sid(5, 2)]
    w.write(100)
    w.close()
    i = info(store)
    assert current(store) == [(quarters[0], 0.0, 0.25), (merged[0], 0.25, 0.75), (quarters[3], 0.75, 1.0)]
    m = seg(store, merged[0])
    assert m.predecessors == (quarters[1], quarters[2])
    assert seg(store, quarters[1]).successors == (merged[0],) == seg(store, quarters[2]).successors
    assert [e.segment_count for e in i.history] == [1, 4, 3]
    assert_graph(i)
    evs = read_with_reader(store, end=i.tail)
    assert Counter(evs) == Counter(w.written)
    assert_per_key_order(evs)


def test_merge_everything_back_into_one_segment(store):
    make(store, 1)
    w = Keyed(store)
    w.write(50)
    parts = store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0, 0.3), (0.3, 0.6), (0.6, 1)])
    w.write(50)
    one = store.scale_stream(SCOPE, STREAM, seal=parts, new_ranges=[(0, 1)])
    w.write(50)
    w.close()
    assert current(store) == [(one[0], 0.0, 1.0)]
    assert seg(store, one[0]).predecessors == tuple(parts)
    evs = read_with_reader(store, end=info(store).tail)
    assert Counter(evs) == Counter(w.written)
    assert_per_key_order(evs)


def test_non_adjacent_segments_in_one_scale(store):
    make(store, 4)
    w = Keyed(store)
    w.write(100)
    s0, s1, s2, s3 = (s for s, _, _ in current(store))
    # split s0 and s2 (not adjacent) in one scale, leaving s1 and s3 alone
    new = store.scale_stream(SCOPE, STREAM, seal=[s2, s0],
                             new_ranges=[(0.5, 0.625), (0.0, 0.125), (0.125, 0.25), (0.625, 0.75)])
    assert len(new) == 4 and all(s >> 32 == 1 for s in new)
    assert [lo for _, lo, _ in current(store)] == [0.0, 0.125, 0.25, 0.5, 0.625, 0.75]
    i = info(store)
    assert i.epoch == 1 and [e.segment_count for e in i.history] == [4, 6]
    assert seg(store, s0).successors == tuple(s for s, lo, _ in current(store) if lo in (0.0, 0.125))
    assert seg(store, s2).successors == tuple(s for s, lo, _ in current(store) if lo in (0.5, 0.625))
    assert not seg(store, s1).sealed and not seg(store, s3).sealed
    assert_graph(i)
    # and replace two non-adjacent segments one for one (same ranges, new segments)
    again = store.scale_stream(SCOPE, STREAM, seal=[s1, s3], new_ranges=[(0.25, 0.5), (0.75, 1.0)])
    assert [seg(store, s).predecessors for s in again] == [(s1,), (s3,)]
    w.write(100)
    w.close()
    i = info(store)
    assert_graph(i)
    evs = read_with_reader(store, end=i.tail)
    assert Counter(evs) == Counter(w.written)
    assert_per_key_order(evs)


def test_events_buffered_for_a_segment_being_sealed_go_to_its_successors(store):
    make(store, 1)
    # a long linger: nothing is handed over before flush()
    w = store.create_writer(SCOPE, STREAM, writer_id="slow", linger=60.0, batch_bytes=64 << 20)
    pending = []
    for n in range(300):
        key = f"k{n % 30}"
        ev = f"{key}:{n}".encode()
        w.write_event(ev, routing_key=key)
        pending.append(ev)
    new = store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    assert w.flush() == 299
    w.close()
    assert seg(store, 0).length == 0, "nothing may reach the sealed segment"
    got = list(store.read_slice(SCOPE, STREAM))
    assert Counter(e.event for e in got) == Counter(pending)
    for e in got:
        assert e.segment_id in new
        s = seg(store, e.segment_id)
        assert s.key_low <= key_point(e.routing_key) < s.key_high
    assert_per_key_order([e.event for e in got])


# --------------------------------------------------------------------------- validation
def _bad_requests(ids):
    s0, s1, s2, s3 = ids
    return [
        ("unknown id", [999], [(0.0, 0.25)]),
        ("unknown id with the epoch bits", [sid(0, 7)], [(0.0, 0.25)]),
        ("negative id", [-1], [(0.0, 0.25)]),
        ("id as str", [str(s0)], [(0.0, 0.25)]),
        ("id as bool", [True], [(0.25, 0.5)]),
        ("id as float", [float(s1)], [(0.25, 0.5)]),
        ("duplicate id", [s0, s0], [(0.0, 0.25)]),
        ("empty seal", [], [(0.0, 0.25)]),
        ("seal not a list", s0, [(0.0, 0.25)]),
        ("seal a str", "0", [(0.0, 0.25)]),
        ("seal None", None, [(0.0, 0.25)]),
        ("empty ranges", [s0], []),
        ("ranges None", [s0], None),
        ("ranges a str", [s0], "0,0.25"),
        ("gap", [s0], [(0.0, 0.1), (0.2, 0.25)]),
        ("short of the high end", [s0], [(0.0, 0.2)]),
        ("short of the low end", [s0], [(0.05, 0.25)]),
        ("into an unsealed segment", [s0], [(0.0, 0.3)]),
        ("overlap", [s0], [(0.0, 0.2), (0.1, 0.25)]),
        ("duplicate range", [s0], [(0.0, 0.25), (0.0, 0.25)]),
        ("spans a gap between sealed segments", [s0, s2], [(0.0, 0.75)]),
        ("only one of two sealed covered", [s0, s2], [(0.0, 0.25)]),
        ("low == high", [s0], [(0.0, 0.25), (0.25, 0.25)]),
        ("low > high", [s0], [(0.25, 0.0)]),
        ("below 0", [s0], [(-0.25, 0.25)]),
        ("above 1", [s3], [(0.75, 1.5)]),
        ("nan", [s0], [(0.0, float("nan")), (float("nan"), 0.25)]),
        ("triple", [s0], [(0.0, 0.1, 0.25)]),
        ("single number", [s0], [0.25]),
        ("strings", [s0], [("0", "0.25")]),
        ("bool bounds", [s1], [(0.25, True)]),
        ("None bounds", [s0], [(None, 0.25)]),
    ]


def test_every_invalid_request_raises_and_changes_nothing(store):
    make(store, 4)
    w = Keyed(store)
    w.write(100)
    ids = [s for s, _, _ in current(store)]
    # one sealed segment to name as well: split s3 then merge back (s3 is no longer open)
    halves = store.scale_stream(SCOPE, STREAM, seal=[ids[3]], new_ranges=[(0.75, 0.875), (0.875, 1.0)])
    back = store.scale_stream(SCOPE, STREAM, seal=halves, new_ranges=[(0.75, 1.0)])
    live = ids[:3] + back
    cases = _bad_requests(live) + [
        ("sealed segment", [ids[3]], [(0.75, 1.0)]),
        ("sealed segment among open ones", [live[2], ids[3]], [(0.5, 1.0)]),
        ("scaled-away segment", [halves[0]], [(0.75, 0.875)]),
    ]
    before = info(store)
    for what, seal, ranges in cases:
        with pytest.raises(errors.InvalidConfigurationError):
            store.scale_stream(SCOPE, STREAM, seal=seal, new_ranges=ranges)
        assert info(store) == before, f"{what}: a refused scale changed the stream"
    # the store and the writer still work, and the next scale gets the next epoch
    w.write(50)
    new = store.scale_stream(SCOPE, STREAM, seal=[live[0]], new_ranges=[(0.0, 0.125), (0.125, 0.25)])
    assert [s >> 32 for s in new] == [3, 3] and info(store).epoch == 3
    w.close()
    evs = read_with_reader(store, end=info(store).tail)
    assert Counter(evs) == Counter(w.written)


def test_refused_scale_is_not_persisted(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as s:
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, STREAM, config(pe.ScalingPolicy.fixed(2)))
        with pytest.raises(errors.InvalidConfigurationError):
            s.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.6)])
        with pytest.raises(errors.InvalidConfigurationError):  # below min_segments (fixed(2))
            s.scale_stream(SCOPE, STREAM, seal=[0, 1], new_ranges=[(0.0, 1.0)])
        before = s.stream_info(SCOPE, STREAM)
    with pe.open(path) as s:
        after = s.stream_info(SCOPE, STREAM)
        assert after == before and after.epoch == 0
        assert [x.segment_id for x in after.current_segments] == [0, 1]
        # the first scale after reopening is epoch 1 with the next numbers
        assert s.scale_stream(SCOPE, STREAM, seal=[1], new_ranges=[(0.5, 0.75), (0.75, 1.0)]) == [sid(2, 1), sid(3, 1)]


def test_sealed_stream_cannot_scale(store):
    make(store, 2)
    w = Keyed(store)
    w.write(20)
    w.close()
    store.seal_stream(SCOPE, STREAM)
    before = info(store)
    with pytest.raises(errors.StreamSealedError):
        store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.25), (0.25, 0.5)])
    assert info(store) == before


def test_missing_stream_or_scope(store):
    make(store, 1)
    with pytest.raises(errors.StreamNotFoundError):
        store.scale_stream(SCOPE, "nope", seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    with pytest.raises(errors.ScopeNotFoundError):
        store.scale_stream("nope", STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    store.delete_stream(SCOPE, STREAM)
    with pytest.raises(errors.StreamNotFoundError):
        store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])


def test_closed_store_refuses_scaling():
    s = pe.open_temporary()
    s.create_scope(SCOPE)
    s.create_stream(SCOPE, STREAM)
    s.close()
    with pytest.raises(errors.StoreClosedError):
        s.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])


# --------------------------------------------------------------------------- min_segments
@pytest.mark.parametrize("policy", [
    pe.ScalingPolicy.fixed(2),
    pe.ScalingPolicy.by_event_rate(1e9, min_segments=2),
    pe.ScalingPolicy.by_data_rate(1e9, min_segments=2),
])
def test_min_segments_is_enforced(store, policy):
    make(store, policy=policy)
    assert len(current(store)) == 2
    before = info(store)
    with pytest.raises(errors.InvalidConfigurationError):
        store.scale_stream(SCOPE, STREAM, seal=[0, 1], new_ranges=[(0.0, 1.0)])
    assert info(store) == before
    # 2 -> 3 -> 2 is fine, and from 2 a merge is refused again
    a, b = store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.25), (0.25, 0.5)])
    merged = store.scale_stream(SCOPE, STREAM, seal=[a, b], new_ranges=[(0.0, 0.5)])
    before = info(store)
    with pytest.raises(errors.InvalidConfigurationError):
        store.scale_stream(SCOPE, STREAM, seal=[merged[0], 1], new_ranges=[(0.0, 1.0)])
    assert info(store) == before and len(before.current_segments) == 2
    # a 1-for-1 replacement keeps the count and is allowed
    store.scale_stream(SCOPE, STREAM, seal=[1], new_ranges=[(0.5, 1.0)])
    assert len(current(store)) == 2


def test_min_segments_1_allows_merging_to_one(store):
    make(store, policy=pe.ScalingPolicy.by_event_rate(1e9, min_segments=1))
    a, b = store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    (one,) = store.scale_stream(SCOPE, STREAM, seal=[a, b], new_ranges=[(0.0, 1.0)])
    assert current(store) == [(one, 0.0, 1.0)]


# --------------------------------------------------------------------------- update_stream
def test_update_stream_fixed_n_rescales_into_equal_ranges(store):
    make(store, 2)
    w = Keyed(store)
    w.write(100)
    store.update_stream(SCOPE, STREAM, config(pe.ScalingPolicy.fixed(3)))
    i = info(store)
    assert i.config.scaling == pe.ScalingPolicy.fixed(3)
    assert i.epoch == 1
    cur = i.current_segments
    bounds = [b for s in cur for b in (s.key_low, s.key_high)]
    assert bounds == pytest.approx([0, 1 / 3, 1 / 3, 2 / 3, 2 / 3, 1])
    assert cur[0].key_low == 0.0 and cur[-1].key_high == 1.0
    assert [s.segment_id >> 32 for s in cur] == [1, 1, 1]
    # predecessors by overlap: the middle third overlaps both halves
    assert [s.predecessors for s in cur] == [(0,), (0, 1), (1,)]
    assert seg(store, 0).successors == (cur[0].segment_id, cur[1].segment_id)
    assert seg(store, 1).successors == (cur[1].segment_id, cur[2].segment_id)
    assert_graph(i)
    w.write(100)
    # the same count again: nothing happens
    store.update_stream(SCOPE, STREAM, config(pe.ScalingPolicy.fixed(3)))
    assert info(store).epoch == 1
    # down to 1: one segment owning everything, with the three as predecessors
    store.update_stream(SCOPE, STREAM, config(pe.ScalingPolicy.fixed(1)))
    i = info(store)
    assert i.epoch == 2 and len(i.current_segments) == 1
    assert i.current_segments[0].predecessors == tuple(s.segment_id for s in cur)
    w.write(100)
    w.close()
    evs = read_with_reader(store, end=info(store).tail)
    assert Counter(evs) == Counter(w.written)
    assert_per_key_order(evs)


def test_update_stream_rate_policy_min_segments_above_count_rescales(store):
    make(store, 1)
    store.update_stream(SCOPE, STREAM, config(pe.ScalingPolicy.by_event_rate(1e9, min_segments=4)))
    i = info(store)
    assert i.epoch == 1
    assert [(s.key_low, s.key_high) for s in i.current_segments] == [
        (0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    # a rate policy with min_segments at or below the count changes nothing
    store.update_stream(SCOPE, STREAM, config(pe.ScalingPolicy.by_data_rate(1e9, min_segments=2)))
    assert info(store).epoch == 1 and len(info(store).current_segments) == 4
    # and that new min_segments now bounds manual merges
    ids = [s.segment_id for s in info(store).current_segments]
    store.scale_stream(SCOPE, STREAM, seal=ids[:2], new_ranges=[(0.0, 0.5)])
    store.scale_stream(SCOPE, STREAM, seal=[ids[2], ids[3]], new_ranges=[(0.5, 1.0)])
    with pytest.raises(errors.InvalidConfigurationError):
        store.scale_stream(SCOPE, STREAM, seal=[s.segment_id for s in info(store).current_segments],
                           new_ranges=[(0.0, 1.0)])


def test_update_stream_invalid_config_changes_nothing(store):
    make(store, 2)
    before = info(store)
    with pytest.raises(errors.InvalidConfigurationError):
        store.update_stream(SCOPE, STREAM, pe.ScalingPolicy.fixed(3))
    assert info(store) == before


# --------------------------------------------------------------------------- history and graph
def test_history_epochs_predecessors_and_successors(store):
    make(store, 2)
    e0 = info(store)
    assert e0.epoch == 0 and len(e0.history) == 1
    assert [(r.segment_id, r.key_low, r.key_high) for r in e0.history[0].segments] == [(0, 0.0, 0.5), (1, 0.5, 1.0)]
    a, b = store.scale_stream(SCOPE, STREAM, seal=[1], new_ranges=[(0.5, 0.75), (0.75, 1.0)])
    (c,) = store.scale_stream(SCOPE, STREAM, seal=[0, a], new_ranges=[(0.0, 0.75)])
    d, e, f = store.scale_stream(SCOPE, STREAM, seal=[c, b], new_ranges=[(0.0, 0.2), (0.2, 0.9), (0.9, 1.0)])
    assert (a, b, c, d, e, f) == (sid(2, 1), sid(3, 1), sid(4, 2), sid(5, 3), sid(6, 3), sid(7, 3))
    i = info(store)
    assert i.epoch == 3
    shape = [[(r.segment_id, r.key_low, r.key_high) for r in ep.segments] for ep in i.history]
    assert shape == [
        [(0, 0.0, 0.5), (1, 0.5, 1.0)],
        [(0, 0.0, 0.5), (a, 0.5, 0.75), (b, 0.75, 1.0)],
        [(c, 0.0, 0.75), (b, 0.75, 1.0)],
        [(d, 0.0, 0.2), (e, 0.2, 0.9), (f, 0.9, 1.0)],
    ]
    assert [ep.segment_count for ep in i.history] == [2, 3, 2, 3]
    graph = {s.segment_id: (s.predecessors, s.successors, s.sealed) for s in i.segments}
    assert graph == {
        0: ((), (c,), True),
        1: ((), (a, b), True),
        a: ((1,), (c,), True),
        b: ((1,), (e, f), True),
        c: ((0, a), (d, e), True),
        d: ((c,), (), False),
        e: ((b, c), (), False),
        f: ((b,), (), False),
    }
    times = [ep.time_ns for ep in i.history]
    assert times == sorted(times) and len(set(times)) == 4
    for s in i.segments:
        assert s.created_ns == times[s.segment_id >> 32]
    assert_graph(i)


def test_scaling_survives_close_and_reopen(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as s:
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, STREAM, config(pe.ScalingPolicy.by_event_rate(1e9, min_segments=1)))
        w = Keyed(s)
        w.write(100)
        a, b = s.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
        w.write(100)
        c, _d, _e = s.scale_stream(SCOPE, STREAM, seal=[b], new_ranges=[(0.5, 0.6), (0.6, 0.8), (0.8, 1.0)])
        w.write(100)
        s.scale_stream(SCOPE, STREAM, seal=[a, c], new_ranges=[(0.0, 0.6)])
        w.write(100)
        w.close()
        written = list(w.written)
        before = s.stream_info(SCOPE, STREAM)
    with pe.open(path) as s:
        after = s.stream_info(SCOPE, STREAM)
        assert after == before
        assert after.epoch == 3 and [x.segment_count for x in after.history] == [1, 2, 4, 3]
        assert_graph(after)
        evs = read_with_reader(s, end=after.tail)
        assert Counter(evs) == Counter(written)
        assert_per_key_order(evs)
        # writing and scaling go on: new ids do not reuse old numbers, writers resume
        w2 = s.create_writer(SCOPE, STREAM, writer_id="w")
        assert w2.last_sequence == 399
        ids = [x.segment_id for x in after.current_segments]
        new = s.scale_stream(SCOPE, STREAM, seal=ids, new_ranges=[(0.0, 1.0)])
        assert new == [sid(7, 4)]
        for n in range(400, 500):
            key = f"k{n % 40}"
            w2.write_event(f"{key}:{n}".encode(), routing_key=key)
            written.append(f"{key}:{n}".encode())
        w2.close()
        last = s.stream_info(SCOPE, STREAM)
    with pe.open(path) as s:
        assert s.stream_info(SCOPE, STREAM) == last
        evs = read_with_reader(s, end=last.tail)
        assert Counter(evs) == Counter(written)
        assert_per_key_order(evs)


# --------------------------------------------------------------------------- old StreamCuts
def _three_scalings_with_cuts(store):
    """Write A | cut1 | B | cut2 | C, all in epoch 0 (2 segments); then 3 scalings with D, E, F
    written after each. Returns (cut1, cut2, batches)."""
    make(store, 2)
    w = Keyed(store)
    a = w.write(150)
    cut1 = info(store).tail
    b = w.write(150)
    cut2 = info(store).tail
    c = w.write(150)
    s0, s1 = 0, 1
    x, y = store.scale_stream(SCOPE, STREAM, seal=[s0], new_ranges=[(0.0, 0.25), (0.25, 0.5)])
    d = w.write(150)
    (z,) = store.scale_stream(SCOPE, STREAM, seal=[y, s1], new_ranges=[(0.25, 1.0)])
    e = w.write(150)
    store.scale_stream(SCOPE, STREAM, seal=[x, z], new_ranges=[(0.0, 0.1), (0.1, 0.7), (0.7, 1.0)])
    f = w.write(150)
    w.close()
    assert info(store).epoch == 3
    assert {s for s, _ in cut1.positions} == {s for s, _ in cut2.positions} == {0, 1}
    return cut1, cut2, (a, b, c, d, e, f)


def test_epoch0_cuts_bound_slices_and_readers_after_three_scalings(store):
    cut1, cut2, (a, b, c, d, e, f) = _three_scalings_with_cuts(store)
    # slice between the two old cuts: exactly B
    assert Counter(read_all(store, cut1, cut2)) == Counter(b)
    assert Counter(read_with_reader(store, cut1, cut2)) == Counter(b)
    assert_per_key_order(read_with_reader(store, cut1, cut2))
    # head -> old cut, old cut -> tail
    assert Counter(read_all(store, None, cut1)) == Counter(a)
    tail = info(store).tail
    after2 = read_with_reader(store, cut2, tail)
    assert Counter(after2) == Counter(c + d + e + f)
    assert_per_key_order(after2)
    assert Counter(read_all(store, cut2)) == Counter(c + d + e + f)
    # the cuts keep their text form and still parse and work
    again = pe.StreamCut.from_text(cut1.to_text())
    assert Counter(read_all(store, again, pe.StreamCut.from_text(cut2.to_text()))) == Counter(b)
    # an old cut as start with the current tail (epoch 3) as end
    assert Counter(read_all(store, cut1, tail)) == Counter(b + c + d + e + f)
    # an end before the start, across epochs, is refused
    with pytest.raises(errors.InvalidStreamCutError):
        list(store.read_slice(SCOPE, STREAM, start=tail, end=cut1))
    with pytest.raises(errors.InvalidStreamCutError):
        store.create_reader(SCOPE, STREAM, start=tail, end=cut2)


def test_cut_from_a_middle_epoch_and_a_reader_position(store):
    make(store, 1)
    w = Keyed(store)
    a = w.write(100)
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    b = w.write(100)
    mid = info(store).tail  # names epoch-1 segments
    assert all(s >> 32 == 1 for s, _ in mid.positions)
    cur = [s for s, _, _ in current(store)]
    store.scale_stream(SCOPE, STREAM, seal=cur, new_ranges=[(0.0, 0.3), (0.3, 1.0)])
    c = w.write(100)
    w.close()
    assert Counter(read_all(store, None, mid)) == Counter(a + b)
    assert Counter(read_all(store, mid)) == Counter(c)
    # a reader's position taken half way through epoch 0's data is a cut too
    with store.create_reader(SCOPE, STREAM) as r:
        first = [r.read_next_event(0).event for _ in range(40)]
        pos = r.position()
    assert Counter(read_all(store, None, pos)) == Counter(first)
    assert Counter(read_all(store, pos)) == Counter(w.written) - Counter(first)


def test_truncate_with_an_epoch0_cut_after_three_scalings(store):
    cut1, cut2, (_a, _b, c, d, e, f) = _three_scalings_with_cuts(store)
    store.truncate_stream(SCOPE, STREAM, cut2)
    i = info(store)
    assert i.head == cut2
    assert Counter(read_all(store)) == Counter(c + d + e + f)
    evs = read_with_reader(store, None, i.tail)
    assert Counter(evs) == Counter(c + d + e + f)
    assert_per_key_order(evs)
    # a start before the head is refused
    with pytest.raises(errors.TruncatedDataError):
        store.create_reader(SCOPE, STREAM, start=cut1)
    # truncating at an older cut does not move the head back
    store.truncate_stream(SCOPE, STREAM, cut1)
    assert info(store).head == cut2
    # truncating at the tail leaves nothing, and the head names only current segments
    tail = info(store).tail
    store.truncate_stream(SCOPE, STREAM, tail)
    i = info(store)
    assert {s for s, _ in i.head.positions} == {s.segment_id for s in i.current_segments}
    assert read_all(store) == []
    w = Keyed(store, writer_id="w2")
    g = w.write(100)
    w.close()
    assert Counter(read_all(store)) == Counter(g)


def test_truncate_persists_across_reopen_after_scaling(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as s:
        s.create_scope(SCOPE)
        _cut1, cut2, (_a, _b, c, d, e, f) = _three_scalings_with_cuts(s)
        s.truncate_stream(SCOPE, STREAM, cut2)
    with pe.open(path) as s:
        assert s.stream_info(SCOPE, STREAM).head == cut2
        assert Counter(read_all(s)) == Counter(c + d + e + f)


# --------------------------------------------------------------------------- more readers and writers
def test_a_reader_position_at_any_point_resumes_exactly_across_epochs(store):
    """Read a few events, take reader.position(), and resume a new reader there: the two parts
    are disjoint and together the whole stream, wherever the split point falls (epoch 0
    segments, half-read successors, merged segments)."""
    make(store, 2)
    w = Keyed(store, keys=12)
    w.write(60)
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.2), (0.2, 0.5)])
    w.write(60)
    cur = [s for s, _, _ in current(store)]
    store.scale_stream(SCOPE, STREAM, seal=[cur[1], cur[2]], new_ranges=[(0.2, 1.0)])
    w.write(60)
    cur = [s for s, _, _ in current(store)]
    store.scale_stream(SCOPE, STREAM, seal=cur, new_ranges=[(0.0, 0.6), (0.6, 1.0)])
    w.write(60)
    w.close()
    tail = info(store).tail
    total = read_with_reader(store, end=tail)
    assert Counter(total) == Counter(w.written)
    for k in range(0, len(total) + 1, 7):
        with store.create_reader(SCOPE, STREAM, end=tail) as r:
            head = [r.read_next_event(timeout=0).event for _ in range(k)]
            pos = r.position()
        rest = read_with_reader(store, start=pos, end=tail)
        assert Counter(head) + Counter(rest) == Counter(total), f"split after {k} events"
        assert Counter(read_all(store, end=pos)) == Counter(head), f"slice to the position after {k}"
        assert_per_key_order(head + rest)


def test_arrow_slice_across_epochs(store):
    make(store, 1)
    w = Keyed(store)
    w.write(100)
    start = info(store).tail
    w.write(100)
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    w.write(100)
    w.close()
    table = store.read_slice(SCOPE, STREAM, start=start).to_arrow()
    assert table.num_rows == 200
    assert Counter(bytes(x) if isinstance(x, (bytes, bytearray)) else x
                   for x in table.column("event").to_pylist()) == Counter(w.written[100:])


def test_explicit_sequences_are_deduplicated_across_a_scaling(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as s:
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, STREAM)
        with s.create_writer(SCOPE, STREAM, writer_id="w") as w:
            for n in range(100):
                w.write_event(f"k{n % 7}:{n}".encode(), routing_key=f"k{n % 7}", sequence=n)
        s.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    with pe.open(path) as s:
        with s.create_writer(SCOPE, STREAM, writer_id="w") as w:
            assert w.last_sequence == 99
            for n in range(150):  # a retry of everything, then 50 new events
                w.write_event(f"k{n % 7}:{n}".encode(), routing_key=f"k{n % 7}", sequence=n)
        evs = read_with_reader(s, end=s.stream_info(SCOPE, STREAM).tail)
        assert sorted(evs, key=lambda e: int(e.split(b":")[1])) == [f"k{n % 7}:{n}".encode() for n in range(150)]
        assert_per_key_order(evs)


def test_concurrent_scale_requests_serialize(store):
    """Threads scaling the same stream from their own (possibly stale) view: each request
    either commits as a whole or is refused, and the stream stays consistent."""
    import random
    import threading

    make(store, 1)
    w = Keyed(store)
    ok, refused, errs = [0], [0], []

    def scaler(seed: int) -> None:
        rnd = random.Random(seed)
        for _ in range(60):
            cur = current(store)
            try:
                if len(cur) < 6 and (len(cur) == 1 or rnd.random() < 0.5):
                    s, lo, hi = rnd.choice(cur)
                    store.scale_stream(SCOPE, STREAM, seal=[s], new_ranges=[(lo, (lo + hi) / 2), ((lo + hi) / 2, hi)])
                else:
                    i = rnd.randrange(len(cur) - 1)
                    (a, lo, _), (b, _, hi) = cur[i], cur[i + 1]
                    store.scale_stream(SCOPE, STREAM, seal=[a, b], new_ranges=[(lo, hi)])
                ok[0] += 1
            except errors.InvalidConfigurationError:
                refused[0] += 1
            except BaseException as exc:  # noqa: BLE001
                errs.append(exc)

    threads = [threading.Thread(target=scaler, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for _ in range(20):
        w.write(20)
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a scaler thread hung"
    w.close()
    assert not errs, errs
    i = info(store)
    assert i.epoch == ok[0] and ok[0] + refused[0] == 180
    assert_graph(i)
    evs = read_with_reader(store, end=i.tail)
    assert Counter(evs) == Counter(w.written)
    assert_per_key_order(evs)


def test_keyless_events_buffered_across_a_scale_all_arrive(store):
    make(store, 1)
    w = store.create_writer(SCOPE, STREAM, writer_id="nokey", linger=60.0, batch_bytes=64 << 20)
    evs = [f"e{n}".encode() for n in range(200)]
    for ev in evs:
        w.write_event(ev)
    new = store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    w.flush()
    w.close()
    got = list(store.read_slice(SCOPE, STREAM))
    assert Counter(e.event for e in got) == Counter(evs)
    assert {e.segment_id for e in got} <= set(new)


def test_event_pointers_of_scaled_away_segments_still_fetch(store):
    make(store, 1)
    w = Keyed(store)
    w.write(50)
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    w.write(50)
    w.close()
    evs = list(store.read_slice(SCOPE, STREAM))
    assert {e.segment_id for e in evs} >= {0}
    for e in evs[::7]:
        assert store.fetch_event(e.event_pointer).event == e.event


def test_sealing_a_scaled_stream(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as s:
        s.create_scope(SCOPE)
        make(s, 1)
        w = Keyed(s)
        w.write(50)
        a, b = s.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
        w.write(50)
        w.close()
        s.seal_stream(SCOPE, STREAM)
        i = s.stream_info(SCOPE, STREAM)
        assert i.sealed and i.epoch == 1
        assert [x.segment_id for x in i.current_segments] == [a, b]
        assert all(x.sealed for x in i.segments)
        with pytest.raises(errors.StreamSealedError):
            s.scale_stream(SCOPE, STREAM, seal=[a], new_ranges=[(0.0, 0.25), (0.25, 0.5)])
        with pytest.raises(errors.StreamSealedError):
            s.create_writer(SCOPE, STREAM)
    with pe.open(path) as s:
        i = s.stream_info(SCOPE, STREAM)
        assert i.sealed and [x.segment_id for x in i.current_segments] == [a, b]
        assert_graph(i)
        with s.create_reader(SCOPE, STREAM) as r:  # ends by itself: the stream is sealed
            evs = [e.event for e in r]
        assert Counter(evs) == Counter(w.written)
        assert_per_key_order(evs)


def test_deleted_scaled_stream_and_a_new_one_of_the_same_name(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as s:
        s.create_scope(SCOPE)
        make(s, 1)
        w = Keyed(s, writer_id="old")
        w.write(100)
        a, b = s.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
        w.write(100)
        s.scale_stream(SCOPE, STREAM, seal=[a, b], new_ranges=[(0.0, 1.0)])
        w.write(100)
        w.close()
        s.delete_stream(SCOPE, STREAM)
        make(s, 2)
        i = s.stream_info(SCOPE, STREAM)
        assert i.epoch == 0 and [x.segment_id for x in i.segments] == [0, 1]
        assert all(x.length == 0 for x in i.segments)
        w2 = Keyed(s, writer_id="old")
        assert w2.w.last_sequence == -1, "a new stream does not inherit a deleted one's writer state"
        w2.write(100)
        w2.close()
    with pe.open(path) as s:
        i = s.stream_info(SCOPE, STREAM)
        assert i.epoch == 0 and len(i.history) == 1 and len(i.segments) == 2
        evs = read_all(s)
        assert Counter(evs) == Counter(w2.written)
        s.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.25), (0.25, 0.5)])
        assert s.stream_info(SCOPE, STREAM).epoch == 1
