"""The shorthands users of Pravega's Python client, Kafka and Redis reach for first, the same
in process, through a client on the unix socket and over TCP (``handle``):
``create_stream(scope, stream, 4)`` for four fixed segments, ``create_reader_group(name,
scope, stream)`` for one stream, and ``starting_timestamp`` for readers and reader groups (they
start at the cut at that time: exactly the events written at or after it)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _mark() -> datetime:
    """A time after everything acknowledged so far and before what comes next (the clock is
    waited on, not slept on), as an aware datetime of whole µs."""
    t = time.time_ns() // 1000 + 1
    while time.time_ns() // 1000 <= t:
        pass
    return datetime.fromtimestamp(t // 1_000_000, tz=timezone.utc).replace(microsecond=t % 1_000_000)


def _write(store, first, n):
    with store.create_writer("a", "s") as w:
        for i in range(first, first + n):
            w.write_event(b"e%04d" % i, routing_key=f"k{i % 5}")


def test_create_stream_with_a_segment_count(handle):
    handle.create_scope("a")
    assert handle.create_stream("a", "s", 4) is True
    assert handle.stream_info("a", "s").config.scaling == pe.ScalingPolicy.fixed(4)
    assert len(handle.stream_info("a", "s").current_segments) == 4
    for bad in (0, -1, True, 1.5, "4"):
        with pytest.raises(errors.InvalidConfigurationError):
            handle.create_stream("a", "t", bad)
    assert "t" not in handle.list_streams("a")


def test_a_reader_group_of_one_stream_by_scope_and_name(handle):
    handle.create_scope("a")
    handle.create_stream("a", "s", 2)
    _write(handle, 0, 30)
    group = handle.create_reader_group("g", "a", "s")
    with group.create_reader("r1") as r:
        got = sorted(r.read_next_event(timeout=5).event for _ in range(30))
    assert got == sorted(b"e%04d" % i for i in range(30))
    with pytest.raises(errors.InvalidConfigurationError, match="names one stream"):
        handle.create_reader_group("g2", [("a", "s")], "s")


def test_readers_and_groups_start_at_a_timestamp(handle):
    handle.create_scope("a")
    handle.create_stream("a", "s", 3)
    _write(handle, 0, 40)
    t = _mark()
    _write(handle, 40, 25)
    for when in (t, t.timestamp(), t.isoformat()):
        with handle.create_reader("a", "s", starting_timestamp=when) as r:
            got = sorted(r.read_next_event(timeout=5).event for _ in range(25))
            assert r.read_next_event(timeout=0.2) is None
        assert got == sorted(b"e%04d" % i for i in range(40, 65)), when
    group = handle.create_reader_group("late", "a", "s", starting_timestamp=t)
    with group.create_reader("r1") as r:
        got = sorted(r.read_next_event(timeout=5).event for _ in range(25))
        assert r.read_next_event(timeout=0.2) is None
    assert got == sorted(b"e%04d" % i for i in range(40, 65))
    head = handle.stream_info("a", "s").head
    with pytest.raises(errors.InvalidConfigurationError, match="not both"):
        handle.create_reader("a", "s", head, starting_timestamp=t)
    with pytest.raises(errors.InvalidConfigurationError, match="not both"):
        handle.create_reader_group("g3", pe.ReaderGroupConfig(streams=[("a", "s")], start=head),
                                   starting_timestamp=t)
    with pytest.raises(errors.InvalidConfigurationError, match="zone"):
        handle.create_reader("a", "s", starting_timestamp="2026-11-25 10:00")
