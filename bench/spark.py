"""Spark benchmark of pravega_embedded (issue 15): ``format("pravega")`` batch and micro-batch
reads and the sink, each beside Spark's own Parquet reads and writes in one run on the same data.

    python bench/spark.py                    # --mb 64 (a few minutes on 2 cores)
    python bench/spark.py --mb 16 --reps 1   # a smoke run
    python bench/spark.py --mb 256 --reps 3 --json out.json --dir /some/dir --keep

Workload: ``--mb`` MB (10^6 B) of 1 KiB events (``bench/tiering.py``'s events: an index, random
bytes, JSON-like text) over 64 routing keys into a stream of 4 fixed segments, written by one
writer, then tiered (``flush_tier2``: Parquet files in ``<dir>/tier2``) and the journal files
reclaimed, so the stream's whole history lives in tier 2. The store stays open in this process
(Spark's Python workers connect to it, as in a notebook). Spark: ``local[2]`` (the machine's
two cores), ``spark.sql.shuffle.partitions=2``, default memory settings otherwise.

Every read is timed as a whole Spark job: ``df.write.format("noop").mode("overwrite").save()``
materializes every row and column (Spark's benchmark idiom: no output cost, no column pruning).

1. BATCH READ of the tiered stream. Baseline: ``spark.read.parquet(<tier2>/scope=bench/
   stream=s)`` (the same files; the JVM's vectorized Parquet reader). Ours:
   ``spark.read.format("pravega")`` of the tier-2 folder (``pe.open_tier2`` and pyarrow in each
   Python worker, Arrow batches to the JVM), and of the live store (the workers plan through
   the owner, this process, and read the tiered ranges straight from its tier 2).
   Both sides plan their own partitions by their defaults: Parquet by its file rules, ours
   one task per core of the session (``local[2]``: the 4 segments packed into 2 even tasks).
   Goal (issue 15): ours <= 1.2x the Parquet read's time.

2. MICRO-BATCH READ: ``readStream.format("pravega")`` of the live store from the head,
   ``Trigger.AvailableNow``, ``max_bytes_per_trigger`` 16m, into the ``noop`` sink; events/s
   until the query ends (the batch read of the same store is the reference).

3. SINK: the same rows (``event``, ``routing_key``), cached in Spark's memory first, written
   by ``df.write.format("pravega")`` (exactly once: a transaction per task, one commit) and
   with ``exactly_once=false`` to a fresh stream each time, against ``df.write.parquet`` of
   the same rows (zstd, as tier 2). Events/s.

Each side runs ``--reps`` times (the sides take turns going first); the median time is used;
ratios are of times (ours / baseline: lower is better) for reads, of events/s for the sink.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import harness  # noqa: E402

import pravega_embedded as pe  # noqa: E402

KEYS = [f"sensor-{i}" for i in range(64)]
EVENT = 1024
_TEXT = (b'{"site": "north-ridge", "unit": "kPa", "status": "ok", "firmware": "4.2.1", '
         b'"readings": [101.3, 101.4, 101.2, 101.5], "note": "nominal"} ') * 16


def event(i: int, rnd: bytes) -> bytes:
    """Event ``i``: its index, 504 random bytes, 512 bytes of text (bench/tiering.py's)."""
    off = (i * 37) % (len(_TEXT) - 512)
    return i.to_bytes(8, "big") + rnd[(i * 504) % (len(rnd) - 504):][:504] + _TEXT[off:off + 512]


def session():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("pe-bench-spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.parquet.compression.codec", "zstd")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import pravega_embedded.spark
    pravega_embedded.spark.register(spark)
    return spark


def fill(store: pe.Store, mb: int) -> int:
    """The workload into bench/s, tiered, the journal reclaimed; returns the event count."""
    store.create_scope("bench", exist_ok=True)
    store.create_stream("bench", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
    n = mb * 1_000_000 // EVENT
    rnd = os.urandom(1 << 20)
    with store.create_writer("bench", "s") as w:
        for i in range(n):
            w.write_event(event(i, rnd), routing_key=KEYS[i % 64])
    store.flush_tier2(timeout=600)
    store.checkpoint()
    store.reclaim()
    return n


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def alternate(sides: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """The median time of each side over ``reps`` rounds, the sides taking turns first."""
    times: dict[str, list[float]] = {k: [] for k in sides}
    names = list(sides)
    for r in range(reps):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            times[name].append(timed(sides[name]))
    return {k: statistics.median(v) for k, v in times.items()}


def noop(df) -> None:
    df.write.format("noop").mode("overwrite").save()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="pe-bench-spark-"))
    work.mkdir(parents=True, exist_ok=True)
    spark = session()
    tier2 = work / "tier2"
    store = pe.open(work / "data", tier2=str(tier2), roll_bytes=16 << 20, tier2_file_bytes=64 << 20)
    try:
        return run(args, spark, store, work, tier2)
    finally:
        store.close()
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, spark, store: pe.Store, work: Path, tier2: Path) -> int:
    harness.warm_up(work, 64)
    n = fill(store, args.mb)
    status = store.tiering_status()
    print(f"pravega_embedded {harness.library_version()}; {args.mb} MB = {n:,} events of {EVENT} B, "
          f"4 segments, {status.files} tier-2 files; load {harness.loadavg()}; reps {args.reps}")
    files = str(tier2 / "scope=bench" / "stream=s")
    pravega = dict(scope="bench", stream="s")

    def read(path: str):
        r = spark.read.format("pravega").option("path", path)
        for k, v in pravega.items():
            r = r.option(k, v)
        return r.load()

    counts = {"parquet": spark.read.parquet(files).count(), "pravega tier 2": read(str(tier2)).count(),
              "pravega live": read(str(store.path)).count()}
    assert set(counts.values()) == {n}, counts  # every side reads every event (also a warm-up)
    batch = alternate({"parquet": lambda: noop(spark.read.parquet(files)),
                       "pravega tier 2": lambda: noop(read(str(tier2))),
                       "pravega live": lambda: noop(read(str(store.path)))}, args.reps)
    results: dict[str, object] = {"events": n, "mb": args.mb, "batch_read_s": batch}
    print("\n1. BATCH READ (noop sink; time, events/s, ratio to spark.read.parquet)")
    for k, t in batch.items():
        print(f"   {k:<16} {t:7.2f} s  {n / t:>10,.0f} ev/s  {t / batch['parquet']:5.2f}x")

    stream_times = []
    for r in range(args.reps):
        ckpt = work / f"ckpt-{r}"
        q = (spark.readStream.format("pravega").option("path", str(store.path)).option("scope", "bench")
             .option("stream", "s").option("start_stream_cut", "earliest")
             .option("max_bytes_per_trigger", "16m").load()
             .writeStream.format("noop").option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True))
        t0 = time.perf_counter()
        query = q.start()
        query.awaitTermination()
        stream_times.append(time.perf_counter() - t0)
        rows = sum(p.numInputRows for p in query.recentProgress)
        assert rows == n, (rows, n)
        batches = len([p for p in query.recentProgress if p.numInputRows])
    st = statistics.median(stream_times)
    results["microbatch_s"] = st
    print(f"\n2. MICRO-BATCH READ (AvailableNow, 16m per trigger, {batches} batches): {st:.2f} s, "
          f"{n / st:,.0f} ev/s ({st / batch['pravega live']:.2f}x the batch read of the live store)")

    rows = spark.read.parquet(files).select("event", "routing_key").cache()
    assert rows.count() == n
    k = iter(range(1_000_000))

    def sink(exactly_once: bool) -> None:
        (rows.write.format("pravega").option("path", str(store.path)).option("scope", "bench")
         .option("stream", f"out-{next(k)}").option("exactly_once", str(exactly_once).lower())
         .mode("append").save())

    def parquet_out() -> None:
        rows.write.mode("overwrite").parquet(str(work / "out.parquet"))

    sinks = alternate({"parquet": parquet_out, "pravega exactly once": lambda: sink(True),
                       "pravega plain": lambda: sink(False)}, args.reps)
    written = store.read_slice("bench", "out-0").to_arrow().num_rows
    assert written == n, (written, n)
    results["sink_s"] = sinks
    print("\n3. SINK (the same cached rows; time, events/s, events/s ratio to df.write.parquet)")
    for name, t in sinks.items():
        print(f"   {name:<22} {t:7.2f} s  {n / t:>10,.0f} ev/s  {sinks['parquet'] / t:5.2f}x")
    rows.unpersist()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
