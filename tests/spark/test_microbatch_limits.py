"""The micro-batch reader's decisions, called as Spark's driver calls them (no Spark session:
the same methods, in this process, against a live store through its socket):
``min_events_per_trigger`` holds a batch back until enough events are there or
``max_trigger_delay`` has passed; ``fail_on_data_loss`` fails a query whose start retention
passed, naming what was lost, or skips it with a warning; a range truncated while a task reads
it likewise; ``starting_timestamp`` starts at the cut at that time.

The whole path through Spark is in test_spark_stream.py; these pin each rule down exactly."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.spark.microbatch import PravegaStreamReader, offset_of
from pravega_embedded.spark.options import parse_stream_options


@pytest.fixture
def store(tmp_path):
    # small journal files, no tail cache: truncated data is really gone once reclaimed
    s = pe.open(tmp_path / "data", tier2=False, roll_bytes=1 << 20, tail_cache_bytes=1)
    s.create_scope("iot")
    s.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    yield s
    s.close()


def _reader(store, **options) -> PravegaStreamReader:
    opts = {"path": str(store.path), "scope": "iot", "stream": "sensors"}
    if "starting_timestamp" not in options:
        opts["start_stream_cut"] = "earliest"
    opts.update({k: str(v) for k, v in options.items()})
    return PravegaStreamReader(parse_stream_options(opts))


def _write(store, first, n, flush_every=10, pad=0):
    with store.create_writer("iot", "sensors") as w:
        for i in range(first, first + n):
            w.write_event(b"%07d" % i + b" " * pad, routing_key=f"k{i % 5}")
            if i % flush_every == 0:
                w.flush()


def _read(reader, start, end) -> list[int]:
    ids = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            ids += [int(e) for e in batch.column("event").to_pylist()]
    return sorted(ids)


LIMIT = ReadMaxBytes(1 << 30)


def test_min_events_holds_a_batch_back_until_that_many_are_there(store):
    r = _reader(store, min_events_per_trigger=40, max_trigger_delay="1h")
    start = r.initialOffset()
    _write(store, 0, 30)
    assert r.latestOffset(start, LIMIT) == start  # 30 < 40: no batch yet
    assert r.latestOffset(start, ReadAllAvailable()) != start  # Spark asks for everything
    _write(store, 30, 15)
    end = r.latestOffset(start, LIMIT)
    assert end != start and _read(r, start, end) == list(range(45))


def test_max_trigger_delay_lets_a_small_batch_go_once_it_has_passed(store):
    r = _reader(store, min_events_per_trigger=1000, max_trigger_delay="0s")
    start = r.initialOffset()
    _write(store, 0, 3)
    end = r.latestOffset(start, LIMIT)
    assert _read(r, start, end) == [0, 1, 2]
    waiting = _reader(store, min_events_per_trigger=1000, max_trigger_delay="10m")
    assert waiting.latestOffset(start, LIMIT) == start


def test_available_now_does_not_wait_for_min_events(store):
    _write(store, 0, 5)
    r = _reader(store, min_events_per_trigger=1000, max_trigger_delay="1h")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    end = r.latestOffset(start, LIMIT)
    assert _read(r, start, end) == list(range(5))


def _truncated(store, keep_from):
    """Truncate the stream about ``keep_from`` events in; what is left: {event: segment}."""
    cut = store.get_next_stream_cut("iot", "sensors", None, 1 << 30, max_events=keep_from)
    store.truncate_stream("iot", "sensors", cut)
    store.checkpoint()  # the truncated sections' index entries go ...
    store.reclaim()  # ... and their journal files: reading them fails
    return {int(ev.event): ev.segment_id for ev in store.read_slice("iot", "sensors")}


def test_a_start_retention_passed_fails_the_query_naming_what_was_lost(store):
    r = _reader(store)
    _write(store, 0, 100)
    start = r.initialOffset()
    left = _truncated(store, 40)
    assert 0 < len(left) < 100
    with pytest.raises(errors.TruncatedDataError, match=r"deleted by the stream's retention.*segment "
                       r"\d+(#\d+)? \[0, \d+\).*fail_on_data_loss to false"):
        r.latestOffset(start, LIMIT)
    with pytest.raises(errors.TruncatedDataError, match="fail_on_data_loss"):
        r.partitions(start, offset_of(store.stream_info("iot", "sensors").tail))


def test_with_fail_on_data_loss_false_the_lost_part_is_skipped_with_a_warning(store, caplog):
    r = _reader(store, fail_on_data_loss="false")
    _write(store, 0, 100)
    start = r.initialOffset()
    left = _truncated(store, 40)
    with caplog.at_level(logging.WARNING, logger="pravega_embedded.spark"):
        end = r.latestOffset(start, LIMIT)
        got = _read(r, start, end)
    assert got == sorted(left)  # what is left, exactly once; nothing before the head
    warned = [rec.getMessage() for rec in caplog.records if "were deleted" in rec.getMessage()]
    assert warned and "skipped" in warned[0] and "segment " in warned[0]


@pytest.mark.parametrize("fail", [True, False])
def test_a_range_truncated_before_its_task_reads_it(store, fail, caplog):
    """Planned on the driver, truncated (and its journal files reclaimed) before the task runs:
    an error naming the range, or the rest from the segment's head with a warning. (A read
    already going holds its files: it reads on to its end, so nothing is lost to it.)"""
    r = _reader(store, fail_on_data_loss=str(fail).lower())
    _write(store, 0, 200, pad=40_000)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    parts = r.partitions(start, end)
    left = _truncated(store, 150)
    if fail:
        with pytest.raises(errors.TruncatedDataError, match="while Spark read them.*fail_on_data_loss"):
            list(r.read(parts[0]))
        return
    with caplog.at_level(logging.WARNING, logger="pravega_embedded.spark"):
        got = [[int(e[:7]) for e in b.column("event").to_pylist()] for p in parts for b in r.read(p)]
    assert sorted(i for ids in got for i in ids) == sorted(left)  # what is left, exactly once
    assert any("skipped, fail_on_data_loss is false" in rec.getMessage() for rec in caplog.records)


def test_starting_timestamp_starts_at_the_cut_at_that_time(store):
    _write(store, 0, 50)
    ms = time.time_ns() // 1_000_000 + 1  # the next millisecond: nothing written yet then
    while time.time_ns() <= ms * 1_000_000 + 1000:
        pass
    _write(store, 50, 50)
    r = _reader(store, starting_timestamp=str(ms))  # ms since the epoch, as spark-sql-kafka
    start = r.initialOffset()
    at = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    assert start == offset_of(store.get_stream_cut_at("iot", "sensors", at))
    end = r.latestOffset(start, ReadAllAvailable())
    assert _read(r, start, end) == list(range(50, 100))
    iso = _reader(store, starting_timestamp=at.isoformat())
    assert iso.initialOffset() == start
