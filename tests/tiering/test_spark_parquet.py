"""Issue 13's plain-reader contract for Spark: after ``flush_tier2`` a local ``spark.read.parquet``
of a stream's tier-2 folder returns exactly the acknowledged events (a scaled stream: sealed
segments and successors with 64-bit ids, events with and without keys, a large event), and after
each truncation exactly the events from the cut on. One local SparkSession for the module.

Marked ``spark`` but never skipped: CI must run it, so a missing pyspark or Java fails it."""

from __future__ import annotations

import os
import shutil
import time

import pytest

import pravega_embedded as pe

pytestmark = [pytest.mark.spark,
              # pyspark warns at import that pandas 3 is not fully supported; no pandas used here
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

MiB = 1 << 20


@pytest.fixture(scope="module")
def spark():
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        pytest.fail(f"pyspark is not installed ({exc}): install the test extra, "
                    "pip install -e '.[test]' (pyspark>=4.2)", pytrace=False)
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        pytest.fail("Spark needs Java (17 or later): no `java` on PATH and JAVA_HOME is not set",
                    pytrace=False)
    session = (SparkSession.builder.master("local[1]").appName("pe-tier2-spark")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.default.parallelism", "1")
               .config("spark.driver.memory", "1g")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def spark_rows(spark, tier2) -> list[tuple[int, int, str | None, bytes]]:
    """(segment, offset, key, event) of every row Spark reads from the stream's folder."""
    df = spark.read.parquet(f"{tier2}/scope=iot/stream=sensors")
    rows = df.select("segment", "offset", "routing_key", "event").collect()
    return sorted((r.segment, r.offset, r.routing_key, bytes(r.event)) for r in rows)


def store_rows(store) -> list[tuple[int, int, str | None, bytes]]:
    return sorted((ev.segment_id, ev.offset, ev.routing_key, ev.event)
                  for ev in store.read_slice("iot", "sensors"))


def test_spark_reads_exactly_the_acknowledged_events_then_what_truncation_left(tmp_path, spark):
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, LongType, StringType, TimestampType

    tier2 = tmp_path / "tier2"
    big = bytes(range(256)) * (36 * 1024)  # 9 MiB: a large event, one whole row
    written: list[tuple[str | None, bytes]] = []
    t0_us = time.time_ns() // 1000
    with pe.open(tmp_path / "data", tier2=str(tier2), roll_bytes=MiB, tier2_file_bytes=64 << 10,
                 tier2_delete_grace=0) as store:
        store.create_scope("iot")
        store.create_stream("iot", "sensors",
                            pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))

        def write(w, prefix: bytes, n: int) -> None:
            for i in range(n):
                key = f"sensor-{i % 7}" if i % 4 else None
                ev = prefix + b"%05d-" % i + b"r" * 250
                w.write_event(ev, routing_key=key)
                written.append((key, ev))
                if i % 100 == 99:
                    w.flush()  # acknowledged in sections: cuts inside files are possible

        with store.create_writer("iot", "sensors") as w:
            write(w, b"a", 1500)
            w.write_event(big, routing_key="big")
            written.append(("big", big))
            w.flush()
        first = store.stream_info("iot", "sensors").segments
        sealed = next(s for s in first if s.key_low == 0.0)
        other = next(s for s in first if s.key_low != 0.0)
        succ = store.scale_stream("iot", "sensors", [sealed.segment_id],
                                  [(sealed.key_low, sealed.key_high / 2),
                                   (sealed.key_high / 2, sealed.key_high)])
        with store.create_writer("iot", "sensors") as w:
            write(w, b"b", 1500)
            w.flush()
        store.flush_tier2(timeout=120)
        t1_us = time.time_ns() // 1000
        assert store.tiering_status().untiered_bytes == 0
        everything = store_rows(store)

        # the acknowledged events, each once, and the store agrees
        assert sorted((k or "", e) for *_, k, e in everything) == sorted((k or "", e) for k, e in written)
        segs = {s for s, *_ in everything}
        assert segs == {sealed.segment_id, other.segment_id, *succ} and max(segs) >= 1 << 32
        files = list(tier2.glob("scope=iot/stream=sensors/segment=*/*.parquet"))
        assert len(files) > 2 * len(segs)  # several files per segment

        df = spark.read.parquet(f"{tier2}/scope=iot/stream=sensors")
        types = {f.name: f.dataType for f in df.schema.fields}
        assert types == {"offset": LongType(), "routing_key": StringType(), "event": BinaryType(),
                         "write_time": TimestampType(), "segment": LongType()}
        lo, hi, nulls = df.select(F.min(F.unix_micros("write_time")), F.max(F.unix_micros("write_time")),
                                  F.sum(F.col("write_time").isNull().cast("int"))).first()
        assert t0_us <= lo <= hi <= t1_us and nulls == 0
        assert spark_rows(spark, tier2) == everything

        # a cut in the middle of the sealed segment and its sibling: the successors stay whole
        by_seg: dict[int, list[int]] = {}
        for s, off, *_ in everything:
            by_seg.setdefault(s, []).append(off)
        mid = {s: offs[len(offs) // 2 + 7] for s, offs in by_seg.items()}
        cut1 = {sealed.segment_id: mid[sealed.segment_id], other.segment_id: mid[other.segment_id]}
        store.truncate_stream("iot", "sensors", pe.StreamCut.of("iot", "sensors", cut1))
        store.flush_tier2(timeout=120)
        keep1 = {**cut1, **{s: 0 for s in succ}}
        want1 = [r for r in everything if r[1] >= keep1[r[0]]]
        assert store_rows(store) == want1 and len(want1) < len(everything)
        assert spark_rows(spark, tier2) == want1

        # a cut past the sealed segment, in the middle of the successors: its files all go
        cut2 = {other.segment_id: by_seg[other.segment_id][-40], **{s: mid[s] for s in succ}}
        store.truncate_stream("iot", "sensors", pe.StreamCut.of("iot", "sensors", cut2))
        store.flush_tier2(timeout=120)
        want2 = [r for r in everything if r[0] in cut2 and r[1] >= cut2[r[0]]]
        assert store_rows(store) == want2 and len(want2) < len(want1)
        assert not list(tier2.glob(f"scope=iot/stream=sensors/segment={sealed.segment_id}/*.parquet"))
        assert spark_rows(spark, tier2) == want2
