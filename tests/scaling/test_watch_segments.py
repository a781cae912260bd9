"""Segment watchers (store.watch_segments): one SegmentCountChange per scaling, in epoch order,
each exactly once; the iterator and callback forms; the initial item; closing by hand, by
deleting the stream and by closing the store; callback exceptions are collected."""

from __future__ import annotations

import random
import threading
import time

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

SCOPE, STREAM = "sc", "x"
# a rate policy that never triggers (target far away), so merges down to 1 are allowed
QUIET = pe.ScalingPolicy.by_event_rate(1e12, min_segments=1)


@pytest.fixture
def store():
    with pe.open_temporary() as s:
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=QUIET))
        yield s


def ids(store, stream=STREAM) -> tuple[int, ...]:
    return tuple(s.segment_id for s in store.stream_info(SCOPE, stream).current_segments)


def segs(store, stream=STREAM):
    return [(s.segment_id, s.key_low, s.key_high) for s in store.stream_info(SCOPE, stream).current_segments]


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def five_scalings(store, stream=STREAM) -> list[int]:
    """1 -> 2 -> 4 -> 3 -> 2 (update_stream) -> 4 (two splits in one scale); returns counts."""
    store.scale_stream(SCOPE, stream, seal=[ids(store, stream)[0]], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    _a, b = ids(store, stream)
    store.scale_stream(SCOPE, stream, seal=[b], new_ranges=[(0.5, 0.6), (0.6, 0.8), (0.8, 1.0)])
    s = segs(store, stream)
    store.scale_stream(SCOPE, stream, seal=[s[1][0], s[2][0]], new_ranges=[(0.5, 0.8)])
    store.update_stream(SCOPE, stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    x, y = ids(store, stream)
    store.scale_stream(SCOPE, stream, seal=[y, x], new_ranges=[(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)])
    return [1, 2, 4, 3, 2, 4]


def check_change(store, c, epoch: int, stream=STREAM, *, initial: bool = False) -> None:
    """``c`` describes epoch ``epoch`` of the stream exactly (an initial item's previous_count
    is left open: it describes no change)."""
    h = store.stream_info(SCOPE, stream).history
    assert isinstance(c, pe.SegmentCountChange)
    assert (c.scope, c.stream, c.epoch) == (SCOPE, stream, epoch)
    assert c.time_ns == h[epoch].time_ns
    assert c.segment_ids == tuple(r.segment_id for r in h[epoch].segments)
    assert c.segment_count == len(h[epoch].segments)
    if epoch > 0 and not initial:
        assert c.previous_count == len(h[epoch - 1].segments)
        assert c.delta == c.segment_count - c.previous_count


# --------------------------------------------------------------------------- iterator form
def test_one_item_per_scaling_with_the_right_counts(store):
    w = store.watch_segments(SCOPE, STREAM)
    first = w.get(timeout=5)
    check_change(store, first, 0, initial=True)
    assert first.segment_count == 1 and first.segment_ids == (0,)
    expected = [1]
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    c = w.get(timeout=5)
    check_change(store, c, 1)
    assert (c.segment_count, c.previous_count, c.delta) == (2, 1, 1)
    # a refused scale publishes nothing: the next item is the next real scaling
    with pytest.raises(errors.InvalidConfigurationError):
        store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 1.0)])
    a, b = ids(store)
    store.scale_stream(SCOPE, STREAM, seal=[a, b], new_ranges=[(0.0, 1.0)])
    c = w.get(timeout=5)
    check_change(store, c, 2)
    assert (c.segment_count, c.previous_count, c.delta) == (1, 2, -1)
    expected = five_scalings(store)
    for k, n in enumerate(expected[1:], start=3):
        c = w.get(timeout=5)
        check_change(store, c, k)
        assert c.segment_count == n
    assert c.delta == 2, "two splits in one scale are one change of +2"
    # nothing more was queued: after one more scaling the next item is that one
    store.scale_stream(SCOPE, STREAM, seal=[ids(store)[0]], new_ranges=[(0.0, 0.1), (0.1, 0.25)])
    check_change(store, w.get(timeout=5), 8)
    w.close()
    assert w.closed and w.get(timeout=5) is None
    assert list(w) == []


def test_iterating_in_a_thread_sees_every_change_in_order_and_ends_on_close(store):
    w = store.watch_segments(SCOPE, STREAM)
    got: list = []
    t = threading.Thread(target=lambda: got.extend(w), daemon=True)
    t.start()
    counts = five_scalings(store)
    wait_until(lambda: len(got) == 6, 5, "six items")
    w.close()
    t.join(5)
    assert not t.is_alive(), "iteration did not end on close"
    assert [c.epoch for c in got] == [0, 1, 2, 3, 4, 5]
    assert [c.segment_count for c in got] == counts
    for c in got:
        check_change(store, c, c.epoch, initial=c.epoch == 0)


def test_items_queued_before_close_are_still_handed_out(store):
    w = store.watch_segments(SCOPE, STREAM, initial=False)
    five_scalings(store)
    w.close()
    w.close()  # idempotent
    assert [c.epoch for c in w] == [1, 2, 3, 4, 5]
    store.scale_stream(SCOPE, STREAM, seal=[ids(store)[0]], new_ranges=[(0.0, 0.1), (0.1, 0.25)])
    assert w.get(timeout=0) is None, "a closed watcher received a change"


def test_initial_false_starts_with_the_first_scaling(store):
    w = store.watch_segments(SCOPE, STREAM, initial=False)
    assert w.get(timeout=0) is None
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    c = w.get(timeout=5)
    check_change(store, c, 1)
    w.close()


def test_a_watcher_created_later_starts_at_the_current_epoch(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as s:
        s.create_scope(SCOPE)
        s.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=QUIET))
        five_scalings(s)
        with s.watch_segments(SCOPE, STREAM) as w:
            c = w.get(timeout=5)
            check_change(s, c, 5, initial=True)
            assert c.segment_count == 4 and c.segment_ids == ids(s)
        assert w.closed
    with pe.open(path) as s:  # and after reopening
        w = s.watch_segments(SCOPE, STREAM)
        c = w.get(timeout=5)
        check_change(s, c, 5, initial=True)
        assert c.segment_ids == ids(s)
        s.scale_stream(SCOPE, STREAM, seal=[ids(s)[0]], new_ranges=[(0.0, 0.1), (0.1, 0.25)])
        check_change(s, w.get(timeout=5), 6)


def test_two_watchers_and_two_streams(store):
    store.create_stream(SCOPE, "y", pe.StreamConfiguration(scaling=QUIET))
    w1 = store.watch_segments(SCOPE, STREAM, initial=False)
    w2 = store.watch_segments(SCOPE, STREAM, initial=False)
    wy = store.watch_segments(SCOPE, "y", initial=False)
    store.scale_stream(SCOPE, "y", seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.3), (0.3, 0.6), (0.6, 1.0)])
    c1, c2 = w1.get(timeout=5), w2.get(timeout=5)
    assert c1 == c2 and c1.stream == STREAM and c1.segment_count == 3
    cy = wy.get(timeout=5)
    assert cy.stream == "y" and cy.segment_count == 2
    # each watcher got exactly its stream's one change
    w2.close()
    store.scale_stream(SCOPE, STREAM, seal=[ids(store)[0]], new_ranges=[(0.0, 0.1), (0.1, 0.3)])
    assert w1.get(timeout=5).epoch == 2
    assert wy.get(timeout=0) is None and w2.get(timeout=0) is None
    w1.close()
    wy.close()


# --------------------------------------------------------------------------- callback form
def test_callback_gets_every_change_on_its_own_thread(store):
    got: list = []
    threads: set = set()
    done = threading.Event()

    def cb(c):
        threads.add(threading.current_thread())
        got.append(c)
        if c.epoch == 5:
            done.set()

    w = store.watch_segments(SCOPE, STREAM, cb)
    assert isinstance(w, pe.SegmentWatcher)
    counts = five_scalings(store)
    assert done.wait(5)
    assert [c.epoch for c in got] == [0, 1, 2, 3, 4, 5]
    assert [c.segment_count for c in got] == counts
    assert threading.main_thread() not in threads and len(threads) == 1
    assert w.errors == []
    w.close()


def test_callback_exceptions_are_collected_and_later_changes_still_arrive(store):
    got: list = []

    def cb(c):
        got.append(c.epoch)
        if c.epoch in (1, 3):
            raise ValueError(f"boom at {c.epoch}")

    w = store.watch_segments(SCOPE, STREAM, cb, initial=False)
    five_scalings(store)
    wait_until(lambda: got[-1:] == [5], 5, "the last change")
    assert got == [1, 2, 3, 4, 5]
    assert [str(e) for e in w.errors] == ["boom at 1", "boom at 3"]
    assert all(isinstance(e, ValueError) for e in w.errors)
    store.scale_stream(SCOPE, STREAM, seal=[ids(store)[0]], new_ranges=[(0.0, 0.1), (0.1, 0.25)])
    wait_until(lambda: got[-1:] == [6], 5, "a change after the errors")
    w.close()


def test_a_slow_callback_does_not_hold_up_scaling(store):
    release = threading.Event()
    got: list = []

    def cb(c):
        release.wait(30)
        got.append(c.epoch)

    w = store.watch_segments(SCOPE, STREAM, cb)
    five_scalings(store)  # returns although the callback is still blocked on the first item
    assert store.stream_info(SCOPE, STREAM).epoch == 5 and got == []
    release.set()
    wait_until(lambda: len(got) == 6, 5, "the queued changes")
    assert got == [0, 1, 2, 3, 4, 5]
    w.close()


def test_closing_a_callback_watcher_stops_it(store):
    got: list = []
    ctl: list = []
    w = store.watch_segments(SCOPE, STREAM, got.append)
    wait_until(lambda: len(got) == 1, 5, "the initial item")
    w.close()
    assert w.closed
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    # a control watcher opened after the close gets the next scaling; the closed one never does
    c = store.watch_segments(SCOPE, STREAM, ctl.append, initial=False)
    a, b = ids(store)
    store.scale_stream(SCOPE, STREAM, seal=[a, b], new_ranges=[(0.0, 1.0)])
    wait_until(lambda: len(ctl) == 1, 5, "the control watcher")
    assert [x.epoch for x in got] == [0]
    assert w.get(timeout=0) is None
    c.close()


# --------------------------------------------------------------------------- implicit closes
def test_closing_the_store_closes_its_watchers():
    store = pe.open_temporary()
    store.create_scope(SCOPE)
    store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=QUIET))
    it = store.watch_segments(SCOPE, STREAM)
    got: list = []
    t = threading.Thread(target=lambda: got.extend(it), daemon=True)
    t.start()
    cb_items: list = []
    cbw = store.watch_segments(SCOPE, STREAM, cb_items.append)
    wait_until(lambda: len(got) == 1 and len(cb_items) == 1, 5, "the initial items")
    store.close()
    t.join(5)
    assert not t.is_alive(), "an iterating thread was left blocked by store.close()"
    assert it.closed and cbw.closed
    assert it.get(timeout=0) is None
    with pytest.raises(errors.StoreClosedError):
        store.watch_segments(SCOPE, STREAM)


def test_deleting_the_stream_closes_its_watchers(store):
    it = store.watch_segments(SCOPE, STREAM, initial=False)
    got: list = []
    t = threading.Thread(target=lambda: got.extend(it), daemon=True)
    t.start()
    store.delete_stream(SCOPE, STREAM)
    t.join(5)
    assert not t.is_alive() and it.closed
    # a new stream of the same name is a different stream: the old watcher stays closed
    store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=QUIET))
    store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
    assert got == [] and it.get(timeout=0) is None


# --------------------------------------------------------------------------- the auto-scaler
def test_auto_scaler_scalings_arrive_once_each_in_epoch_order():
    with pe.open_temporary(scale_windows=(0.1, 0.2, 0.4, 0.8), scale_cooldown=0.2,
                           maintenance_interval=0.02) as store:
        store.create_scope(SCOPE)
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(
            scaling=pe.ScalingPolicy.by_event_rate(target_rate=2)))  # the load is far above it
        w = store.watch_segments(SCOPE, STREAM, initial=False)
        stop = threading.Event()

        def load():
            rnd = random.Random(5)
            with store.create_writer(SCOPE, STREAM) as wr:
                while not stop.is_set():
                    for _ in range(10):
                        wr.write_event(b"e", routing_key=f"k{rnd.randrange(1000)}")
                    wr.flush()
                    stop.wait(0.01)

        t = threading.Thread(target=load, daemon=True)
        t.start()
        got = []
        deadline = time.monotonic() + 120  # only bounds a hang: a loaded machine scales later
        try:
            while len(got) < 3:
                assert time.monotonic() < deadline, f"only {len(got)} scalings in 120 s"
                c = w.get(timeout=0.2)
                if c is not None:
                    got.append(c)
        finally:
            stop.set()
            t.join(120)
        assert not t.is_alive(), "the load thread did not stop"
        w.close()
        got += list(w)  # whatever was queued up to the close
        assert [c.epoch for c in got] == list(range(1, len(got) + 1))
        for c in got:
            check_change(store, c, c.epoch)
        assert all(c.delta > 0 for c in got[:3]), "the load splits"


# --------------------------------------------------------------------------- errors
def test_watch_errors(store):
    with pytest.raises(errors.StreamNotFoundError):
        store.watch_segments(SCOPE, "nope")
    with pytest.raises(errors.ScopeNotFoundError):
        store.watch_segments("nope", STREAM)
    with pytest.raises(errors.InvalidConfigurationError):
        store.watch_segments(SCOPE, STREAM, callback=42)
    with pytest.raises(errors.InvalidNameError):
        store.watch_segments(SCOPE, "bad/name")
