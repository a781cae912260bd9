"""Reader-group benchmark of pravega_embedded (issue 3): one run, the same data, baseline side by side.

    python bench/readergroup.py            # full run (about a minute on 2 cores)
    python bench/readergroup.py --quick    # a tenth of the data, fewer samples
    python bench/readergroup.py --json out.json --dir /some/dir

Measured:

  1. catch-up throughput: a bounded reader group (end = the stream's tail) read by 1, 2 and 4
     reader threads over a 4-segment stream of 1,000,000 events of 100 B (keys cycling over 64
     keys), each run a fresh group, every thread reading until ``is_read_completed``; the
     baseline is one standalone reader (``store.create_reader``, ``read_next_event(timeout=0)``
     until None) on the same stream, in the same run. Three interleaved repetitions, median.
     Every run checks that the events read add up to the events written; one extra (untimed)
     run with 4 threads checks every (segment, offset) is delivered exactly once.
  2. checkpoint latency: ``initiate_checkpoint`` -> ``result()``, 4 reader threads, 200
     samples, p50/p99; readers idle (blocked at the tail), following a live stream a writer
     thread appends to steadily, and catching up on a backlog.
  3. rebalance on join: 2 reader threads at the tail of an 8-segment stream; a third reader
     is created and its thread starts reading; the time until ``segment_distribution()``
     shows it holding its fair share (>= 8 // 3 = 2 segments), polled in a tight loop and,
     for comparison, every 0.1 ms; 50 samples each, p50/p99.

Python threads share the GIL: more reader threads cannot read faster than one in aggregate.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import pravega_embedded as pe

SCOPE = "b"
KEYS = [f"sensor-{i}" for i in range(64)]
THREADS = (1, 2, 4)
HANG = 120.0  # seconds: a read that makes no progress for this long is reported as a hang


class BenchFailure(RuntimeError):
    pass


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def cache_files(path: Path) -> None:
    """Read every file under path once, so every timed read finds the data in the page cache."""
    for f in sorted(path.rglob("*")):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def write_stream(store: pe.Store, stream: str, segments: int, n: int, size: int) -> None:
    store.create_stream(SCOPE, stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))
    base = os.urandom(size + 256)
    evs = [base[i % 256: i % 256 + size] for i in range(4096)]
    with store.create_writer(SCOPE, stream) as w:
        we = w.write_event
        for i in range(n):
            we(evs[i & 4095], KEYS[i & 63])
        w.flush()


# ---------------------------------------------------------------------------- 1. catch-up
def standalone_read(store: pe.Store, stream: str) -> tuple[float, int]:
    r = store.create_reader(SCOPE, stream)
    rn = r.read_next_event
    n = 0
    gc.collect()
    t = time.perf_counter()
    while rn(0) is not None:
        n += 1
    dt = time.perf_counter() - t
    r.close()
    return dt, n


def bounded_config(store: pe.Store, stream: str) -> pe.ReaderGroupConfig:
    tail = store.stream_info(SCOPE, stream).tail
    return pe.ReaderGroupConfig(streams=[(SCOPE, stream)], end=tail, automatic_checkpoint_interval=None)


def group_read(store: pe.Store, stream: str, name: str, threads: int,
               collect: bool = False) -> tuple[float, list[int], list[tuple[int, int]]]:
    """A fresh bounded group read by `threads` reader threads until each sees is_read_completed.
    Returns (seconds, events per thread, [(segment_id, offset)] if collect)."""
    g = store.create_reader_group(name, bounded_config(store, stream))
    readers = [g.create_reader(f"r{i}") for i in range(threads)]
    counts = [0] * threads
    seen: list[list[tuple[int, int]]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)

    def run(i: int) -> None:
        r = readers[i]
        rn = r.read_next_event
        n = 0
        idle_since = None
        try:
            barrier.wait()
            if collect:
                out = seen[i]
                while True:
                    ev = rn(1.0)
                    if ev is None:
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since > HANG:
                            raise BenchFailure(f"reader r{i}: no read-completed after {HANG:.0f} s (hang)")
                        continue
                    if ev[0] is None:  # a marker (event is None only for markers)
                        if ev.is_read_completed:
                            break
                        continue
                    out.append((ev[2], ev[3]))
                    n += 1
            else:
                while True:
                    ev = rn(1.0)
                    if ev is None:  # nothing within 1 s: waiting for the others to finish
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since > HANG:
                            raise BenchFailure(f"reader r{i}: no read-completed after {HANG:.0f} s (hang)")
                        continue
                    if ev[0] is None:  # a marker: checkpoint (none here) or read-completed
                        if ev.is_read_completed:
                            break
                        continue
                    n += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        counts[i] = n

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    gc.collect()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join(HANG + 10)
    dt = time.perf_counter() - t0
    if any(t.is_alive() for t in ts):
        raise BenchFailure(f"group {name}: reader threads still running after {HANG + 10:.0f} s (hang)")
    if errors:
        raise BenchFailure(f"group {name}: reader thread failed: {errors[0]!r}") from errors[0]
    for r in readers:
        r.close()
    store.delete_reader_group(name)
    return dt, counts, [x for s in seen for x in s]


# ---------------------------------------------------------------------------- shared: reader threads
class ReaderThreads:
    """Group readers, each looping read_next_event(timeout) in its own thread until stopped; a
    checkpoint marker is simply followed by the next call (which records the checkpoint)."""

    def __init__(self, group, ids: list[str], timeout: float = 0.2) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.events: dict[str, int] = {}
        self.markers: dict[str, int] = {}
        self.threads = {}
        self.timeout = timeout
        for rid in ids:
            self.add(group.create_reader(rid))

    def add(self, r) -> threading.Thread:
        stop = threading.Event()

        def run() -> None:
            rn = r.read_next_event
            n = m = 0
            try:
                while not stop.is_set() and not self.stop.is_set():
                    ev = rn(self.timeout)
                    if ev is None:
                        continue
                    if ev[0] is None:
                        m += 1
                        continue
                    n += 1
            except BaseException as exc:  # noqa: BLE001
                self.errors.append(exc)
            finally:
                self.events[r.reader_id] = n
                self.markers[r.reader_id] = m
                r.close()

        t = threading.Thread(target=run, daemon=True)
        t.stop = stop  # type: ignore[attr-defined]
        self.threads[r.reader_id] = t
        t.start()
        return t

    def remove(self, rid: str) -> None:
        t = self.threads.pop(rid)
        t.stop.set()  # type: ignore[attr-defined]
        t.join(10)
        if t.is_alive():
            raise BenchFailure(f"reader {rid} did not stop within 10 s")
        self.check()

    def check(self) -> None:
        if self.errors:
            raise BenchFailure(f"reader thread failed: {self.errors[0]!r}") from self.errors[0]

    def close(self) -> None:
        self.stop.set()
        for rid in list(self.threads):
            self.remove(rid)


def wait_until(cond, what: str, limit: float = 30.0, step: float = 0.001) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise BenchFailure(f"timed out after {limit:.0f} s waiting for {what}")
        time.sleep(step)


# ---------------------------------------------------------------------------- 2. checkpoints
def unbounded(stream: str) -> pe.ReaderGroupConfig:
    return pe.ReaderGroupConfig(streams=[(SCOPE, stream)], automatic_checkpoint_interval=None)


STATS: dict[str, list[int]] = {"commits": [], "conflicts": [], "state_bytes": []}


def checkpoint_sample(g, name: str) -> float:
    # group-state figures read (read only) from the private synchronizer, to explain the latency:
    # commits = state revisions during the sample (initiate + 4 answers + any balancing),
    # conflicts = optimistic updates that lost a race and were recomputed
    gs = g._gs
    rev0, conf0 = gs.revision, gs.conflicts
    t = time.perf_counter()
    fut = g.initiate_checkpoint(name)
    try:
        fut.result(30)
    except TimeoutError:
        raise BenchFailure(f"checkpoint {name} did not complete within 30 s "
                           f"(outstanding {g.outstanding_checkpoints()}, "
                           f"distribution {g.segment_distribution()})") from None
    dt = time.perf_counter() - t
    STATS["commits"].append(gs.revision - rev0)
    STATS["conflicts"].append(gs.conflicts - conf0)
    STATS["state_bytes"].append(len(gs._raw))
    return dt


def checkpoints_idle(store: pe.Store, stream: str, samples: int) -> list[float]:
    g = store.create_reader_group("cp-idle", unbounded(stream))
    rt = ReaderThreads(g, [f"r{i}" for i in range(4)])
    wait_until(lambda: g.unread_bytes() == 0 and sorted(g.segment_distribution().counts.values()) == [1] * 4,
               "idle readers at the tail")
    lat = []
    for i in range(samples):
        time.sleep(0.005)  # every reader is back, blocked in read_next_event, before the sample
        lat.append(checkpoint_sample(g, f"cp-{i}"))
        rt.check()
    rt.close()
    store.delete_reader_group("cp-idle")
    return lat


def checkpoints_live(store: pe.Store, stream: str, samples: int) -> tuple[list[float], dict]:
    """4 readers following a stream a writer thread appends 100 events (100 B) to every ~1 ms."""
    store.create_stream(SCOPE, stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
    g = store.create_reader_group("cp-live", unbounded(stream))
    rt = ReaderThreads(g, [f"r{i}" for i in range(4)])
    stop = threading.Event()
    written = [0]
    werr: list[BaseException] = []

    def writer() -> None:
        ev = os.urandom(100)
        try:
            with store.create_writer(SCOPE, stream, writer_id="steady") as w:
                i = 0
                while not stop.is_set():
                    w.write_events([ev] * 100, KEYS[i & 63])
                    written[0] += 100
                    i += 1
                    time.sleep(0.001)
                w.flush()
        except BaseException as exc:  # noqa: BLE001
            werr.append(exc)

    wt = threading.Thread(target=writer, daemon=True)
    wt.start()
    wait_until(lambda: sorted(g.segment_distribution().counts.values()) == [1] * 4, "4 readers with 1 segment each")
    time.sleep(0.2)
    lat = []
    t0 = time.perf_counter()
    w0 = written[0]
    for i in range(samples):
        time.sleep(0.005)
        lat.append(checkpoint_sample(g, f"cp-{i}"))
        rt.check()
    dt = time.perf_counter() - t0
    w1 = written[0]
    lag_bytes = g.unread_bytes()
    stop.set()
    wt.join(30)
    if werr:
        raise BenchFailure(f"writer thread failed: {werr[0]!r}") from werr[0]
    wait_until(lambda: g.unread_bytes() == 0, "readers catching up with the writer")
    rt.close()
    total_read = sum(rt.events.values())
    if total_read != written[0]:
        raise BenchFailure(f"live stream: the group read {total_read:,} events, {written[0]:,} were written")
    store.delete_reader_group("cp-live")
    return lat, {"writer_events_per_s": (w1 - w0) / dt, "lag_bytes_at_end": lag_bytes,
                 "events_written": written[0], "events_read": total_read}


def checkpoints_catching_up(store: pe.Store, stream: str, samples: int) -> tuple[list[float], dict]:
    """4 readers reading a backlog from the head; a sample is taken only while more than 10% of
    the backlog is unread; when less is left, the group is replaced by a fresh one at the head."""
    total = store.stream_info(SCOPE, stream).length
    lat: list[float] = []
    groups = 0
    unread_after: list[int] = []  # unread bytes when each sample completed
    while len(lat) < samples:
        name = f"cp-busy-{groups}"
        groups += 1
        g = store.create_reader_group(name, unbounded(stream))
        rt = ReaderThreads(g, [f"r{i}" for i in range(4)])
        wait_until(lambda g=g: sorted(g.segment_distribution().counts.values()) == [1] * 4,
                   "4 readers with 1 segment each")  # started and balanced
        while len(lat) < samples and g.unread_bytes() > total // 10:
            lat.append(checkpoint_sample(g, f"cp-{len(lat)}"))
            unread_after.append(g.unread_bytes())
            rt.check()
            time.sleep(0.005)
        rt.close()
        store.delete_reader_group(name)
    return lat, {"groups": groups, "backlog_bytes": total,
                 "samples_ending_behind": sum(u > 0 for u in unread_after)}


# ---------------------------------------------------------------------------- 3. rebalance on join
def rebalance_on_join(store: pe.Store, stream: str, samples: int,
                      poll_sleep: float | None) -> tuple[list[float], list[float], dict]:
    """poll_sleep None: poll segment_distribution() in a tight loop (the main thread competes
    for the GIL with the readers); else sleep that long between polls."""
    name = f"join-{'tight' if poll_sleep is None else 'sleep'}"
    g = store.create_reader_group(name, unbounded(stream))
    rt = ReaderThreads(g, ["r1", "r2"])
    back = {"r1": 4, "r2": 4}
    wait_until(lambda: g.unread_bytes() == 0 and g.segment_distribution().counts == back,
               "2 readers holding 4 segments each at the tail")
    total, join_call, revisions = [], [], []
    finals: dict[str, int] = {}
    for i in range(samples):
        time.sleep(0.05)  # r1 and r2 blocked at the tail
        rid = f"j{i}"
        rev0 = g._gs.revision  # group-state commits during the join (a private figure, read only)
        t0 = time.perf_counter()
        r = g.create_reader(rid)
        t1 = time.perf_counter()
        rt.add(r)
        deadline = t0 + 30
        while True:
            counts = g.segment_distribution().counts
            if counts.get(rid, 0) >= 2:
                break
            if time.perf_counter() > deadline:
                raise BenchFailure(f"new reader {rid} did not get 2 segments within 30 s: {counts}")
            if poll_sleep is not None:
                time.sleep(poll_sleep)
        t2 = time.perf_counter()
        revisions.append(g._gs.revision - rev0)
        shape = ",".join(str(c) for c in sorted(counts.values(), reverse=True))
        finals[shape] = finals.get(shape, 0) + 1
        total.append(t2 - t0)
        join_call.append(t1 - t0)
        rt.check()
        def settled() -> bool:  # the balancing rule's fixed point: everyone at lo=2 or hi=3
            d = g.segment_distribution()
            return not d.unassigned and sorted(d.counts.values()) == [2, 3, 3]

        wait_until(settled, "the fixed point 3,3,2 after the join")
        rt.remove(rid)  # its thread closes it: its segments go back to r1 and r2
        wait_until(lambda: g.segment_distribution().counts == back and not g.segment_distribution().unassigned,
                   "r1 and r2 holding 4 segments each again")
    rt.close()
    store.delete_reader_group(name)
    return total, join_call, {"distribution_at_fair_share": finals,
                              "state_commits_median": statistics.median(revisions)}


# ---------------------------------------------------------------------------- runner
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the data, fewer samples")
    ap.add_argument("--dir", help="where to put stores (default: bench/out/ under the repo)")
    ap.add_argument("--json", help="also write the results as JSON here")
    args = ap.parse_args()
    out_root = Path(args.dir) if args.dir else ROOT / "bench" / "out"
    out_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rg-", dir=out_root))
    q = args.quick
    n_events = 100_000 if q else 1_000_000
    reps = 1 if q else 3
    cp_samples = 50 if q else 200
    join_samples = 10 if q else 50
    results: dict[str, object] = {}

    def say(line: str = "") -> None:
        print(line, flush=True)

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    nproc = len(os.sched_getaffinity(0))
    say(f"pravega_embedded {pe.__version__} reader-group bench — nproc {nproc}, {cpu}, Python "
        f"{platform.python_version()}, switch interval {sys.getswitchinterval() * 1e3:.0f} ms")
    say(f"data dir: {work}{' (quick)' if q else ''}")
    results["machine"] = {"nproc": nproc, "cpu": cpu, "python": platform.python_version(), "quick": q}
    t_start = time.perf_counter()
    store = pe.open(work / "store")  # default durability: fsync
    try:
        store.create_scope(SCOPE)
        write_stream(store, "s", 4, n_events, 100)
        store.checkpoint()
        cache_files(work / "store")

        # 1. catch-up throughput
        say()
        say(f"CATCH-UP READS ({n_events:,} events of 100 B, 4 segments, 64 keys; bounded group, end = tail; "
            f"{reps} interleaved repetition{'s' if reps > 1 else ''}, median)")
        times: dict[str, list[float]] = {"standalone": [], **{f"group-{k}": [] for k in THREADS}}
        per_thread: dict[str, list[int]] = {}
        for rep in range(reps):
            dt, n = standalone_read(store, "s")
            if n != n_events:
                raise BenchFailure(f"standalone reader read {n:,} events, {n_events:,} were written")
            times["standalone"].append(dt)
            for k in THREADS:
                dt, counts, _ = group_read(store, "s", f"tp-{rep}-{k}", k)
                if sum(counts) != n_events:
                    raise BenchFailure(f"group with {k} reader threads read {sum(counts):,} events "
                                       f"({counts}), {n_events:,} were written")
                times[f"group-{k}"].append(dt)
                per_thread[f"group-{k}"] = counts
        _, counts, seen = group_read(store, "s", "verify", 4, collect=True)
        dup = len(seen) - len(set(seen))
        if len(seen) != n_events or dup:
            raise BenchFailure(f"exactly-once check: {len(seen):,} events read ({dup:,} duplicates), "
                               f"{n_events:,} written")
        del seen
        base = statistics.median(times["standalone"])
        tp = {}
        say(f"{'reader':<26} {'events/s':>12} {'x standalone':>13}   per repetition (x standalone)")
        for name, ts in times.items():
            med = statistics.median(ts)
            per_rep = [s / t for s, t in zip(times["standalone"], ts)]
            label = "standalone reader" if name == "standalone" else \
                f"group, {name.split('-')[1]} reader thread{'s' if name != 'group-1' else ''}"
            tp[name] = {"events_per_s": n_events / med, "x_standalone": base / med,
                        "x_standalone_per_rep": per_rep, "seconds": ts,
                        "events_per_thread_last_rep": per_thread.get(name)}
            extra = f"   events per thread {per_thread[name]}" if name in per_thread and name != "group-1" else ""
            say(f"{label:<26} {n_events / med:>12,.0f} {base / med:>13.2f}   "
                + ", ".join(f"{x:.2f}" for x in per_rep) + extra)
        say(f"exactly once: every run read {n_events:,} events in total; an extra 4-thread run delivered "
            f"{n_events:,} distinct (segment, offset) pairs, 0 duplicates")
        results["catch_up"] = tp

        # 2. checkpoint latency
        say()
        say(f"CHECKPOINT LATENCY (initiate_checkpoint -> result(), 4 reader threads, {cp_samples} samples)")
        write_stream(store, "idle", 4, 10_000, 100)
        stats = {}

        def take_stats(name: str) -> None:
            stats[name] = {"commits_median": statistics.median(STATS["commits"]),
                           "conflicts_mean": statistics.mean(STATS["conflicts"]),
                           "state_bytes_max": max(STATS["state_bytes"])}
            for v in STATS.values():
                v.clear()

        lat_idle = checkpoints_idle(store, "idle", cp_samples)
        take_stats("idle at the tail")
        lat_live, live_info = checkpoints_live(store, "live", cp_samples)
        take_stats("live stream")
        lat_busy, busy_info = checkpoints_catching_up(store, "s", cp_samples)
        take_stats("catching up")
        cps = {}
        for name, lat, note in (
            ("idle at the tail", lat_idle, "readers blocked in read_next_event(0.2)"),
            ("live stream", lat_live,
             f"writer ~{live_info['writer_events_per_s']:,.0f} events/s; lag at end {live_info['lag_bytes_at_end']:,} B"),
            ("catching up", lat_busy,
             (f"backlog {n_events:,} events; {busy_info['groups']} fresh groups; readers still behind "
              f"when {busy_info['samples_ending_behind']}/{len(lat_busy)} samples completed")),
        ):
            cps[name] = {"p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
                         "max_ms": max(lat) * 1e3, "samples": len(lat), **stats[name]}
            say(f"  {name:<17} p50 {pct(lat, 0.5) * 1e3:7.3f} ms   p99 {pct(lat, 0.99) * 1e3:7.3f} ms   "
                f"max {max(lat) * 1e3:7.3f} ms   ({note})")
        say("  group-state updates per checkpoint (median commits / mean optimistic conflicts / largest state "
            "document): " + "; ".join(f"{k} {v['commits_median']:.0f} / {v['conflicts_mean']:.1f} / "
                                      f"{v['state_bytes_max']:,} B" for k, v in stats.items()))
        cps["live stream"].update(live_info)
        cps["catching up"].update(busy_info)
        say(f"  live stream: the group read all {live_info['events_written']:,} events written")
        results["checkpoint_latency"] = cps

        # 3. rebalance on join
        say()
        say(f"REBALANCE ON JOIN (8 segments; 2 reader threads at the tail; a 3rd joins; until it holds >= 2; "
            f"{join_samples} samples)")
        write_stream(store, "join", 8, 8_000, 100)
        rb = {}
        for label, poll in (("tight poll loop", None), ("poll every 0.1 ms", 0.0001)):
            tot, join_call, info = rebalance_on_join(store, "join", join_samples, poll)
            say(f"  {label:<17}  join -> fair share p50 {pct(tot, 0.5) * 1e3:7.3f} ms   "
                f"p99 {pct(tot, 0.99) * 1e3:7.3f} ms   max {max(tot) * 1e3:7.3f} ms   | create_reader() p50 "
                f"{pct(join_call, 0.5) * 1e3:6.3f} ms  p99 {pct(join_call, 0.99) * 1e3:6.3f} ms   | "
                f"state commits {info['state_commits_median']:.0f} (median)")
            say(f"  {'':<17}  segments per reader when the new one reached 2: "
                + ", ".join(f"{k} x{v}" for k, v in sorted(info["distribution_at_fair_share"].items()))
                + "; every sample then settled at 3,3,2")
            rb[label] = {
                "p50_ms": pct(tot, 0.5) * 1e3, "p99_ms": pct(tot, 0.99) * 1e3, "max_ms": max(tot) * 1e3,
                "create_reader_p50_ms": pct(join_call, 0.5) * 1e3,
                "create_reader_p99_ms": pct(join_call, 0.99) * 1e3, "samples": len(tot), **info}
        results["rebalance_on_join"] = rb
    finally:
        store.close()
        shutil.rmtree(work, ignore_errors=True)
    results["elapsed_s"] = time.perf_counter() - t_start
    say(f"(took {results['elapsed_s']:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
