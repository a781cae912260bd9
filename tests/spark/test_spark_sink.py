"""The sink, ``df.write`` / ``writeStream`` with ``format("pravega")``, on a real local Spark
session that retries a failed task (``local[2,3]``, as a cluster does). What a user relies on:
output equals input exactly once, even when a task is killed mid-write and Spark runs it again,
and when a streaming query runs its last batch again after a restart (its last commit deleted
from the checkpoint); a batch job's rows appear all at once; append is the only mode; a bad
schema is refused before anything is written.

Marked ``spark`` but never skipped: CI must run it, so a missing pyspark or Java fails it."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest

import pravega_embedded as pe

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

SPARK_MASTER = "local[2,3]"  # a failed task runs again (up to 3 attempts)
WROTE = 3 << 20  # what the killed attempt must have handed the store first


def _events(store, stream):
    return Counter((ev.event, ev.routing_key) for ev in store.read_slice("iot", stream))


def _opts(path, stream):
    return {"path": str(path), "scope": "iot", "stream": stream}


def test_a_batch_write_appends_every_row_once_and_refuses_other_modes(spark, tmp_path):
    with pe.open(tmp_path / "data", tier2=False) as store:
        rows = [(b"e%05d" % i, f"k{i % 7}") for i in range(3000)]
        df = spark.createDataFrame(rows, "event BINARY, routing_key STRING").repartition(4)
        df.write.format("pravega").options(**_opts(tmp_path / "data", "out")).mode("append").save()
        assert _events(store, "out") == Counter(rows)  # the stream was created by the write
        text = spark.createDataFrame([("plain text", None)], "event STRING, routing_key STRING")
        text.write.format("pravega").options(**_opts(tmp_path / "data", "out")).mode("append").save()
        assert _events(store, "out")[(b"plain text", None)] == 1
        for mode in ("overwrite", "errorifexists", "ignore"):
            with pytest.raises(Exception, match=r"mode\('append'\)|append|Append"):
                df.write.format("pravega").options(**_opts(tmp_path / "data", "out")).mode(mode).save()
        with pytest.raises(Exception, match="column 'event'"):
            spark.createDataFrame([(1,)], "x INT").write.format("pravega") \
                .options(**_opts(tmp_path / "data", "out")).mode("append").save()
        with pytest.raises(Exception, match="no option 'exactly_onc'"):
            df.write.format("pravega").options(**_opts(tmp_path / "data", "out")) \
                .option("exactly_onc", "false").mode("append").save()
        assert sum(_events(store, "out").values()) == 3001  # nothing of the refused writes


def test_plain_writes_with_exactly_once_false(spark, tmp_path):
    with pe.open(tmp_path / "data", tier2=False) as store:
        rows = [(b"p%04d" % i, None) for i in range(500)]
        spark.createDataFrame(rows, "event BINARY, routing_key STRING").write.format("pravega") \
            .options(**_opts(tmp_path / "data", "plain")).option("exactly_once", "false") \
            .mode("append").save()
        assert _events(store, "plain") == Counter(rows)


def test_a_task_killed_mid_write_leaves_its_rows_out_and_its_retry_writes_them_once(spark, tmp_path):
    """One partition: its first attempt hands the sink 10 MB of rows and waits until 3 MiB of
    them reached the store (into the attempt's transaction), then its process dies; the second
    attempt writes everything."""
    from pyspark import TaskContext

    flag = tmp_path / "the first attempt wrote"
    died = tmp_path / "the first attempt died"
    n, size = 300, 64 * 1024

    def rows(batches):
        import pyarrow as pa
        attempt = TaskContext.get().attemptNumber()
        i = 0
        for _ in batches:
            pass
        for start in range(0, n, 20):
            ev = [b"%04d" % j + b"x" * size for j in range(start, start + 20)]
            yield pa.RecordBatch.from_pydict({"event": ev, "routing_key": [f"k{j % 5}" for j in range(start, start + 20)]})
            i += 20
            if attempt == 0 and i == 160:  # the sink has 5+ batches (the store 4 MiB) by now
                deadline = time.monotonic() + 120
                while not flag.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                died.touch()
                os._exit(1)  # the task's process dies in the middle of its rows

    with pe.open(tmp_path / "data", tier2=False) as store:
        store.create_scope("iot")
        store.create_stream("iot", "out", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        base = store.status().journal_written

        reached = []

        def watch():  # the first attempt's rows reached the store: let it die
            deadline = time.monotonic() + 120
            while store.status().journal_written < base + WROTE and time.monotonic() < deadline:
                time.sleep(0.01)
            reached.append(store.status().journal_written - base)
            flag.touch()

        t = threading.Thread(target=watch)
        t.start()
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")  # rows flow on at once
        try:
            spark.range(1, numPartitions=1).mapInArrow(rows, "event BINARY, routing_key STRING") \
                .write.format("pravega").options(**_opts(tmp_path / "data", "out")).mode("append").save()
        finally:
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
            t.join()
        assert died.exists() and reached[0] >= WROTE  # it died with its rows in the store
        got = _events(store, "out")
        assert sum(got.values()) == n and len(got) == n  # every row once: the first attempt's rows not at all
        assert sorted(int(e[:4]) for e, _ in got) == list(range(n))


def _pipe(spark, path, ckpt, **opts):
    src = (spark.readStream.format("pravega").options(**_opts(path, "in"))
           .option("start_stream_cut", "earliest").option("max_events_per_trigger", "300").load())
    w = src.writeStream.format("pravega").options(**_opts(path, "out")).option("checkpointLocation", str(ckpt))
    for k, v in opts.items():
        w = w.option(k, v)
    return w.trigger(availableNow=True).start()


def test_a_streaming_copy_is_exactly_once_across_a_replayed_batch(spark, tmp_path):
    path, ckpt = tmp_path / "data", tmp_path / "ckpt"
    with pe.open(path, tier2=False) as store:
        store.create_scope("iot")
        store.create_stream("iot", "in", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        with store.create_writer("iot", "in") as w:
            for i in range(2000):
                w.write_event(b"r%05d" % i, routing_key=f"s{i % 9}")
                if i % 100 == 99:
                    w.flush()  # sections of 100 events: batches of about 300
        q = _pipe(spark, path, ckpt)
        assert q.awaitTermination(300), "the query did not end"
        assert q.exception() is None
        want = _events(store, "in")
        assert _events(store, "out") == want
        commits = sorted((ckpt / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
        last = commits[-1]
        assert last.name.isdigit() and int(last.name) >= 3  # several batches
        marks = store.create_transactional_writer("iot", "out", writer_id=f"spark-sink-{q.id}")
        assert marks.last_mark() == int(last.name)
        last.unlink()  # Spark forgets the last batch was committed: a restart runs it again
        for crc in ckpt.glob(f"commits/.{last.name}.crc"):
            crc.unlink()
        q = _pipe(spark, path, ckpt)
        assert q.awaitTermination(300), "the query did not end"
        assert q.exception() is None
        assert (ckpt / "commits" / last.name).exists()  # the batch ran again and was committed
        assert _events(store, "out") == want  # ... as a no-op: nothing twice
        with store.create_writer("iot", "in") as w:  # and the query goes on from there
            for i in range(2000, 2500):
                w.write_event(b"r%05d" % i, routing_key=f"s{i % 9}")
        q = _pipe(spark, path, ckpt)
        assert q.awaitTermination(300), "the query did not end"
        assert q.exception() is None
        assert _events(store, "out") == _events(store, "in") and sum(_events(store, "out").values()) == 2500
