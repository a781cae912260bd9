"""Tier-2 benchmark of pravega_embedded (issue 13): the copy to Parquet, ingest beside it,
catch-up reads from it and the local budget, each against its baseline in one run on the same
data.

    python bench/tiering.py                  # --mb 64 (about 40 s on 2 cores)
    python bench/tiering.py --mb 16          # a smoke run (~15 s; INGEST ends before the tierer copies)
    python bench/tiering.py --mb 256 --reps 3 --json out.json --dir /some/dir --keep --profile

Workload: ``--mb`` MB (10^6 B) of 1 KiB events, written by one writer with ``write_event`` and
one ``flush()`` (durability "fsync", the default, as in bench/run.py) over the routing keys
``sensor-0`` ... ``sensor-63`` into a stream of the default configuration (one segment: one
tier-2 file per flush, as a user's first stream). Event i is its index (u64, big-endian), 504
random bytes and 512 bytes of a JSON-like text from an offset derived from i: every event
differs and zstd halves it, like sensor records with an id and a random part.

1. COPY: a store opened with ``roll_bytes=16 MiB, tier2_file_bytes=2 GiB,
   tier2_file_age=86400`` (so the tierer thread copies nothing while the data is written), the
   data written, ``os.sync()``, then ``store.flush_tier2()`` timed: reading the journal (the
   tail cache holds most of it, as right after a write), building the Parquet file, writing,
   fsyncing and checking it, LMDB, the manifest (the journal files it frees are deleted by
   the tiering thread after the call: the bench waits for that, untimed, and prints when it
   was done, so nothing of ours runs beside the baselines). Baseline:
   ``pyarrow.parquet.write_table`` of the same rows (the tables read back from the store's own
   files: columns offset, routing_key, event, write_time and the file's key-value metadata)
   with the same options as ``tiering/parquetfile.py`` (zstd, the same rows per row group:
   ``ROW_GROUP_ROWS`` at most, about ``ROW_GROUP_BYTES`` of events, statistics on the
   layout's ``STATISTICS_COLUMNS``, a dictionary for its ``DICTIONARY_COLUMNS`` only, page
   checksums) to a file. Also shown: the same plus ``os.fsync`` of the file (the store's file is durable when flush_tier2 returns); ``pa.table`` built from Python
   lists of the same values plus write_table (a Python program starting from Python objects);
   and, timed before the flush, a column-wise copy through public calls: ``read_slice()
   .to_arrow()`` of the stream, a write_time column, write_table, fsync (what the copier could
   do with the store's C frame parser instead of a Python object per event). MB/s are of
   segment bytes (the journal's frames: 6-byte header, key, payload), the same numerator on
   every side; ratios are of times, medians of the repetitions; each repetition uses a fresh
   store; --reps + 2 repetitions (one slow repetition on a noisy host moves a median of three).
   Goal (issue 13): flush_tier2 >= 0.8x write_table.

2. CATCH-UP READS from tier 2: the store of the last COPY repetition, with a second stream
   written after the flush (17 MiB: the journal rolls) and flushed to tier 2, so the journal
   file holding the end of the measured stream is reclaimed as well: every event of it is read
   from Parquet (checked: the store's cold-read loads). Each timed read opens the store afresh
   (empty cold-read cache; the open, and a flush_tier2 that waits for the tierer's first
   round, are untimed) and reads the whole stream: ``read_slice(...).to_arrow()``, and a reader
   from the head (``read_next_event(timeout=0)`` until None; the time to its first event is
   printed too). Baseline: ``pyarrow.dataset.dataset(<tier2>/scope=bench/stream=s,
   format="parquet", partitioning="hive").to_table()``; and, as baselines doing the work the
   store's reads do, the same with page-checksum verification (the store verifies every page
   it reads) and pyarrow.dataset event by event (``to_batches``, each payload, key and offset
   turned into Python objects: what a program reading events one at a time from the files
   does). The files are in the page cache for
   every side (read once before). MB/s of payload bytes; median of --reps + 2 repetitions (the
   sides take turns going first); the to_arrow result is compared with the baseline's rows
   (offsets, keys, events). For reference, the same two reads from the local journal, timed in
   COPY's last repetition before its flush. Goal: >= 0.8x the baseline.

3. INGEST: the workload's events (cycled) up to ``--ingest-mb`` MB (default 16 x --mb: long
   enough for the tierer to copy 128 MiB files during the write) into a fresh store opened
   with ``tier2=False``, one opened with tiering on and its defaults (``pe.open(dir)``: tier 2
   in <store>/tier2, 128 MiB files, 180 s), and one with the tierer idle (2 GiB files, 1 day:
   the cost of tiering being on without copying); events/s until the writer's flush returns.
   Each write starts from os.sync() and, as root, a dropped clean page cache; the sides take
   turns going first; median of the repetitions. Also printed: how much the tierer copied
   during the timed write. Goal: tiering on >= 0.85x tier2=False.

4. LOCAL BUDGET: ``pe.open(dir, roll_bytes=1 MiB, local_budget=8 MiB)`` (``--budget-mib``) and
   ten times the budget ingested as in 3; a thread samples ``tiering_status().local_bytes``
   and the size of the journal folder every 10 ms. Printed: the peak of both against the
   budget, the ingest rate against tier2=False with the same roll_bytes (same run) and against
   COPY's flush_tier2 MB/s, and the appends that waited. Afterwards flush_tier2, and the
   tier-2 rows are counted (pyarrow).

--profile adds untimed cProfiles of one more flush_tier2 and of the two tier-2 reads.

Ratios are ours / baseline (higher is better). No test asserts timing.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import pravega_embedded as pe  # noqa: E402
from pravega_embedded.tiering.layout import (COMPRESSION, DICTIONARY_COLUMNS, SCHEMA,  # noqa: E402
                                             STATISTICS_COLUMNS)
from pravega_embedded.tiering.parquetfile import split_groups  # noqa: E402


def group_rows(tab: pa.Table) -> int:
    """The rows per row group the store's files have for these rows (parquetfile.split_groups:
    at most ROW_GROUP_ROWS rows and about ROW_GROUP_BYTES of events), for the baselines."""
    return next(split_groups(tab)).num_rows

import harness  # noqa: E402  bench/harness.py: shared by the runners

SCOPE, STREAM = "bench", "s"
SIZE = 1024
KEYS = [f"sensor-{i}" for i in range(64)]
MiB = 1 << 20
FRAME_HEADER = 6
TEXT = (b'{"sensor": "temperature", "unit": "celsius", "status": "ok", "firmware": "1.2.3", '
        b'"site": "plant-7", "line": 4, "calibrated": true} ') * 24
RANDOM_PART = SIZE - 8 - 512
DROP_CACHES = True
# the encoding options of the store's files (tiering/parquetfile.py), for the baselines
LAYOUT_OPTIONS = {"write_statistics": list(STATISTICS_COLUMNS), "use_dictionary": list(DICTIONARY_COLUMNS),
                  "write_page_checksum": True}


class BenchFailure(RuntimeError):
    pass


def say(line: str = "") -> None:
    print(line, flush=True)


# ---------------------------------------------------------------------------- workload
class Workload:
    """n distinct events of SIZE bytes (module docstring)."""

    def __init__(self, n: int) -> None:
        self.n = n
        rnd = os.urandom(n * RANDOM_PART)
        pack = struct.Struct(">Q").pack
        self.evs = [pack(i) + rnd[i * RANDOM_PART:(i + 1) * RANDOM_PART]
                    + TEXT[(i * 37) % 1024:(i * 37) % 1024 + 512] for i in range(n)]
        assert all(len(e) == SIZE for e in self.evs[:8])
        self.payload_bytes = n * SIZE
        self.segment_bytes = sum(FRAME_HEADER + len(KEYS[i & 63]) + SIZE for i in range(n))


def write_all(store: pe.Store, stream: str, evs: list[bytes], count: int | None = None) -> float:
    """``count`` events (default: all of ``evs``; cycled) with write_event, one flush; the
    seconds it took."""
    n, keys = len(evs), KEYS
    count = n if count is None else count
    w = store.create_writer(SCOPE, stream)
    we = w.write_event
    gc.collect()
    t = time.perf_counter()
    for i in range(count):
        we(evs[i % n], keys[i & 63])
    w.flush()
    dt = time.perf_counter() - t
    w.close()
    return dt


def open_store(path: Path, **options: object) -> pe.Store:
    store = pe.open(path, **options)  # durability "fsync" (the default)
    store.create_scope(SCOPE, exist_ok=True)
    store.create_stream(SCOPE, STREAM, exist_ok=True)
    return store


def settle() -> None:
    harness.settle(DROP_CACHES)


def cache_files(path: Path) -> None:
    for f in sorted(path.rglob("*")):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def journal_bytes(store_dir: Path) -> int:
    total = 0
    with os.scandir(store_dir / "journal") as it:
        for entry in it:
            try:
                total += entry.stat().st_size
            except FileNotFoundError:
                continue  # reclaimed meanwhile
    return total


def median(xs: list[float]) -> float:
    return statistics.median(xs)


# ---------------------------------------------------------------------------- 1. copy
def copy_rep(work: Path, wl: Workload, rep: int, keep: bool, profile: bool = False,
             local_reads: bool = False) -> dict:
    """One repetition of COPY: a fresh store, the data written, (``local_reads``: the READS
    sides timed from the local journal), a column-wise copy through read_slice().to_arrow(),
    flush_tier2 timed, then the baselines on the same rows. With ``keep`` the store is returned
    open (for READS)."""
    d = work / f"copy-{rep}"
    store = open_store(d, roll_bytes=16 * MiB, tier2_file_bytes=1 << 31, tier2_file_age=86400.0)
    write_all(store, STREAM, wl.evs)
    before = store.tiering_status()
    if before.tiered_bytes or before.files:
        raise BenchFailure(f"the tierer copied during the write: {before}")
    row: dict = {}
    if local_reads:  # the same reads as READS, from the local tier (tail cache and journal)
        for how in ("to_arrow", "reader"):
            gc.collect()
            dt, first, got, _ = read_stream(store, how)
            if got != wl.n:
                raise BenchFailure(f"local {how}: {got} events read, {wl.n} written")
            row[f"local_{how}_s"] = dt
    # what a column-wise copy through the store's own frame parser costs: the range as Arrow
    # (read_slice().to_arrow()), a write_time column, write_table, fsync
    out = work / f"baseline-{rep}"
    out.mkdir()
    os.sync()
    gc.collect()
    t = time.perf_counter()
    sl = store.read_slice(SCOPE, STREAM).to_arrow()
    tab = pa.table([sl.column("offset").cast(pa.int64()), sl.column("routing_key").cast(pa.string()),
                    sl.column("event").cast(pa.binary()),
                    pa.array([time.time_ns() // 1000] * sl.num_rows, pa.int64()).cast(SCHEMA.field("write_time").type)],
                   schema=SCHEMA)
    pq.write_table(tab, out / "colwise.parquet", compression=COMPRESSION, row_group_size=group_rows(tab),
                   **LAYOUT_OPTIONS)
    fd = os.open(out / "colwise.parquet", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    row["colwise_s"] = time.perf_counter() - t
    del sl, tab
    os.sync()
    gc.collect()
    prof = cProfile.Profile() if profile else None
    t = time.perf_counter()
    if prof:
        prof.enable()
    store.flush_tier2()
    if prof:
        prof.disable()
    t_ours = time.perf_counter() - t
    st = store.tiering_status()
    if st.untiered_bytes or st.tiered_bytes != wl.segment_bytes:
        raise BenchFailure(f"flush_tier2 left {st.untiered_bytes} B untiered, tiered "
                           f"{st.tiered_bytes} of {wl.segment_bytes}: {st}")
    # flush_tier2 leaves deleting the journal files it freed to the tiering thread: wait for
    # it (untimed, reported) so that nothing of ours runs beside the baselines
    row["reclaim_after_s"] = wait_reclaimed(store, t + t_ours)
    st = store.tiering_status()
    files = sorted((d / "tier2").rglob("*.parquet"))
    tables = [pq.read_table(f) for f in files]
    if sum(t.num_rows for t in tables) != wl.n or not all(
            t.schema.equals(SCHEMA, check_metadata=False) for t in tables):
        raise BenchFailure("the tier-2 files do not hold the workload's rows in the layout's schema")
    # baseline a: write_table of the same rows; b: + fsync; c: pa.table from Python lists first
    os.sync()
    gc.collect()
    t_write = t_sync = 0.0
    for i, tab in enumerate(tables):
        path = out / f"{i}.parquet"
        t = time.perf_counter()
        pq.write_table(tab, path, compression=COMPRESSION, row_group_size=group_rows(tab),
                       **LAYOUT_OPTIONS)
        t_write += time.perf_counter() - t
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        t_sync += time.perf_counter() - t
    lists = [({name: tab.column(name).to_pylist() for name in ("offset", "routing_key", "event")},
              tab.column("write_time").cast(pa.int64()).to_pylist(), tab.schema.metadata)
             for tab in tables]
    os.sync()
    gc.collect()
    t_lists = 0.0
    for i, (cols, times, meta) in enumerate(lists):
        t = time.perf_counter()
        tab = pa.table([pa.array(cols["offset"], pa.int64()), pa.array(cols["routing_key"], pa.string()),
                        pa.array(cols["event"], pa.binary()),
                        pa.array(times, pa.int64()).cast(SCHEMA.field("write_time").type)],
                       schema=SCHEMA).replace_schema_metadata(meta)
        pq.write_table(tab, out / f"lists-{i}.parquet", compression=COMPRESSION,
                       row_group_size=group_rows(tab), **LAYOUT_OPTIONS)
        t_lists += time.perf_counter() - t
    del lists, tables
    shutil.rmtree(out)
    row.update(ours_s=t_ours, write_table_s=t_write, write_table_fsync_s=t_sync, lists_write_table_s=t_lists,
               files=st.files, file_bytes=st.file_bytes, segment_bytes=st.tiered_bytes,
               local_bytes_after=st.local_bytes)
    if prof:
        row["profile"] = prof
    if keep:
        row["store"] = store
    else:
        store.close()
        shutil.rmtree(d)
    return row


def wait_reclaimed(store: pe.Store, since: float, timeout: float = 30.0) -> float:
    """Seconds from ``since`` until the tiering thread deleted the journal files a flush freed
    (local bytes down to the file being written, at most 16 MiB)."""
    deadline = time.monotonic() + timeout
    while store.tiering_status().local_bytes > 16 * MiB:
        if time.monotonic() > deadline:
            raise BenchFailure(f"the journal files were not deleted within {timeout} s of the "
                               f"flush: {store.tiering_status()}")
        time.sleep(0.001)
    return time.perf_counter() - since


# ---------------------------------------------------------------------------- 2. reads
def prepare_reads(store: pe.Store, wl: Workload) -> None:
    """Roll the journal past the measured stream's end and tier what follows it, so its last
    journal file is reclaimed too."""
    store.create_stream(SCOPE, "filler", exist_ok=True)
    write_all(store, "filler", wl.evs, (17 * MiB) // SIZE + 1)
    store.flush_tier2()
    store.close()


def read_dataset(folder: Path, checksums: bool = False) -> tuple[float, pa.Table]:
    """pyarrow.dataset's read of the stream's folder; with ``checksums``, verifying the page
    checksums as the store's cold reads do."""
    fmt: str | ds.ParquetFileFormat = "parquet"
    if checksums:
        fmt = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(
            page_checksum_verification=True))
    gc.collect()
    t = time.perf_counter()
    table = ds.dataset(folder, format=fmt, partitioning="hive").to_table()
    return time.perf_counter() - t, table


def loop_dataset(folder: Path) -> float:
    """What a program reading the events one at a time from the Parquet files does with
    pyarrow.dataset: each event's payload, key and offset as Python objects, batch by batch."""
    gc.collect()
    t = time.perf_counter()
    n = 0
    for batch in ds.dataset(folder, format="parquet", partitioning="hive").to_batches(
            columns=["event", "routing_key", "offset"]):
        for _ev, _key, _off in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(),
                                   batch.column(2).to_pylist()):
            n += 1
    return time.perf_counter() - t


def read_stream(store: pe.Store, how: str) -> tuple[float, float, int, pa.Table | None]:
    """Read the whole stream ``how`` ("to_arrow" or "reader"): (seconds, seconds to the first
    event, events, the table for to_arrow)."""
    if how == "to_arrow":
        t = time.perf_counter()
        table = store.read_slice(SCOPE, STREAM).to_arrow()
        dt = time.perf_counter() - t
        return dt, dt, table.num_rows, table
    r = store.create_reader(SCOPE, STREAM)
    rn = r.read_next_event
    t = time.perf_counter()
    n = 0 if rn(0) is None else 1
    first = time.perf_counter() - t
    while rn(0) is not None:
        n += 1
    dt = time.perf_counter() - t
    r.close()
    return dt, first, n, None


def read_store(store_dir: Path, how: str) -> tuple[float, float, int, int, pa.Table | None]:
    """Open the store afresh and read the whole stream ``how``: (seconds, seconds to the first
    event, events, row groups loaded from tier 2, the table for to_arrow)."""
    store = pe.open(store_dir, roll_bytes=16 * MiB)
    try:
        store.flush_tier2()  # the tierer's first round (recovery) is done before timing
        cold = store._engine.cold  # the bench reads the cold-read counter (ColdReads.loads)
        loads0 = cold.loads
        gc.collect()
        dt, first, n, table = read_stream(store, how)
        return dt, first, n, cold.loads - loads0, table
    finally:
        store.close()


def check_same_rows(ours: pa.Table, theirs: pa.Table) -> None:
    theirs = theirs.sort_by([("segment", "ascending"), ("offset", "ascending")])
    ours = ours.sort_by([("segment_id", "ascending"), ("offset", "ascending")])
    for a, b in (("offset", "offset"), ("routing_key", "routing_key"), ("event", "event")):
        x, y = ours.column(a), theirs.column(b)
        if x.type != y.type:
            y = y.cast(x.type)
        if not x.equals(y):
            raise BenchFailure(f"read_slice().to_arrow() and the tier-2 files differ in column {a}")


# ---------------------------------------------------------------------------- 4. budget
class Sampler(threading.Thread):
    """Samples tiering_status().local_bytes and the journal folder's size every ``every`` s."""

    def __init__(self, store: pe.Store, store_dir: Path, every: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.store, self.store_dir, self.every = store, store_dir, every
        self.stop = threading.Event()
        self.status_peak = self.dir_peak = self.samples = 0
        self.blocked = 0

    def run(self) -> None:
        while not self.stop.is_set():
            st = self.store.tiering_status()
            self.status_peak = max(self.status_peak, st.local_bytes)
            self.dir_peak = max(self.dir_peak, journal_bytes(self.store_dir))
            self.blocked += st.state == "blocked"
            self.samples += 1
            self.stop.wait(self.every)


def budget_run(work: Path, wl: Workload, budget: int, roll: int) -> dict:
    count = -(-10 * budget // SIZE)  # ten times the budget, in payload bytes
    res: dict = {"events": count, "budget": budget, "roll_bytes": roll}
    # baseline: the same ingest without tiering (nothing bounds the journal)
    d = work / "budget-off"
    settle()
    store = open_store(d, tier2=False, roll_bytes=roll)
    res["off_s"] = write_all(store, STREAM, wl.evs, count)
    res["off_journal_bytes"] = journal_bytes(d)
    store.close()
    shutil.rmtree(d)
    d = work / "budget-on"
    settle()
    store = open_store(d, roll_bytes=roll, local_budget=budget)
    sampler = Sampler(store, d)
    sampler.start()
    try:
        res["on_s"] = write_all(store, STREAM, wl.evs, count)
    finally:
        sampler.stop.set()
        sampler.join()
    res.update(status_peak=sampler.status_peak, dir_peak=sampler.dir_peak, samples=sampler.samples,
               blocked_samples=sampler.blocked, waits=store._engine.budget.waits)
    st = store.tiering_status()
    res["files_during"] = st.files
    t = time.perf_counter()
    store.flush_tier2()
    res["drain_s"] = time.perf_counter() - t
    st = store.tiering_status()
    res["files"] = st.files
    folder = d / "tier2" / f"scope={SCOPE}" / f"stream={STREAM}"
    rows = ds.dataset(folder, format="parquet", partitioning="hive").count_rows()
    store.close()
    if rows != count:
        raise BenchFailure(f"local budget run: {rows} rows in tier 2, {count} written")
    shutil.rmtree(d)
    return res


# ---------------------------------------------------------------------------- runner
def warm_imports(work: Path) -> None:
    """A small store tiered once, and a write_table: the lazy imports (pyarrow.parquet,
    pyarrow.dataset, fsspec) and first allocations fall outside every timed phase."""
    d = work / "warm"
    store = open_store(d)
    with store.create_writer(SCOPE, STREAM) as w:
        for i in range(2000):
            w.write_event(b"x" * SIZE, KEYS[i & 63])
    store.flush_tier2()
    store.close()
    tab = ds.dataset(d / "tier2", format="parquet", partitioning="hive").to_table()
    pq.write_table(tab, work / "warm.parquet", compression=COMPRESSION)
    (work / "warm.parquet").unlink()
    shutil.rmtree(d)


def print_profile(prof: cProfile.Profile, title: str, n: int = 15) -> None:
    say(f"  cProfile of {title} (top {n} by own time):")
    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.strip_dirs().sort_stats("tottime").print_stats(n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=64, help="MB of 1 KiB events to tier and read (default 64)")
    ap.add_argument("--ingest-mb", type=float, help="MB ingested per INGEST side (default 16 x --mb)")
    ap.add_argument("--budget-mib", type=int, default=8, help="local_budget of LOCAL BUDGET (default 8)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of INGEST (default 3); COPY and READS run 2 more")
    ap.add_argument("--dir", help="where to put stores (default: bench/out/ under the repo)")
    ap.add_argument("--json", help="also write the results as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile one more flush_tier2 and one more cold read (untimed)")
    ap.add_argument("--no-drop-caches", action="store_true",
                    help="only os.sync() between phases (do not drop the clean page cache)")
    args = ap.parse_args()
    global DROP_CACHES
    DROP_CACHES = not args.no_drop_caches
    out_root = Path(args.dir) if args.dir else ROOT / "bench" / "out"
    out_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tiering-", dir=out_root))
    n = max(int(args.mb * 1e6) // SIZE, 1000)
    ingest_events = max(int((args.ingest_mb or 16 * args.mb) * 1e6) // SIZE, 1000)
    reps = max(args.reps, 1)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    fs = os.popen(f"df -T {work} | tail -1 | awk '{{print $2}}'").read().strip()
    say(f"pravega_embedded {pe.__version__} tiering bench — nproc {len(os.sched_getaffinity(0))}, {cpu}, "
        f"Python {platform.python_version()}, pyarrow {pa.__version__}, fs {fs}")
    say(f"library: {harness.library_version()}")
    say(f"data dir: {work}; {n:,} events of {SIZE} B ({n * SIZE / 1e6:,.1f} MB) tiered and read, "
        f"{ingest_events:,} per ingest side, {reps} repetitions ({reps + 2} of COPY and READS); load average at start: {harness.loadavg()}")
    results: dict = {"machine": {"cpu": cpu, "python": platform.python_version(), "pyarrow": pa.__version__,
                                 "fs": fs, "library": harness.library_version()},
                     "mb": args.mb, "events": n, "ingest_events": ingest_events, "reps": reps}
    t_start = time.perf_counter()
    try:
        harness.warm_up(work, 1024)
        warm_imports(work)
        wl = Workload(n)
        seg_mb, pay_mb = wl.segment_bytes / 1e6, wl.payload_bytes / 1e6

        # 1. COPY -------------------------------------------------------------------------
        say()
        say(f"COPY TO TIER 2 ({seg_mb:,.1f} MB of segment data, {n:,} events, one segment; "
            f"MB/s of segment bytes)")
        rows = []
        kept = None
        copy_reps = reps + 2
        for rep in range(copy_reps):
            settle()
            row = copy_rep(work, wl, rep, keep=rep == copy_reps - 1, local_reads=rep == copy_reps - 1)
            kept = row.pop("store", kept)
            rows.append(row)
            say(f"  rep {rep + 1}: flush_tier2 {seg_mb / row['ours_s']:6,.1f} MB/s ({row['ours_s']:.3f} s)   "
                f"write_table {seg_mb / row['write_table_s']:6,.1f}   +fsync "
                f"{seg_mb / row['write_table_fsync_s']:6,.1f}   lists+write_table "
                f"{seg_mb / row['lists_write_table_s']:6,.1f}   to_arrow+write_table+fsync "
                f"{seg_mb / row['colwise_s']:6,.1f}   x write_table {row['write_table_s'] / row['ours_s']:.2f}"
                f"   (journal files deleted {row['reclaim_after_s']:.3f} s after the call)")
        med = {k: median([r[k] for r in rows]) for k in
               ("ours_s", "write_table_s", "write_table_fsync_s", "lists_write_table_s", "colwise_s")}
        copy = {"ours_mb_s": seg_mb / med["ours_s"], "write_table_mb_s": seg_mb / med["write_table_s"],
                "write_table_fsync_mb_s": seg_mb / med["write_table_fsync_s"],
                "lists_write_table_mb_s": seg_mb / med["lists_write_table_s"],
                "colwise_mb_s": seg_mb / med["colwise_s"],
                "x_write_table": med["write_table_s"] / med["ours_s"],
                "x_write_table_fsync": med["write_table_fsync_s"] / med["ours_s"],
                "x_lists_write_table": med["lists_write_table_s"] / med["ours_s"],
                "colwise_x_write_table": med["write_table_s"] / med["colwise_s"]}
        say(f"  median: flush_tier2 {copy['ours_mb_s']:,.1f} MB/s: x write_table {copy['x_write_table']:.2f}, "
            f"x write_table+fsync {copy['x_write_table_fsync']:.2f}, x lists+write_table "
            f"{copy['x_lists_write_table']:.2f}; to_arrow+write_table+fsync {copy['colwise_mb_s']:,.1f} MB/s = x "
            f"write_table {copy['colwise_x_write_table']:.2f}")
        say(f"  {rows[-1]['files']} file(s), {rows[-1]['file_bytes'] / 1e6:,.1f} MB of Parquet "
            f"({rows[-1]['file_bytes'] / wl.segment_bytes:.2f} of the segment bytes); journal left after the "
            f"flush {rows[-1]['local_bytes_after'] / 1e6:,.1f} MB (the file being written)")
        results["copy"] = copy | {"reps": [{k: v for k, v in r.items() if k != "profile"} for r in rows]}
        local = {k: rows[-1][f"local_{k}_s"] for k in ("to_arrow", "reader")}

        # 2. READS (on the kept store) ----------------------------------------------------
        store_dir = work / f"copy-{copy_reps - 1}"
        prepare_reads(kept, wl)
        folder = store_dir / "tier2" / f"scope={SCOPE}" / f"stream={STREAM}"
        cache_files(store_dir / "tier2")
        read_reps = reps + 2
        say()
        say(f"CATCH-UP READS FROM TIER 2 ({pay_mb:,.1f} MB of payload, every journal file reclaimed; "
            f"MB/s of payload bytes; the files in the page cache; {read_reps} repetitions)")
        sides = ["dataset", "to_arrow", "reader", "dataset+checksums", "dataset loop"]
        times: dict[str, list[float]] = {s: [] for s in sides}
        firsts: list[float] = []
        loads: dict[str, int] = {}
        for rep in range(read_reps):
            order = sides[rep % len(sides):] + sides[:rep % len(sides)]
            base_table = ours_table = None
            for side in order:
                if side == "dataset loop":
                    dt, got, ld = loop_dataset(folder), n, 0
                elif side.startswith("dataset"):
                    dt, table = read_dataset(folder, checksums=side != "dataset")
                    got, ld = table.num_rows, 0
                    if side == "dataset":
                        base_table = table
                    del table
                else:
                    dt, first, got, ld, table = read_store(store_dir, side)
                    if table is not None:
                        ours_table = table
                    else:
                        firsts.append(first)
                    if ld == 0:
                        raise BenchFailure(f"{side}: nothing was read from tier 2 (journal still there?)")
                    loads[side] = ld
                if got != n:
                    raise BenchFailure(f"{side}: {got} events read, {n} written")
                times[side].append(dt)
            if rep == 0:
                check_same_rows(ours_table, base_table)
            del base_table, ours_table
            say(f"  rep {rep + 1}: " + "   ".join(f"{s} {pay_mb / times[s][-1]:7,.1f} MB/s" for s in sides)
                + f"   (reader's first event after {firsts[-1] * 1e3:,.0f} ms)")
        med = {s: median(times[s]) for s in sides}
        reads = {f"{s}_mb_s": pay_mb / med[s] for s in sides} | {
            "x_dataset_to_arrow": med["dataset"] / med["to_arrow"],
            "x_dataset_reader": med["dataset"] / med["reader"], "row_groups_loaded": loads,
            "x_dataset_loop_reader": med["dataset loop"] / med["reader"],
            "x_dataset_checksums_to_arrow": med["dataset+checksums"] / med["to_arrow"],
            "reader_first_event_s": median(firsts), "seconds": times,
            "local_to_arrow_mb_s": pay_mb / local["to_arrow"], "local_reader_mb_s": pay_mb / local["reader"]}
        say(f"  median: pyarrow.dataset to_table {reads['dataset_mb_s']:,.1f} MB/s; read_slice().to_arrow() "
            f"{reads['to_arrow_mb_s']:,.1f} MB/s = x dataset {reads['x_dataset_to_arrow']:.2f}; reader "
            f"{reads['reader_mb_s']:,.1f} MB/s ({n / med['reader']:,.0f} ev/s, first event after "
            f"{reads['reader_first_event_s'] * 1e3:,.0f} ms) = x dataset {reads['x_dataset_reader']:.2f}")
        say(f"  pyarrow.dataset verifying page checksums as the store does: {reads['dataset+checksums_mb_s']:,.1f} MB/s; "
            f"to_arrow x it {med['dataset+checksums'] / med['to_arrow']:.2f}, reader x it "
            f"{med['dataset+checksums'] / med['reader']:.2f}")
        say(f"  pyarrow.dataset event by event (each payload, key and offset to Python, batch by batch): "
            f"{reads['dataset loop_mb_s']:,.1f} MB/s; reader x it {reads['x_dataset_loop_reader']:.2f}")
        say(f"  the same reads from the local journal (COPY's last repetition, before its flush_tier2): to_arrow "
            f"{reads['local_to_arrow_mb_s']:,.1f} MB/s, reader {reads['local_reader_mb_s']:,.1f} MB/s "
            f"({n / local['reader']:,.0f} ev/s)")
        say(f"  row groups loaded from tier 2 per read: {loads}; to_arrow's rows checked equal to the files'")
        results["reads"] = reads

        # 3. INGEST -----------------------------------------------------------------------
        say()
        say(f"INGEST ({ingest_events:,} events of {SIZE} B = {ingest_events * SIZE / 1e6:,.0f} MB per side, "
            f"write_event + one flush, durability fsync; events/s)")
        variants = {"tier2=False": {"tier2": False}, "tiering on": {},
                    "tiering idle": {"tier2_file_bytes": 1 << 31, "tier2_file_age": 86400.0}}
        ing: dict[str, list[float]] = {v: [] for v in variants}
        copied: dict[str, list[int]] = {v: [] for v in variants}
        for rep in range(reps):
            order = list(variants)[rep % 3:] + list(variants)[:rep % 3]
            for i, v in enumerate(order):
                d = work / f"ingest-{rep}-{i}"
                settle()
                store = open_store(d, **variants[v])
                dt = write_all(store, STREAM, wl.evs, ingest_events)
                ing[v].append(dt)
                copied[v].append(store.tiering_status().tiered_bytes if v != "tier2=False" else 0)
                store.close()
                shutil.rmtree(d)
            off = ing["tier2=False"][-1]
            say(f"  rep {rep + 1}: tier2=False {ingest_events / off:>9,.0f}   tiering on "
                f"{ingest_events / ing['tiering on'][-1]:>9,.0f} (x {off / ing['tiering on'][-1]:.2f}; "
                f"{copied['tiering on'][-1] / 1e6:,.0f} MB tiered during the write)   tiering idle "
                f"{ingest_events / ing['tiering idle'][-1]:>9,.0f} (x {off / ing['tiering idle'][-1]:.2f})")
        m = {v: median(ing[v]) for v in variants}
        mb_in = ingest_events * SIZE / 1e6
        ingest = {"off_ev_s": ingest_events / m["tier2=False"], "on_ev_s": ingest_events / m["tiering on"],
                  "idle_ev_s": ingest_events / m["tiering idle"],
                  "x_off": m["tier2=False"] / m["tiering on"], "idle_x_off": m["tier2=False"] / m["tiering idle"],
                  "tiered_during_bytes": copied["tiering on"], "seconds": ing}
        say(f"  median: tier2=False {ingest['off_ev_s']:,.0f} ev/s ({mb_in / m['tier2=False']:,.0f} MB/s); "
            f"tiering on {ingest['on_ev_s']:,.0f} ev/s ({mb_in / m['tiering on']:,.0f} MB/s) = x {ingest['x_off']:.2f}; "
            f"tiering idle (2 GiB files, 1 day: nothing copied) {ingest['idle_ev_s']:,.0f} ev/s = x "
            f"{ingest['idle_x_off']:.2f}")
        if not any(copied["tiering on"]):
            say("  note: the tierer finished no copy during any write: this ratio is of an idle tierer; "
                "raise --ingest-mb (the default 16 x --mb of 64 is enough here)")
        results["ingest"] = ingest

        # 4. LOCAL BUDGET -----------------------------------------------------------------
        budget = args.budget_mib * MiB
        roll = min(MiB, budget // 2)
        say()
        say(f"LOCAL BUDGET (local_budget {budget / MiB:.0f} MiB, roll_bytes {roll / MiB:.0f} MiB, "
            f"ten times the budget ingested, sampled every 10 ms)")
        b = budget_run(work, wl, budget, roll)
        mb = b["events"] * SIZE / 1e6
        say(f"  peak local_bytes (tiering_status) {b['status_peak'] / MiB:,.2f} MiB = {b['status_peak'] / budget:.2f}x "
            f"the budget; peak journal folder {b['dir_peak'] / MiB:,.2f} MiB ({b['samples']:,} samples, "
            f"{b['blocked_samples']:,} 'blocked')")
        say(f"  ingest {b['events'] / b['on_s']:,.0f} ev/s ({mb / b['on_s']:,.1f} MB/s) against tier2=False "
            f"{b['events'] / b['off_s']:,.0f} ev/s ({mb / b['off_s']:,.1f} MB/s, journal grew to "
            f"{b['off_journal_bytes'] / MiB:,.0f} MiB): x {b['off_s'] / b['on_s']:.2f}, and x "
            f"{mb / b['on_s'] / copy['ours_mb_s']:.2f} COPY's flush_tier2 MB/s; appends that waited "
            f"{b['waits']:,}; {b['files_during']} files by the end of the write, {b['files']} after "
            f"flush_tier2 ({b['drain_s']:.2f} s); rows in tier 2 checked")
        results["budget"] = b

        if args.profile:
            say()
            say("PROFILES (untimed extra runs)")
            settle()
            row = copy_rep(work, wl, copy_reps, keep=True, profile=True)
            print_profile(row["profile"], "flush_tier2")
            prepare_reads(row["store"], wl)
            prof = cProfile.Profile()
            prof.enable()
            read_store(work / f"copy-{copy_reps}", "to_arrow")
            prof.disable()
            print_profile(prof, "open + read_slice().to_arrow() from tier 2")
            prof = cProfile.Profile()
            prof.enable()
            read_store(work / f"copy-{copy_reps}", "reader")
            prof.disable()
            print_profile(prof, "open + reader loop from tier 2")
    except BenchFailure as exc:
        say(f"FAILED: {exc}")
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    say()
    targets = [
        ("flush_tier2 MB/s >= 0.8x pyarrow write_table of the same rows", copy["x_write_table"] >= 0.8,
         f"{copy['x_write_table']:.2f}x ({copy['ours_mb_s']:,.1f} against {copy['write_table_mb_s']:,.1f} MB/s)"),
        ("ingest 1 KiB events/s with tiering on (defaults) >= 0.85x tier2=False", ingest["x_off"] >= 0.85,
         f"{ingest['x_off']:.2f}x ({ingest['idle_x_off']:.2f}x with the tierer idle)"
         + ("" if any(ingest["tiered_during_bytes"]) else "; nothing was tiered during the writes")),
        ("catch-up read_slice().to_arrow() from tier 2 >= 0.8x pyarrow.dataset to_table",
         reads["x_dataset_to_arrow"] >= 0.8, f"{reads['x_dataset_to_arrow']:.2f}x"),
        ("catch-up reader loop from tier 2 >= 0.8x pyarrow.dataset to_table", reads["x_dataset_reader"] >= 0.8,
         f"{reads['x_dataset_reader']:.2f}x"),
        ("  the same reads against baselines doing the same work: to_arrow >= 0.8x dataset verifying "
         "page checksums", reads["x_dataset_checksums_to_arrow"] >= 0.8,
         f"{reads['x_dataset_checksums_to_arrow']:.2f}x"),
        ("  reader >= 0.8x pyarrow.dataset event by event", reads["x_dataset_loop_reader"] >= 0.8,
         f"{reads['x_dataset_loop_reader']:.2f}x"),
        ("local journal peak <= local_budget + 2 MiB (the bound tests/tiering/test_budget.py checks)",
         b["status_peak"] <= budget + 2 * MiB and b["dir_peak"] <= budget + 2 * MiB,
         f"{max(b['status_peak'], b['dir_peak']) / MiB:,.2f} MiB of {budget / MiB:.0f} MiB"),
    ]
    say("TARGETS (issue 13)")
    for name, ok, value in targets:
        say(f"  [{'met' if ok else 'NOT met':>7}] {name}: {value}")
    results["targets"] = [{"target": t, "met": ok, "value": v} for t, ok, v in targets]
    results["elapsed_s"] = time.perf_counter() - t_start
    say(f"(took {results['elapsed_s']:.0f} s; load average at the end: {harness.loadavg()})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
