"""Event time: writers note time, readers get a time window whose bounds only move forward and
bound the times of the events around the reader's position."""

from __future__ import annotations

import random
import time

import pytest

import pravega_embedded as pe
from pravega_embedded.errors import InvalidConfigurationError, StreamNotFoundError, WriterClosedError

FAST = dict(maintenance_interval=0.02)


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("timed out")


def watermarks(store, key="s/x"):
    return list(store._engine.watermarks.marks.get(key, []))


def test_window_bounds_the_event_times_around_the_reader():
    """Two writers write events stamped with their own clock and note it as they go; at every
    reader position, every event not yet read has time >= lower, and every event read has time
    <= upper."""
    rnd = random.Random(7)
    with pe.open_temporary(**FAST) as store:
        store.create_scope("s")
        store.create_stream("s", "x", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        writers = [store.create_writer("s", "x", writer_id=f"w{i}") for i in range(2)]
        clock = [0, 0]
        for step in range(60):
            i = rnd.randrange(2)
            w = writers[i]
            for _ in range(rnd.randint(1, 30)):
                clock[i] += rnd.randint(0, 3)
                w.write_event(str(clock[i]).encode(), routing_key=f"k{rnd.randrange(20)}")
            w.note_time(clock[i])  # every later event of this writer has time >= clock[i]
            if step % 10 == 9:
                n = len(watermarks(store))
                wait_for(lambda n=n: len(watermarks(store)) > n)
        for w in writers:
            w.flush()
        marks = watermarks(store)
        assert len(marks) >= 5
        for (lo1, hi1, _), (lo2, hi2, _) in zip(marks, marks[1:]):
            assert lo1 <= lo2 and hi1 <= hi2  # both bounds only grow
        all_times = [int(ev.event) for ev in store.read_slice("s", "x")]
        r = store.create_reader("s", "x", end=store.stream_info("s", "x").tail)
        # at the head the window is as tight as the first watermark allows
        assert r.get_current_time_window() == pe.TimeWindow(None, marks[0][1])
        read: list[int] = []
        last = pe.TimeWindow(None, None)
        saw_lower = saw_upper = False
        while True:
            win = r.get_current_time_window()
            if last.lower is not None:
                assert win.lower is not None and win.lower >= last.lower
            if last.upper is not None and win.upper is not None:
                assert win.upper >= last.upper
            unread = _unread(all_times, read)
            if win.lower is not None:
                saw_lower = True
                assert all(t >= win.lower for t in unread)
            if win.upper is not None:
                saw_upper = True
                assert all(t <= win.upper for t in read)
            last = win
            ev = r.read_next_event(0)
            if ev is None:
                break
            read.append(int(ev.event))
        assert saw_lower and saw_upper
        assert sorted(read) == sorted(all_times)


def _unread(all_times, read):
    rest = list(all_times)
    for t in read:
        rest.remove(t)
    return rest


def test_automatic_noting_uses_wall_clock_milliseconds():
    with pe.open_temporary(**FAST) as store:
        store.create_scope("s")
        store.create_stream("s", "x")
        t0 = time.time_ns() // 1_000_000
        w = store.create_writer("s", "x", writer_id="w", automatically_note_time=True)
        w.write_event(b"a", routing_key="k")
        w.flush()
        wait_for(lambda: watermarks(store))
        lo, hi, _ = watermarks(store)[-1]
        assert t0 <= lo <= hi <= time.time_ns() // 1_000_000
        r = store.create_reader("s", "x")
        assert r.get_current_time_window().upper == hi  # the reader is before the watermark
        assert r.read_next_event(1).event == b"a"
        assert r.get_current_time_window().lower == lo  # and now past it
        w.close()


def test_watermarks_survive_a_reopen_and_a_closed_writer_stops_counting(tmp_path):
    with pe.open(tmp_path, durability="os", **FAST) as store:
        store.create_scope("s")
        store.create_stream("s", "x")
        slow = store.create_writer("s", "x", writer_id="slow")
        fast = store.create_writer("s", "x", writer_id="fast")
        slow.note_time(10)
        fast.note_time(100)
        wait_for(lambda: watermarks(store) and watermarks(store)[-1][:2] == (10, 100))
        slow.close()  # the slow writer no longer holds the lower bound back
        fast.write_event(b"e", routing_key="k")
        fast.note_time(200)
        wait_for(lambda: watermarks(store)[-1][:2] == (200, 200))
        before = watermarks(store)
    with pe.open(tmp_path, **FAST) as store:
        assert watermarks(store) == before


def test_group_reader_window_and_bad_input():
    with pe.open_temporary(**FAST) as store:
        store.create_scope("s")
        store.create_stream("s", "x")
        store.create_stream("s", "other")
        w = store.create_writer("s", "x", writer_id="w")
        w.write_event(b"1", routing_key="k")
        w.note_time(5)
        w.write_event(b"2", routing_key="k")
        w.note_time(9)
        wait_for(lambda: watermarks(store) and watermarks(store)[-1][0] == 9)
        group = store.create_reader_group("g", pe.ReaderGroupConfig(
            streams=[("s", "x")], automatic_checkpoint_interval=None))
        r = group.create_reader("r")
        ev = r.read_next_event(1)
        assert ev.event in (b"1", b"2")
        win = r.get_current_time_window("s", "x")
        assert win.upper is not None or win.lower is not None
        with pytest.raises(StreamNotFoundError):
            r.get_current_time_window("s", "other")
        for bad in (-1, 1.5, "3", True, None):
            with pytest.raises(InvalidConfigurationError):
                w.note_time(bad)
        with pytest.raises(InvalidConfigurationError):
            store.create_writer("s", "x", writer_id="w2", automatically_note_time="yes")
        w.close()
        with pytest.raises(WriterClosedError):
            w.note_time(10)
        r.close()


def test_a_reader_past_every_watermark_has_no_upper_bound():
    with pe.open_temporary(**FAST) as store:
        store.create_scope("s")
        store.create_stream("s", "x")
        w = store.create_writer("s", "x", writer_id="w")
        for t in (100, 200):
            w.note_time(t)
            w.write_event(str(t).encode(), routing_key="k")
            w.write_event(str(t + 50).encode(), routing_key="k")
            w.flush()
            n = len(watermarks(store))
            wait_for(lambda n=n: len(watermarks(store)) > n)
        r = store.create_reader("s", "x")
        read = []
        for _ in range(4):
            read.append(int(r.read_next_event(1).event))
            win = r.get_current_time_window()
            assert win.upper is None or all(t <= win.upper for t in read)
            assert win.lower is None or win.upper is None or win.lower <= win.upper
        assert r.get_current_time_window() == pe.TimeWindow(200, None)
        w.close()
