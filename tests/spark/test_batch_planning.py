"""How a read is planned and each partition read, called as Spark calls them (no Spark
session): a live store's tiered ranges go straight to tier 2 (batch and micro-batch), and one
whose tier-2 files vanished after planning is read through the store instead; pushed filters
keep exactly the rows Spark's own filtering keeps (property-tested against Python).

The path through Spark is in test_spark_batch.py and test_spark_pushdown.py."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, LessThan,
                                    LessThanOrEqual, Not, StringStartsWith)
from pyspark.sql.streaming.datasource import ReadAllAvailable

import pravega_embedded as pe
from pravega_embedded.spark.batchread import ARROW_SCHEMA, plan_partitions, plan_ranges, read_range
from pravega_embedded.spark.microbatch import PravegaStreamReader, offset_of
from pravega_embedded.spark.partitioning import default_parallelism
from pravega_embedded.spark.options import parse_read_options, parse_stream_options
from pravega_embedded.spark.pushdown import NO_BOUNDS, push
from pravega_embedded.tiering.layout import manifest_name


@pytest.fixture
def tiered(tmp_path):
    """A live store with most of a two-segment stream tiered and the rest not."""
    s = pe.open(tmp_path / "data", tier2=str(tmp_path / "tier2"), tier2_file_bytes=16 << 10,
                tier2_file_age=3600)
    s.create_scope("iot")
    s.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    _write(s, 0, 2000)
    s.flush_tier2()
    _write(s, 2000, 40)
    yield s
    s.close()


def _write(store, first, n):
    with store.create_writer("iot", "sensors") as w:
        for i in range(first, first + n):
            w.write_event(b"%06d:" % i + b"y" * 60, routing_key=f"k{i % 7}")
            if i % 25 == 0:
                w.flush()


def _ids(batches):
    return [int(e[:6]) for b in batches for e in b.column("event").to_pylist()]


def test_a_live_stores_tiered_ranges_are_read_from_tier2(tiered):
    opts = parse_read_options({"path": str(tiered.path), "scope": "iot", "stream": "sensors"})
    planned = plan_ranges(opts)
    from_t2 = [p for p in planned if p.tier2 is not None]
    assert sum(p.range.nbytes for p in from_t2) == tiered.tiered_bytes("iot", "sensors") > 0
    assert {p.tier2 for p in from_t2} == {tiered.tiering_status().target}
    assert any(p.tier2 is None for p in planned)  # the untiered tail: through the store
    ids = sorted(i for p in planned for i in _ids(read_range(opts, p.range, tier2=p.tier2)))
    assert ids == list(range(2040))


def test_a_tiered_range_whose_files_vanished_is_read_through_the_store(tiered, caplog):
    opts = parse_read_options({"path": str(tiered.path), "scope": "iot", "stream": "sensors"})
    planned = [p for p in plan_ranges(opts) if p.tier2 is not None]
    want = sorted(i for p in planned for i in _ids(tiered.read_segment_range(p.range).arrow_batches()))
    shutil.rmtree(tiered.tiering_status().target)  # tier 2 lost after planning (local data kept)
    with caplog.at_level(logging.WARNING, logger="pravega_embedded.spark"):
        got = sorted(i for p in planned for i in _ids(read_range(opts, p.range, tier2=p.tier2)))
    assert got == want and len(got) > 1000
    assert "reading the rest through the store" in caplog.text


def test_partitions_are_the_parallelism_at_least_min_partitions_and_sized_after_pruning(tiered):
    base = {"path": str(tiered.path), "scope": "iot", "stream": "sensors"}
    want = sorted(_ids(tiered.read_slice("iot", "sensors").to_arrow().to_batches()))

    def planned(parallelism, bounds=NO_BOUNDS, **options):
        opts = parse_read_options({**base, **options})
        runs = plan_partitions(opts, bounds, parallelism)
        got = sorted(i for run in runs for p in run for i in _ids(read_range(opts, p.range, tier2=p.tier2)))
        return runs, got

    runs, got = planned(3, min_partitions="1")  # a floor: it does not lower the parallelism
    assert len(runs) == 3 and got == want
    runs, got = planned(3, min_partitions="5")
    assert len(runs) == 5 and got == want
    total = sum(r.nbytes for r in tiered.get_segments("iot", "sensors"))
    runs, got = planned(1, max_partition_bytes=str(total // 6))  # sized: about 6 of that size
    assert 6 <= len(runs) <= 7 and got == want
    seg = tiered.get_segments("iot", "sensors")[0].segment_id
    bounds, _ = push([EqualTo(("segment_id",), seg)])
    runs, got = planned(1, bounds, max_partition_bytes=str(total // 6))
    assert {p.range.segment_id for run in runs for p in run} == {seg}
    assert len(runs) <= 4  # half the stream is read: sized for that half, not for the whole


def test_micro_batches_read_tiered_ranges_from_tier2(tiered):
    reader = PravegaStreamReader(parse_stream_options({
        "path": str(tiered.path), "scope": "iot", "stream": "sensors", "start_stream_cut": "earliest"}))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == offset_of(tiered.stream_info("iot", "sensors").tail)
    parts = reader.partitions(start, end)
    pieces = [p for part in parts for p in part.planned]
    assert any(p.tier2 for p in pieces) and any(not p.tier2 for p in pieces)
    assert len(parts) <= default_parallelism()  # packed: one task per core (no session: this machine's)
    assert sorted(i for p in parts for i in _ids(reader.read(p))) == list(range(2040))


# ---------------------------------------------------------------------- pushdown semantics
_T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
_COLS = {"segment_id": st.integers(0, 5), "offset": st.integers(0, 40),
         "write_time": st.integers(0, 40).map(lambda s: _T0 + timedelta(seconds=s))}
_OPS = [EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual]


@st.composite
def _filters(draw):
    col = draw(st.sampled_from(sorted(_COLS)))
    kind = draw(st.sampled_from(["cmp", "in", "notnull", "not", "other"]))
    if kind == "in":
        return In((col,), tuple(draw(st.lists(_COLS[col], max_size=4))))
    if kind == "notnull":
        return IsNotNull((col,))
    if kind == "not":
        return Not(EqualTo((col,), draw(_COLS[col])))
    if kind == "other":
        return StringStartsWith(("routing_key",), "k1")
    return draw(st.sampled_from(_OPS))((col,), draw(_COLS[col]))


def _holds(f, row) -> bool:
    if isinstance(f, Not):
        return not _holds(f.child, row)
    if isinstance(f, StringStartsWith):
        return row["routing_key"].startswith(f.value)
    v = row[f.attribute[0]]
    if isinstance(f, IsNotNull):
        return True
    if isinstance(f, In):
        return v in f.value
    return {EqualTo: v == f.value, GreaterThan: v > f.value, GreaterThanOrEqual: v >= f.value,
            LessThan: v < f.value, LessThanOrEqual: v <= f.value}[type(f)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_COLS["segment_id"], _COLS["offset"], _COLS["write_time"]), max_size=30),
       st.lists(_filters(), max_size=4))
def test_pushed_filters_keep_exactly_the_rows_spark_would(rows, filters):
    data = [{"segment_id": s, "offset": o, "write_time": w, "routing_key": f"k{o % 3}"} for s, o, w in rows]
    batch = pa.RecordBatch.from_pylist(
        [{"event": b"e", "scope": "iot", "stream": "s", **r} for r in data], schema=ARROW_SCHEMA)
    bounds, rest = push(filters)
    assert all(any(r is f for f in filters) for r in rest)  # invariant 2: returned unchanged
    kept = [r for b in bounds.apply([batch]) for r in b.to_pylist()]
    after_spark = [(r["segment_id"], r["offset"]) for r in kept if all(_holds(f, r) for f in rest)]
    want = [(r["segment_id"], r["offset"]) for r in data if all(_holds(f, r) for f in filters)]
    assert after_spark == want
    taken = [f for f in filters if not any(f is r for r in rest)]
    for r in data:  # pruning by the bounds never drops a range holding a matching row
        if all(_holds(f, r) for f in taken):
            assert bounds.segment_id.meets(r["segment_id"], r["segment_id"])
            assert bounds.offset.meets(r["offset"], r["offset"])


# ---------------------------------------------------------------------- what routing refuses
def test_write_time_is_not_null_is_left_to_spark():
    """Records of journal formats 1 and 2 have no write time: Spark decides IS NOT NULL."""
    f = IsNotNull(("write_time",))
    bounds, rest = push([f, IsNotNull(("offset",))])
    assert rest == [f] and not bounds.bounded
    batch = pa.RecordBatch.from_pylist(
        [{"event": b"e", "routing_key": None, "scope": "a", "stream": "s", "segment_id": 0, "offset": 0,
          "write_time": None}], schema=ARROW_SCHEMA)
    later, _ = push([GreaterThan(("write_time",), _T0)])
    assert [b.num_rows for b in later.apply([batch])] == []  # a comparison with null: no row


def test_a_tier2_this_process_cannot_read_plans_everything_through_the_store(tiered, caplog):
    mdir = next(Path(tiered.tiering_status().target).rglob("_manifest"))
    (mdir / manifest_name(10**6)).write_text("{garbage")  # the newest version: damaged
    opts = parse_read_options({"path": str(tiered.path), "scope": "iot", "stream": "sensors"})
    with caplog.at_level(logging.WARNING, logger="pravega_embedded.spark"):
        planned = plan_ranges(opts)
    assert planned and all(p.tier2 is None for p in planned)
    assert "could not be read from this process" in caplog.text
    assert sorted(i for p in planned for i in _ids(read_range(opts, p.range))) == list(range(2040))


def test_the_tier2_folder_of_a_deleted_stream_of_that_name_is_not_read(tiered, tmp_path):
    """Between a delete and the tierer's next round, tier 2 still holds the old stream's
    files: a re-created stream of that name must not be read from them."""
    target = Path(tiered.tiering_status().target)
    old = next(target.rglob("stream=sensors"))
    shutil.copytree(old, tmp_path / "old")
    tiered.delete_stream("iot", "sensors")
    tiered.flush_tier2()  # the tierer deletes the old folder ...
    tiered.create_stream("iot", "sensors", 2)
    with tiered.create_writer("iot", "sensors") as w:
        for i in range(3000):
            w.write_event(b"%06d:" % (900000 + i) + b"z" * 60, routing_key=f"k{i % 7}")
    shutil.copytree(tmp_path / "old", old)  # ... as if that had not happened yet
    opts = parse_read_options({"path": str(tiered.path), "scope": "iot", "stream": "sensors"})
    planned = plan_ranges(opts)
    assert all(p.tier2 is None for p in planned)
    got = sorted(i for p in planned for i in _ids(read_range(opts, p.range, tier2=p.tier2)))
    assert got == list(range(900000, 903000))


def test_a_relative_tier2_target_is_not_read_from_another_directory():
    from pravega_embedded.spark.batchread import _tier2_url

    class Owner:
        def __init__(self, target):
            self.target = target

        def tiering_status(self):
            return self

    assert _tier2_url(Owner("t2")) is None  # the owner's working directory, not ours
    assert _tier2_url(Owner("/abs/t2")) == "/abs/t2"
    assert _tier2_url(Owner("s3://b/p")) == "s3://b/p"


def test_a_time_filtered_range_that_tier2_no_longer_holds_is_kept_whole():
    """A trim between planning's two looks at a tier-2 URL's manifest: the range is read
    whole, so the read reports what is gone instead of planning it away."""
    from pravega_embedded.batch import SegmentRange
    from pravega_embedded.spark.batchread import _files_kept
    from pravega_embedded.tiering.manifest import Manifest, SegmentNode, TieredFile

    files = (TieredFile(0, 100, 200, 10, 1, 5, 9), TieredFile(0, 200, 300, 10, 1, 50, 90))
    m = Manifest("a", "s", 2, (SegmentNode(0, 0.0, 1.0, False),), files, head=((0, 100),), created_us=1)
    late, _ = push([GreaterThan(("write_time",), datetime(1970, 1, 1, tzinfo=timezone.utc)
                                + timedelta(microseconds=20))])
    rng = SegmentRange(scope="a", stream="s", segment_id=0, start=0, end=300)
    assert _files_kept(m, rng, late) == [rng]  # starts before the manifest's head
    rng = SegmentRange(scope="a", stream="s", segment_id=0, start=100, end=300)
    assert _files_kept(m, rng, late) == [SegmentRange(scope="a", stream="s", segment_id=0, start=200, end=300)]
