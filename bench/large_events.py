"""Large-events benchmark of pravega_embedded: MB/s of events of 16, 64 and 256 MiB written
(``write_event`` + ``flush`` per event) and read back, against a raw file write+fdatasync loop and
SQLite, in one run on the same bytes; with the peak RSS of every phase.

    python bench/large_events.py            # full run (about 1.5 minutes on 2 cores)
    python bench/large_events.py --quick    # one eighth of the data (~20 s)
    python bench/large_events.py --json out.json --dir /some/dir --no-sqlite --reps 3

Workload, per size: 1 GiB of events (64 x 16 MiB, 16 x 64 MiB, 4 x 256 MiB), all with routing
key ``cam-0``. Event i of a size is made of 1 MiB pieces: piece k starts with (size, i, k) (24
bytes) and continues with 1 MiB - 24 bytes of a random block from an offset derived from (i, k),
so every event and every piece of it differs. The bench builds each event just before it is
written (untimed) and drops it right after, so it holds one event at a time.

Sides (each write starts from os.sync() and, as root, a dropped clean page cache):

  raw     per event: an 8-byte length, then the event's bytes ``os.write``n in 4 MiB slices (of a
          memoryview: no copy) to one file, then ``os.fdatasync``. Read back: per event
          ``os.read`` of the length, then ``os.read`` of the payload (one fresh bytes object).
  ours    ``pe.open(dir)`` (durability "fsync"), one stream of one segment; per event
          ``w.write_event(event, routing_key="cam-0")`` then ``w.flush()`` (durable on return).
          Read back: iterating ``store.read_slice(...)`` (``.event``), and a standalone reader
          (``read_next_event(timeout=0)``).
  sqlite  stdlib sqlite3, WAL, ``synchronous=FULL``, table (id INTEGER PRIMARY KEY, payload
          BLOB), one ``INSERT`` per transaction (the event as one BLOB; SQLite's default limit is
          1e9 bytes per BLOB). Read back: ``SELECT payload FROM t WHERE id = ?`` per event.
          (``--no-sqlite`` skips it.)

Reads are timed twice: "cached" right after the side's own write (its data in the page cache,
as each side left it), and "cold" after os.sync() + dropping the clean page cache (as root; if
the cache cannot be dropped the two are the same). Only the calls above are timed: building the
events and checking them are not. Every event read back is checked byte for byte (``memcmp`` of
each piece against the bytes it was built from, no copy), in order, with its routing key, and the
count must match. The three sides take turns going first, one size after another.

Memory: every phase (a write, or one read pass) runs in a child process forked from the bench
(which holds no store, no connection and no thread), so its ``resource.getrusage(RUSAGE_SELF)
.ru_maxrss`` is that phase's peak RSS. The bench prints it and how far it rose above the child's
RSS at the start of the phase (after opening the store or file). The phase itself holds one
event during a write (the caller's bytes, built just before the timed call) and the event just
read during a read, so "+1.00 x event" is the floor.

Ratios are ours / baseline (higher is better).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import re
import resource
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import pravega_embedded as pe

import harness  # bench/harness.py: shared by the runners

MiB = 1 << 20
SCOPE, STREAM, KEY = "b", "big", "cam-0"
SIZES = ((16 * MiB, 64), (64 * MiB, 16), (256 * MiB, 4))
SIZES_QUICK = ((16 * MiB, 8), (64 * MiB, 2), (256 * MiB, 1))
RAW_SLICE = 4 * MiB
PIECE_HDR = struct.Struct(">QQQ")  # size, event index, piece index (24 bytes)
LEN = struct.Struct("<Q")
BLOCK_SPAN = 4096
BLOCK = os.urandom(MiB + BLOCK_SPAN)
BLOCK_MV = memoryview(BLOCK)

_libc = ctypes.CDLL(None)
_memcmp = _libc.memcmp
_memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_memcmp.restype = ctypes.c_int


class BenchFailure(RuntimeError):
    pass


# ---------------------------------------------------------------------------- events
def _off(i: int, k: int) -> int:
    return (i * 131 + k * 17) % BLOCK_SPAN


def make_event(size: int, i: int) -> bytes:
    body = MiB - PIECE_HDR.size
    parts: list[object] = []
    for k in range(size // MiB):
        o = _off(i, k)
        parts += (PIECE_HDR.pack(size, i, k), BLOCK_MV[o:o + body])
    return b"".join(parts)


def _addr(b: bytes) -> int:
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value or 0


BLOCK_ADDR = _addr(BLOCK)


def check_event(what: str, got: object, size: int, i: int) -> None:
    """Byte-exact check of event i without copying it."""
    if type(got) is not bytes:
        raise BenchFailure(f"{what}: event {i} came back as {type(got).__name__}, not bytes")
    if len(got) != size:
        raise BenchFailure(f"{what}: event {i} has {len(got)} bytes, {size} written")
    base = _addr(got)
    body = MiB - PIECE_HDR.size
    for k in range(size // MiB):
        at = k * MiB
        if got[at:at + PIECE_HDR.size] != PIECE_HDR.pack(size, i, k) or \
                _memcmp(base + at + PIECE_HDR.size, BLOCK_ADDR + _off(i, k), body) != 0:
            raise BenchFailure(f"{what}: event {i} differs from the bytes written in its MiB {k}")


# ---------------------------------------------------------------------------- memory
def _status(field: str) -> int:
    m = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(m.group(1)) * 1024 if m else -1


class Phase:
    """Times the marked calls of one phase (in a child process) from its start RSS on."""

    def __init__(self) -> None:
        gc.collect()
        self.seconds = 0.0
        self.start_rss = _status("VmRSS")


def in_child(fn, *args) -> dict:
    """Run fn(*args) -> dict in a forked child; return its dict plus the child's ru_maxrss."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(rfd)
            try:
                out = fn(*args)
                out["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            except BaseException as e:  # noqa: BLE001 - reported by the parent
                out = {"error": f"{type(e).__name__}: {e}"}
            data = json.dumps(out).encode()
            while data:
                data = data[os.write(wfd, data):]
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(wfd)
    chunks = []
    while True:
        b = os.read(rfd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    if not chunks or os.waitstatus_to_exitcode(status) != 0:
        raise BenchFailure(f"{fn.__name__}: the child process failed (status {status})")
    out = json.loads(b"".join(chunks))
    if "error" in out:
        raise BenchFailure(f"{fn.__name__}: {out['error']}")
    out["peak"] = out["ru_maxrss"] - out["start_rss"]
    return out


# ---------------------------------------------------------------------------- sides
# Each runs in a child process (in_child) and returns {"seconds", "start_rss", ...}.
def raw_write(path: str, size: int, count: int) -> dict:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    per: list[float] = []
    ph = Phase()
    perf, write, sync = time.perf_counter, os.write, os.fdatasync
    for i in range(count):
        ev = make_event(size, i)
        t = perf()
        view = memoryview(ev)
        write(fd, LEN.pack(len(ev)))
        for a in range(0, len(ev), RAW_SLICE):
            chunk = view[a:a + RAW_SLICE]
            while chunk:
                chunk = chunk[write(fd, chunk):]
        sync(fd)
        dt = perf() - t
        ph.seconds += dt
        per.append(dt * 1e3)
        del view, chunk, ev
    os.close(fd)
    return {"seconds": ph.seconds, "start_rss": ph.start_rss, "per_event_ms": per}


def raw_read(path: str, size: int, count: int) -> dict:
    fd = os.open(path, os.O_RDONLY)
    ph = Phase()
    perf, read = time.perf_counter, os.read
    for i in range(count):
        t = perf()
        (n,) = LEN.unpack(read(fd, LEN.size))
        ev = read(fd, n)
        if len(ev) < n:  # a short read (rare for a regular file): finish it
            ev += read(fd, n - len(ev))
        ph.seconds += perf() - t
        check_event("raw read", ev, size, i)
        del ev
    if read(fd, 1):
        raise BenchFailure("raw read: bytes after the last event")
    os.close(fd)
    return {"seconds": ph.seconds, "start_rss": ph.start_rss}


def ours_write(path: str, size: int, count: int) -> dict:
    store = pe.open(path)  # durability "fsync"
    store.create_scope(SCOPE)
    store.create_stream(SCOPE, STREAM)
    w = store.create_writer(SCOPE, STREAM, writer_id="big")
    perf = time.perf_counter
    writes: list[float] = []
    flushes: list[float] = []
    ph = Phase()
    for i in range(count):
        ev = make_event(size, i)
        t = perf()
        w.write_event(ev, routing_key=KEY)
        t1 = perf()
        w.flush()
        t2 = perf()
        ph.seconds += t2 - t
        writes.append((t1 - t) * 1e3)
        flushes.append((t2 - t1) * 1e3)
        del ev
    if w.durable_sequence != w.last_sequence:
        raise BenchFailure("ours write: durable_sequence behind last_sequence after flush")
    w.close()
    store.close()
    return {"seconds": ph.seconds, "start_rss": ph.start_rss, "write_event_ms": writes, "flush_ms": flushes}


def ours_read_slice(path: str, size: int, count: int) -> dict:
    store = pe.open(path)
    it = iter(store.read_slice(SCOPE, STREAM))
    perf = time.perf_counter
    ph = Phase()
    for i in range(count):
        t = perf()
        e = next(it, None)
        ph.seconds += perf() - t
        if e is None:
            raise BenchFailure(f"ours read_slice: {i} events read back, {count} written")
        if e.routing_key != KEY:
            raise BenchFailure(f"ours read_slice: event {i} has routing key {e.routing_key!r}")
        ev = e.event
        del e
        check_event("ours read_slice", ev, size, i)
        del ev
    if next(it, None) is not None:
        raise BenchFailure(f"ours read_slice: more than the {count} events written")
    store.close()
    return {"seconds": ph.seconds, "start_rss": ph.start_rss}


def ours_reader(path: str, size: int, count: int) -> dict:
    store = pe.open(path)
    r = store.create_reader(SCOPE, STREAM)
    rn = r.read_next_event
    perf = time.perf_counter
    ph = Phase()
    for i in range(count):
        t = perf()
        e = rn(0)
        ph.seconds += perf() - t
        if e is None:
            raise BenchFailure(f"ours reader: {i} events read back, {count} written")
        if e.routing_key != KEY:
            raise BenchFailure(f"ours reader: event {i} has routing key {e.routing_key!r}")
        ev = e.event
        del e
        check_event("ours reader", ev, size, i)
        del ev
    if rn(0) is not None:
        raise BenchFailure(f"ours reader: more than the {count} events written")
    r.close()
    store.close()
    return {"seconds": ph.seconds, "start_rss": ph.start_rss}


def sqlite_write(path: str, size: int, count: int) -> dict:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload BLOB)")
    perf = time.perf_counter
    per: list[float] = []
    ph = Phase()
    for i in range(count):
        ev = make_event(size, i)
        t = perf()
        db.execute("BEGIN")
        db.execute("INSERT INTO t VALUES (?, ?)", (i, ev))
        db.execute("COMMIT")
        dt = perf() - t
        ph.seconds += dt
        per.append(dt * 1e3)
        del ev
    db.close()
    return {"seconds": ph.seconds, "start_rss": ph.start_rss, "per_event_ms": per}


def sqlite_read(path: str, size: int, count: int) -> dict:
    db = sqlite3.connect(path, isolation_level=None)
    ph = Phase()
    perf = time.perf_counter
    for i in range(count):
        t = perf()
        row = db.execute("SELECT payload FROM t WHERE id = ?", (i,)).fetchone()
        ph.seconds += perf() - t
        if row is None:
            raise BenchFailure(f"sqlite read: no row {i}")
        ev = row[0]
        del row
        check_event("sqlite read", ev, size, i)
        del ev
    if db.execute("SELECT count(*) FROM t").fetchone()[0] != count:
        raise BenchFailure("sqlite read: row count differs from the events written")
    db.close()
    return {"seconds": ph.seconds, "start_rss": ph.start_rss}


# ---------------------------------------------------------------------------- runner
DROP_CACHES = True
CAN_DROP = False


def settle() -> None:
    global CAN_DROP
    CAN_DROP = harness.settle(DROP_CACHES) or CAN_DROP


warm_up, library_version, loadavg = harness.warm_up, harness.library_version, harness.loadavg


WRITERS = {"raw": (raw_write, "raw.bin"), "ours": (ours_write, "store"), "sqlite": (sqlite_write, "sqlite.db")}
READERS = {"raw": [("read", raw_read)], "sqlite": [("read", sqlite_read)],
           "ours": [("read_slice", ours_read_slice), ("reader", ours_reader)]}


def remove(work: Path, name: str) -> None:
    for f in work.glob(name + "*"):
        shutil.rmtree(f) if f.is_dir() else f.unlink()


def run_side(side: str, work: Path, size: int, count: int, reps: int) -> dict:
    """Write (reps times, each into a fresh file/store; median), then read the last copy back
    cached and cold. Every phase in its own child process. Returns phase name -> result(s)."""
    fn, name = WRITERS[side]
    path = str(work / name)
    out: dict = {"write": []}
    for rep in range(reps):
        remove(work, name)
        settle()
        out["write"].append(in_child(fn, path, size, count))
    for cache in ("cached", "cold"):
        if cache == "cold":
            settle()
        for rname, rfn in READERS[side]:
            if cache == "cold" and rname == "reader":
                continue  # one cold pass per side
            out[f"{rname} ({cache})"] = in_child(rfn, path, size, count)
    remove(work, name)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one eighth of the events")
    ap.add_argument("--reps", type=int, default=1, help="write repetitions per side (median; default 1)")
    ap.add_argument("--no-sqlite", action="store_true", help="skip the SQLite baseline")
    ap.add_argument("--dir", help="where to put stores (default: bench/out/ under the repo)")
    ap.add_argument("--json", help="also write the results as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--no-drop-caches", action="store_true", help="only os.sync() between phases")
    args = ap.parse_args()
    global DROP_CACHES
    DROP_CACHES = not args.no_drop_caches
    sizes = SIZES_QUICK if args.quick else SIZES
    out_root = Path(args.dir) if args.dir else ROOT / "bench" / "out"
    out_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="large-", dir=out_root))

    def say(line: str = "") -> None:
        print(line, flush=True)

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    say(f"pravega_embedded {pe.__version__} large-events bench — nproc {len(os.sched_getaffinity(0))}, {cpu}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    say(f"library: {library_version()}")
    say(f"data dir: {work.parent}/large-…{' (quick)' if args.quick else ''}; before each write and "
        f"cold read: os.sync(){' + drop clean page cache' if DROP_CACHES else ''}")
    say(f"load average at start: {loadavg()}")
    t_all = time.perf_counter()
    warm_up(work, 512 if args.quick else 3072)
    settle()
    sides = ["raw", "ours"] + ([] if args.no_sqlite else ["sqlite"])
    results: dict = {"sizes": []}
    say(f"RSS of the bench process (each phase's process starts as a fork of it): "
        f"{_status('VmRSS') / MiB:,.0f} MiB; write repetitions per side: {args.reps} (median)"
        + ("" if CAN_DROP or not DROP_CACHES else "; cannot drop the page cache (not root): cold = cached"))
    ok = True
    try:
        for si, (size, count) in enumerate(sizes):
            order = sides[si % len(sides):] + sides[: si % len(sides)]
            res = {s: run_side(s, work, size, count, args.reps) for s in order}
            results["sizes"].append({"size": size, "count": count, "order": order, "sides": res})
            report(say, size, count, order, res)
    except BenchFailure as e:
        say(f"FAILED: {e}")
        ok = False
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kids = [r["ru_maxrss"] for sz in results["sizes"] for side in sz["sides"].values()
            for v in side.values() for r in (v if isinstance(v, list) else [v])]
    elapsed = time.perf_counter() - t_all
    say()
    say(f"peak RSS (ru_maxrss): bench process {ru / MiB:,.0f} MiB; highest of any phase's process "
        f"{max(kids, default=0) / MiB:,.0f} MiB; load average at the end: {loadavg()}; took {elapsed:.0f} s")
    if args.json:
        results.update(ru_maxrss=ru, elapsed_s=elapsed)
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def report(say, size: int, count: int, order: list[str], res: dict) -> None:
    total = size * count
    mb = total / 1e6

    def sec(side: str, phase: str) -> float:
        v = res[side][phase]
        return statistics.median(r["seconds"] for r in v) if isinstance(v, list) else v["seconds"]

    def peak_abs(side: str, phase: str) -> int:
        v = res[side][phase]
        return max(r["ru_maxrss"] for r in v) if isinstance(v, list) else v["ru_maxrss"]

    def peak(side: str, phase: str) -> int:
        v = res[side][phase]
        return max(r["peak"] for r in v) if isinstance(v, list) else v["peak"]

    say()
    say(f"{size // MiB} MiB events: {count} events, {total / MiB:,.0f} MiB per side (sides in the order "
        f"{', '.join(order)}); verified byte for byte")
    say(f"  {'phase':<34} {'MB/s':>8} {'x raw':>6} {'x sqlite':>8}   peak RSS (ru_maxrss of the phase)")
    rows = [("write", [("raw", "write", "raw write+fdatasync"), ("ours", "write", "ours write_event+flush"),
                       ("sqlite", "write", "sqlite INSERT+COMMIT")])]
    for cache in ("cached", "cold"):
        rows.append((f"read ({cache})", [("raw", f"read ({cache})", f"raw read ({cache})"),
                                         ("ours", f"read_slice ({cache})", f"ours read_slice ({cache})"),
                                         ("ours", f"reader ({cache})", f"ours reader ({cache})"),
                                         ("sqlite", f"read ({cache})", f"sqlite SELECT ({cache})")]))
    for base, lines in rows:
        for side, phase, label in lines:
            if side not in res or phase not in res[side]:
                continue
            s = sec(side, phase)
            xr = sec("raw", base) / s
            xs = f"{sec('sqlite', base) / s:>8.2f}" if "sqlite" in res else f"{'-':>8}"
            p = peak(side, phase)
            pk = f"{peak_abs(side, phase) / MiB:5,.0f} MiB, {p / MiB:+5,.0f} MiB over start ({p / size:.2f} x event)"
            say(f"  {label:<34} {mb / s:>8,.0f} {xr:>6.2f} {xs}   {pk}")
    w = res["ours"]["write"][-1]
    say(f"  ours per event: write_event p50 {statistics.median(w['write_event_ms']):,.1f} ms (chunks and MERGE "
        f"appended to the journal), flush p50 {statistics.median(w['flush_ms']):,.1f} ms (until the journal is "
        f"synced past the MERGE); raw per event p50 {statistics.median(res['raw']['write'][-1]['per_event_ms']):,.1f} ms")
    if len(res["ours"]["write"]) > 1:
        say("  write seconds per repetition: " + "; ".join(
            f"{side} " + ", ".join(f"{r['seconds']:.2f}" for r in res[side]["write"]) for side in order))


if __name__ == "__main__":
    sys.exit(main())
