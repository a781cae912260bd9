"""Many processes, one store: a client process against the owner's own process, and Redis Streams.

    python bench/multiprocess.py [--events 300000] [--read-events 600000] [--samples 2000]

Same run, same payloads (100-byte events, 64 routing keys, durability fsync):

  write     ``write_event`` of 100 B then one ``flush``: in the owner's process (in process) and
            in a client process (``pe.open`` of the store the bench process owns); issue 14's
            goal: client >= 0.5x in process;
  redis     ``XADD`` of the same events, pipelined 1,000 at a time through redis-py, to a local
            ``redis-server`` (appendonly, appendfsync everysec; its default); goal: client
            >= 5x redis. The bench installs redis-server (apt) and redis-py (pip) if it can, and
            says so and skips this line if it cannot;
  ack       ``write_event`` + ``flush()`` round trips from a client: p50 / p99 (goal p50 <= 1 ms),
            beside the same in process;
  catch-up  reading a stream of durable events to its end: one in-process reader against 1, 2
            and 4 client processes, each a reader of one reader group (the events divided by
            segment); aggregate events/s from the first read to the last process done; goal:
            2 processes >= 1.5x the in-process reader. Both loops do the same per event: one
            ``read_next_event`` and one test (``is None`` in process, ``is_read_completed``
            for a group's reader).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from harness import ROOT, library_version, loadavg, warm_up

sys.path.insert(0, str(ROOT))
import pravega_embedded as pe  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
PAYLOAD = b"x" * 100
KEYS = [f"sensor-{i}" for i in range(64)]
# catch-up reads divide a stream's segments among processes: 1,024 devices spread a 4-segment
# stream evenly (64 keys happen to put 26 of them, 40% of the data, in one segment)
READ_KEYS = [f"sensor-{i}" for i in range(1024)]

CLIENT = textwrap.dedent("""
    import json, sys, time
    import pravega_embedded as pe
    mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = pe.open(path)
    assert isinstance(store, pe.RemoteStore), store
    payload, keys = b"x" * 100, [f"sensor-{i}" for i in range(64)]
    out = {}
    if mode == "write":
        w = store.create_writer("bench", "w")
        t = time.perf_counter()
        for i in range(n):
            w.write_event(payload, keys[i & 63])
        w.flush()
        out["seconds"] = time.perf_counter() - t
        w.close()
    elif mode == "ack":
        w = store.create_writer("bench", "ack")
        lat = []
        for i in range(n):
            t = time.perf_counter()
            w.write_event(payload, keys[i & 63])
            w.flush()
            lat.append(time.perf_counter() - t)
        out["latencies"] = lat
        w.close()
    elif mode == "read":
        r = store.get_reader_group(sys.argv[4]).create_reader(sys.argv[5])
        print("READY", flush=True)
        sys.stdin.readline()
        # the same work per event as the in-process loop: one read, one test (no checkpoint
        # is taken: a marker counted as an event would fail the bench's count)
        ev = r.read_next_event(None)
        first, count = time.time(), 0
        while not ev.is_read_completed:
            count += 1
            ev = r.read_next_event(None)
        out = {"count": count, "first": first, "last": time.time()}
        r.close()
    store.close()
    print(json.dumps(out), flush=True)
""")


def _client(mode: str, path: Path, n: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CLIENT, mode, str(path), str(n), *extra], env=ENV,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p: subprocess.Popen[str]) -> dict:
    out, err = p.communicate(timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"a client process failed: {err}")
    return json.loads(out.strip().splitlines()[-1])


def bench_write(store: pe.Store, path: Path, n: int) -> tuple[float, float]:
    store.create_stream("bench", "w", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)), exist_ok=True)
    w = store.create_writer("bench", "w")
    t = time.perf_counter()
    for i in range(n):
        w.write_event(PAYLOAD, KEYS[i & 63])
    w.flush()
    inproc = n / (time.perf_counter() - t)
    w.close()
    client = n / _result(_client("write", path, n))["seconds"]
    return inproc, client


def _redis_ready() -> str | None:
    """None if redis-server and redis-py are here (installed now if possible), else why not."""
    if shutil.which("redis-server") is None and shutil.which("apt-get") is not None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], capture_output=True, timeout=600)
    if shutil.which("redis-server") is None:
        return "redis-server is not installed and apt-get could not install it"
    try:
        import redis  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "redis"], capture_output=True, timeout=600)
    try:
        import redis  # noqa: F401,F811
    except ImportError:
        return "redis-py is not installed and pip could not install it"
    return None


def bench_redis(work: Path, n: int) -> float | str:
    why = _redis_ready()
    if why is not None:
        return why
    import redis

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = work / "redis"
    data.mkdir()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--dir", str(data), "--save", "",
                             "--appendonly", "yes", "--appendfsync", "everysec"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        deadline = time.monotonic() + 30
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    return "redis-server did not start"
                time.sleep(0.05)
        t = time.perf_counter()
        for start in range(0, n, 1000):
            pipe = r.pipeline(transaction=False)
            for i in range(start, min(n, start + 1000)):
                pipe.xadd("bench", {"k": KEYS[i & 63], "v": PAYLOAD})
            pipe.execute()
        return n / (time.perf_counter() - t)
    finally:
        proc.terminate()
        proc.wait(30)


def bench_ack(store: pe.Store, path: Path, samples: int) -> tuple[tuple[float, float], tuple[float, float]]:
    store.create_stream("bench", "ack", exist_ok=True)
    w = store.create_writer("bench", "ack")
    lat = []
    for i in range(samples):
        t = time.perf_counter()
        w.write_event(PAYLOAD, KEYS[i & 63])
        w.flush()
        lat.append(time.perf_counter() - t)
    w.close()
    client = _result(_client("ack", path, samples))["latencies"]

    def p(xs: list[float]) -> tuple[float, float]:
        q = statistics.quantiles(xs, n=100)
        return q[49], q[98]
    return p(lat), p(client)


def bench_catch_up(store: pe.Store, path: Path, n: int) -> dict[str, float]:
    store.create_stream("bench", "r", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)), exist_ok=True)
    with store.create_writer("bench", "r") as w:
        for i in range(n):
            w.write_event(PAYLOAD, READ_KEYS[i & 1023])
    store.seal_stream("bench", "r")
    out = {}
    r = store.create_reader("bench", "r")
    t = time.perf_counter()
    count = 0
    while r.read_next_event(0) is not None:
        count += 1
    out["in process"] = count / (time.perf_counter() - t)
    r.close()
    assert count == n
    for procs in (1, 2, 4):
        name = f"g{procs}"
        store.create_reader_group(name, pe.ReaderGroupConfig(streams=[("bench", "r")],
                                                             automatic_checkpoint_interval=None))
        clients = [_client("read", path, 0, name, f"r{i}") for i in range(procs)]
        for c in clients:
            assert c.stdout.readline().strip() == "READY", c.stderr.read()
        for c in clients:  # all joined: the segments are divided among them
            c.stdin.write("\n")
            c.stdin.flush()
        res = [_result(c) for c in clients]
        assert sum(x["count"] for x in res) == n, res
        wall = max(x["last"] for x in res) - min(x["first"] for x in res)
        out[f"{procs} client process{'es' if procs > 1 else ''}"] = n / wall
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--read-events", type=int, default=600_000)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--dir", help="where to put the stores (default: a temporary directory)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mp-", dir=args.dir))
    print(f"pravega_embedded {library_version()}, python {sys.version.split()[0]}, load {loadavg()}")
    try:
        warm_up(work, 256)
        path = work / "store"
        with pe.open(path, tier2=False) as store:
            assert isinstance(store, pe.Store)
            store.create_scope("bench")
            inproc, client = bench_write(store, path, args.events)
            print(f"write_event 100 B: in process {inproc:,.0f} ev/s | client process {client:,.0f} ev/s "
                  f"| client / in process {client / inproc:.2f}x (goal >= 0.5)", flush=True)
            red = bench_redis(work, args.events)
            if isinstance(red, str):
                print(f"redis XADD: skipped: {red}", flush=True)
            else:
                print(f"redis XADD pipelined 1,000: {red:,.0f} ev/s | client / redis {client / red:.2f}x "
                      "(goal >= 5)", flush=True)
            (i50, i99), (c50, c99) = bench_ack(store, path, args.samples)
            print(f"durable ack (write_event + flush): in process p50 {i50 * 1e3:.3f} p99 {i99 * 1e3:.3f} ms "
                  f"| client p50 {c50 * 1e3:.3f} p99 {c99 * 1e3:.3f} ms (goal p50 <= 1 ms)", flush=True)
            reads = bench_catch_up(store, path, args.read_events)
            base = reads["in process"]
            print("catch-up read of " + f"{args.read_events:,} events: " + " | ".join(
                f"{k} {v:,.0f} ev/s ({v / base:.2f}x)" for k, v in reads.items())
                + " (goal: 2 processes >= 1.5x)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
