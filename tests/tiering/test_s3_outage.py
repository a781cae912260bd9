"""An S3 outage mid-ingest (moto's server behind a relay the test cuts): ingest goes on into
the journal up to ``local_budget``, then writers raise LocalBudgetError and the status says
"blocked" with the connection failure; once the endpoint is back the backlog drains by itself
and every acknowledged event is in S3 exactly once, read by the store and by plain pyarrow."""

from __future__ import annotations

import time

import pyarrow.dataset as ds
import s3fs

import pravega_embedded as pe
from pravega_embedded.errors import LocalBudgetError

from s3helpers import Link, new_bucket, s3_options

MiB = 1 << 20
BUDGET = 4 * MiB
EVENT = 1000


def event(i: int) -> bytes:
    return b"%08d" % i + b"s" * (EVENT - 8)


def write(w, i: int, deadline: float) -> None:
    """Write event ``i``, as a user's loop does: a refused batch is kept by the writer."""
    try:
        w.write_event(event(i), routing_key=f"k{i % 4}")
    except LocalBudgetError:
        assert time.monotonic() < deadline, "ingest stalled"


def flush(w, deadline: float) -> None:
    while True:
        try:
            w.flush()
            return
        except LocalBudgetError:
            assert time.monotonic() < deadline, "the backlog did not drain"


def test_s3_outage_blocks_ingest_at_the_budget_and_the_backlog_drains(tmp_path, moto_endpoint):
    bucket = new_bucket(moto_endpoint)
    link = Link(int(moto_endpoint.rsplit(":", 1)[1]))
    url = f"s3://{bucket}/edge"
    deadline = time.monotonic() + 300
    try:
        with pe.open(tmp_path / "data", tier2=url, tier2_options=s3_options(link.url),
                     roll_bytes=MiB, local_budget=BUDGET, local_budget_timeout=0.5,
                     tier2_file_bytes=512 << 10) as store:
            store.create_scope("iot")
            store.create_stream("iot", "cam")
            w = store.create_writer("iot", "cam", batch_bytes=64 << 10)
            n = 0
            while n * EVENT < 2 * BUDGET:  # the link is up: tiering keeps up with ingest
                write(w, n, deadline)
                n += 1
            flush(w, deadline)
            store.flush_tier2(timeout=120)

            link.cut()  # the endpoint goes away mid-run
            while True:
                try:
                    w.write_event(event(n), routing_key=f"k{n % 4}")
                except LocalBudgetError as exc:
                    refused = exc
                    n += 1  # kept by the writer
                    break
                n += 1
                assert time.monotonic() < deadline, "the budget never held ingest back"
            assert "local_budget" in str(refused)
            status = store.tiering_status()
            assert status.state == "blocked" and status.local_bytes >= BUDGET
            while not status.failures:  # the round in progress fails once s3fs gives up
                assert time.monotonic() < deadline, "the outage was never reported"
                time.sleep(0.05)
                status = store.tiering_status()
            assert "Could not connect" in status.last_error and status.state == "blocked"
            assert status.local_bytes <= BUDGET + 2 * MiB

            link.restore()  # the backlog drains by itself
            flush(w, deadline)
            for _ in range(2000):
                write(w, n, deadline)
                n += 1
            flush(w, deadline)
            assert w.durable_sequence == n - 1
            w.close()
            store.flush_tier2(timeout=120)
            assert store.tiering_status().state == "ok"
            got = [ev.event for ev in store.read_slice("iot", "cam")]
    finally:
        link.cut()
    want = [event(i) for i in range(n)]
    assert sorted(got) == want  # exactly once
    fs = s3fs.S3FileSystem(**s3_options(moto_endpoint))
    table = ds.dataset(f"{bucket}/edge/scope=iot/stream=cam", filesystem=fs, format="parquet",
                       partitioning="hive").to_table(columns=["event"])
    assert sorted(table.column("event").to_pylist()) == want
