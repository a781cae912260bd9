"""Transactions benchmark of pravega_embedded: transactional write throughput against plain
``write_event`` and two baselines, in one run on the same data, at 1 KiB events (fsync).

    python bench/transactions.py            # full run (about 1 minute on 2 cores)
    python bench/transactions.py --quick    # a tenth of the events (~10 s)
    python bench/transactions.py --json out.json --dir /some/dir --reps 3

Workload (the same list of payloads for every side): 200,000 events of 1 KiB, 100 routing keys
``key-00`` ... ``key-99`` (event i's key drawn at random, seeded), one writer thread. Every
payload starts with its index i (u64, big-endian) and its key index (u32); the rest is filler
derived from i, so any event can be checked byte for byte.

Sides, grouped by where they wait for durability ("sync points"):

  raw        one Python thread frames every event like the store (``<IH`` payload length + key
             length, key, payload), joins the frames of a sync group (at most 1,000) and
             ``os.write``s them, and ``os.fdatasync``s every B events (B = 100, 1,000, 10,000)
             or once at the end;
  sqlite     stdlib sqlite3, WAL, ``synchronous=FULL`` (a commit is durable when it returns),
             table (key TEXT, seq INTEGER, payload BLOB), ``executemany`` of B rows per
             transaction (B as above; "end": one transaction for everything);
  txn-B      ``pe.open(dir)`` (durability "fsync"), ``tw = store.create_transactional_writer``;
             per B events ``tw.begin_txn()``, B x ``txn.write_event(payload, routing_key=key)``,
             ``txn.commit()`` (which returns once the commit is durable);
  plain/1000 ``store.create_writer``; ``w.write_event(payload, key)`` for every event and
             ``w.flush()`` after every 1,000 (the fair comparison to txn-1000: the same number
             of waits for durability);
  plain/end  the same with one ``w.flush()`` at the end;
  txn-1000 with 10 % aborted: txn-1000 where every 10th transaction calls ``txn.abort()``
             instead of ``commit()`` after writing its 1,000 events (so 90 % of the events are
             committed; both rates are printed).

Store sides run on a stream with one segment (the default configuration), then again (txn-B,
plain/1000, plain/end) on ``ScalingPolicy.fixed(4)``: a transaction has a staging segment per
segment of the stream, so its fixed cost may grow with the segment count.

Every store run is checked afterwards (``verified`` in the output; a failure exits non-zero):
``read_slice(...).to_arrow()`` of the whole stream must hold exactly the committed events (the
set of indices equal to the committed ones: nothing lost, duplicated or from an aborted
transaction); within each segment the indices must increase in read order (per-key order, and
each transaction's events contiguous and in commit order; a plain writer batches events per
key, so for it only per-key order is checked); the routing_key column and the key in each
payload must match the key written; every event must lie in a segment whose key range owns its
key; 2,000 sampled payloads must be byte-exact; every transaction's status must be COMMITTED or
ABORTED as intended. The run with aborts is also closed, reopened (replay) and checked again. The
raw file is parsed back (frame count) and SQLite's row count checked.

Before each side: os.sync() and, as root, the clean page cache dropped; 1 GiB written and deleted
before the first. Each txn side also prints where its time goes: ``begin_txn`` and ``commit``
latency (p50/p99) and the time per staged ``write_event``. Ratios are ours / baseline.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy comes with pandas (the "test" extra)
    sys.exit("bench/transactions.py needs numpy (pip install numpy) for its verification step")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import pravega_embedded as pe

import harness  # bench/harness.py: shared by the runners
from pravega_embedded.routing import key_point

SCOPE = "b"
NKEYS = 100
KEYS = [f"key-{i:02d}" for i in range(NKEYS)]
KEYS_B = [k.encode() for k in KEYS]
KEYS_PA = pa.array(KEYS, pa.large_string())
KEY_POINTS = np.array([key_point(k) for k in KEYS])
SIZE = 1024
EVENTS, EVENTS_QUICK = 200_000, 20_000
TXN_SIZES = (100, 1000, 10_000)
ABORT_EVERY = 10  # every 10th transaction of the abort run is aborted
FRAME = struct.Struct("<IH")
HDR = struct.Struct(">QI")
SAMPLE = 2000


class BenchFailure(RuntimeError):
    pass


# ---------------------------------------------------------------------------- workload
class Workload:
    """n events of SIZE bytes; event i has a seeded random key among NKEYS."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.filler = os.urandom(SIZE + 256)
        rng = random.Random(n)
        self.keys = [int(rng.random() * NKEYS) for _ in range(n)]
        self.evs = [self.payload(i, k) for i, k in enumerate(self.keys)]
        self.key_of = np.array(self.keys, dtype=np.int64)

    def payload(self, i: int, k: int) -> bytes:
        return HDR.pack(i, k) + self.filler[(i * 31) & 255:][: SIZE - HDR.size]


# ---------------------------------------------------------------------------- baselines
def raw_write(path: Path, wl: Workload, every: int | None) -> float:
    """Framed events, os.write per group of min(every, 1000) frames, fdatasync every `every`
    events (None: once at the end)."""
    group = min(every or 1000, 1000)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pack, kb_of, write, sync = FRAME.pack, KEYS_B, os.write, os.fdatasync
        t = time.perf_counter()
        buf: list[bytes] = []
        for i, (ev, k) in enumerate(zip(wl.evs, wl.keys)):
            kb = kb_of[k]
            buf += (pack(len(ev), len(kb)), kb, ev)
            if i % group == group - 1:
                data = b"".join(buf)
                while data:
                    data = data[write(fd, data):]
                buf.clear()
                if every is not None and i % every == every - 1:
                    sync(fd)
        if buf:
            data = b"".join(buf)
            while data:
                data = data[write(fd, data):]
        sync(fd)
        dt = time.perf_counter() - t
    finally:
        os.close(fd)
    data = path.read_bytes()  # check: every frame back
    p, n, unpack = 0, 0, FRAME.unpack_from
    while p < len(data):
        ln, kl = unpack(data, p)
        p += 6 + kl + ln
        n += 1
    if n != wl.n or p != len(data):
        raise BenchFailure(f"raw baseline: {n} frames read back, {wl.n} written")
    return dt


def sqlite_write(path: Path, wl: Workload, every: int | None) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (key TEXT, seq INTEGER, payload BLOB)")
    evs, keys, n = wl.evs, wl.keys, wl.n
    step = every or n
    t = time.perf_counter()
    for start in range(0, n, step):
        rows = [(KEYS[keys[i]], i, evs[i]) for i in range(start, min(start + step, n))]
        db.execute("BEGIN")
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        db.execute("COMMIT")
    dt = time.perf_counter() - t
    got = db.execute("SELECT count(*) FROM t").fetchone()[0]
    db.close()
    if got != n:
        raise BenchFailure(f"sqlite baseline: {got} rows, {n} written")
    return dt


# ---------------------------------------------------------------------------- ours
def open_store(path: Path, segments: int) -> pe.Store:
    store = pe.open(path)  # durability "fsync" (the default)
    store.create_scope(SCOPE)
    store.create_stream(SCOPE, "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))
    return store


def run_txn(path: Path, wl: Workload, size: int, segments: int, abort_every: int | None) -> dict:
    """One timed transactional write of the workload to a fresh store; then verified."""
    store = open_store(path, segments)
    tw = store.create_transactional_writer(SCOPE, "s", writer_id="b")
    evs, keys, kstr, n = wl.evs, wl.keys, KEYS, wl.n
    perf = time.perf_counter
    begins: list[float] = []
    commits: list[float] = []
    ended: list[tuple[object, bool]] = []  # (txn, committed?)
    committed = np.ones(n, dtype=bool)
    t_write = 0.0
    gc.collect()
    t0 = perf()
    for j, start in enumerate(range(0, n, size)):
        a = perf()
        txn = tw.begin_txn()
        b = perf()
        we = txn.write_event
        for i in range(start, min(start + size, n)):
            we(evs[i], routing_key=kstr[keys[i]])
        c = perf()
        abort = abort_every is not None and j % abort_every == abort_every - 1
        if abort:
            txn.abort()
            committed[start:start + size] = False
        else:
            txn.commit()
        d = perf()
        begins.append(b - a)
        t_write += c - b
        commits.append(d - c)
        ended.append((txn, not abort))
    dt = perf() - t0
    for txn, ok in ended:
        want = pe.TxnStatus.COMMITTED if ok else pe.TxnStatus.ABORTED
        if txn.status() != want:
            raise BenchFailure(f"txn-{size}: a transaction is {txn.status().value}, expected {want.value}")
    verify(store, wl, committed, f"txn-{size}")
    if abort_every is not None:  # aborted events must stay invisible after a replay too
        store.close()
        store = pe.open(path)
        verify(store, wl, committed, f"txn-{size} after reopen")
    store.close()
    ncommit = int(committed.sum())
    stats = {"begin_ms": pctl(begins), "commit_ms": pctl([c for c, (_, ok) in zip(commits, ended) if ok]),
             "write_us_per_event": t_write / n * 1e6, "txns": len(ended)}
    if abort_every is not None:
        stats["abort_ms"] = pctl([c for c, (_, ok) in zip(commits, ended) if not ok])
    return {"seconds": dt, "committed": ncommit, **stats}


def run_plain(path: Path, wl: Workload, every: int | None, segments: int) -> dict:
    store = open_store(path, segments)
    w = store.create_writer(SCOPE, "s", writer_id="p")
    evs, keys, kstr, n = wl.evs, wl.keys, KEYS, wl.n
    we, flush = w.write_event, w.flush
    gc.collect()
    t0 = time.perf_counter()
    if every is None:
        for i in range(n):
            we(evs[i], kstr[keys[i]])
    else:
        for start in range(0, n, every):
            for i in range(start, min(start + every, n)):
                we(evs[i], kstr[keys[i]])
            flush()
    if flush() != w.last_sequence:
        raise BenchFailure("plain writer: durable_sequence behind last_sequence after flush")
    dt = time.perf_counter() - t0
    w.close()
    verify(store, wl, np.ones(n, dtype=bool), "plain", per_key=True)
    store.close()
    return {"seconds": dt, "committed": n}


def verify(store: pe.Store, wl: Workload, committed: np.ndarray, what: str, per_key: bool = False) -> None:
    """per_key: only per-key order is promised (a plain writer batches events per key); else
    the order within each segment is write order (a transaction's events, commit after commit)."""
    table = store.read_slice(SCOPE, "s").to_arrow()
    want = np.flatnonzero(committed)
    n = table.num_rows
    if n != len(want):
        raise BenchFailure(f"{what}: read back {n} events, {len(want)} committed")
    idx, kix = [], []
    for chunk in table.column("event").chunks:
        if len(chunk) == 0:
            continue
        bufs = chunk.buffers()
        offs = np.frombuffer(bufs[1], np.int64, count=len(chunk) + 1, offset=8 * chunk.offset)
        if not (np.diff(offs) == SIZE).all():
            raise BenchFailure(f"{what}: an event of the wrong size was read back")
        rows = np.frombuffer(bufs[2], np.uint8)[offs[0]:offs[-1]].reshape(-1, SIZE)
        idx.append(np.ascontiguousarray(rows[:, :8]).view(">u8").ravel().astype(np.int64))
        kix.append(np.ascontiguousarray(rows[:, 8:12]).view(">u4").ravel().astype(np.int64))
    index, key = np.concatenate(idx), np.concatenate(kix)
    if not np.array_equal(np.sort(index), want):
        raise BenchFailure(f"{what}: the events read back are not exactly the committed ones "
                           "(lost, duplicated, or from an aborted transaction)")
    if not (wl.key_of[index] == key).all():
        raise BenchFailure(f"{what}: a payload's key differs from the key written with it")
    rk = table.column("routing_key").combine_chunks()
    if not pc.all(pc.equal(rk, KEYS_PA.take(pa.array(key)))).as_py():
        raise BenchFailure(f"{what}: routing_key column does not match the key in the payload")
    seg = table.column("segment_id").to_numpy()
    group = seg * NKEYS + key if per_key else seg
    order = np.argsort(group, kind="stable")  # stable: read order within each group
    g, ix = group[order], index[order]
    if not ((np.diff(ix) > 0) | (np.diff(g) != 0)).all():
        raise BenchFailure(f"{what}: events out of write order within a "
                           + ("key" if per_key else "segment (per-key order or a transaction's contiguity broken)"))
    info = store.stream_info(SCOPE, "s")
    ranges = {x.segment_id: (x.key_low, x.key_high) for x in info.segments}
    uniq, inv = np.unique(seg, return_inverse=True)
    lo = np.array([ranges[int(u)][0] for u in uniq])[inv]
    hi = np.array([ranges[int(u)][1] for u in uniq])[inv]
    kp = KEY_POINTS[key]
    if not ((lo <= kp) & (kp < hi)).all():
        raise BenchFailure(f"{what}: an event lies in a segment whose key range does not own its key")
    col = table.column("event")
    for r in random.Random(n).sample(range(n), min(SAMPLE, n)):
        i = int(index[r])
        if col[r].as_py() != wl.evs[i]:
            raise BenchFailure(f"{what}: payload of row {r} (event {i}) differs from the one written")


def pctl(xs: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    if not xs:
        return (float("nan"), float("nan"))
    xs = sorted(xs)
    return (xs[len(xs) // 2] * 1e3, xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3)


# ---------------------------------------------------------------------------- runner
DROP_CACHES = True


def settle() -> None:
    harness.settle(DROP_CACHES)


warm_up, library_version, loadavg = harness.warm_up, harness.library_version, harness.loadavg


# side name -> (kind, sync points, segments); sync points: B events per durable wait, None = end
def sides(segments: tuple[int, ...]) -> list[tuple[str, str, int | None, int]]:
    out: list[tuple[str, str, int | None, int]] = []
    for every in (100, 1000, 10_000, None):
        tag = "end" if every is None else f"{every}"
        out += [(f"raw/{tag}", "raw", every, 0), (f"sqlite/{tag}", "sqlite", every, 0)]
        for segs in segments:
            sfx = "" if segs == 1 else f" [{segs} seg]"
            if every is not None:
                out.append((f"txn-{every}{sfx}", "txn", every, segs))
            if every in (1000, None):
                out.append((f"plain/{tag}{sfx}", "plain", every, segs))
            if every == 1000 and segs == 1:
                out.append(("txn-1000, 10% aborted", "abort", every, segs))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{EVENTS_QUICK:,} events instead of {EVENTS:,}")
    ap.add_argument("--reps", type=int, default=1, help="repetitions of every side (median time; default 1)")
    ap.add_argument("--segments", default="1,4", help="segment counts of the store sides (default 1,4)")
    ap.add_argument("--dir", help="where to put stores (default: bench/out/ under the repo)")
    ap.add_argument("--json", help="also write the results as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--no-drop-caches", action="store_true", help="only os.sync() between phases")
    args = ap.parse_args()
    global DROP_CACHES
    DROP_CACHES = not args.no_drop_caches
    n = EVENTS_QUICK if args.quick else EVENTS
    segments = tuple(int(x) for x in args.segments.split(","))
    out_root = Path(args.dir) if args.dir else ROOT / "bench" / "out"
    out_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="txn-", dir=out_root))

    def say(line: str = "") -> None:
        print(line, flush=True)

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    say(f"pravega_embedded {pe.__version__} transactions bench — nproc {len(os.sched_getaffinity(0))}, {cpu}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    say(f"library: {library_version()}")
    say(f"data dir: {work.parent}/txn-…{' (quick)' if args.quick else ''}; between sides: os.sync()"
        f"{' + drop clean page cache' if DROP_CACHES else ''}")
    say(f"workload: {n:,} events of {SIZE} B, {NKEYS} keys, one writer thread, durability 'fsync'; "
        f"{args.reps} repetition(s)")
    say(f"load average at start: {loadavg()}")
    t_all = time.perf_counter()
    warm_up(work, 256 if args.quick else 1024)
    wl = Workload(n)
    gc.collect()
    gc.freeze()  # the workload's lists stay out of every side's collections
    plan = sides(segments)
    rows: dict[str, list[dict]] = {}
    ok = True
    try:
        for rep in range(args.reps):
            for name, kind, every, segs in plan:
                settle()
                gc.collect()
                path = work / "side"
                if kind == "raw":
                    r = {"seconds": raw_write(path, wl, every), "committed": n}
                    path.unlink()
                elif kind == "sqlite":
                    r = {"seconds": sqlite_write(path, wl, every), "committed": n}
                    for f in work.glob("side*"):
                        f.unlink()
                elif kind == "plain":
                    r = run_plain(path, wl, every, segs)
                    shutil.rmtree(path)
                else:
                    r = run_txn(path, wl, every, segs, ABORT_EVERY if kind == "abort" else None)
                    shutil.rmtree(path)
                r.update(kind=kind, every=every, segments=segs, rep=rep)
                rows.setdefault(name, []).append(r)
        report(say, rows, n)
    except BenchFailure as e:
        say(f"FAILED: {e}")
        ok = False
    elapsed = time.perf_counter() - t_all
    say(f"(load average at the end: {loadavg()}; took {elapsed:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"events": n, "rows": rows, "elapsed_s": elapsed}, indent=1,
                                              default=str))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def report(say, rows: dict[str, list[dict]], n: int) -> None:
    def sec(name: str) -> float:
        return statistics.median(r["seconds"] for r in rows[name])

    def committed(name: str) -> int:
        return rows[name][0]["committed"]

    def rate(name: str) -> float:
        return committed(name) / sec(name)

    def x(a: str, b: str) -> str:
        return f"{rate(a) / rate(b):.2f}" if a in rows and b in rows else "-"

    mb = SIZE / 1e6
    say()
    say("THROUGHPUT (events/s and MB/s of committed payload; the time includes the last commit or flush)")
    say(f"  {'side':<24} {'events/s':>10} {'MB/s':>7} {'x plain/end':>11} {'x plain/1000':>12} "
        f"{'x raw':>6} {'x sqlite':>8}")
    for name, rs in rows.items():
        r = rs[0]
        tag = "end" if r["every"] is None else str(r["every"])
        sfx = "" if r["segments"] in (0, 1) else f" [{r['segments']} seg]"
        if r["kind"] in ("raw", "sqlite"):
            xs = ("-", "-", "1.00" if r["kind"] == "raw" else x(name, f"raw/{tag}"),
                  "1.00" if r["kind"] == "sqlite" else "-")
        else:
            xs = (x(name, f"plain/end{sfx}"), x(name, f"plain/1000{sfx}"), x(name, f"raw/{tag}"),
                  x(name, f"sqlite/{tag}"))
        say(f"  {name:<24} {rate(name):>10,.0f} {rate(name) * mb:>7,.1f} {xs[0]:>11} {xs[1]:>12} "
            f"{xs[2]:>6} {xs[3]:>8}")
    say("  (x raw / x sqlite: against the baseline with the same sync points; raw/end and sqlite/end for plain/end)")
    say()
    say("WHERE A TRANSACTION'S TIME GOES (per transaction: begin_txn and commit latency p50 / p99; "
        "per staged write_event: mean)")
    for name, rs in rows.items():
        r = rs[0]
        if r["kind"] not in ("txn", "abort"):
            continue
        line = (f"  {name:<24} {r['txns']:>5,} txns  begin {r['begin_ms'][0]:.2f} / {r['begin_ms'][1]:.2f} ms   "
                f"commit {r['commit_ms'][0]:.2f} / {r['commit_ms'][1]:.2f} ms   write_event "
                f"{r['write_us_per_event']:.2f} µs")
        if "abort_ms" in r:
            line += f"   abort {r['abort_ms'][0]:.2f} / {r['abort_ms'][1]:.2f} ms"
        say(line)
        if name.startswith("txn-1000, 10%"):
            staged = n / sec(name)
            say(f"  {'':<24} staged {staged:,.0f} events/s ({n:,} staged, {committed(name):,} committed, "
                f"{n - committed(name):,} aborted); verified again after close + reopen")
    if len(next(iter(rows.values()))) > 1:
        say()
        say("PER REPETITION (seconds)")
        for name, rs in rows.items():
            say(f"  {name:<24} " + ", ".join(f"{r['seconds']:.2f}" for r in rs))
    say()
    say("verified: every store side (exact committed set, per-segment write order, keys, key ranges, "
        f"{SAMPLE:,} byte-exact samples, txn statuses); raw frame count; sqlite row count")


if __name__ == "__main__":
    sys.exit(main())
