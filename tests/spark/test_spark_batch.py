"""``spark.read.format("pravega")`` on a real local Spark session: a batch read returns exactly
the events ``read_slice`` returns for the same cuts — a scaled and truncated stream whose
history is partly tiered with its journal files reclaimed, read from the live store (Spark's
Python workers are clients of this process), from the store when no process holds it (the
workers open it themselves), and from its tier-2 folder and an S3 bucket (moto) with no store.

Marked ``spark`` but never skipped: CI must run it, so a missing pyspark or Java fails it."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

import pravega_embedded as pe

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

MiB = 1 << 20
COLUMNS = ["event", "routing_key", "scope", "stream", "segment_id", "offset", "write_time"]


def _load(spark, path, **options):
    r = spark.read.format("pravega").option("path", str(path)).option("scope", "iot").option("stream", "sensors")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _spark_rows(df):
    return sorted((r.segment_id, r.offset, r.routing_key, bytes(r.event)) for r in df.collect())


def _slice_rows(sl):
    return sorted((ev.segment_id, ev.offset, ev.routing_key.decode() if isinstance(ev.routing_key, bytes)
                   else ev.routing_key, ev.event) for ev in sl)


def _write(store, first, n, size=200):
    with store.create_writer("iot", "sensors") as w:
        for i in range(first, first + n):
            key = f"sensor-{i % 13}" if i % 5 else None
            w.write_event(b"%07d:" % i + b"v" * size, routing_key=key)
            if i % 400 == 0:
                w.flush()


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A store whose stream scaled, was truncated, and had its oldest journal files reclaimed
    after tiering; (store path, tier-2 folder, the cuts a test reads between)."""
    root = tmp_path_factory.mktemp("spark-src")
    tier2 = root / "tier2"
    store = pe.open(root / "data", tier2=str(tier2), roll_bytes=MiB, tier2_file_bytes=256 << 10,
                    tier2_delete_grace=0)
    store.create_scope("iot")
    store.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    _write(store, 0, 6000)
    cut_a = store.get_next_stream_cut("iot", "sensors", None, 300 << 10)
    store.scale_stream("iot", "sensors", [0], [(0.0, 1 / 6), (1 / 6, 1 / 3)])
    _write(store, 6000, 6000)
    store.truncate_stream("iot", "sensors", store.get_next_stream_cut("iot", "sensors", None, 100 << 10))
    store.flush_tier2()
    store.checkpoint()
    store.reclaim()
    _write(store, 12000, 3000)  # not tiered yet
    cut_b = store.get_next_stream_cut("iot", "sensors", cut_a, 2 * MiB)
    assert store.tiered_bytes("iot", "sensors") > 0
    yield store, root / "data", tier2, cut_a, cut_b
    store.close()


def test_a_read_of_a_live_store_equals_read_slice(spark, history):
    store, path, _, cut_a, cut_b = history
    df = _load(spark, path)
    assert df.columns == COLUMNS
    whole = store.read_slice("iot", "sensors")
    assert _spark_rows(df) == _slice_rows(whole)
    between = _load(spark, path, start_stream_cut=cut_a.to_text(), end_stream_cut=cut_b.to_text())
    assert _spark_rows(between) == _slice_rows(store.read_slice("iot", "sensors", cut_a, cut_b))
    # write_time is the record's append time, the same the store's Arrow slices and tier 2 give
    want = store.read_slice("iot", "sensors", cut_a, cut_b).to_arrow(write_time=True)
    times = {(s, o): t for s, o, t in zip(want.column("segment_id").to_pylist(),
                                          want.column("offset").to_pylist(),
                                          want.column("write_time").to_pylist())}
    got = between.select("segment_id", "offset", "write_time", "scope", "stream").collect()
    assert all(r.write_time is not None for r in got)
    assert {(r.segment_id, r.offset): r.write_time.replace(tzinfo=None) for r in got} == \
        {k: v.replace(tzinfo=None) for k, v in times.items()}
    assert {(r.scope, r.stream) for r in got} == {("iot", "sensors")}


def test_partitions_follow_the_sessions_cores_or_min_partitions_and_keep_every_event_once(spark, history):
    store, path, _, _, _ = history
    want = _slice_rows(store.read_slice("iot", "sensors"))
    plain = _load(spark, path)  # the stream's 4 segments packed into one task per core (local[2])
    assert plain.rdd.getNumPartitions() == 2
    split = _load(spark, path, min_partitions="12")
    assert 8 <= split.rdd.getNumPartitions() <= 12
    small = _load(spark, path, max_partition_bytes="64k")  # more tasks so none holds more
    assert small.rdd.getNumPartitions() > 8
    for df in (plain, split, small):
        assert _spark_rows(df) == want


def test_a_store_no_process_holds_is_opened_by_the_workers(spark, tmp_path):
    with pe.open(tmp_path / "data", tier2=False, roll_bytes=MiB) as store:
        store.create_scope("iot")
        store.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
        _write(store, 0, 8000)
        want = _slice_rows(store.read_slice("iot", "sensors"))
    # closed: the first worker task to open it owns it (tier 2 off: no tier2 option), the
    # others connect to that one (and reopen and resume if it closes first)
    assert _spark_rows(_load(spark, tmp_path / "data", min_partitions="8")) == want
    assert not (tmp_path / "data" / "tier2").exists()  # no task tiered anywhere
    with pe.open(tmp_path / "data", tier2=False) as store:  # and it still opens, unchanged
        assert _slice_rows(store.read_slice("iot", "sensors")) == want


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_a_tier2_url_is_read_with_no_store(spark, history, where, request):
    store, _, tier2, _, _ = history
    if where == "folder":
        url, options = str(tier2), {}
    else:  # copy the tiered files to a bucket of moto's server: the same layout, on S3
        import fsspec
        endpoint = request.getfixturevalue("moto_endpoint")
        options = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
        bucket = f"pe-spark-{uuid.uuid4().hex[:10]}"
        s3 = fsspec.filesystem("s3", **options)
        s3.mkdir(bucket)
        s3.put(str(tier2) + "/", f"{bucket}/t2/", recursive=True)
        url = f"s3://{bucket}/t2"
    t2 = pe.open_tier2(url, options or None)
    want = _slice_rows(t2.read_slice("iot", "sensors"))
    assert len(want) > 1000
    df = _load(spark, url, storage_options=json.dumps(options), min_partitions="6")
    assert _spark_rows(df) == want
    tiered = {(s, o) for s, o, _, _ in want}
    live = {(s, o) for s, o, _, _ in _slice_rows(store.read_slice("iot", "sensors"))}
    assert tiered <= live  # tier 2 holds a prefix of what the store reads


def test_timestamps_bound_a_read_as_the_cuts_at_those_times(spark, history):
    """starting_timestamp / ending_timestamp (ISO-8601 or ms since the epoch, as
    spark-sql-kafka) read what ``read_slice`` reads between the cuts at those times: live
    (tiered and un-tiered parts, a scaled and truncated stream) and from a tier-2 folder."""
    store, path, tier2, _, _ = history
    times = sorted(set(store.read_slice("iot", "sensors").to_arrow(write_time=True)
                       .column("write_time").to_pylist()))
    t1 = times[len(times) // 4]  # µs write times of events: cuts fall between records
    ms2 = int(times[3 * len(times) // 4].timestamp() * 1000)
    t2 = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms2)
    df = _load(spark, path, starting_timestamp=t1.isoformat(), ending_timestamp=str(ms2))
    want = store.read_slice("iot", "sensors", store.get_stream_cut_at("iot", "sensors", t1),
                            store.get_stream_cut_at("iot", "sensors", t2))
    rows = _spark_rows(df)
    assert rows == _slice_rows(want) and len(rows) > 100
    got_times = [r.write_time for r in df.select("write_time").collect()]
    assert all(t1.replace(tzinfo=None) <= t.replace(tzinfo=None) < t2.replace(tzinfo=None) for t in got_times)
    t2store = pe.open_tier2(str(tier2))
    from_tier2 = _load(spark, tier2, starting_timestamp=t1.isoformat())
    assert _spark_rows(from_tier2) == _slice_rows(
        t2store.read_slice("iot", "sensors", start=t2store.get_stream_cut_at("iot", "sensors", t1)))


def test_bad_options_fail_the_query_with_the_library_message(spark, history, tmp_path):
    _, path, _, _, _ = history
    cases = [
        ({"end_stream_cuts": "latest"}, "has no option 'end_stream_cuts'"),
        ({"start_stream_cut": "pe1:iot/other:0=0"}, "not of iot/sensors"),
        ({"start_stream_cut": "garbage"}, "StreamCut"),
        ({"min_partitions": "0"}, "min_partitions"),
        ({"starting_timestamp": "2026-11-25 10:00"}, "no time zone"),
    ]
    for options, text in cases:
        with pytest.raises(Exception, match=text):
            _load(spark, path, **options).collect()
    with pytest.raises(Exception, match="there is no store at"):
        _load(spark, tmp_path / "typo").collect()
    assert not (tmp_path / "typo").exists()  # a read never creates a store
