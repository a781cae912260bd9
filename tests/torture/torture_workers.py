"""The torture run's threads (see ``torture_harness.py`` for the run): writers with automatic
and explicit sequences, transactions, scaling, truncation, checkpoints, Arrow snapshots,
standalone and reader-group readers, and the watchdog.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.topology import frontier
from torture_model import (
    BLOCK,
    GROUP,
    MAX_SEGMENTS,
    SCOPE,
    STREAM,
    TX,
    TX_SHIFT,
    XS,
    Gen,
    KeyLog,
    Pacer,
    Run,
    TxnRec,
    _src_of_key,
    describe,
    eid,
    src_name,
)


class Worker(threading.Thread):
    producer = True
    checkpoints = False  # a CheckpointFailedError while the store closes is expected

    def __init__(self, run: Run, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.run_ = run
        self.last = time.monotonic()
        self.waiting = False
        self.done = False
        self.stalled = False
        self.crashed = False   # stopped by a failure: left out of the end-of-run waits and checks
        self.op = "start"
        self.rng = random.Random(f"{run.seed}-{name}")
        run.workers.append(self)

    def beat(self, op: str | None = None) -> None:
        self.last = time.monotonic()
        if op is not None:
            self.op = op

    def run(self) -> None:  # noqa: D401 - threading.Thread.run
        gen: Gen | None = None
        try:
            while True:
                gen = self.run_.next_gen(self, gen)
                if gen is None:
                    return
                try:
                    if self.session(gen):
                        return
                except Exception as exc:  # noqa: BLE001 - classified
                    if not self.run_.clean_close_error(self, gen, exc):
                        self.crashed = True
                        return
        except BaseException as exc:  # noqa: BLE001
            self.crashed = True
            self.run_.fail(f"{self.name}: crashed in {self.op!r}", exc)
        finally:
            self.done = True

    def session(self, gen: Gen) -> bool:
        """Work on one open store; True when finished, a ClosedError when it was closed."""
        raise NotImplementedError

    def pause(self, lo: float, hi: float) -> None:
        self.run_.stop.wait(self.rng.uniform(lo, hi))


class _SeqWriter(Worker):
    """Shared by the writers: acknowledgement and resumption checks."""

    def __init__(self, run: Run, name: str, wid: str, src: int) -> None:
        super().__init__(run, name)
        self.wid, self.src = wid, src
        self.acked = -1            # highest durable_sequence seen (flush, durable_sequence)
        self.last_returned = -1    # highest sequence a write call returned
        self.attempt: int | None = None    # last sequence of the write call in progress
        self.before_close: int | None = None   # last_returned just before the main thread closed the store
        self.final_last: int | None = None
        self.resumes = 0

    def note_ack(self, d: int, w: pe.EventStreamWriter) -> None:
        if d < self.acked:
            self.run_.fail(f"{self.name}: durable_sequence went back from {self.acked} to {d}")
        if d > w.last_sequence:
            self.run_.fail(f"{self.name}: durable_sequence {d} > last_sequence {w.last_sequence}")
        self.acked = max(self.acked, d)

    def resumed(self, w: pe.EventStreamWriter) -> int:
        run, L = self.run_, w.last_sequence
        if self.last_returned >= 0 or self.attempt is not None or self.resumes:
            if L < self.acked:
                run.fail(f"LOSS: {self.name}: after reopening, last_sequence is {L} but sequence "
                         f"{self.acked} was acknowledged (durable_sequence)")
            if self.before_close is not None and L < self.before_close:
                run.fail(f"LOSS: {self.name}: after a clean close, last_sequence is {L} but write "
                         f"calls had returned up to sequence {self.before_close} before close() "
                         f"was called")
            hi = self.last_returned if self.attempt is None else max(self.last_returned, self.attempt)
            if L > hi:
                run.fail(f"{self.name}: after reopening, last_sequence {L} is beyond anything "
                         f"written (last returned {self.last_returned}, in progress {self.attempt})")
            elif L > self.last_returned and L != self.attempt:
                run.fail(f"{self.name}: after reopening, last_sequence {L} is inside the "
                         f"write_events batch ending at {self.attempt}: the batch was split")
            if L > self.last_returned:
                run.count("writes-kept-across-close")
        d = w.durable_sequence
        if d != L:
            run.fail(f"{self.name}: a re-created writer has durable_sequence {d} != last_sequence {L}")
        self.acked = max(self.acked, min(d, L))
        self.last_returned, self.attempt, self.before_close = L, None, None
        self.resumes += 1
        return L

    def finish(self, w: pe.EventStreamWriter) -> bool:
        self.beat("close")
        w.close()
        self.final_last = w.last_sequence
        d = w.durable_sequence
        if d != self.final_last:
            self.run_.fail(f"{self.name}: after close(), durable_sequence {d} != last_sequence {self.final_last}")
        self.acked = max(self.acked, d)
        return True


class WriterWorker(_SeqWriter):
    def __init__(self, run: Run, i: int) -> None:
        super().__init__(run, f"writer-w{i}", f"w{i}", i)
        self.i = i

    def session(self, gen: Gen) -> bool:
        run, plan, i = self.run_, self.run_.plan, self.i
        self.beat("create_writer")
        w = gen.store.create_writer(SCOPE, STREAM, writer_id=self.wid,
                                    linger=self.rng.choice((0.0, 0.0005, 0.002, 0.01)))
        n = self.resumed(w) + 1
        if n % BLOCK and plan.writer_batch(i, n // BLOCK):
            run.fail(f"{self.name}: last_sequence {n - 1} splits the write_events batch of block {n // BLOCK}")
        pacer = Pacer(run.rate, self.rng)
        while not run.stop.is_set():
            b = n // BLOCK
            key = plan.writer_key(i, b)
            if n % BLOCK == 0 and plan.writer_batch(i, b):
                want = n + BLOCK - 1
                self.attempt = want
                self.beat("write_events")
                seq = w.write_events([plan.payload(i, m) for m in range(n, n + BLOCK)], routing_key=key)
            else:
                want = n
                self.attempt = want
                self.beat("write_event")
                seq = w.write_event(plan.payload(i, n), routing_key=key)
            if seq != want:
                run.fail(f"{self.name}: a write returned sequence {seq}, expected {want}")
                return True
            self.last_returned, self.attempt = seq, None
            run.count("events-written", want - n + 1)
            n = seq + 1
            r = self.rng.random()
            if r < 0.03:
                self.beat("flush")
                self.note_ack(w.flush(), w)
            elif r < 0.08:
                self.note_ack(w.durable_sequence, w)
            pacer.pace(want - n + 2, run.stop)
        return self.finish(w)


class XsWorker(_SeqWriter):
    """Explicit sequence numbers with gaps, and re-sent duplicates."""

    def __init__(self, run: Run) -> None:
        super().__init__(run, "writer-xs", "xs", XS)

    def session(self, gen: Gen) -> bool:
        run, plan = self.run_, self.run_.plan
        self.beat("create_writer")
        w = gen.store.create_writer(SCOPE, STREAM, writer_id=self.wid,
                                    linger=self.rng.choice((0.0, 0.001, 0.005)))
        L = self.resumed(w)
        if L >= 0 and plan.xs_index(L) is None:
            run.fail(f"{self.name}: last_sequence {L} is no sequence this writer used")
            return True
        k = 0 if L < 0 else plan.xs_index(L) + 1  # type: ignore[operator]
        dups = 0

        def resend(j: int) -> None:
            nonlocal dups
            s = plan.xs_seq(j)
            self.beat("write_event(duplicate)")
            got = w.write_event(plan.payload(XS, s), routing_key=plan.xs_key(j), sequence=s)
            dups += 1
            if got != s or w.duplicates_dropped != dups:
                run.fail(f"{self.name}: re-sent sequence {s} returned {got}, duplicates_dropped "
                         f"{w.duplicates_dropped} (expected {dups})")
            run.count("duplicates-dropped")

        for j in range(max(0, k - 5), k):  # re-send the tail of what is stored: all dropped
            resend(j)
        pacer = Pacer(run.rate, self.rng)
        while not run.stop.is_set():
            s = plan.xs_seq(k)
            self.attempt = s
            self.beat("write_event(sequence=)")
            got = w.write_event(plan.payload(XS, s), routing_key=plan.xs_key(k), sequence=s)
            if got != s:
                run.fail(f"{self.name}: write_event(sequence={s}) returned {got}")
                return True
            self.last_returned, self.attempt = s, None
            run.count("events-written")
            k += 1
            r = self.rng.random()
            if r < 0.05:
                resend(k - 1 - self.rng.randint(0, min(k - 1, 20)))
            elif r < 0.08:
                self.beat("flush")
                self.note_ack(w.flush(), w)
            pacer.pace(1, run.stop)
        return self.finish(w)


class TxnWorker(Worker):
    def __init__(self, run: Run) -> None:
        super().__init__(run, "txn")
        self.next_t = 0
        self.pending: TxnRec | None = None

    def _finish(self, txn: pe.Transaction, rec: TxnRec) -> None:
        run = self.run_
        if rec.intent == "commit":
            rec.phase = "committing"
            self.beat("commit")
            txn.commit()
            rec.status = "committed"
            run.count("txns-committed")
            want = pe.TxnStatus.COMMITTED
        else:
            rec.phase = "aborting"
            self.beat("abort")
            txn.abort()
            rec.status = "aborted"
            run.count("txns-aborted")
            want = pe.TxnStatus.ABORTED
        rec.phase = "done"
        if rec.resumed:
            run.count("txns-finished-after-reopen")
        st = txn.status()
        if st != want:
            run.fail(f"txn {rec.t}: status {st} after {rec.intent}")

    def _resolve(self, tw: pe.TransactionalEventStreamWriter) -> None:
        """Finish the transaction a store close interrupted."""
        run, rec = self.run_, self.pending
        assert rec is not None
        if rec.txn_id is None:  # begin_txn was interrupted: no id, nothing written
            self.pending = None
            return
        self.beat("get_txn")
        txn = tw.get_txn(rec.txn_id)
        st = txn.status()
        rec.resumed = True
        rec.interrupted += f"closed during {rec.phase!r} with {rec.count} events written, {st.value} after the reopen; "
        if rec.phase == "writing":
            # a write call was interrupted: whether its events were staged is unknown: abort
            rec.intent = "abort"
            if st == pe.TxnStatus.OPEN:
                self._finish(txn, rec)
            else:
                rec.status = "committed" if st == pe.TxnStatus.COMMITTED else "aborted"
                run.fail(f"txn {rec.t}: interrupted while writing (never committed or aborted), "
                         f"it is {st.value} after the reopen")
        else:
            if rec.intent is None:
                rec.intent = "commit" if self.rng.random() < 0.75 else "abort"
            if st == pe.TxnStatus.OPEN:
                self._finish(txn, rec)  # a resumed transaction holds everything written to it
            elif st == pe.TxnStatus.COMMITTED and rec.intent == "commit":
                rec.status, rec.phase = "committed", "done"
                run.count("txns-committed")
            elif st == pe.TxnStatus.ABORTED and rec.intent == "abort":
                rec.status, rec.phase = "aborted", "done"
                run.count("txns-aborted")
            else:
                run.fail(f"txn {rec.t}: the store was closed during {rec.phase!r} "
                         f"(intent {rec.intent}); after the reopen it is {st.value}")
                rec.status = "committed" if st == pe.TxnStatus.COMMITTED else "aborted"
                rec.phase = "done"
        self.pending = None

    def session(self, gen: Gen) -> bool:
        run, plan = self.run_, self.run_.plan
        self.beat("create_transactional_writer")
        tw = gen.store.create_transactional_writer(SCOPE, STREAM, writer_id="tx")
        if self.pending is not None:
            self._resolve(tw)
        while not run.stop.is_set():
            t = self.next_t
            rec = TxnRec(t)
            self.pending = rec
            self.beat("begin_txn")
            txn = tw.begin_txn(lease=900)
            rec.txn_id, rec.phase = txn.txn_id, "writing"
            with run.lock:
                run.txns[t] = rec
            self.next_t += 1
            m = self.rng.randint(1, 24)
            idx = 0
            while idx < m:
                key = plan.tx_key(t, idx)
                end = min(m, (idx // 4 + 1) * 4)
                if end - idx > 1 and self.rng.random() < 0.4:
                    self.beat("txn.write_events")
                    txn.write_events([plan.payload(TX, (t << TX_SHIFT) | j) for j in range(idx, end)],
                                     routing_key=key)
                    idx = end
                else:
                    self.beat("txn.write_event")
                    txn.write_event(plan.payload(TX, (t << TX_SHIFT) | idx), routing_key=key)
                    idx += 1
                rec.count = idx
                if self.rng.random() < 0.15:
                    self.pause(0.0, 0.02)  # give scalings a chance to land mid-transaction
            if self.rng.random() < 0.3:
                rec.phase = "flushing"
                self.beat("txn.flush")
                txn.flush()
            rec.phase = "written"
            rec.intent = "commit" if self.rng.random() < 0.75 else "abort"
            self._finish(txn, rec)
            self.pending = None
            run.count("txn-events-written", m if rec.intent == "commit" else 0)
            self.pause(0.0, 0.05)
        tw.close()
        return True


class Scaler(Worker):
    def session(self, gen: Gen) -> bool:
        run, store = self.run_, gen.store
        while not run.stop.is_set():
            self.pause(0.15, 0.7)
            self.beat("stream_info")
            info = store.stream_info(SCOPE, STREAM)
            cur = info.current_segments
            floor = info.config.scaling.min_segments
            if self.rng.random() < 0.07:
                k = self.rng.choice((1, 2, 3))
                self.beat(f"update_stream(fixed({k}))")
                store.update_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(k)))
                after = store.stream_info(SCOPE, STREAM)
                if len(after.current_segments) != k:
                    run.fail(f"scaler: update_stream(fixed({k})) left {len(after.current_segments)} open segments")
                if after.epoch != info.epoch:
                    run.count("scalings")
                    run.count("rescalings-by-update_stream")
                continue
            splittable = [s for s in cur if s.key_high - s.key_low > 1e-6]
            can_split = len(cur) < MAX_SEGMENTS and splittable
            can_merge = len(cur) >= 2 and len(cur) - 1 >= floor
            if can_split and (not can_merge or self.rng.random() < 0.5):
                s = self.rng.choice(splittable)
                mid = (s.key_low + s.key_high) / 2
                seal, ranges = [s.segment_id], [(s.key_low, mid), (mid, s.key_high)]
                what = "split"
            elif can_merge:
                j = self.rng.randrange(len(cur) - 1)
                a, b = cur[j], cur[j + 1]
                seal, ranges = [a.segment_id, b.segment_id], [(a.key_low, b.key_high)]
                what = "merge"
            else:
                continue
            self.beat(f"scale_stream({what})")
            new = store.scale_stream(SCOPE, STREAM, seal=seal, new_ranges=ranges)
            if len(new) != len(ranges):
                run.fail(f"scaler: scale_stream returned {new} for {len(ranges)} ranges")
            run.count("scalings")
            run.count(f"scalings-{what}")
        return True


def expand(cut: pe.StreamCut, segs: dict[int, pe.SegmentInfo]) -> dict[int, int]:
    """The position a cut stands for in every segment (docs/streamcuts.md, cuts across
    scalings): a named segment its offset, an ancestor of one its end, any other 0."""
    named = cut.as_dict()
    pos = dict(named)
    todo = [p for sid in named for p in segs[sid].predecessors]
    while todo:
        a = todo.pop()
        if a not in pos:
            pos[a] = segs[a].length
            todo.extend(segs[a].predecessors)
    return pos


def at_least(cut: pe.StreamCut, info: pe.StreamInfo) -> pe.StreamCut:
    """The cut moved forward to the stream's head in every segment where it is behind it: the
    store's own frontier of the per-segment maximum (docs/streamcuts.md, cuts across scalings)."""
    segs = {s.segment_id: s for s in info.segments}
    a, h = expand(cut, segs), expand(info.head, segs)
    full = {sid: max(a.get(sid, 0), h.get(sid, 0)) for sid in segs}
    shapes = {sid: SimpleNamespace(sealed=s.sealed, length=s.length, preds=s.predecessors,
                                   succs=s.successors) for sid, s in segs.items()}
    return pe.StreamCut.of(SCOPE, STREAM, frontier(shapes, full))


def cut_le(a: pe.StreamCut, b: pe.StreamCut, segs: dict[int, pe.SegmentInfo]) -> bool:
    pa, pb = expand(a, segs), expand(b, segs)
    return all(pa.get(s, 0) <= pb.get(s, 0) for s in segs)


class Truncator(Worker):
    def __init__(self, run: Run, name: str) -> None:
        super().__init__(run, name)
        self.next_at = time.monotonic() + 1.5

    def session(self, gen: Gen) -> bool:
        run, store = self.run_, gen.store
        while not run.stop.is_set():
            self.pause(0.3, 0.9)
            self.beat("stream_info")
            run.add_cut(store.stream_info(SCOPE, STREAM).tail, "tail")
            now = time.monotonic()
            if now < self.next_at:
                continue
            with run.lock:
                ripe = [c for c in run.cuts if now - c[0] >= 1.0]
            if not ripe:
                continue
            taken, cut, source = ripe[-1] if self.rng.random() < 0.5 else self.rng.choice(ripe)
            with run.lock:
                run.cuts = [c for c in run.cuts if c[0] > taken]
            info = store.stream_info(SCOPE, STREAM)
            segs = {s.segment_id: s for s in info.segments}
            if not cut_le(info.head, cut, segs):
                run.count("truncation-cuts-behind-head")
                continue
            self.beat("read_slice(head..cut).to_arrow()")
            table = store.read_slice(SCOPE, STREAM, end=cut).to_arrow()
            segs = {s.segment_id: s for s in store.stream_info(SCOPE, STREAM).segments}
            pos = expand(cut, segs)
            ids = self.check_slice(table, pos, cut)
            with run.lock:
                again = [e for e in ids if e in run.t_done]
                run.t_any.update(ids)
            if again:
                run.fail(f"truncator: {len(again)} events read in head..cut were truncated "
                         f"earlier, e.g. {describe(again[0])}")
            self.beat(f"truncate_stream({source} cut)")
            try:
                store.truncate_stream(SCOPE, STREAM, cut)
            except BaseException:
                with run.lock:  # the truncation may or may not have happened
                    run.t_maybe.update(ids)
                raise
            with run.lock:
                run.t_done.update(ids)
            run.count("truncations")
            run.count(f"truncations-at-{source}-cut")
            run.count("events-truncated", len(ids))
            head = store.stream_info(SCOPE, STREAM)
            hsegs = {s.segment_id: s for s in head.segments}
            if not cut_le(cut, head.head, hsegs):
                run.fail(f"truncator: after truncate_stream({cut}) the head is {head.head}, behind the cut")
            self.next_at = time.monotonic() + self.rng.uniform(1.0, 3.0)
        return True

    def check_slice(self, table: Any, pos: dict[int, int], cut: pe.StreamCut) -> list[int]:
        run = self.run_
        ids = []
        log = KeyLog()
        events = table.column("event").to_pylist()
        keys = table.column("routing_key").to_pylist()
        sids = table.column("segment_id").to_pylist()
        offs = table.column("offset").to_pylist()
        for ev, key, sid, off in zip(events, keys, sids, offs):
            c = run.classify("truncator's slice head..cut", key, ev)
            if c is None:
                continue
            src, n = c
            if not off < pos.get(sid, 0):
                run.fail(f"truncator: read_slice(end={cut}) returned {describe(eid(src, n))} at "
                         f"segment {sid} offset {off}, which is not before the cut")
            bad = log.add(key, src, n)
            if bad:
                run.fail(f"truncator's slice: {bad}")
            ids.append(eid(src, n))
        return ids


class Checkpointer(Worker):
    checkpoints = True

    def session(self, gen: Gen) -> bool:
        run, store = self.run_, gen.store
        self.beat("get_reader_group")
        group = store.get_reader_group(GROUP)
        i = 0
        while not run.stop.is_set():
            self.pause(0.4, 1.4)
            if self.rng.random() < 0.2:
                self.beat("generate_stream_cuts")
                cuts = group.generate_stream_cuts(timeout=run.stall / 2)
                run.count("generated-stream-cuts")
                cut = cuts.get((SCOPE, STREAM))
                if cut is not None:
                    run.add_cut(cut, "generated")
                continue
            name = f"cp-{gen.number}-{i}"
            i += 1
            self.beat(f"initiate_checkpoint({name})")
            fut = group.initiate_checkpoint(name)
            t0 = time.monotonic()
            closed_at = None
            while True:
                try:
                    cp = fut.result(timeout=0.5)
                    break
                except TimeoutError:
                    now = time.monotonic()
                    if gen.closed.is_set():
                        closed_at = closed_at or now
                        if now - closed_at > 10:
                            run.fail(f"checkpointer: checkpoint {name!r} neither completed nor "
                                     f"failed 10 s after store.close() returned (a caller of "
                                     f"future.result() without a timeout hangs)")
                            raise errors.StoreClosedError("(abandoned checkpoint future)") from None
                    elif now - t0 > run.stall:
                        raise TimeoutError(f"checkpoint {name!r} did not complete in {run.stall:.0f} s "
                                           f"with the group's readers reading") from None
            self.beat()
            run.count("checkpoints")
            cut = cp.stream_cuts.get((SCOPE, STREAM))
            if cut is not None:
                run.add_cut(cut, "checkpoint")
        return True


class Snapshotter(Worker):
    def session(self, gen: Gen) -> bool:
        run, store = self.run_, gen.store
        while not run.stop.is_set():
            self.pause(0.3, 1.0)
            self.beat("read_slice().to_arrow()")
            try:
                table = store.read_slice(SCOPE, STREAM).to_arrow()
            except errors.TruncatedDataError:
                run.count("snapshots-truncated-under-them")
                continue
            self.beat("checking a snapshot")
            self.check(table)
            run.count("snapshots")
        return True

    def check(self, table: Any) -> None:
        run, plan = self.run_, self.run_.plan
        log = KeyLog()
        txn_counts: Counter[int] = Counter()
        events = table.column("event").to_pylist()
        keys = table.column("routing_key").to_pylist()
        for ev, key in zip(events, keys):
            c = run.classify("snapshot", key, ev)
            if c is None:
                continue
            src, n = c
            bad = log.add(key, src, n)
            if bad:
                run.fail(f"snapshot (read_slice().to_arrow()): {bad}")
            if src == TX:
                txn_counts[n >> TX_SHIFT] += 1
        run.count("snapshot-rows", len(events))
        # holes: between two events of a key, every event of that key written between them
        for key, arr in log.by_key.items():
            src = _src_of_key(key)
            if src == TX:
                continue
            for a, b in zip(arr, arr[1:]):
                if b <= a:
                    continue
                if src == XS:
                    ka, kb = plan.xs_index(a), plan.xs_index(b)
                    if kb - ka != 4:  # type: ignore[operator]
                        run.fail(f"snapshot: key {key!r} jumps from xs seq {a} to {b}: events between them are missing")
                    continue
                for blk in range(a // BLOCK, b // BLOCK + 1):
                    if plan.writer_key(src, blk) != key:
                        continue
                    lo, hi = max(blk * BLOCK, a + 1), min(blk * BLOCK + BLOCK, b)
                    if lo < hi:
                        run.fail(f"snapshot: key {key!r} jumps from {src_name(src)} seq {a} to {b}: "
                                 f"seq {lo}..{hi - 1} of that key are missing")
                        break
        partial = []
        with run.lock:
            run.txn_visible.update(txn_counts)
            for t, c in txn_counts.items():
                rec = run.txns.get(t)
                if rec is None:
                    partial.append(f"snapshot: events of transaction {t}, which was never begun")
                elif c != rec.count and not any(eid(TX, (t << TX_SHIFT) | j) in run.t_any
                                                for j in range(rec.count)):
                    partial.append(f"ATOMICITY: a snapshot shows {c} of the {rec.count} events of "
                                   f"transaction {t} (status {rec.status}, phase {rec.phase})")
        for msg in partial:
            run.fail(msg)


class ReaderWorker(Worker):
    producer = False

    def __init__(self, run: Run, name: str) -> None:
        super().__init__(run, name)
        self.log = KeyLog()
        self.resume: pe.StreamCut | None = None
        self.completed = False
        self.missed_reported = False
        # the readers whose name ends in 1 fall behind now and then (pausing between two events,
        # often in the middle of a chunk), so truncations and closes overtake them
        self.laggy = name.endswith("1")
        self.pause_at = time.monotonic() + self.rng.uniform(1.0, 3.0)

    def maybe_lag(self) -> None:
        if not self.laggy or self.run_.sealing.is_set():
            return
        now = time.monotonic()
        if now >= self.pause_at:
            self.beat("lagging")
            self.run_.finished.wait(self.rng.uniform(2.0, 6.0))
            self.pause_at = time.monotonic() + self.rng.uniform(0.5, 2.5)
            self.run_.count("reader-lags")

    def record(self, ev: Any, where: str, stamp: int = 0) -> None:
        run = self.run_
        c = run.classify(where, ev.routing_key, ev.event)
        if c is None:
            return
        bad = self.log.add(ev.routing_key, c[0], c[1], stamp)
        if bad:
            run.fail(f"{where}: {bad}")

    def report_missed(self) -> None:
        by_key, keyless = self.run_.drain  # type: ignore[misc]
        missed = sorted(eid(_src_of_key(k), n) for k, ns in by_key.items()
                        for n in ns - set(self.log.by_key.get(k, ())))
        missed += sorted(keyless - set(self.log.keyless))
        self.missed_reported = True
        self.run_.fail(f"LOSS for a reader: {self.name} is at the end of the sealed stream and never "
                       f"returned {len(missed)} of its events, e.g. "
                       + ", ".join(describe(e) for e in missed[:12]))

    def drained(self) -> bool:
        target = self.run_.drain
        if target is None:
            return False
        by_key, keyless = target
        for key, ns in by_key.items():
            arr = self.log.by_key.get(key)
            if arr is None or not ns.issubset(arr):
                return False
        return keyless.issubset(self.log.keyless)


class StandaloneReader(ReaderWorker):
    def session(self, gen: Gen) -> bool:
        run, store = self.run_, gen.store
        self.beat("create_reader")
        if self.resume is None:
            r = store.create_reader(SCOPE, STREAM)
        else:
            try:
                r = store.create_reader(SCOPE, STREAM, start=self.resume)
                run.count("reader-resumed-at-position")
            except errors.TruncatedDataError:
                # truncation overtook the saved position in some segment: go on from the head
                # there and from the saved position everywhere else, as an application does (a
                # reader from the stream's head would return the events after the head again)
                run.count("reader-resume-position-truncated")
                r = self.resume_past_head(store)
            except Exception as exc:
                info = store.stream_info(SCOPE, STREAM)
                named = self.resume.as_dict()
                exc.add_note(f"resuming at the position() the reader gave after its store was closed: "
                             f"{self.resume}; head now {info.head}; named segments now "
                             + ", ".join(f"{s.segment_id >> 32}:{s.segment_id & 0xFFFFFFFF} head={s.head} "
                                         f"length={s.length} sealed={s.sealed}"
                                         for s in info.segments if s.segment_id in named))
                raise
        at_end = 0
        try:
            while True:
                if run.finished.is_set():
                    return True
                self.beat("read_next_event")
                t0 = time.monotonic()
                try:
                    ev = r.read_next_event(timeout=0.5)
                except errors.TruncatedDataError:
                    run.count("reader-truncated-errors")
                    continue
                if ev is None:
                    if run.drain is not None and self.drained():
                        self.completed = True
                        return True
                    if run.drain is not None and time.monotonic() - t0 < 0.4:
                        at_end += 1  # None at once: the end of the sealed stream
                        if at_end >= 5:
                            self.report_missed()
                            return True
                        time.sleep(0.05)
                    continue
                self.record(ev, self.name)
                run.count("events-read-standalone")
                self.maybe_lag()
                if self.rng.random() < 0.002:
                    self.beat("fetch_event")
                    try:
                        again = store.fetch_event(ev.event_pointer)
                        if (again.event, again.routing_key) != (ev.event, ev.routing_key):
                            run.fail(f"{self.name}: fetch_event({ev.event_pointer}) returned another event")
                    except errors.TruncatedDataError:
                        pass
        except errors.ClosedError:
            self.resume = r.position()
            raise

    def resume_past_head(self, store: pe.Store) -> pe.EventStreamReader:
        assert self.resume is not None
        for _ in range(20):  # a truncation may land between stream_info and create_reader
            cut = at_least(self.resume, store.stream_info(SCOPE, STREAM))
            try:
                return store.create_reader(SCOPE, STREAM, start=cut)
            except errors.TruncatedDataError:
                continue
        raise AssertionError(f"{self.name}: could not resume past the head 20 times in a row")


class GroupReaderWorker(ReaderWorker):
    def __init__(self, run: Run, name: str, rid: str) -> None:
        super().__init__(run, name)
        self.rid = rid
        self.log = KeyLog(stamped=True)

    def session(self, gen: Gen) -> bool:
        run, store = self.run_, gen.store
        self.beat("create_reader")
        group = store.get_reader_group(GROUP)
        r = group.create_reader(self.rid)
        try:
            return self._read(r)
        except errors.ClosedError:
            raise
        except BaseException:
            try:  # hand its segments back, as an application would, so the group goes on
                r.close()
            except BaseException:  # noqa: BLE001
                pass
            raise

    def _read(self, r: Any) -> bool:
        run = self.run_
        while True:
            if run.finished.is_set():
                r.close()
                return True
            self.beat("read_next_event")
            try:
                ev = r.read_next_event(timeout=0.5)
            except errors.TruncatedDataError:
                run.count("group-reader-truncated-errors")
                continue
            if ev is None:
                continue
            stamp = next(run.stamp)
            if ev.is_checkpoint:
                run.count("checkpoint-markers")
                continue
            if ev.is_read_completed:
                if not run.sealing.is_set():
                    run.fail(f"{self.name}: read-completed marker on a stream that is not sealed")
                self.completed = True
                r.close()
                return True
            self.record(ev, f"{self.name} (reader group)", stamp)
            run.count("events-read-group")
            self.maybe_lag()


class Watchdog(threading.Thread):
    def __init__(self, run: Run) -> None:
        super().__init__(name="watchdog", daemon=True)
        self.run_ = run
        self.quit = threading.Event()

    def run(self) -> None:  # noqa: D401
        run = self.run_
        while not self.quit.wait(1.0):
            now = time.monotonic()
            stuck = [w for w in run.workers
                     if not w.done and not w.waiting and not w.stalled and now - w.last > run.stall]
            if stuck:
                for w in stuck:
                    w.stalled = True
                names = ", ".join(f"{w.name} in {w.op!r} for {now - w.last:.0f} s" for w in stuck)
                stacks = run.dump_stacks(f"watchdog: no progress: {names}")
                run.fail(f"HANG: no progress for more than {run.stall:.0f} s: {names}\n{stacks}", abort=True)
