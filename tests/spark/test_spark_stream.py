"""``spark.readStream.format("pravega")`` on a real local Spark session: micro-batches read every
event exactly once, per key in write order across batches, each batch bounded (the first one
too); ``Trigger.AvailableNow`` stops at the tail it saw when it started; a query restarted from
its checkpoint goes on where it stopped; a processing-time query follows a writer that is
writing meanwhile.

Marked ``spark`` but never skipped: CI must run it, so a missing pyspark or Java fails it."""

from __future__ import annotations

import threading
import time

import pytest

import pravega_embedded as pe

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]


def _write(store, first, n, size=300, flush_every=200):
    with store.create_writer("iot", "sensors") as w:
        for i in range(first, first + n):
            w.write_event(b"%07d:" % i + b"v" * size, routing_key=f"sensor-{i % 9}")
            if i % flush_every == 0:
                w.flush()


class Batches:
    """What foreachBatch saw: (batch id, [(id, key, segment, offset), ...])."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.batches: list[tuple[int, list[tuple[int, str, int, int]]]] = []

    def __call__(self, df, batch_id) -> None:
        rows = [(int(bytes(r.event)[:7]), r.routing_key, r.segment_id, r.offset)
                for r in df.select("event", "routing_key", "segment_id", "offset").collect()]
        with self.cond:
            self.batches.append((batch_id, rows))
            self.cond.notify_all()

    def ids(self) -> list[int]:
        with self.lock:
            return [r[0] for _, rows in self.batches for r in rows]

    def wait_for(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while sum(len(rows) for _, rows in self.batches) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True


def _per_key_in_order_across_batches(batches: Batches) -> None:
    last: dict[str, int] = {}
    for _, rows in sorted(batches.batches):
        for i, key, _, _ in sorted(rows, key=lambda r: (r[2], r[3])):  # a batch: per segment, by offset
            assert last.get(key, -1) < i, f"{key}: event {i} after {last.get(key)}"
            last[key] = i


def _query(spark, path, ckpt, sink, trigger, **options):
    r = (spark.readStream.format("pravega").option("path", str(path)).option("scope", "iot")
         .option("stream", "sensors").option("start_stream_cut", "earliest"))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt)).trigger(**trigger).start()


def test_available_now_reads_in_bounded_batches_and_a_restart_goes_on(spark, tmp_path):
    store = pe.open(tmp_path / "data", tier2=False)
    try:
        store.create_scope("iot")
        store.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        _write(store, 0, 6000)
        sink = Batches()
        q = _query(spark, tmp_path / "data", tmp_path / "ckpt", sink, {"availableNow": True},
                   max_bytes_per_trigger="256k")
        q.awaitTermination(300)
        assert q.exception() is None
        assert sorted(sink.ids()) == list(range(6000))
        sizes = [322 * len(rows) for _, rows in sink.batches]  # framed: 6 + key 8 + payload 308
        assert len(sink.batches) >= 5 and max(sizes) <= 256 * 1024 + 3 * 200 * 322  # soft: a section over
        _per_key_in_order_across_batches(sink)
        # more events, the same checkpoint: only the new ones, in a few batches of at most 500
        _write(store, 6000, 2000)
        again = Batches()
        q = _query(spark, tmp_path / "data", tmp_path / "ckpt", again, {"availableNow": True},
                   max_events_per_trigger="500")
        q.awaitTermination(300)
        assert q.exception() is None
        assert sorted(again.ids()) == list(range(6000, 8000))
        assert all(len(rows) <= 500 + 3 * 201 for _, rows in again.batches) and len(again.batches) >= 3
    finally:
        store.close()


def test_a_processing_time_query_follows_a_writer_exactly_once(spark, tmp_path):
    store = pe.open(tmp_path / "data", tier2=False)
    try:
        store.create_scope("iot")
        store.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        _write(store, 0, 500)
        sink = Batches()
        q = _query(spark, tmp_path / "data", tmp_path / "ckpt", sink, {"processingTime": "200 milliseconds"},
                   max_events_per_trigger="700")
        done = threading.Event()

        def writer() -> None:
            for k in range(10):  # 10 x 300 events while the query runs; one scaling in between
                _write(store, 500 + 300 * k, 300, flush_every=100)
                if k == 4:
                    store.scale_stream("iot", "sensors", [0], [(0.0, 0.25), (0.25, 0.5)])
            done.set()

        t = threading.Thread(target=writer)
        t.start()
        t.join(120)
        assert done.is_set()
        assert sink.wait_for(3500, 240), f"read {len(sink.ids())} of 3500"
        q.stop()
        assert q.exception() is None
        assert sorted(sink.ids()) == list(range(3500))
        _per_key_in_order_across_batches(sink)
        assert len(sink.batches) >= 3
    finally:
        store.close()


def test_data_retention_deleted_before_the_query_read_it(spark, tmp_path):
    """``fail_on_data_loss``: a query whose start retention has passed fails naming what was
    lost (default), or with false reads what is left, exactly once (the skip is logged)."""
    store = pe.open(tmp_path / "data", tier2=False, roll_bytes=1 << 20)
    try:
        store.create_scope("iot")
        store.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        _write(store, 0, 3000)
        start = store.stream_info("iot", "sensors").head.to_text()
        store.truncate_stream("iot", "sensors", store.get_next_stream_cut(
            "iot", "sensors", None, 1 << 30, max_events=1000))
        left = sorted(int(ev.event[:7]) for ev in store.read_slice("iot", "sensors"))
        assert 1500 < len(left) < 2500
        failed = Batches()
        q = _query(spark, tmp_path / "data", tmp_path / "ckpt-a", failed, {"availableNow": True},
                   start_stream_cut=start)
        with pytest.raises(Exception, match="deleted by the stream's retention"):
            q.awaitTermination(300)
        assert "fail_on_data_loss" in str(q.exception()) and failed.ids() == []
        skipped = Batches()
        q = _query(spark, tmp_path / "data", tmp_path / "ckpt-b", skipped, {"availableNow": True},
                   start_stream_cut=start, fail_on_data_loss="false", max_events_per_trigger="700")
        q.awaitTermination(300)
        assert q.exception() is None
        assert sorted(skipped.ids()) == left
        _per_key_in_order_across_batches(skipped)
    finally:
        store.close()
