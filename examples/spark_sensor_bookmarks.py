"""Bookmarking, slicing and replaying a sensor stream on Spark ("Play it again, Sam", seed 001).

The sample application of the Flink Forward 2018 talk, with Spark instead of Flink:
``examples/sensor_bookmarks.py`` does it with a reader group in one process; here every job is
a Spark query over ``format("pravega")``::

    python examples/spark_sensor_bookmarks.py                 # a temporary store, local[2]
    python examples/spark_sensor_bookmarks.py --store ./data  # on disk (re-runs replay it)

1. The sensor data: 8 sensors' readings written to ``iot/sensors`` (``sensor_bookmarks``'
   ``write_sensor_data``; routing key = sensor id, so each sensor's readings stay in order).

2. :func:`bookmark` is a **streaming query** (``readStream.format("pravega")``,
   ``Trigger.AvailableNow``, ``max_events_per_trigger``): its micro-batches are the
   checkpoints. Spark's offsets are StreamCuts, so each batch is the slice between two cuts;
   a ``foreachBatch`` sums each batch up per sensor (any reading below 0? the last reading's
   value?). Per sensor, an episode below 0 starts at the start cut of the batch with its first
   negative reading and ends at the end cut of the batch where the sensor is back >= 0: the
   pair holds the whole episode. (``max_events_per_trigger`` is soft: a batch ends with the
   writer's batch that crosses it, so the slices are as fine as the writes.) The pairs are written to ``iot/slices`` by the exactly-once
   sink (``df.write.format("pravega")``).

3. :func:`replay` is a **batch job per slice**: ``spark.read.format("pravega")`` between the
   two cuts (``start_stream_cut`` / ``end_stream_cut``), filtered to the slice's sensor.

The functions take a SparkSession and a store that this process keeps open (Spark's Python
workers connect to it); ``tests/spark/test_example_spark_bookmarks.py`` calls them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sensor_bookmarks as sb  # noqa: E402 - the data, the slice record and the ground truth

import pravega_embedded as pe  # noqa: E402
from pravega_embedded.spark.microbatch import cut_of  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCOPE, SENSORS, SLICES = sb.SCOPE, sb.SENSORS, sb.SLICES
READING = "sensor STRING, seq INT, value DOUBLE"  # the JSON of one reading


def session(master: str = "local[2]") -> "SparkSession":
    """A local Spark session whose Python workers run this interpreter (they import
    pravega_embedded), with ``format("pravega")`` registered."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName("sensor-bookmarks")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import pravega_embedded.spark
    pravega_embedded.spark.register(spark)
    return spark


def _source(spark: "SparkSession", store: pe.Store, stream: str, *, streaming: bool = False):
    r = spark.readStream if streaming else spark.read
    return (r.format("pravega").option("path", str(store.path)).option("scope", SCOPE)
            .option("stream", stream))


@dataclass(frozen=True)
class BatchSummary:
    """What one micro-batch says about one sensor: a reading below 0 in it, and whether its
    last reading (in write order) is >= 0."""

    negative: bool
    ends_positive: bool


# ---------------------------------------------------------------------------- 2. bookmarking
def bookmark(spark: "SparkSession", store: pe.Store, checkpoint_dir: str, *,
             checkpoint_every: int = 100) -> list[sb.SensorStreamSlice]:
    """Job 2 (module docstring): a streaming query whose batches are the bookmarks'
    checkpoints; writes the slices to iot/slices with the exactly-once sink and returns them."""
    from pyspark.sql import functions as F

    summaries: dict[int, dict[str, BatchSummary]] = {}  # batch id -> sensor -> summary

    def summarize(df: "DataFrame", batch_id: int) -> None:
        r = df.select(F.from_json(F.col("event").cast("string"), READING).alias("r")).select("r.*")
        rows = r.groupBy("sensor").agg(F.min("value").alias("low"),
                                       F.max_by("value", "seq").alias("last")).collect()
        summaries[batch_id] = {row.sensor: BatchSummary(row.low < 0, row.last >= 0) for row in rows}

    head = store.stream_info(SCOPE, SENSORS).head  # where the query starts ("earliest")
    q = (_source(spark, store, SENSORS, streaming=True).option("start_stream_cut", head.to_text())
         .option("max_events_per_trigger", str(checkpoint_every)).load()
         .writeStream.foreachBatch(summarize).option("checkpointLocation", checkpoint_dir)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    def cut(offset: str | None) -> pe.StreamCut:  # the first batch's start shows as null
        value = json.loads(offset) if offset else None
        return head if value is None else cut_of(value, SCOPE, SENSORS)

    cuts = {p.batchId: (cut(p.sources[0].startOffset), cut(p.sources[0].endOffset))
            for p in q.recentProgress if p.batchId in summaries}
    missing = sorted(set(summaries) - set(cuts))
    if missing:
        raise RuntimeError(f"no progress of batches {missing}: raise "
                           "spark.sql.streaming.numRecentProgressUpdates")
    slices = episodes(summaries, cuts)
    if slices:
        rows = [(json.dumps(sl.to_json()), sl.sensor_id) for sl in slices]
        (spark.createDataFrame(rows, "event STRING, routing_key STRING").write.format("pravega")
         .option("path", str(store.path)).option("scope", SCOPE).option("stream", SLICES)
         .mode("append").save())
    return slices


def episodes(summaries: dict[int, dict[str, BatchSummary]],
             cuts: dict[int, tuple[pe.StreamCut, pe.StreamCut]]) -> list[sb.SensorStreamSlice]:
    """The bookmark pairs, batch by batch in order: an episode opens at the start cut of the
    batch with a sensor's first reading below 0 and closes at the end cut of the batch whose
    last reading of the sensor is >= 0 (a dip again before that batch ends is the same
    episode); one still open at the end closes at the last batch's end."""
    open_: dict[str, pe.StreamCut] = {}
    out: list[sb.SensorStreamSlice] = []
    last_end: pe.StreamCut | None = None
    for b in sorted(summaries):
        start, end = cuts[b]
        for sensor, s in sorted(summaries[b].items()):
            if s.negative and sensor not in open_:
                open_[sensor] = start
            if sensor in open_ and s.ends_positive:
                out.append(sb.SensorStreamSlice(sensor, open_.pop(sensor), end))
        last_end = end
    for sensor, start in sorted(open_.items()):
        assert last_end is not None
        out.append(sb.SensorStreamSlice(sensor, start, last_end))
    return out


# ---------------------------------------------------------------------------- 3. replay
def read_slices(spark: "SparkSession", store: pe.Store) -> list[sb.SensorStreamSlice]:
    """The bookmarks in iot/slices, read by Spark."""
    rows = _source(spark, store, SLICES).load().select("event").collect()
    return [sb.SensorStreamSlice.from_json(json.loads(bytes(r.event))) for r in rows]


def replay_slice(spark: "SparkSession", store: pe.Store, sl: sb.SensorStreamSlice) -> dict[str, Any]:
    """A bounded batch read of iot/sensors between the slice's cuts, its sensor's readings."""
    from pyspark.sql import functions as F

    df = (_source(spark, store, SENSORS).option("start_stream_cut", sl.start.to_text())
          .option("end_stream_cut", sl.end.to_text()).load())
    readings = df.select(F.from_json(F.col("event").cast("string"), READING).alias("r")).select("r.*")
    total = readings.count()
    mine = sorted((r.seq, r.value) for r in readings.where(F.col("sensor") == sl.sensor_id).collect())
    neg = [seq for seq, v in mine if v < 0]
    return {"sensor": sl.sensor_id, "start": sl.start.to_text(), "end": sl.end.to_text(),
            "slice_events": total, "sensor_readings": mine, "negative_seqs": neg,
            "min_value": min((v for _, v in mine), default=None)}


def replay(spark: "SparkSession", store: pe.Store) -> list[dict[str, Any]]:
    """Job 3: replay every slice recorded in iot/slices."""
    return [replay_slice(spark, store, sl) for sl in read_slices(spark, store)]


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="store directory (default: a temporary store)")
    ap.add_argument("--checkpoint-every", type=int, default=100,
                    help="events per micro-batch: the bookmarks' precision")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = ap.parse_args(argv)

    spark = session(args.master)
    work = tempfile.mkdtemp(prefix="sensor-bookmarks-")
    store = pe.open(args.store) if args.store else pe.open(os.path.join(work, "data"))
    try:
        sb.create_streams(store)
        if store.stream_info(SCOPE, SENSORS).tail == store.stream_info(SCOPE, SENSORS).head:
            sb.write_sensor_data(store)
            print(f"wrote {sb.NUM_SENSORS * sb.READINGS_PER_SENSOR} readings to {SCOPE}/{SENSORS}")
        if store.stream_info(SCOPE, SLICES).tail == store.stream_info(SCOPE, SLICES).head:
            slices = bookmark(spark, store, os.path.join(work, "ckpt"),
                              checkpoint_every=args.checkpoint_every)
            print(f"bookmarked {len(slices)} slices into {SCOPE}/{SLICES} (Spark streaming query)")
        else:
            print(f"{SCOPE}/{SLICES} already holds bookmarks: replaying them")
        reports = replay(spark, store)
        print(f"replayed {len(reports)} slices (a Spark batch read each):")
        for rep in reports:
            print("  " + sb.format_report(rep))
        truth = sb.expected_episodes()
        missing = [t for t in truth if not any(
            rep["sensor"] == t["sensor"] and set(t["negative_seqs"]) <= set(rep["negative_seqs"])
            for rep in reports)]
        print("every episode is inside its slice" if not missing else f"{len(missing)} episodes missing")
        return 1 if missing else 0
    finally:
        store.close()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)  # the checkpoint (and a temporary store)


if __name__ == "__main__":
    sys.exit(main())
