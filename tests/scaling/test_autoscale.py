"""The auto-scaler (pravega_embedded/scaling.py), with fast time constants.

Windows (0.1, 0.2, 0.4, 0.8) s, cooldown 0.2 s, a check every 0.02 s: a segment with target T
is hot if r0 > 5T (age > 0.1 s) or r1 > 2T (age > 0.2 s) or r2 > T (age > 0.4 s) and is split
into ``scale_factor`` equal sub-ranges; cold if r0, r1, r2 < T and r3 < T/2 (age > 0.8 s), and
two adjacent cold segments merge, never below min_segments. Every wait polls with a deadline;
where a test asserts that something does *not* happen, a control stream in the same store
shows that the scaler had every chance to do it.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

SCOPE = "sc"
FAST = {"scale_windows": (0.1, 0.2, 0.4, 0.8), "scale_cooldown": 0.2, "maintenance_interval": 0.02}


@pytest.fixture
def store():
    with pe.open_temporary(**FAST) as s:
        s.create_scope(SCOPE)
        yield s


def stream(store, name: str, policy: pe.ScalingPolicy) -> str:
    store.create_stream(SCOPE, name, pe.StreamConfiguration(scaling=policy))
    return name


def info(store, name: str) -> pe.StreamInfo:
    return store.stream_info(SCOPE, name)


def count(store, name: str) -> int:
    return len(info(store, name).current_segments)


class Load:
    """A writer thread offering ``rate`` events/s of ``size`` bytes over 1000 routing keys."""

    def __init__(self, store, name: str, rate: float, size: int = 16, seed: int = 1) -> None:
        self.store, self.name, self.rate, self.size = store, name, rate, size
        self.stop_ev = threading.Event()
        self.written: list[bytes] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(seed,), daemon=True)
        self.thread.start()

    def _run(self, seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with self.store.create_writer(SCOPE, self.name) as w:
                t0, n = time.monotonic(), 0
                while not self.stop_ev.is_set():
                    now = time.monotonic()
                    # after a stall, drop the missed ticks (at most 50 ms of backlog): a burst
                    # would read as a spike to the auto-scaler
                    t0 = max(t0, now - n / self.rate - 0.05)
                    due = int((now - t0) * self.rate)
                    while n < due:
                        ev = f"{n}:".encode().ljust(self.size, b"x")
                        w.write_event(ev, routing_key=f"k{rnd.randrange(1000)}")
                        self.written.append(ev)
                        n += 1
                    w.flush()
                    self.stop_ev.wait(0.005)  # pacing
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(exc)

    def stop(self) -> None:
        self.stop_ev.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        assert not self.errors, self.errors


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.01)


def shapes(i: pe.StreamInfo, factor: int) -> tuple[int, int]:
    """Check that every scale of the auto-scaler is a split into ``factor`` equal sub-ranges or
    a merge of two adjacent segments; return (splits, merges)."""
    by_id = {s.segment_id: s for s in i.segments}
    splits, merged_into = 0, set()
    for s in i.segments:
        if not s.successors:
            continue
        succ = sorted((by_id[t] for t in s.successors), key=lambda x: x.key_low)
        if len(succ) > 1 or succ[0].predecessors == (s.segment_id,):
            assert len(succ) == factor, f"a split into {len(succ)}, not {factor}"
            assert all(t.predecessors == (s.segment_id,) for t in succ)
            width = (s.key_high - s.key_low) / factor
            for k, t in enumerate(succ):
                assert t.key_low == pytest.approx(s.key_low + k * width, abs=1e-12)
                assert t.key_high - t.key_low == pytest.approx(width, rel=1e-9), "unequal sub-ranges"
            assert succ[0].key_low == s.key_low and succ[-1].key_high == s.key_high
            assert all(a.key_high == b.key_low for a, b in itertools.pairwise(succ))
            assert len({t.segment_id >> 32 for t in succ}) == 1, "one split is one epoch"
            splits += 1
        else:
            (t,) = succ
            a, b = sorted((by_id[p] for p in t.predecessors), key=lambda x: x.key_low)
            assert len(t.predecessors) == 2, "the auto-scaler merges exactly two segments"
            assert a.key_high == b.key_low, "merged segments are adjacent"
            assert (t.key_low, t.key_high) == (a.key_low, b.key_high)
            merged_into.add(t.segment_id)
    return splits, len(merged_into)


def counts(i: pe.StreamInfo) -> list[int]:
    return [e.segment_count for e in i.history]


# --------------------------------------------------------------------------- splits and merges
def test_a_spike_splits_hot_segments_and_a_lull_merges_them_back(store):
    s = stream(store, "x", pe.ScalingPolicy.by_event_rate(target_rate=50, scale_factor=2, min_segments=1))
    load = Load(store, s, rate=1000)
    wait_until(lambda: count(store, s) >= 4, 60, "splits under a spike")
    load.stop()
    peak = max(counts(info(store, s)))
    wait_until(lambda: count(store, s) == 1, 60, "merges back to one segment in the lull")
    i = info(store, s)
    assert counts(i)[0] == 1 and max(counts(i)) == peak >= 4
    assert min(counts(i)) >= 1
    splits, merges = shapes(i, 2)
    assert splits >= 2 and merges >= 2
    # up while the spike lasted, then down: the peak comes before the final merges
    c = counts(i)
    assert c.index(peak) < len(c) - 1
    assert Counter(e.event for e in store.read_slice(SCOPE, s)) == Counter(load.written)


def test_scale_factor_three_and_min_segments_two(store):
    s = stream(store, "x", pe.ScalingPolicy.by_event_rate(target_rate=50, scale_factor=3, min_segments=2))
    assert count(store, s) == 2
    load = Load(store, s, rate=1200)
    wait_until(lambda: count(store, s) >= 6, 60, "splits into thirds")
    load.stop()
    wait_until(lambda: count(store, s) == 2, 60, "merges back to min_segments")
    i = info(store, s)
    splits, merges = shapes(i, 3)
    assert splits >= 2 and merges >= 2
    assert min(counts(i)) == 2, f"below min_segments: {counts(i)}"
    # the floor holds: an idle control stream (min 1, split by hand now, so younger than x's
    # segments) merges; by then x had the same chance and is still at 2 in the same epoch
    epoch = i.epoch
    ctl = stream(store, "ctl", pe.ScalingPolicy.by_event_rate(target_rate=50, scale_factor=3, min_segments=1))
    store.scale_stream(SCOPE, ctl, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    wait_until(lambda: count(store, ctl) == 1, 60, "the control stream to merge")
    assert info(store, s).epoch == epoch and count(store, s) == 2


def test_every_split_found_in_one_check_is_one_scale(store):
    """Four segments of the same age under the same heavy load turn hot in the same check:
    one scale (one epoch, one watcher item) splits all four."""
    s = stream(store, "x", pe.ScalingPolicy.by_event_rate(target_rate=10, scale_factor=2, min_segments=4))
    w = store.watch_segments(SCOPE, s, initial=False)
    load = Load(store, s, rate=1000)
    try:
        first = w.get(timeout=60)
    finally:
        load.stop()
        w.close()
    assert first is not None, "no scaling in 60 s"
    assert (first.epoch, first.previous_count, first.segment_count, first.delta) == (1, 4, 8, 4)
    i = info(store, s)
    assert counts(i)[:2] == [4, 8]
    assert all(len(x.successors) == 2 for x in i.segments if x.segment_id >> 32 == 0)


def test_by_data_rate_spike_splits_and_lull_merges(store):
    s = stream(store, "x", pe.ScalingPolicy.by_data_rate(target_kib_per_s=20, scale_factor=2, min_segments=1))
    load = Load(store, s, rate=200, size=2048)  # ~400 KiB/s
    wait_until(lambda: count(store, s) >= 4, 60, "splits under a data-rate spike")
    load.stop()
    wait_until(lambda: count(store, s) == 1, 60, "merges in the lull")
    i = info(store, s)
    splits, merges = shapes(i, 2)
    assert splits >= 2 and merges >= 2 and min(counts(i)) >= 1


def test_data_rate_meters_bytes_and_event_rate_meters_events(store):
    # many tiny events: hot by events (1000/s vs 50/s), cold by bytes (~25 KiB/s vs 10 MiB/s)
    ev_hot = stream(store, "ev-hot", pe.ScalingPolicy.by_event_rate(target_rate=50))
    by_cool = stream(store, "by-cool", pe.ScalingPolicy.by_data_rate(target_kib_per_s=10240))
    # few big events: hot by bytes (~800 KiB/s vs 20 KiB/s), cool by events (100/s vs 10000/s)
    by_hot = stream(store, "by-hot", pe.ScalingPolicy.by_data_rate(target_kib_per_s=20))
    ev_cool = stream(store, "ev-cool", pe.ScalingPolicy.by_event_rate(target_rate=10000))
    loads = [Load(store, ev_hot, 1000, 8), Load(store, by_cool, 1000, 8, seed=2),
             Load(store, by_hot, 100, 8192, seed=3), Load(store, ev_cool, 100, 8192, seed=4)]
    try:
        wait_until(lambda: info(store, ev_hot).epoch >= 2 and info(store, by_hot).epoch >= 2, 60,
                   "the hot streams to split twice")
        assert info(store, by_cool).epoch == 0 and info(store, ev_cool).epoch == 0
    finally:
        for ld in loads:
            ld.stop()


def test_fixed_and_sealed_streams_never_auto_scale(store):
    hot = stream(store, "hot", pe.ScalingPolicy.by_event_rate(target_rate=50))
    idle = stream(store, "idle", pe.ScalingPolicy.by_event_rate(target_rate=50))
    store.scale_stream(SCOPE, idle, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    f1 = stream(store, "f1", pe.ScalingPolicy.fixed(1))
    f3 = stream(store, "f3", pe.ScalingPolicy.fixed(3))
    f2_idle = stream(store, "f2-idle", pe.ScalingPolicy.fixed(2))
    sealed = stream(store, "sealed", pe.ScalingPolicy.by_event_rate(target_rate=50))
    store.scale_stream(SCOPE, sealed, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    store.seal_stream(SCOPE, sealed)
    loads = [Load(store, hot, 1000), Load(store, f1, 1000, seed=2), Load(store, f3, 1000, seed=3)]
    try:
        # controls: the same load splits a rate stream twice, an idle one merges
        wait_until(lambda: info(store, hot).epoch >= 2 and count(store, idle) == 1, 60,
                   "the rate streams to scale")
        assert info(store, f1).epoch == 0 and count(store, f1) == 1
        assert info(store, f3).epoch == 0 and count(store, f3) == 3
        assert info(store, f2_idle).epoch == 0 and count(store, f2_idle) == 2
        assert info(store, sealed).epoch == 1 and count(store, sealed) == 2
    finally:
        for ld in loads:
            ld.stop()


def test_switching_a_stream_to_fixed_stops_auto_scaling(store):
    s = stream(store, "x", pe.ScalingPolicy.by_event_rate(target_rate=50))
    ctl = stream(store, "ctl", pe.ScalingPolicy.by_event_rate(target_rate=50))
    loads = [Load(store, s, 1000), Load(store, ctl, 1000, seed=2)]
    try:
        wait_until(lambda: info(store, s).epoch >= 1, 60, "a first split")
        n = count(store, s)
        # fixed(n) with the current count: no rescale (the ranges may be unequal after splits
        # of different segments, so only when they are equal is this a no-op); then frozen
        store.update_stream(SCOPE, s, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n)))
        epoch = info(store, s).epoch
        e0 = info(store, ctl).epoch
        wait_until(lambda: info(store, ctl).epoch >= e0 + 2, 60, "the control stream to go on scaling")
        assert info(store, s).epoch == epoch
    finally:
        for ld in loads:
            ld.stop()


# --------------------------------------------------------------------------- cooldown
def test_no_segment_is_scaled_before_the_cooldown_since_its_creation():
    cooldown = 0.6
    with pe.open_temporary(scale_windows=(0.05, 0.1, 0.2, 0.4), scale_cooldown=cooldown,
                           maintenance_interval=0.02) as store:
        store.create_scope(SCOPE)
        s = stream(store, "x", pe.ScalingPolicy.by_event_rate(target_rate=20))
        load = Load(store, s, 2000)
        try:
            wait_until(lambda: info(store, s).epoch >= 3, 60, "three scalings")
        finally:
            load.stop()
        i = info(store, s)
        start = {e.epoch: e.time_ns for e in i.history}
        by_id = {x.segment_id: x for x in i.segments}
        checked = 0
        for x in i.segments:
            if not x.successors:
                continue
            sealed_at = start[by_id[x.successors[0]].segment_id >> 32]
            age = (sealed_at - x.created_ns) / 1e9
            assert age >= cooldown, f"segment {x.segment_id:#x} scaled {age:.3f} s after its creation"
            checked += 1
        assert checked >= 3
        # epoch 0's segment too: the first scale comes a cooldown after the stream's creation
        assert (i.history[1].time_ns - i.created_ns) / 1e9 >= cooldown


# --------------------------------------------------------------------------- steadiness
def test_a_steady_load_between_half_and_full_target_settles_without_flapping(store):
    """1.4 T on one segment is hot: it splits into two halves of ~0.7 T each. A half at 0.7 T
    is neither hot (< T) nor cold (> T/2), so the stream must then stay at 2 segments while
    the load stays the same. (The auto-scaler's rates of a new segment start at 0, so at age
    w3 its r3 reads ~0.63 x 0.7 T = 0.44 T < T/2 and the halves are merged back, split again,
    and so on.)"""
    s = stream(store, "x", pe.ScalingPolicy.by_event_rate(target_rate=100, scale_factor=2, min_segments=1))
    load = Load(store, s, rate=140)
    try:
        wait_until(lambda: count(store, s) == 2, 60, "the first split")
        split_epoch = info(store, s).epoch
        # give the halves 3 x w3 at the steady load (an observation window, not a timing claim)
        end = time.monotonic() + 2.4
        while time.monotonic() < end:
            assert info(store, s).epoch == split_epoch, (
                f"a steady load of 0.7 T per segment flapped: segment counts {counts(info(store, s))}")
            time.sleep(0.02)
    finally:
        load.stop()


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize("opts", [
    {"scale_windows": (1, 2, 3)},
    {"scale_windows": (1, 2, 3, 0)},
    {"scale_windows": (1, 2, 3, -4)},
    {"scale_windows": "1,2,3,4"},
    {"scale_windows": (1, 2, 3, True)},
    {"scale_cooldown": -1},
    {"scale_cooldown": "600"},
    {"maintenance_interval": 0},
    {"maintenance_interval": -1},
    {"maintenance_interval": True},
])
def test_invalid_scaler_options_are_refused(tmp_path, opts):
    with pytest.raises(errors.InvalidConfigurationError):
        pe.open(tmp_path / "s", **opts)
    # and the directory is not left locked
    pe.open(tmp_path / "s").close()
