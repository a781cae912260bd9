"""The benchmark runner of pravega_embedded: one run, the same data, baselines side by side.

    python bench/run.py            # full run (a few minutes on 2 cores)
    python bench/run.py --quick    # a smoke run (~30 s)
    python bench/run.py --json out.json

Measured (issue 2): write_event and write_events at 100 B, 1 KiB, 64 KiB and 1 MiB with the
default durability (fsync, group commit); durable-ack latency; catch-up read_next_event;
slice -> Arrow; write amplification. Baselines, on the same payloads in the same process:

  raw     a Python loop that frames each event like the store does (u32 length, u16 key length,
          key, payload), writes it through a buffered file and fdatasyncs every 1,000 events;
  sqlite  stdlib sqlite3, WAL, synchronous=NORMAL, table (key TEXT, seq INTEGER, payload BLOB),
          executemany of 1,000 rows per transaction (one commit per chunk).

Reads: ours = a fresh reader, read_next_event(timeout=0) until None; raw = parse the raw loop's
file with struct.unpack_from; sqlite = SELECT payload FROM t ORDER BY rowid. Slice -> Arrow:
read_slice(...).to_arrow() (first and best of two) against SELECT into pa.array.

Ratios are ours / baseline (higher is better for throughput, lower for latency).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import pravega_embedded as pe  # noqa: E402

KEYS = [f"sensor-{i}" for i in range(64)]
KEYS_B = [k.encode() for k in KEYS]
FRAME = struct.Struct("<IH")
SIZES = {100: 2_000_000, 1024: 500_000, 64 * 1024: 8_000, 1024 * 1024: 600}
BATCH = {100: 1000, 1024: 1000, 64 * 1024: 16, 1024 * 1024: 2}
# Large events are bound by the page cache and the device, which vary by tens of percent from
# one second to the next on this VM: they run three interleaved repetitions (raw, sqlite, ours,
# ours) and report the median time of each side, with every repetition's ratio.
REPS = {100: 1, 1024: 1, 64 * 1024: 3, 1024 * 1024: 3}


def payloads(size: int, n: int) -> list[bytes]:
    """n distinct payloads of `size` bytes (distinct objects, varied content)."""
    base = os.urandom(size + 256)
    return [base[i % 256 : i % 256 + size] for i in range(n)] if n <= 4096 else \
        [base[i % 256 : i % 256 + size] for i in range(4096)] * (n // 4096) + \
        [base[i % 256 : i % 256 + size] for i in range(n % 4096)]


# ---------------------------------------------------------------------------- baselines
def raw_write(path: Path, evs: list[bytes]) -> float:
    t = time.perf_counter()
    with open(path, "wb") as f:
        w, pack = f.write, FRAME.pack
        for i, ev in enumerate(evs):
            k = KEYS_B[i & 63]
            w(pack(len(ev), len(k)))
            w(k)
            w(ev)
            if i % 1000 == 999:
                f.flush()
                os.fdatasync(f.fileno())
        f.flush()
        os.fdatasync(f.fileno())
    return time.perf_counter() - t


def raw_read(path: Path) -> tuple[float, int]:
    t = time.perf_counter()
    data = path.read_bytes()
    n, p, unpack = 0, 0, FRAME.unpack_from
    while p < len(data):
        ln, kl = unpack(data, p)
        p += 6
        _key = data[p : p + kl]
        _ev = data[p + kl : p + kl + ln]
        p += kl + ln
        n += 1
    return time.perf_counter() - t, n


def sqlite_open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE t (key TEXT, seq INTEGER, payload BLOB)")
    return db


def sqlite_write(db: sqlite3.Connection, evs: list[bytes]) -> float:
    t = time.perf_counter()
    for start in range(0, len(evs), 1000):
        rows = [(KEYS[i & 63], i, evs[i]) for i in range(start, min(start + 1000, len(evs)))]
        db.execute("BEGIN")
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        db.execute("COMMIT")
    return time.perf_counter() - t


def sqlite_read(db: sqlite3.Connection) -> tuple[float, int]:
    t = time.perf_counter()
    n = 0
    for _ in db.execute("SELECT payload FROM t ORDER BY rowid"):
        n += 1
    return time.perf_counter() - t, n


def sqlite_arrow(db: sqlite3.Connection) -> tuple[float, int]:
    t = time.perf_counter()
    rows = db.execute("SELECT payload, key FROM t ORDER BY rowid").fetchall()
    table = pa.table({"event": pa.array([r[0] for r in rows], pa.large_binary()),
                      "routing_key": pa.array([r[1] for r in rows], pa.large_string())})
    return time.perf_counter() - t, table.num_rows


# ---------------------------------------------------------------------------- ours
def ours_write_event(store: pe.Store, stream: str, evs: list[bytes]) -> float:
    w = store.create_writer("bench", stream, writer_id=f"{stream}-we")
    we, keys = w.write_event, KEYS
    t = time.perf_counter()
    for i, ev in enumerate(evs):
        we(ev, keys[i & 63])
    w.flush()
    dt = time.perf_counter() - t
    w.close()
    return dt


def ours_write_events(store: pe.Store, stream: str, evs: list[bytes], batch: int) -> float:
    w = store.create_writer("bench", stream, writer_id=f"{stream}-wb")
    wes = w.write_events
    t = time.perf_counter()
    for j, start in enumerate(range(0, len(evs), batch)):
        wes(evs[start : start + batch], KEYS[j & 63])
    w.flush()
    dt = time.perf_counter() - t
    w.close()
    return dt


def ack_latency(store: pe.Store, samples: int, background: bool) -> tuple[float, float]:
    store.create_stream("bench", f"ack{int(background)}")
    stop = threading.Event()

    def noise() -> None:
        with store.create_writer("bench", f"ack{int(background)}", writer_id="noise") as w:
            ev = b"n" * 100
            while not stop.is_set():
                w.write_events([ev] * 100, "noise")
                time.sleep(0.0005)

    t_noise = threading.Thread(target=noise, daemon=True)
    if background:
        t_noise.start()
    w = store.create_writer("bench", f"ack{int(background)}", writer_id="acker")
    lat = []
    ev = b"a" * 100
    for _ in range(samples):
        t = time.perf_counter()
        w.write_event(ev, "k")
        w.flush()
        lat.append(time.perf_counter() - t)
    stop.set()
    if background:
        t_noise.join()
    w.close()
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)]


def raw_ack_latency(path: Path, samples: int, background: bool = False) -> tuple[float, float]:
    """Raw write+fdatasync of one framed event per sample. With ``background``, beside a raw
    busy writer that does the work ``ack_latency``'s busy writer asks of the store: every
    ~0.5 ms it frames 100 events of 100 B (this file's raw framing) and writes them to the same
    file, so its bytes ride on the measured fdatasync as they ride on the store's group commit."""
    lat = []
    stop = threading.Event()
    lock = threading.Lock()  # keeps the two threads' frames whole in the file
    with open(path, "wb") as f:

        def noise() -> None:
            key, ev, pack = b"noise", b"n" * 100, FRAME.pack
            while not stop.is_set():
                parts: list[bytes] = []
                for e in [ev] * 100:
                    parts += (pack(len(e), len(key)), key, e)
                buf = b"".join(parts)
                with lock:
                    f.write(buf)
                time.sleep(0.0005)

        t_noise = threading.Thread(target=noise, daemon=True)
        if background:
            t_noise.start()
        for _ in range(samples):
            t = time.perf_counter()
            with lock:
                f.write(FRAME.pack(100, 1) + b"k" + b"a" * 100)
                f.flush()
            os.fdatasync(f.fileno())
            lat.append(time.perf_counter() - t)
        stop.set()
        if background:
            t_noise.join()
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)]


def read_all(store: pe.Store, stream: str) -> tuple[float, int]:
    r = store.create_reader("bench", stream)
    rn = r.read_next_event
    n = 0
    t = time.perf_counter()
    while rn(0) is not None:
        n += 1
    dt = time.perf_counter() - t
    r.close()
    return dt, n


DROP_CACHES = True


def settle() -> None:
    """Same starting point for every measured phase: dirty data written back and, where allowed
    (root) and not disabled (--no-drop-caches), the clean page cache dropped, so no phase
    inherits another's dirty pages or cache."""
    os.sync()
    if DROP_CACHES:
        try:
            Path("/proc/sys/vm/drop_caches").write_text("1\n")
        except OSError:
            pass


def warm_up(work: Path, mib: int) -> None:
    """Write and delete `mib` MiB once: on a VM the first touch of guest memory for the page
    cache costs several times a normal write, and would otherwise fall on whichever side runs
    first."""
    block = os.urandom(1 << 20)
    path = work / "warm-up"
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)
        f.flush()
        os.fdatasync(f.fileno())
    path.unlink()
    settle()


def cache_files(path: Path) -> None:
    """Read every file under path once, so the timed read that follows finds it in the page
    cache (as the baselines do, which read what they have just written)."""
    for f in sorted(path.rglob("*")):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def proc_write_bytes() -> int:
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


# ---------------------------------------------------------------------------- runner
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the data")
    ap.add_argument("--dir", help="where to put stores (default: bench/out/ under the repo)")
    ap.add_argument("--json", help="also write the results as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--no-drop-caches", action="store_true",
                    help="only os.sync() between phases (do not drop the clean page cache)")
    args = ap.parse_args()
    global DROP_CACHES
    DROP_CACHES = not args.no_drop_caches
    out_root = Path(args.dir) if args.dir else ROOT / "bench" / "out"
    out_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=out_root))
    scale = 10 if args.quick else 1
    results: dict[str, object] = {}

    def say(line: str = "") -> None:
        print(line, flush=True)

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    fs = os.popen(f"df -T {work} | tail -1 | awk '{{print $2}}'").read().strip()
    nproc = len(os.sched_getaffinity(0))
    say(f"pravega_embedded {pe.__version__} bench — nproc {nproc}, {cpu}, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, pyarrow {pa.__version__}, fs {fs}")
    say(f"data dir: {work}{' (quick: a tenth of the data)' if args.quick else ''}; "
        f"between phases: os.sync(){' + drop clean page cache' if DROP_CACHES else ''}")
    results["machine"] = {"nproc": nproc, "cpu": cpu, "python": platform.python_version(), "fs": fs,
                          "sqlite": sqlite3.sqlite_version, "pyarrow": pa.__version__,
                          "quick": args.quick, "drop_caches": DROP_CACHES}
    t_start = time.perf_counter()
    warm_up(work, 3072 // scale)
    store_dir = work / "store"
    store = pe.open(store_dir)  # default durability: fsync with group commit
    store.create_scope("bench")
    say()
    say("WRITES (default durability; 4 segments; 64 routing keys)")
    say(f"{'size':>8} {'form':<12} {'events/s':>12} {'MB/s':>9} {'raw MB/s':>9} {'sqlite MB/s':>11} "
        f"{'x raw':>7} {'x sqlite':>9}")
    writes = {}
    amp = {}
    for size, n in SIZES.items():
        n = max(n // scale, 64)
        evs = payloads(size, n)
        mb = size * n / 1e6
        reps = REPS[size]
        t_raws: list[float] = []
        t_sqls: list[float] = []
        t_ours: dict[str, list[float]] = {"write_event": [], "write_events": []}
        db = None
        for rep in range(reps):
            # one repetition: raw, sqlite, write_event, write_events — each from a settled cache
            settle()
            gc.collect()
            raw_path = work / f"raw-{size}"
            t_raws.append(raw_write(raw_path, evs))
            if rep == 0:
                raw_read_result = raw_read(raw_path)
            raw_path.unlink()
            if db is not None:
                db.close()
                for f in work.glob(f"sqlite-{size}.db*"):
                    f.unlink()
            settle()
            db = sqlite_open(work / f"sqlite-{size}.db")
            t_sqls.append(sqlite_write(db, evs))
            for form in ("write_event", "write_events"):
                stream = f"s{size}-{form.replace('_', '-')}" + (f"-{rep}" if rep else "")
                store.create_stream("bench", stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
                settle()
                before_io, before_disk = proc_write_bytes(), disk_bytes(store_dir)
                gc.collect()
                dt = (ours_write_event(store, stream, evs) if form == "write_event"
                      else ours_write_events(store, stream, evs, BATCH[size]))
                t_ours[form].append(dt)
                if size in (100, 1024) and rep == 0:
                    store.checkpoint()
                    os.sync()
                    amp[f"{size}/{form}"] = {
                        "disk_growth": (disk_bytes(store_dir) - before_disk) / (size * n),
                        "device_writes": (proc_write_bytes() - before_io) / (size * n)}
        t_raw, t_sql = statistics.median(t_raws), statistics.median(t_sqls)
        for form in ("write_event", "write_events"):
            dt = statistics.median(t_ours[form])
            per_rep = [r / o for r, o in zip(t_raws, t_ours[form])]
            row = {"events": n, "reps": reps, "events_per_s": n / dt, "mb_per_s": mb / dt,
                   "raw_mb_per_s": mb / t_raw, "sqlite_mb_per_s": mb / t_sql,
                   "x_raw": t_raw / dt, "x_sqlite": t_sql / dt, "x_raw_per_rep": per_rep,
                   "seconds": {"ours": t_ours[form], "raw": t_raws, "sqlite": t_sqls}}
            writes[f"{size}/{form}"] = row
            spread = (f"  median of {reps}; x raw per rep " + ", ".join(f"{x:.2f}" for x in per_rep)
                      if reps > 1 else "")
            say(f"{size:>8} {form:<12} {row['events_per_s']:>12,.0f} {row['mb_per_s']:>9,.1f} "
                f"{row['raw_mb_per_s']:>9,.1f} {row['sqlite_mb_per_s']:>11,.1f} {row['x_raw']:>7.2f} "
                f"{row['x_sqlite']:>9.2f}{spread}")
        if size in (100, 1024):
            # reads on the same data
            store.checkpoint()
            cache_files(store_dir / "journal")  # the baselines read from the page cache too
            t_ours, got = read_all(store, f"s{size}-write-event")
            assert got == n, (got, n)
            t_rr, rn = raw_read_result
            t_sr, sn = sqlite_read(db)
            writes[f"{size}/read"] = {"events_per_s": n / t_ours, "raw_events_per_s": rn / t_rr,
                                      "sqlite_events_per_s": sn / t_sr}
            times = []
            for rep in range(2):
                sl = store.read_slice("bench", f"s{size}-write-event")
                gc.collect()
                t = time.perf_counter()
                table = sl.to_arrow()
                dt = time.perf_counter() - t
                assert table.num_rows == n
                times.append(dt)
                del table
            t_sa, _ = sqlite_arrow(db)
            writes[f"{size}/arrow"] = {"first_mb_per_s": mb / times[0], "best_mb_per_s": mb / min(times),
                                       "sqlite_mb_per_s": mb / t_sa}
        db.close()
        for f in work.glob(f"sqlite-{size}.db*"):
            f.unlink()
    results["writes"] = writes
    results["write_amplification"] = amp
    say()
    say("CATCH-UP READS (fresh reader from the head, read_next_event until None)")
    for size in (100, 1024):
        r = writes[f"{size}/read"]
        say(f"{size:>8} B  ours {r['events_per_s']:>12,.0f} ev/s   raw parse loop {r['raw_events_per_s']:>12,.0f} ev/s"
            f"   sqlite SELECT {r['sqlite_events_per_s']:>12,.0f} ev/s   x raw {r['events_per_s'] / r['raw_events_per_s']:.2f}"
            f"   x sqlite {r['events_per_s'] / r['sqlite_events_per_s']:.2f}")
    say()
    say("SLICE -> ARROW (payload MB/s; whole stream; first and best of two)")
    for size in (100, 1024):
        a = writes[f"{size}/arrow"]
        say(f"{size:>8} B  first {a['first_mb_per_s']:>8,.0f}   best {a['best_mb_per_s']:>8,.0f}   "
            f"sqlite->arrow {a['sqlite_mb_per_s']:>8,.0f}   x sqlite {a['best_mb_per_s'] / a['sqlite_mb_per_s']:.1f}")
    say()
    samples = 2000 // (5 if args.quick else 1)
    p50, p99 = ack_latency(store, samples, background=False)
    b50, b99 = ack_latency(store, samples, background=True)
    r50, r99 = raw_ack_latency(work / "raw-ack", samples)
    rb50, rb99 = raw_ack_latency(work / "raw-ack-busy", samples, background=True)
    results["ack_latency_ms"] = {"p50": p50 * 1e3, "p99": p99 * 1e3, "busy_p50": b50 * 1e3,
                                 "busy_p99": b99 * 1e3, "raw_p50": r50 * 1e3, "raw_p99": r99 * 1e3,
                                 "raw_busy_p50": rb50 * 1e3, "raw_busy_p99": rb99 * 1e3}
    say("DURABLE-ACK LATENCY (write_event of 100 B + flush(), round trip)")
    say(f"   alone: p50 {p50 * 1e3:.3f} ms  p99 {p99 * 1e3:.3f} ms   | with a busy writer beside it: "
        f"p50 {b50 * 1e3:.3f} ms  p99 {b99 * 1e3:.3f} ms")
    say(f"   raw write+fdatasync alone: p50 {r50 * 1e3:.3f} ms  p99 {r99 * 1e3:.3f} ms   | beside a raw "
        f"busy writer: p50 {rb50 * 1e3:.3f} ms  p99 {rb99 * 1e3:.3f} ms")
    say()
    say("WRITE AMPLIFICATION (bytes per payload byte during each write test, before any tier-2 copy)")
    for name, a in amp.items():
        size, form = name.split("/")
        say(f"{size:>8} B {form:<12} on-disk growth (journal + LMDB) {a['disk_growth']:.3f}x   "
            f"device writes (/proc/self/io write_bytes) {a['device_writes']:.3f}x")
    store.close()
    say()
    w100, w1k, w1m = writes["100/write_event"], writes["1024/write_events"], writes[f"{1024 * 1024}/write_events"]
    a100, a1k = writes["100/arrow"], writes["1024/arrow"]
    worst_amp = max(max(a["disk_growth"], a["device_writes"]) for a in amp.values())
    targets = [
        ("write_event 100 B >= 1,000,000 events/s", w100["events_per_s"] >= 1e6, f"{w100['events_per_s']:,.0f}"),
        ("write_event 100 B >= 1.0x raw loop", w100["x_raw"] >= 1.0, f"{w100['x_raw']:.2f}x"),
        ("write_events 1 KiB >= 0.9x raw MB/s", w1k["x_raw"] >= 0.9, f"{w1k['x_raw']:.2f}x"),
        ("write_events 1 MiB >= 0.9x raw MB/s", w1m["x_raw"] >= 0.9, f"{w1m['x_raw']:.2f}x"),
        ("durable-ack p99 <= 5 ms (alone)", p99 <= 0.005, f"{p99 * 1e3:.3f} ms"),
        ("durable-ack p99 <= 5 ms (busy writer beside it)", b99 <= 0.005, f"{b99 * 1e3:.3f} ms"),
        ("durable-ack p99 <= 2x raw write+fdatasync p99 (alone)", p99 <= 2 * r99, f"{p99 / r99:.2f}x"),
        ("durable-ack p99 beside a busy writer <= 2x raw p99 beside a raw busy writer", b99 <= 2 * rb99,
         f"{b99 / rb99:.2f}x"),
        ("durable-ack p99 beside a busy writer <= 2x raw p99 alone (the strict reading)", b99 <= 2 * r99,
         f"{b99 / r99:.2f}x"),
        ("catch-up read 100 B >= 1,000,000 events/s", writes["100/read"]["events_per_s"] >= 1e6,
         f"{writes['100/read']['events_per_s']:,.0f}"),
        ("slice -> Arrow >= 500 MB/s (100 B, best of two)", a100["best_mb_per_s"] >= 500,
         f"{a100['best_mb_per_s']:,.0f} MB/s (first {a100['first_mb_per_s']:,.0f})"),
        ("slice -> Arrow >= 500 MB/s (1 KiB, best of two)", a1k["best_mb_per_s"] >= 500,
         f"{a1k['best_mb_per_s']:,.0f} MB/s (first {a1k['first_mb_per_s']:,.0f})"),
        ("write amplification <= 1.2x (100 B and 1 KiB, both measures)", worst_amp <= 1.2,
         f"worst {worst_amp:.3f}x"),
    ]
    say("TARGETS (issues 2 and 12)")
    for name, ok, value in targets:
        say(f"  [{'met' if ok else 'NOT met':>7}] {name}: {value}")
    results["targets"] = [{"target": n, "met": ok, "value": v} for n, ok, v in targets]
    results["elapsed_s"] = time.perf_counter() - t_start
    say(f"(measured phases took {results['elapsed_s']:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
