"""The Spark source's reading of one range when the store's owner goes away mid-read: the task
reopens the store (becoming its owner here) and resumes just after the last event it yielded,
so the range's events come exactly once (``batchread`` invariant 3). No Spark session needed:
this is what each Spark task runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pravega_embedded as pe
from pravega_embedded.spark.batchread import read_range
from pravega_embedded.spark.options import parse_read_options

REPO = Path(__file__).resolve().parents[2]

OWNER = textwrap.dedent("""
    import sys
    import pravega_embedded as pe
    store = pe.open(sys.argv[1], tier2=False)
    print("READY", flush=True)
    sys.stdin.readline()
    store.close()
    print("CLOSED", flush=True)
    sys.stdin.readline()
""")


def test_a_range_resumes_exactly_after_its_owner_closes(tmp_path):
    path = tmp_path / "data"
    with pe.open(path, tier2=False) as store:
        store.create_scope("iot")
        store.create_stream("iot", "sensors")
        with store.create_writer("iot", "sensors") as w:
            for i in range(40000):
                w.write_event(b"%06d" % i + b"p" * 500, routing_key=f"k{i % 3}" if i % 4 else None)
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=REPO,
                             env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        assert owner.stdout.readline().strip() == "READY"
        opts = parse_read_options({"path": str(path), "scope": "iot", "stream": "sensors"})
        with pe.open(path) as client:
            assert isinstance(client, pe.RemoteStore)
            (rng,) = client.get_segments("iot", "sensors")
        batches = read_range(opts, rng)
        first = next(batches)
        owner.stdin.write("close\n")
        owner.stdin.flush()
        assert owner.stdout.readline().strip() == "CLOSED"
        rest = list(batches)  # the owner is gone: this process reopens the store and owns it
        rows = [(int(e[:6]), k, o) for b in [first] + rest
                for e, k, o in zip(b.column("event").to_pylist(), b.column("routing_key").to_pylist(),
                                   b.column("offset").to_pylist())]
        assert first.num_rows < 40000 and len(rest) > 0
        assert sorted(i for i, _, _ in rows) == list(range(40000))  # each event exactly once
        offsets = [o for _, _, o in rows]
        assert offsets == sorted(set(offsets)) and offsets[0] == 0  # in offset order
        last: dict[object, int] = {}
        for i, key, _ in rows:  # and per key in write order
            assert last.get(key, -1) < i
            last[key] = i
    finally:
        owner.stdin.close()
        owner.wait(60)


def test_owners_lost_many_times_in_a_row_are_retried_until_time_without_progress(monkeypatch):
    """In CI, short tasks each owning the store for a moment took it from a reader four times
    in a row before it read anything, and a count of three failed the query: only time with no
    progress gives up."""
    from pravega_embedded.errors import ConnectionLostError
    from pravega_embedded.spark import batchread

    monkeypatch.setattr(batchread.time, "sleep", lambda s: None)
    exc = ConnectionLostError("the owner closed")
    h = batchread.Handovers("reading a range", 0)
    assert all(h.retry(0, exc) for _ in range(20))
    monkeypatch.setattr(batchread, "HANDOVER_TIMEOUT", 0.0)
    clock = [batchread.time.monotonic()]
    monkeypatch.setattr(batchread.time, "monotonic", lambda: clock[0])
    h = batchread.Handovers("reading a range", 0)
    clock[0] += 1.0  # a long first read: the clock starts at the first loss, not before
    assert h.retry(0, exc) is True
    clock[0] += 1.0
    assert h.retry(0, exc) is False  # no progress for longer than the timeout: give up
    assert h.retry(5, exc) is True  # progress: the clock starts again
    clock[0] += 1.0
    assert h.retry(5, exc) is False and h.retry(6, exc) is True
