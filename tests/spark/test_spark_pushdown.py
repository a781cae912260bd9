"""Filter pushdown on a real local Spark session (``spark.sql.python.filterPushdown.enabled``):
filters on segment_id, offset and write_time return exactly the rows Spark's own filtering of
the whole stream returns, and a read that pushes them plans fewer partitions (ranges of other
segments, and tier-2 files written outside the times asked for, are never read); with the
setting off, a read still filters right (Spark does it), and option ``filter_pushdown`` decides
per read.

Marked ``spark`` but never skipped: CI must run it."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

import pravega_embedded as pe
import pravega_embedded.spark as pe_spark
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan
from pravega_embedded.spark.options import parse_read_options
from pravega_embedded.spark.source import PravegaPushdownReader

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]


def _wait_past(t_ns: int) -> None:
    while time.time_ns() <= t_ns:
        time.sleep(0.001)


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    """A three-segment stream written in four phases, each after the clock passed the last
    one's end: three tiered in several files each, the last (small) not tiered; (store, the times
    between phases as aware datetimes, every event as (segment, offset, write µs, payload))."""
    root = tmp_path_factory.mktemp("pushdown")
    # files of 32 KiB; the last phase, 5.5 KB a segment, stays below that and is not tiered
    store = pe.open(root / "data", tier2=str(root / "tier2"), tier2_file_bytes=32 << 10,
                    tier2_file_age=3600)
    store.create_scope("iot")
    store.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    bounds = []
    for phase in range(4):
        with store.create_writer("iot", "sensors") as w:
            for i in range(phase * 1500, phase * 1500 + (1500 if phase < 3 else 150)):
                w.write_event(b"%06d:" % i + b"x" * 100, routing_key=f"k{i % 11}")
                if i % 50 == 0:
                    w.flush()
        if phase < 3:
            store.flush_tier2()
        t = time.time_ns()
        _wait_past(t)
        bounds.append(datetime.fromtimestamp(t / 1e9, tz=timezone.utc))
    t = store.read_slice("iot", "sensors").to_arrow(write_time=True)
    rows = list(zip(t.column("segment_id").to_pylist(), t.column("offset").to_pylist(),
                    t.column("write_time").to_pylist(), t.column("event").to_pylist()))
    yield store, bounds, rows
    store.close()


def _df(spark, store, **options):
    r = (spark.read.format("pravega").option("path", str(store.path)).option("scope", "iot")
         .option("stream", "sensors"))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _got(df):
    return sorted((r.segment_id, r.offset, bytes(r.event)) for r in df.collect())


@pytest.fixture
def pushdown_on(spark):
    spark.conf.set(pe_spark.PUSHDOWN_CONF, "true")
    pe_spark.register(spark)
    yield spark
    spark.conf.set(pe_spark.PUSHDOWN_CONF, "false")
    pe_spark.register(spark)


def test_pushed_filters_return_exactly_the_matching_rows_and_read_less(pushdown_on, phases):
    spark = pushdown_on
    store, (t1, t2, t3, _), rows = phases
    segs = sorted({s for s, _, _, _ in rows})
    mid = sorted(o for s, o, _, _ in rows if s == segs[1])[len(rows) // 6]
    cases = [
        (f"segment_id = {segs[1]}", lambda s, o, w: s == segs[1]),
        (f"segment_id IN ({segs[0]}, {segs[2]}) AND offset >= {mid}", lambda s, o, w: s != segs[1] and o >= mid),
        (f"offset < {mid} OR segment_id = {segs[2]}", lambda s, o, w: o < mid or s == segs[2]),  # OR: Spark's
        (f"write_time >= '{t1.isoformat()}' AND write_time < '{t2.isoformat()}'",
         lambda s, o, w: t1 <= w < t2),
        (f"write_time > '{t3.isoformat()}'", lambda s, o, w: w > t3),  # the untiered phase only
        (f"write_time <= '{t1.isoformat()}' AND segment_id = {segs[0]} AND offset > {mid}",
         lambda s, o, w: w <= t1 and s == segs[0] and o > mid),
        (f"offset > {1 << 40}", lambda s, o, w: False),
    ]
    for where, keep in cases:
        want = sorted((s, o, ev) for s, o, w, ev in rows if keep(s, o, w))
        df = _df(spark, store).where(where)
        assert _got(df) == want, where
        # Spark's own filtering of the unpushed read agrees (the same rows, to the last one)
        assert _got(_df(spark, store, filter_pushdown="false").where(where)) == want, where
    # pushed filters prune: other segments' ranges are not planned (3 segments of about equal size)
    whole = sum(_planned(store, []))
    assert 0 < sum(_planned(store, [EqualTo(("segment_id",), segs[1])])) < whole / 2


def _planned(store, filters):
    """(bytes planned from tier 2, bytes planned through the store) of a pushed read."""
    opts = parse_read_options({"path": str(store.path), "scope": "iot", "stream": "sensors"})
    reader = PravegaPushdownReader(opts)
    assert list(reader.pushFilters(filters)) == []  # every one taken
    parts = [p for part in reader.partitions() if part.value is not None for p in part.planned]
    return (sum(p.range.nbytes for p in parts if p.tier2 is not None),
            sum(p.range.nbytes for p in parts if p.tier2 is None))


def test_tiered_ranges_are_planned_from_tier2_and_files_of_other_times_are_not(phases):
    store, (t1, t2, t3, _), rows = phases
    tiered, live = _planned(store, [])
    assert tiered == store.tiered_bytes("iot", "sensors") and live > 0  # phases 1-3, phase 4
    early, early_live = _planned(store, [LessThan(("write_time",), t1)])
    middle, _ = _planned(store, [GreaterThanOrEqual(("write_time",), t1), LessThan(("write_time",), t2)])
    late, late_live = _planned(store, [GreaterThan(("write_time",), t3)])
    # a third of the tiered bytes each (a file straddling a phase's end is read whole)
    assert 0 < early < tiered / 2 and 0 < middle < tiered / 2
    assert late == 0 and late_live == early_live == live  # untiered ranges: filtered as read


def test_with_pushdown_off_the_option_is_refused_by_spark_and_filters_still_hold(spark, phases):
    store, (t1, _, _, _), rows = phases
    assert str(spark.conf.get(pe_spark.PUSHDOWN_CONF, "false")).lower() == "false"
    where = f"write_time < '{t1.isoformat()}'"
    want = sorted((s, o, ev) for s, o, w, ev in rows if w < t1)
    assert _got(_df(spark, store).where(where)) == want  # Spark filters: no pushdown
    with pytest.raises(Exception, match="DATA_SOURCE_PUSHDOWN_DISABLED|filterPushdown"):
        _df(spark, store, filter_pushdown="true").where(where).collect()
