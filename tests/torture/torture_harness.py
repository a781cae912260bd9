"""The concurrency torture run behind ``test_torture.py`` (public API only).

One store, one stream ``torture/events`` (``ScalingPolicy.fixed(1)`` at first, so nothing scales
by itself), and these threads for a bounded time:

- ``writer-w0..w3``: automatic sequence numbers. The events of writer ``i`` are a fixed plan:
  sequence ``n`` has the payload ``b"i:n:..."`` and the routing key of its block ``n // 8``
  (writer 0 has keyless blocks too); some blocks are one ``write_events`` batch, the others are
  eight ``write_event`` calls. ``flush()``/``durable_sequence`` give the acknowledged sequence.
- ``writer-xs``: explicit ``sequence=`` numbers with gaps (``3k + k % 3``), and re-sent
  duplicates that must be dropped (``duplicates_dropped``).
- ``txn``: transactions of 1..24 events over three keys, committed (75 %) or aborted.
- ``scaler``: ``scale_stream`` splits and merges of open segments, now and then
  ``update_stream(fixed(k))``.
- ``truncator``: ``truncate_stream`` at a tail cut or reader-group checkpoint cut taken seconds
  earlier. Before truncating it reads the slice head..cut with ``to_arrow()``: those events, each
  checked to lie before the cut by its segment and offset, are the only ones allowed to be
  missing at the end.
- ``checkpointer``: reader-group checkpoints (their cuts feed the truncator) and
  ``generate_stream_cuts``.
- ``snapshots``: ``read_slice().to_arrow()`` snapshots, each checked on the spot.
- ``reader-r0/r1`` (standalone) and ``group-g0/g1`` (one reader group): read all the time,
  checking per-key order and duplicates as they go.

The main thread closes the whole store every few seconds while all of that runs (every thread
must get a ``ClosedError`` subclass, nothing else, and no hang), reopens it, and the threads
resume: writers from ``last_sequence + 1``, the transaction thread by ``get_txn``, standalone
readers from their ``position()``, group readers by id. At the end the producers stop, the
stream is sealed, the readers drain, the store is closed and reopened once more, and a fresh
reader's read from the head is checked against everything recorded (``verify``).

A watchdog fails the run with every thread's stack (``faulthandler``) when a thread makes no
progress for ``stall`` seconds; the main thread runs each store call in a helper thread with the
same bound, so the run never hangs CI. Other failures are recorded (at most 5 messages per
thread or kind) and the run goes on, so one run lists every kind of failure; a thread that
got a wrong exception stops, and its events are left out of the final comparisons.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pravega_embedded as pe
from torture_model import (
    GROUP,
    N_GROUP_READERS,
    N_READERS,
    N_WRITERS,
    SCOPE,
    STREAM,
    TX,
    TX_SHIFT,
    XS,
    KeyLog,
    Plan,
    Run,
    Stuck,
    _src_of_key,
    describe,
    eid,
)
from torture_workers import (
    Checkpointer,
    GroupReaderWorker,
    ReaderWorker,
    Scaler,
    Snapshotter,
    StandaloneReader,
    Truncator,
    TxnWorker,
    Watchdog,
    Worker,
    WriterWorker,
    XsWorker,
    _SeqWriter,
)


# ---------------------------------------------------------------------- the run
def read_all(store: pe.Store) -> list[tuple[Any, bytes, int, int]]:
    """Every event from the head, by a fresh reader, to the end of the (sealed) stream."""
    r = store.create_reader(SCOPE, STREAM)
    out = []
    while True:
        ev = r.read_next_event(timeout=30)
        if ev is None:
            break
        out.append((ev.routing_key, ev.event, ev.segment_id, ev.offset))
    r.close()
    return out


def minimum_met(run: Run) -> list[str]:
    s = run.stats
    lacking = []
    for what in ("scalings", "truncations", "txns-committed", "txns-aborted", "reopens",
                 "checkpoints", "snapshots", "events-read-standalone", "events-read-group"):
        if s[what] < 1:
            lacking.append(what)
    for w in run.workers:
        if isinstance(w, _SeqWriter) and w.acked < 0:
            lacking.append(f"acknowledged events of {w.name}")
    return lacking


def torture(path: Path, durability: str, seconds: float, seed: int, stall: float = 60.0,
            rate: float = 400.0, artifacts: Path | None = None) -> Run:
    run = Run(path, durability, seconds, seed, stall, rate, artifacts or path.parent / "torture-artifacts")
    watchdog = Watchdog(run)
    before: list[tuple[Any, bytes, int, int]] = []
    try:
        store = run.bounded(lambda: pe.open(path, durability=durability), "pe.open")
        store.create_scope(SCOPE)
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
        store.create_reader_group(GROUP, pe.ReaderGroupConfig(
            streams=[(SCOPE, STREAM)], automatic_checkpoint_interval=1.5, max_outstanding_checkpoints=3))
        run.publish(store)
        writers: list[_SeqWriter] = [WriterWorker(run, i) for i in range(N_WRITERS)]
        writers.append(XsWorker(run))
        TxnWorker(run)
        Scaler(run, "scaler")
        Truncator(run, "truncator")
        Checkpointer(run, "checkpointer")
        Snapshotter(run, "snapshots")
        readers: list[ReaderWorker] = [StandaloneReader(run, f"reader-r{j}") for j in range(N_READERS)]
        readers += [GroupReaderWorker(run, f"group-g{j}", f"g{j}") for j in range(N_GROUP_READERS)]
        watchdog.start()
        for w in run.workers:
            w.start()

        deadline = run.started + seconds
        cap = run.started + max(3 * seconds, seconds + 90)
        while not run.aborted.is_set():
            now = time.monotonic()
            lacking = minimum_met(run)
            if now >= deadline and not lacking:
                break
            if now >= cap:
                run.fail(f"the run exercised too little in {now - run.started:.0f} s: no {', '.join(lacking)}")
                break
            run.aborted.wait(run.rng.uniform(2.0, 4.5))
            if run.aborted.is_set():
                break
            for w in writers:
                w.before_close = w.last_returned
            if not reopen(run, "with every thread active"):
                break

        # the producers stop (writers close, flushing); one more close and reopen under the
        # readers; the writers' ids must resume exactly where they ended
        run.stop.set()
        _wait_for(run, [w for w in run.workers if w.producer], "the producers to stop")
        if not run.aborted.is_set() and reopen(run, "with the readers active"):
            store = run.gen.store  # type: ignore[union-attr]
            for w in writers:
                if w.crashed:
                    continue
                L = run.bounded(lambda w=w: _last_sequence(store, w.wid), f"re-creating writer {w.wid}")
                if L != w.final_last:
                    run.fail(f"{w.name}: closed at last_sequence {w.final_last}, re-created with {L}")
                if L < w.acked:
                    run.fail(f"LOSS: {w.name}: re-created with last_sequence {L} < acknowledged {w.acked}")
        if not run.aborted.is_set():
            store = run.gen.store  # type: ignore[union-attr]
            run.sealing.set()
            run.bounded(lambda: store.seal_stream(SCOPE, STREAM), "seal_stream")
            before = run.bounded(lambda: read_all(store), "the read of the sealed stream")
            by_key: dict[str, set[int]] = defaultdict(set)
            keyless: set[int] = set()
            for key, ev, _, _ in before:
                c = run.classify("read after sealing", key, ev)
                if c is not None:
                    if key is None:
                        keyless.add(eid(*c))
                    else:
                        by_key[key].add(c[1])
            run.drain = (dict(by_key), keyless)
            _wait_for_readers(run, [w for w in readers if not w.crashed])
        run.finished.set()
        with run.cond:
            run.cond.notify_all()
        g = run.gen
        assert g is not None
        g.closing.set()
        run.bounded(g.store.close, "the last store.close()")
        g.closed.set()
        if not run.aborted.is_set():
            verify(run, before)
    except Stuck:
        pass
    except BaseException as exc:  # noqa: BLE001
        run.fail("the run itself failed", exc, abort=True)
    finally:
        run.stop.set()
        if run.gen is not None and not run.gen.closed.is_set() and not run.aborted.is_set():
            _wait_for(run, [w for w in run.workers if w.producer], "the producers to stop")
        run.finished.set()
        with run.cond:
            run.cond.notify_all()
        watchdog.quit.set()
        g = run.gen
        if g is not None and not g.closed.is_set():
            g.closing.set()
            closer = threading.Thread(target=_quiet_close, args=(g.store,), daemon=True)
            closer.start()
            closer.join(30)
        t_end = time.monotonic() + 10
        for w in run.workers:
            w.join(max(0.0, t_end - time.monotonic()))
    run.elapsed = time.monotonic() - run.started  # type: ignore[attr-defined]
    return run


def reopen(run: Run, what: str) -> bool:
    """Close the store under the running threads and open it again."""
    g = run.gen
    assert g is not None
    run.gen_stamps.append(next(run.stamp))
    g.closing.set()
    try:
        run.bounded(g.store.close, f"store.close() #{g.number} {what}")
    except Stuck:
        raise
    except Exception as exc:  # noqa: BLE001
        run.fail(f"store.close() #{g.number} {what} raised {type(exc).__name__}: {exc} "
                 f"(store.closed is {g.store.closed} after it)", exc)
        try:  # a second close() releases what the first left open
            run.bounded(g.store.close, f"store.close() #{g.number} again")
        except Stuck:
            raise
        except Exception as exc2:  # noqa: BLE001
            run.fail(f"store.close() #{g.number} raised again: {type(exc2).__name__}: {exc2}", exc2, abort=True)
            return False
    g.closed.set()
    run.count("reopens")
    time.sleep(run.rng.uniform(0.0, 0.3))  # threads meet the closed store
    store = run.bounded(lambda: pe.open(run.path, durability=run.durability), f"reopen #{g.number + 1}")
    run.publish(store)
    return True


def _last_sequence(store: pe.Store, wid: str) -> int:
    w = store.create_writer(SCOPE, STREAM, writer_id=wid)
    try:
        return w.last_sequence
    finally:
        w.close()


def _quiet_close(store: pe.Store) -> None:
    try:
        store.close()
    except BaseException:  # noqa: BLE001
        pass


def _wait_for(run: Run, workers: list[Worker], what: str) -> None:
    """Wait (bounded) for workers told to stop; after a failure, only for ones still beating."""
    t0 = time.monotonic()
    while not all(w.done for w in workers):
        if run.aborted.is_set():
            return
        if time.monotonic() - t0 > run.stall + 30:
            late = [f"{w.name} in {w.op!r}" for w in workers if not w.done]
            stacks = run.dump_stacks(f"waiting for {what}: {', '.join(late)}")
            run.fail(f"HANG: waiting for {what}: still running after {run.stall + 30:.0f} s: "
                     f"{', '.join(late)}\n{stacks}", abort=True)
            return
        time.sleep(0.1)


def _wait_for_readers(run: Run, readers: list[ReaderWorker]) -> None:
    """The readers read the sealed stream to its end: standalone readers until they have
    returned every event in it, group readers until the read-completed marker."""
    t0 = time.monotonic()
    while not all(w.done for w in readers):
        if run.aborted.is_set():
            return
        if time.monotonic() - t0 > run.stall:
            for w in readers:
                if w.done:
                    continue
                if isinstance(w, StandaloneReader) and time.monotonic() - w.last < 5:
                    w.report_missed()
                else:
                    stacks = run.dump_stacks(f"{w.name} did not finish reading the sealed stream")
                    run.fail(f"HANG: {w.name} did not finish reading the sealed stream in "
                             f"{run.stall:.0f} s (in {w.op!r})\n{stacks}", abort=True)
            return
        time.sleep(0.1)


# ---------------------------------------------------------------------- the checker
def _parse(payload: bytes) -> tuple[int, int] | None:
    try:
        a, b, _ = payload.split(b":", 2)
        return int(a), int(b)
    except ValueError:
        return None


def _seg(sid: int) -> str:
    return f"{sid & 0xFFFFFFFF}#{sid >> 32}"


def _around(run: Run, merged: dict[str, list[tuple[int, int, str]]], e: int) -> str:
    """Who of the group returned the events of e's key next to e, and in which generation."""
    src, n = e >> 48, e & ((1 << 48) - 1)
    key = run.plan.key_of(src, n)
    rows = merged.get(key, []) if key is not None else []
    def gen_of(stamp: int) -> int:
        return sum(1 for s in run.gen_stamps if s < stamp)
    below = [r for r in rows if r[1] < n][-3:]
    above = [r for r in rows if r[1] > n][:3]
    fmt = lambda r: f"{describe(eid(src, r[1]))} by {r[2]} in store generation {gen_of(r[0])}"
    return (f"  key {key!r}: before {describe(e)} the group returned "
            + "; ".join(map(fmt, below)) + " -- after it: " + "; ".join(map(fmt, above)))


def _vfail(run: Run, msg: str) -> None:
    run.fail(msg, source="verify:" + msg.split(":")[0][:40])


def verify(run: Run, before: list[tuple[Any, bytes, int, int]]) -> None:
    """Reopen the store, read everything from the head with a fresh reader and check it
    against what the threads recorded."""
    plan = run.plan
    store = run.bounded(lambda: pe.open(run.path, durability=run.durability), "the final reopen")
    try:
        final = run.bounded(lambda: read_all(store), "the final read from the head")
        if not store.stream_info(SCOPE, STREAM).sealed:
            _vfail(run, "the stream is no longer sealed after the final reopen")
        table = run.bounded(lambda: store.read_slice(SCOPE, STREAM).to_arrow(), "the final read_slice")
        as_slice = sorted(zip(table.column("segment_id").to_pylist(), table.column("offset").to_pylist(),
                              table.column("routing_key").to_pylist(), table.column("event").to_pylist()))
        as_read = sorted((sid, off, key, ev) for key, ev, sid, off in final)
        if as_slice != as_read:
            _vfail(run, f"the final read_slice().to_arrow() ({len(as_slice)} events) differs from the "
                     f"final reader's read ({len(as_read)} events)")
        if sorted((sid, off, key, ev) for key, ev, sid, off in before) != as_read:
            _vfail(run, f"a clean close and reopen changed the sealed stream: {len(before)} events "
                     f"before, {len(as_read)} after")
        txn_status = {}
        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id="tx")
        for t, rec in sorted(run.txns.items()):
            txn_status[t] = tw.get_txn(rec.txn_id).status().value
        tw.close()
    finally:
        run.bounded(store.close, "closing the checked store")

    # the events read back, parsed; exactly once; per-key order
    present: Counter[int] = Counter()
    log = KeyLog()
    by_segment: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for key, ev, sid, off in final:
        c = run.classify("final read", key, ev)
        if c is None:
            continue
        e = eid(*c)
        present[e] += 1
        bad = log.add(key, c[0], c[1])
        if bad:
            _vfail(run, f"final read: {bad}")
        if c[0] == TX:
            by_segment[sid].append((off, c[1] >> TX_SHIFT))
    for e, k in present.items():
        if k > 1:
            _vfail(run, f"DUPLICATE: {describe(e)} is in the stream {k} times")

    # what must be there: every writer's gap-free prefix, every committed transaction
    expected: set[int] = set()
    acked: dict[int, int] = {}
    # a thread that crashed (reported already) leaves its events out of the comparisons below
    unknown_src = {w.src for w in run.workers if isinstance(w, _SeqWriter) and w.crashed}
    unknown_txn = {t for t, rec in run.txns.items() if rec.status == "open"
                   and any(isinstance(w, TxnWorker) and w.crashed for w in run.workers)}

    def unknown(e: int) -> bool:
        return (e >> 48) in unknown_src or ((e >> 48) == TX and ((e & ((1 << 48) - 1)) >> TX_SHIFT) in unknown_txn)

    for w in run.workers:
        if not isinstance(w, _SeqWriter) or w.crashed:
            continue
        M = w.final_last
        if M is None:
            _vfail(run, f"{w.name} did not finish")
            continue
        acked[w.src] = w.acked
        if M < w.acked:
            _vfail(run, f"LOSS: {w.name}: last_sequence {M} at the end, but {w.acked} was acknowledged")
        if w.src == XS:
            k = 0
            while plan.xs_seq(k) <= M:
                expected.add(eid(XS, plan.xs_seq(k)))
                k += 1
        else:
            expected.update(eid(w.src, n) for n in range(M + 1))
    committed, aborted = set(), set()
    for t, rec in run.txns.items():
        if rec.status == "committed":
            committed.add(t)
            expected.update(eid(TX, (t << TX_SHIFT) | j) for j in range(rec.count))
        elif rec.status == "aborted":
            aborted.add(t)
        elif t not in unknown_txn:
            _vfail(run, f"txn {t} was left {rec.status} in phase {rec.phase}")
        want = {"committed": "COMMITTED", "aborted": "ABORTED"}.get(rec.status)
        if want and txn_status.get(t) != want:
            _vfail(run, f"txn {t}: {rec.status} by the run, {txn_status.get(t)} after the final reopen")
    for t in sorted(run.txn_visible - committed - unknown_txn)[:10]:
        _vfail(run, f"ABORTED VISIBLE: a snapshot showed events of transaction {t}, which is {run.txns[t].status}")

    truncated = run.t_done | run.t_maybe
    missing = [e for e in expected if e not in present and e not in truncated]
    if missing:
        missing.sort()
        lost_acked = [e for e in missing if (e >> 48) in acked and (e & ((1 << 48) - 1)) <= acked[e >> 48]]
        readers = [w for w in run.workers if isinstance(w, ReaderWorker)]

        def seen_by(e: int) -> str:
            src, n = e >> 48, e & ((1 << 48) - 1)
            key = plan.key_of(src, n)
            who = [w.name for w in readers
                   if (e in w.log.keyless if key is None else n in w.log.by_key.get(key, ()))]
            extra = ""
            if src == TX:
                rec = run.txns[n >> TX_SHIFT]
                extra = f"; transaction {rec.t}: {rec.interrupted or 'never interrupted'}"
            return f"{describe(e)} (returned earlier by {', '.join(who) or 'no reader'}{extra})"

        _vfail(run, f"LOSS: {len(missing)} events written and never truncated are not in the stream "
               f"({len(lost_acked)} of them acknowledged by flush/durable_sequence), e.g. "
               + ", ".join(seen_by(e) for e in missing[:12]))
    unexpected = [e for e in present if e not in expected and not unknown(e)]
    if unexpected:
        _vfail(run, f"{len(unexpected)} events in the stream that were never acknowledged or belong to "
                 f"aborted transactions, e.g. " + ", ".join(describe(e) for e in sorted(unexpected)[:12]))
    resurrected = [e for e in present if e in run.t_done]
    if resurrected:
        _vfail(run, f"{len(resurrected)} events truncated by a truncate_stream that returned are still "
                 f"readable, e.g. " + ", ".join(describe(e) for e in sorted(resurrected)[:12]))
    bogus = [e for e in run.t_any if e not in expected and not unknown(e)]
    if bogus:
        _vfail(run, f"the truncator's slices showed {len(bogus)} events that should not exist, e.g. "
                 + ", ".join(describe(e) for e in sorted(bogus)[:12]))

    # a committed transaction's events are one contiguous run in each segment
    for sid, rows in by_segment.items():
        rows.sort()
        seen_end: dict[int, int] = {}
        first: dict[int, int] = {}
        count: Counter[int] = Counter()
        for i, (_, t) in enumerate(rows):
            first.setdefault(t, i)
            seen_end[t] = i
            count[t] += 1
        for t in count:
            if seen_end[t] - first[t] + 1 != count[t]:
                _vfail(run, f"transaction {t} is not contiguous in segment {sid}")

    # the readers: nothing that should not exist, nothing missed after draining
    universe = expected
    for w in run.workers:
        if not isinstance(w, ReaderWorker) or w.crashed:
            continue
        seen = w.log.ids()
        ghost = [e for e in seen if e not in universe and not unknown(e)]
        if ghost:
            _vfail(run, f"{w.name} read {len(ghost)} events that were never acknowledged or belong to "
                     f"aborted transactions, e.g. " + ", ".join(describe(e) for e in sorted(ghost)[:12]))
        if isinstance(w, StandaloneReader) and not w.missed_reported:
            missed = [e for e in present if e not in seen]
            if missed:
                _vfail(run, f"LOSS for a reader: {w.name} never returned {len(missed)} events of the final "
                         f"stream, e.g. " + ", ".join(describe(e) for e in sorted(missed)[:12]))
    groups = [w for w in run.workers if isinstance(w, GroupReaderWorker)]
    merged: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    keyless: Counter[int] = Counter()
    for w in groups:
        keyless.update(w.log.keyless)
        assert w.log.stamps is not None
        for key, arr in w.log.by_key.items():
            merged[key].extend(zip(w.log.stamps[key], arr, itertools.repeat(w.name)))
    group_seen: set[int] = set()
    for key, rows in merged.items():
        rows.sort()
        src = _src_of_key(key)
        prev = None
        reported = False
        for stamp, n, who in rows:
            group_seen.add(eid(src, n))
            if prev is not None and n <= prev[0] and not reported:
                reported = True  # the first violation per key; the rest of the key is still counted
                dup = n == prev[0] or any(n == r[1] for r in rows if r[0] < stamp)
                _vfail(run, f"reader group: key {key!r}: {describe(eid(src, n))} returned by {who} after "
                       f"{describe(eid(src, prev[0]))} by {prev[1]} ({'a duplicate' if dup else 'out of order'})")
            prev = (n, who)
    for e, k in keyless.items():
        group_seen.add(e)
        if k > 1:
            _vfail(run, f"reader group: keyless {describe(e)} returned {k} times")
    gmissed = [e for e in present if e not in group_seen]
    if gmissed:
        where = {eid(*c): (sid, off) for key, ev, sid, off in final
                 if (c := _parse(ev)) is not None}
        _vfail(run, f"LOSS for the reader group: its readers never returned {len(gmissed)} events of the "
               f"final stream, e.g. " + ", ".join(f"{describe(e)} (segment {_seg(where[e][0])} offset "
                                                  f"{where[e][1]})" for e in sorted(gmissed)[:12])
               + "\n" + _around(run, merged, sorted(gmissed)[0]))
    run.count("final-events", len(final))
    run.count("expected-events", len(expected))
    n_acked = 0
    for src, a in acked.items():
        if src == XS:
            n_acked += sum(1 for _ in itertools.takewhile(lambda k: Plan.xs_seq(k) <= a, itertools.count()))
        else:
            n_acked += a + 1
    run.count("acked-events", n_acked)


def summary(run: Run) -> str:
    s = run.stats
    closed = {k.split(":", 1)[1]: v for k, v in s.items() if k.startswith("closed-errors:")}
    return (
        f"torture[{run.durability}] seed={run.seed} {getattr(run, 'elapsed', 0):.1f}s: "
        f"acked={s['acked-events']} written={s['events-written'] + s['txn-events-written']} "
        f"final={s['final-events']} (truncated away {len(run.t_done)}) "
        f"read: standalone={s['events-read-standalone']} group={s['events-read-group']} "
        f"txns committed={s['txns-committed']} aborted={s['txns-aborted']} "
        f"(finished after reopen {s['txns-finished-after-reopen']}) "
        f"scalings={s['scalings']} truncations={s['truncations']} reopens={s['reopens']} "
        f"checkpoints={s['checkpoints']} snapshots={s['snapshots']} "
        f"dups-dropped={s['duplicates-dropped']} reader-resumes={s['reader-resumed-at-position']} "
        f"(truncated under them {s['reader-resume-position-truncated']}) truncated-errors="
        f"{s['reader-truncated-errors'] + s['group-reader-truncated-errors']} "
        f"closed-errors={dict(sorted(closed.items()))} failures={run.nfailures}"
    )


def report(run: Run) -> str:
    head = (f"{run.nfailures} failure(s) in the torture run (seed {run.seed}, durability "
            f"{run.durability}, {run.seconds:.0f} s; the same random choices with PE_TORTURE_SEED="
            f"{run.seed} PE_TORTURE_SECONDS={run.seconds:.0f}; thread interleavings differ per run):")
    return "\n\n".join([head, *run.failures, summary(run)])
