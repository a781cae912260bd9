"""Time lookups and skipping truncated data, in process, through a client on the unix socket
and over TCP (``handle`` runs each test three ways).

``get_stream_cut_at(t)`` is Kafka's offsets_for_times for a whole stream: what a user relies on
is that a slice from the cut holds exactly the events written at or after ``t`` and a slice up
to it exactly those written before, across a scaling, with large events, never before the head.
``skip_truncated(cut)`` is what a reader that fell behind retention does: move up to the head
and be told exactly what was lost."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _stream(store, segments=2):
    store.create_scope("a", exist_ok=True)
    store.create_stream("a", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))


def _mark() -> int:
    """A time strictly after everything acknowledged so far and strictly before what comes
    next (the clock is waited on, not slept on)."""
    t = time.time_ns()
    while time.time_ns() <= t + 1000:
        pass
    return t + 1


def _write(store, first, n, *, large_at=None):
    w = store.create_writer("a", "s")
    for i in range(first, first + n):
        payload = b"e%06d" % i
        if i == large_at:
            payload += b"L" * (9 << 20)  # a large event: chunks, then the record that ends it
        w.write_event(payload, routing_key=f"k{i % 7}")
        if i % 10 == 0:
            w.flush()
    w.close()


def _ids(sl):
    return sorted(int(ev.event[1:7]) for ev in sl)


def test_a_cut_at_each_mark_splits_the_events_written_before_and_after(handle):
    _stream(handle)
    marks = [_mark()]
    _write(handle, 0, 100)
    marks.append(_mark())
    _write(handle, 100, 100)
    marks.append(_mark())
    info = handle.stream_info("a", "s")
    first = sorted(sid for sid, _ in info.tail.positions)[0]
    handle.scale_stream("a", "s", [first], [(0.0, 0.25), (0.25, 0.5)])
    _write(handle, 200, 100)
    marks.append(_mark())
    _write(handle, 300, 50, large_at=320)
    marks.append(_mark())
    written = [0, 100, 200, 300, 350]  # events written before each mark
    for t, before in zip(marks, written):
        cut = handle.get_stream_cut_at("a", "s", t / 1e9 if before % 200 else
                                       datetime.fromtimestamp(-(-t // 1000) / 1e6, timezone.utc))
        assert _ids(handle.read_slice("a", "s", end=cut)) == list(range(before)), before
        assert _ids(handle.read_slice("a", "s", start=cut)) == list(range(before, 350)), before
    tail = handle.stream_info("a", "s").tail
    assert handle.get_stream_cut_at("a", "s", marks[-1] / 1e9) == tail
    assert handle.get_stream_cut_at("a", "s", 0) == handle.stream_info("a", "s").head


def test_the_same_time_in_every_form_gives_the_same_cut(handle):
    _stream(handle, 1)
    _write(handle, 0, 20)
    t = _mark()
    _write(handle, 20, 20)
    us = -(-t // 1000)
    forms = [us / 1e6, datetime.fromtimestamp(us / 1e6, timezone.utc),
             datetime.fromtimestamp(us / 1e6, timezone.utc).isoformat(),
             datetime.fromtimestamp(us / 1e6, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
             datetime.fromtimestamp(us / 1e6)]  # naive: local time, as datetime.timestamp() takes it
    cuts = {handle.get_stream_cut_at("a", "s", f) for f in forms}
    assert len(cuts) == 1
    assert _ids(handle.read_slice("a", "s", start=cuts.pop())) == list(range(20, 40))


@pytest.mark.parametrize("bad, words", [
    ("2026-11-25T10:00:00", "no time zone"),
    ("yesterday", "ISO-8601"),
    (time.time() * 1000, "milliseconds"),
    (True, "seconds since the epoch"),
    (float("nan"), "seconds since the epoch"),
    (None, "seconds since the epoch"),
    (datetime.min, "out of range"),
])
def test_a_bad_time_is_refused_with_a_hint(handle, bad, words):
    _stream(handle, 1)
    with pytest.raises(errors.InvalidConfigurationError, match=words):
        handle.get_stream_cut_at("a", "s", bad)


def test_a_cut_at_a_time_is_never_before_the_head(handle):
    _stream(handle, 1)
    _write(handle, 0, 50)
    t = _mark()
    _write(handle, 50, 50)
    middle = handle.get_stream_cut_at("a", "s", t / 1e9)
    _write(handle, 100, 10)
    handle.truncate_stream("a", "s", handle.get_stream_cut_at("a", "s", _mark() / 1e9))
    head = handle.stream_info("a", "s").head
    assert handle.get_stream_cut_at("a", "s", t / 1e9) == head
    assert _ids(handle.read_slice("a", "s", start=head)) == []
    with pytest.raises(errors.TruncatedDataError):
        handle.read_slice("a", "s", start=middle)


def test_skip_truncated_moves_a_cut_to_the_head_and_names_what_was_lost(handle):
    _stream(handle, 2)
    _write(handle, 0, 100)
    before = handle.stream_info("a", "s").head
    t = _mark()
    _write(handle, 100, 100)
    cut_t = handle.get_stream_cut_at("a", "s", t / 1e9)
    lost_bytes = handle.read_slice("a", "s", end=cut_t).nbytes
    nothing = handle.skip_truncated("a", "s", before)
    assert nothing.cut == before and nothing.lost == () and nothing.nbytes == 0
    handle.truncate_stream("a", "s", cut_t)
    skip = handle.skip_truncated("a", "s", before)
    assert isinstance(skip, pe.Truncation)
    assert skip.cut == handle.stream_info("a", "s").head == cut_t
    assert skip.nbytes == lost_bytes > 0
    assert sorted(r.segment_id for r in skip.lost) == sorted(sid for sid, _ in before.positions)
    assert all(r.start == 0 and r.end == dict(cut_t.positions)[r.segment_id] for r in skip.lost)
    assert "segment " in skip.describe()
    assert _ids(handle.read_slice("a", "s", start=skip.cut)) == list(range(100, 200))
    # a cut after the head stays as it is
    later = handle.get_next_stream_cut("a", "s", cut_t, 200)
    assert handle.skip_truncated("a", "s", later) == pe.Truncation(cut=later)


def test_skip_truncated_across_a_scaling_reaches_the_successors(handle):
    _stream(handle, 1)
    _write(handle, 0, 30)
    start = handle.stream_info("a", "s").head
    (only,) = [sid for sid, _ in start.positions]
    handle.scale_stream("a", "s", [only], [(0.0, 0.5), (0.5, 1.0)])
    _write(handle, 30, 30)
    t = _mark()
    _write(handle, 60, 30)
    handle.truncate_stream("a", "s", handle.get_stream_cut_at("a", "s", t / 1e9))
    skip = handle.skip_truncated("a", "s", start)
    assert only not in dict(skip.cut.positions)
    assert {r.segment_id for r in skip.lost} >= {only}
    assert _ids(handle.read_slice("a", "s", start=skip.cut)) == list(range(60, 90))


def test_an_events_own_write_time_finds_it_in_every_form_and_through_clients(handle):
    """The µs write time a slice shows for an event, given back (as float seconds too: a
    float's last digits are noise), starts the cut at that event, the same on every side."""
    _stream(handle, 2)
    for k in range(6):
        _write(handle, 100 * k, 100)
    t = handle.read_slice("a", "s").to_arrow(write_time=True)
    us = sorted({int(v.timestamp() * 1_000_000 + 0.5) for v in t.column("write_time").to_pylist()})
    all_us = [int(v.timestamp() * 1_000_000 + 0.5) for v in t.column("write_time").to_pylist()]
    for u in us[:: max(1, len(us) // 25)]:
        for form in (u / 1e6, datetime.fromtimestamp(u // 1_000_000, timezone.utc).replace(
                microsecond=u % 1_000_000)):
            cut = handle.get_stream_cut_at("a", "s", form)
            assert handle.read_slice("a", "s", start=cut).to_arrow().num_rows == \
                sum(1 for x in all_us if x >= u), (u, form)


def test_min_events_counts_from_a_cut_inside_a_writers_batch(handle):
    """A head inside a section (a truncation at a reader's position): only the events after
    it count."""
    _stream(handle, 1)
    with handle.create_writer("a", "s") as w:
        w.write_events([b"e%06d" % i for i in range(20)], routing_key="k")  # one section
    evs = list(handle.read_slice("a", "s"))
    (sid,) = {ev.segment_id for ev in evs}
    handle.truncate_stream("a", "s", pe.StreamCut.of("a", "s", {sid: evs[5].offset}))
    head = handle.stream_info("a", "s").head
    assert handle.get_next_stream_cut("a", "s", head, 1 << 30, min_events=16) == head
    assert handle.get_next_stream_cut("a", "s", head, 1 << 30, min_events=15) != head
    end = pe.StreamCut.of("a", "s", {sid: evs[8].offset})  # an end inside the section too
    assert handle.get_next_stream_cut("a", "s", head, 1 << 30, min_events=4, end=end) == head
    assert handle.get_next_stream_cut("a", "s", head, 1 << 30, min_events=3, end=end) == end
