"""Transactions: events that become visible all at once, or never.

Owns: transactional writers, transactions and their status (the LMDB ``txns`` table), their
staging segments (one per segment the transaction wrote to, ``staging``), commit (one MERGE
record), abort, lease expiry, and finishing commits found by replay at open.

Invariants:
  1. A transaction's events go to its staging segments only; no reader sees them before the
     commit's MERGE record is durable, and then all of them at once, contiguous per segment.
  2. Status moves OPEN -> COMMITTING -> COMMITTED or OPEN -> ABORTING -> ABORTED; the only way
     back is a commit that fails before its MERGE is written (COMMITTING -> OPEN: nothing of it
     is visible, it may be retried). COMMITTING and ABORTING live only in memory: LMDB holds
     OPEN, COMMITTED or ABORTED. Every operation on one transaction runs under its lock, so a
     commit or abort of a transaction that is not OPEN is refused (TxnFailedError), never
     applied twice.
  3. Durable order of a commit: the MERGE record durable (and with it the staged events before
     it), then, in the LMDB transaction of the checkpoint that passes the MERGE (queued under
     the append lock with the MERGE, checkpoint invariant 4), the record says COMMITTED and the
     staging segments are gone. So LMDB never calls a transaction OPEN once a checkpoint has
     passed its MERGE, and replay finishes a commit whose MERGE it meets.
  4. A parent segment sealed by a scaling since the events were staged gets none of them: its
     staged events are copied, each to the open segment that owns its key now, into uid-0
     staging sections ordered before later staged events of that segment (so per-key order
     holds across any number of scalings), and the commit is planned again.
  5. An OPEN transaction past its lease is aborted by the maintenance thread, or by the commit
     that finds it expired. Ended transactions are remembered (so a stale commit or abort is
     refused with their status) for 24 hours, at most 100,000 of them; after that their id is
     unknown (TxnNotFoundError), which refuses a stale operation just the same.
  6. Once the store's close has staged the pending events (stage_pending), no write is
     accepted (StoreClosedError): a write that returned is staged and durable at the close.
  7. Several transactions of one stream committed together (``commit_many``) get one MERGE:
     after any crash every event of them all is visible or none. Their LMDB records first
     name a fresh group id, which that MERGE carries as its transaction id, so replay finishes
     them all. With a mark, the same MERGE sets the committing writer's last sequence to it,
     and a commit whose mark is not above the writer's last one (checked under the append
     lock) commits nothing: its transactions are aborted (a replayed batch).

Thread-safety: every public method may be called from any thread. ``commit_many`` takes the
transactions' locks in the order of their ids (every other path holds one at a time).
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
import uuid
from dataclasses import dataclass
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Iterable

from .append import try_append
from .errors import (
    CorruptDataError,
    EventTooLargeError,
    InvalidConfigurationError,
    SerializationError,
    StreamNotFoundError,
    StoreClosedError,
    StreamSealedError,
    TxnFailedError,
    TxnNotFoundError,
    WriterClosedError,
)
from .frames import FRAME_HEADER_SIZE, FrameParser
from .records import NO_SEQUENCE
from .routing import encode_key, key_point, owner_index
from .segment import Segment
from .segsource import events_from
from .serializers import resolve
from .staging import STAGING_BIT, Parts, merge
from .writer import MAX_EVENT_SIZE

if TYPE_CHECKING:
    from .engine import Engine
    from .stream import StreamState

__all__ = ["TxnStatus", "TransactionInfo", "Transaction", "TransactionalEventStreamWriter", "Transactions"]

DEFAULT_LEASE = 120.0
MAX_LEASE = 86400.0
KEEP_ENDED_NS = 24 * 3600 * 10**9  # ended transactions are remembered this long,
KEEP_ENDED_MAX = 100_000  # but at most this many (the oldest are forgotten first)
MAX_GROUP = 100_000  # transactions one commit_transactions takes at most
PRECREATE_MAX = 64  # begin_txn makes the staging segments of up to this many open segments
_DRAIN_BYTES = 256 * 1024
_PART_BYTES = 32 << 20
_DRAIN_EVENTS = 4096
# a part of a commit: ((parent sid it was staged for, transaction), parent now, sections)
_Piece = tuple[tuple[int, int], Segment, list[tuple[int, int, int]]]


class TxnStatus(str, enum.Enum):
    """A transaction's status (Pravega's Transaction.Status)."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


_DURABLE_STATUS = (TxnStatus.OPEN, TxnStatus.COMMITTED, TxnStatus.ABORTED)


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """A snapshot of one transaction of a stream (``store.list_transactions``)."""

    txn_id: str  # hex UUID, as ``get_txn`` takes it
    writer_id: str
    status: str  # a TxnStatus value
    created_ns: int
    lease: float  # seconds without a ping before an open transaction is aborted
    deadline_ns: int  # when that happens (open transactions)
    staged_bytes: int  # bytes written into it so far (flushed to its staging segments)


def _lease(lease: object) -> float:
    if lease is None:
        return DEFAULT_LEASE
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 0 < lease <= MAX_LEASE:
        raise InvalidConfigurationError(f"lease must be seconds in (0, {MAX_LEASE:g}], got {lease!r}")
    return float(lease)


class _TxnState:
    """One transaction's shared state (every Transaction handle of the id points here)."""

    def __init__(self, txn_id: uuid.UUID, st: "StreamState", writer_id: str, status: TxnStatus,
                 lease: float, deadline_ns: int, created_ns: int, staged: dict[int, Segment]) -> None:
        self.id = txn_id
        self.st = st
        self.writer_id = writer_id
        self.status = status
        self.lease = lease
        self.deadline_ns = deadline_ns
        self.created_ns = created_ns
        self.ended_ns = 0
        self.group = ""  # hex id of the group commit this transaction is part of (invariant 7)
        self.staged = staged  # parent segment id -> staging segment
        self.lock = threading.RLock()
        self.pending: list[tuple[str | None, bytes]] = []  # (routing key, event), write order
        self.pending_bytes = 0
        self.pending_n = 0
        self.written_end = 0  # journal end of the last staged record
        self.keys: dict[str, bytes] = {}  # routing key -> its UTF-8 bytes (validated)
        self.routes: dict[str, Segment] = {}  # routing key -> segment owning it
        self.topology = st.topology  # of the stream when ``routes`` was filled
        self.rr = 0

    def record(self) -> dict[str, Any]:
        status = self.status if self.status in _DURABLE_STATUS else TxnStatus.OPEN  # invariant 2
        rec = {"stream": self.st.key, "writer": self.writer_id, "status": status.value,
               "lease": self.lease, "deadline_ns": self.deadline_ns, "created_ns": self.created_ns,
               "ended_ns": self.ended_ns,
               "staged": {str(sid): seg.uid for sid, seg in self.staged.items()}}
        if self.group:
            rec["group"] = self.group
        return rec


class _Replayed(Exception):
    """A group commit's mark is not above its writer's last one (invariant 7)."""


class Transactions:
    """The store's transactions (created by the store at open)."""

    def __init__(self, engine: "Engine", staged: dict[int, Segment], committed: list[uuid.UUID]) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._closing = False  # invariant 6: set by stage_pending, read under a state's lock
        self._txns: dict[uuid.UUID, _TxnState] = {}
        meta = engine.meta
        done = set(committed)
        orphans = dict(staged)
        now = time.time_ns()
        try:
            records = meta.txns()
        except ValueError as exc:
            raise CorruptDataError(f"metadata {meta.path}: a damaged transaction record ({exc})") from None
        with meta.write() as w:
            for hexid, rec in records:
                try:
                    tid = uuid.UUID(hexid)
                    st = engine.streams.get(rec["stream"])
                    if st is None:
                        meta.delete_txn(w, hexid)
                        continue
                    segs = {}
                    for sid, uid in rec["staged"].items():
                        seg = orphans.pop(uid, None)
                        if seg is not None:
                            segs[int(sid)] = seg
                    status = TxnStatus(rec["status"])
                    if status not in _DURABLE_STATUS:  # written by an older build: not ended
                        status = TxnStatus.OPEN
                    state = _TxnState(tid, st, str(rec["writer"]), status,
                                      float(rec["lease"]), int(rec["deadline_ns"]),
                                      int(rec["created_ns"]), segs)
                    state.ended_ns = int(rec.get("ended_ns", 0))
                    state.group = str(rec.get("group", ""))
                    group = uuid.UUID(state.group) if state.group else None
                except (KeyError, ValueError, TypeError, AttributeError) as exc:
                    raise CorruptDataError(
                        f"metadata {meta.path}: transaction record {hexid!r} is damaged ({exc!r})"
                    ) from None
                if state.status == TxnStatus.OPEN and (tid in done or group in done):
                    state.status = TxnStatus.COMMITTED  # its MERGE was replayed (invariants 3, 7)
                    self._finish(w, state, now)
                self._txns[tid] = state
            meta.delete_segments(w, list(orphans))  # staging of ended or unknown transactions
        for uid in orphans:
            engine.segments.pop(uid, None)

    # ------------------------------------------------------------------ registry
    def begin(self, st: "StreamState", writer_id: str, lease: object) -> _TxnState:
        lease = _lease(lease)
        now = time.time_ns()
        state = _TxnState(uuid.uuid4(), st, writer_id, TxnStatus.OPEN, lease,
                          now + int(lease * 1e9), now, {})
        with self.engine.lock:
            self.engine.check_open()
            if st.deleted:
                raise StreamNotFoundError(f"stream {st.key} was deleted")
            if st.sealed:
                raise StreamSealedError(f"stream {st.key} is sealed")
            parents = list(st.open_segments) if len(st.open_segments) <= PRECREATE_MAX else []
            with self.engine.meta.write("begin a transaction") as w:  # record and staging at once
                segs = self._new_staging(w, state, parents)
                self.engine.meta.put_txn(w, state.id.hex, state.record())
            for seg in segs:
                self.engine.segments[seg.uid] = seg
            with self._lock:  # under the store lock: a concurrent delete_stream sees it
                self._txns[state.id] = state
        return state

    def _new_staging(self, w: Any, state: _TxnState, parents: list[Segment]) -> list[Segment]:
        """Staging segments for ``parents`` in the LMDB write ``w`` (store lock held)."""
        meta = self.engine.meta
        out = []
        now = time.time_ns()
        for parent, uid in zip(parents, meta.allocate_uids(w, len(parents)) if parents else [], strict=True):
            seg = Segment(uid, STAGING_BIT | uid, parent.low, parent.high, 0, False, state.st,
                          created_ns=now)
            rec = seg.record()
            rec["txn"] = state.id.hex
            rec["parent"] = parent.segment_id
            meta.put_segment(w, uid, rec)
            state.staged[parent.segment_id] = seg
            out.append(seg)
        return out

    def get(self, st: "StreamState", txn_id: object) -> _TxnState:
        try:
            tid = txn_id if isinstance(txn_id, uuid.UUID) else uuid.UUID(str(txn_id))
        except ValueError:
            raise TxnNotFoundError(f"{txn_id!r} is not a transaction id") from None
        with self._lock:
            state = self._txns.get(tid)
        if state is None or state.st is not st:
            raise TxnNotFoundError(f"no transaction {tid} on {st.key}")
        return state

    def infos(self, st: "StreamState") -> list[TransactionInfo]:
        """The transactions of ``st`` this store still knows, oldest first."""
        with self._lock:
            states = [t for t in self._txns.values() if t.st is st]
        return [TransactionInfo(t.id.hex, t.writer_id, t.status.value, t.created_ns, t.lease,
                                t.deadline_ns, sum(seg.length for seg in list(t.staged.values())))
                for t in sorted(states, key=lambda t: t.created_ns)]

    def _put(self, state: _TxnState) -> None:
        with self.engine.meta.write(f"update transaction {state.id}") as w:
            self.engine.meta.put_txn(w, state.id.hex, state.record())

    def _finish(self, w: Any, state: _TxnState, now: int) -> None:
        """Record an ended transaction and drop its staging segments (in the LMDB write ``w``;
        memory follows once it is committed, which the caller's ``with`` does last)."""
        state.ended_ns = now
        staged, state.staged = state.staged, {}
        try:
            self.engine.meta.delete_segments(w, [seg.uid for seg in staged.values()])
            self.engine.meta.put_txn(w, state.id.hex, state.record())
        except BaseException:
            state.staged, state.ended_ns = staged, 0
            raise
        for seg in staged.values():
            self.engine.segments.pop(seg.uid, None)

    # ------------------------------------------------------------------ writing
    def write(self, state: _TxnState, key: str | None, events: list[bytes]) -> None:
        """Stage ``events`` (already serialized and size-checked) under routing key ``key``."""
        with state.lock:
            if state.status is not TxnStatus.OPEN or time.time_ns() > state.deadline_ns:
                self._check_open(state, "write to")
            if self.engine.latch.failed:
                raise self.engine.latch.fresh()  # fail-stop: nothing more is acknowledged
            if self._closing:
                raise StoreClosedError(f"store {self.engine.path} is closing: transaction "
                                       f"{state.id} takes no more events (invariant 6)")
            if state.st.sealed:
                raise StreamSealedError(f"stream {state.st.key} is sealed")
            if key is not None and (type(key) is not str or key not in state.keys):
                state.keys[key] = encode_key(key)  # validated once per key (TypeError-safe)
            n = len(events)
            frame = FRAME_HEADER_SIZE + (0 if key is None else len(state.keys[key]))  # framed size
            if n == 1:
                state.pending.append((key, events[0]))
                state.pending_bytes += len(events[0]) + frame
            else:
                state.pending.extend((key, ev) for ev in events)
                state.pending_bytes += sum(map(len, events)) + n * frame
            state.pending_n += n
            if state.pending_bytes >= _DRAIN_BYTES or state.pending_n >= _DRAIN_EVENTS:
                self._drain(state)

    def _staging(self, state: _TxnState, parent: Segment) -> Segment:
        """The staging segment of ``parent`` in this transaction: made at begin for every open
        segment (up to PRECREATE_MAX), else (or for a segment made by a later scaling) created
        in LMDB on first use."""
        seg = state.staged.get(parent.segment_id)
        if seg is not None:
            return seg
        engine = self.engine
        with engine.lock:
            engine.check_open()
            with engine.meta.write(f"stage for transaction {state.id}") as w:
                (seg,) = self._new_staging(w, state, [parent])
                engine.meta.put_txn(w, state.id.hex, state.record())
            engine.segments[seg.uid] = seg
        return seg

    def _drain(self, state: _TxnState) -> None:
        """Append the pending events to their staging segments (one record)."""
        if not state.pending:
            return
        st = state.st
        if state.topology != st.topology:  # scaled: route every key afresh
            state.routes.clear()
            state.topology = st.topology
        lows, segs = st.routing  # a scaling after this is handled at commit (invariant 4)
        routes, keys = state.routes, state.keys
        # per segment, runs of one key in write order (so a segment gets the transaction's
        # events in the order they were written, not only per key)
        by_parent: dict[Segment, list[tuple[bytes | None, list[bytes]]]] = {}
        last: dict[Segment, Any] = {}
        for key, ev in state.pending:
            if key is None:  # keyless: spread over the open segments
                seg = segs[state.rr % len(segs)]
                state.rr += 1
            else:
                seg = routes.get(key)
                if seg is None:
                    seg = routes[key] = segs[owner_index(lows, key_point(key))]
            run = last.get(seg)
            if run is not None and run[0] == key:
                run[1].append(ev)
            else:
                kb = None if key is None else keys[key]
                run = last[seg] = (key, [ev])
                by_parent.setdefault(seg, []).append((kb, run[1]))
        by_seg = {self._staging(state, parent): groups for parent, groups in by_parent.items()}
        self.engine.admit_bytes(f"transaction {state.id}")  # the local budget
        end = try_append(self.engine, state.st, b"", 0, 0, by_seg)
        if end is None:  # staging segments are never sealed
            raise TxnFailedError(f"transaction {state.id}: its staging segments were closed")
        state.pending, state.pending_bytes, state.pending_n = [], 0, 0
        state.written_end = end

    def flush(self, state: _TxnState) -> None:
        with state.lock:
            self._check_open(state, "flush")
            self._drain(state)
            if state.written_end:
                self.engine.journal.wait_acked(state.written_end, None,
                                               what=f"flush of transaction {state.id}")

    # ------------------------------------------------------------------ ending
    def _check_open(self, state: _TxnState, what: str) -> None:
        self.engine.check_open()
        if state.status != TxnStatus.OPEN:
            raise TxnFailedError(f"cannot {what} transaction {state.id}: it is {state.status.value}")
        if time.time_ns() > state.deadline_ns:
            self._abort(state)
            raise TxnFailedError(f"cannot {what} transaction {state.id}: its lease expired, so it was aborted")

    def status(self, state: _TxnState) -> TxnStatus:
        if state.status == TxnStatus.OPEN and time.time_ns() > state.deadline_ns and \
                not self.engine.closed:
            with state.lock:
                if state.status == TxnStatus.OPEN and time.time_ns() > state.deadline_ns:
                    self._abort(state)
        return state.status

    def ping(self, state: _TxnState, lease: object) -> None:
        with state.lock:
            self._check_open(state, "ping")
            if lease is not None:
                state.lease = _lease(lease)
            state.deadline_ns = time.time_ns() + int(state.lease * 1e9)
            self._put(state)

    def commit(self, state: _TxnState) -> None:
        self.commit_many([state])

    def commit_many(self, states: list[_TxnState], writer_id: str = "", mark: int = NO_SEQUENCE) -> bool:
        """Commit OPEN transactions of one stream as one MERGE (invariants 3, 7); with ``mark``
        the MERGE also sets ``writer_id``'s last sequence. False: the mark was not above the
        writer's last one, so the transactions were aborted instead."""
        states = list({s.id: s for s in states}.values())  # the caller's order: the events' order
        st = states[0].st
        if any(s.st is not st for s in states):
            raise InvalidConfigurationError("transactions committed together must be of one stream")
        with ExitStack() as locks:
            for state in sorted(states, key=lambda s: s.id.bytes):  # the lock order
                locks.enter_context(state.lock)
            for state in states:
                self._check_open(state, "commit")
            if st.deleted:
                raise StreamNotFoundError(f"stream {st.key} was deleted")
            merge_id = states[0].id if len(states) == 1 else self._group(states)
            for state in states:
                state.status = TxnStatus.COMMITTING
            appended: list[int] = []  # the MERGE's end once it is in the journal
            try:
                for state in states:
                    self._drain(state)
                self._merge(st, states, merge_id, writer_id or states[0].writer_id, mark, appended)
                return True
            except _Replayed:
                self._abort_all(states)
                return False
            except StreamSealedError:
                if not appended:
                    self._abort_all(states)
                raise
            except BaseException:
                for state in states:
                    if not appended and state.status == TxnStatus.COMMITTING:
                        state.status = TxnStatus.OPEN  # nothing of it is visible: it may be retried
                raise

    def _abort_all(self, states: list[_TxnState]) -> None:
        """Abort each (locked, COMMITTING, nothing merged); one that fails goes back to OPEN
        (its lease ends it), and the first failure is raised once all were tried."""
        failure: BaseException | None = None
        for state in states:
            try:
                self._abort(state)
            except BaseException as exc:
                state.status = TxnStatus.OPEN
                failure = failure or exc
        if failure is not None:
            raise failure

    def _group(self, states: list[_TxnState]) -> uuid.UUID:
        """Name a fresh group id in the transactions' LMDB records, before their MERGE
        carries it (invariant 7); each attempt has its own, so a failed one names nothing."""
        group = uuid.uuid4()
        with self.engine.meta.write("group transactions for one commit") as w:
            for state in states:
                state.group = group.hex
                self.engine.meta.put_txn(w, state.id.hex, state.record())
        return group

    def _merge(self, st: "StreamState", states: list[_TxnState], merge_id: uuid.UUID,
               writer_id: str, mark: int, appended: list[int]) -> None:
        """Write the MERGE of ``states``' staged events and make it durable (states locked,
        COMMITTING; ``appended`` gets the MERGE's end as soon as it is in the journal: from
        then on there is no way back to OPEN); raises _Replayed when the mark says the commit
        happened already."""
        engine = self.engine
        # pieces: (order, intended parent, refs); order = (the parent sid the events were staged
        # for, the transaction), so pieces copied after a scaling come before later ones (inv. 4)
        pieces = [((sid, i), st.segments[sid], engine.index.staged_sections(seg))
                  for i, state in enumerate(states) for sid, seg in sorted(state.staged.items())]
        if mark != NO_SEQUENCE and not any(refs for _, _, refs in pieces):
            # replay learns a mark's stream from the MERGE's parts: a MERGE of none would lose it
            raise InvalidConfigurationError(
                f"commit_transactions(mark={mark}): the transactions hold no events, so there is "
                "nothing to mark: abort them instead")

        def plan() -> Parts | None:  # under the append lock, as the MERGE's note of the mark
            if mark != NO_SEQUENCE:
                last = engine.seqs.last(st.key, writer_id)
                if last is not None and last >= mark:
                    raise _Replayed()
            return _plan(pieces)

        def on_append(end: int) -> None:
            appended.append(end)
            for state in states:
                self._finish_later(state)

        with engine.files.pinned():
            while True:
                end = merge(engine, st, plan, txn_id=merge_id, writer_id=writer_id,
                            last_seq=mark, on_append=on_append)
                if end >= 0:
                    # the MERGE durable, and with it every staged byte before it
                    engine.journal.make_durable(end, f"commit of transaction {merge_id}")
                    for state in states:
                        self._committed(state)
                    return
                pieces = self._rebase(st, pieces)

    def _finish_later(self, state: _TxnState) -> None:
        """Queue the LMDB side of a commit for the checkpoint that passes its MERGE (append
        lock held; checkpoint invariant 4): COMMITTED, staging segments deleted."""
        uids = [seg.uid for seg in state.staged.values()]
        rec = state.record()
        rec.update(status=TxnStatus.COMMITTED.value, ended_ns=time.time_ns(), staged={})
        meta, hexid = self.engine.meta, state.id.hex

        def write(w: Any) -> None:
            meta.delete_segments(w, uids)
            if meta.has_txn(w, hexid):  # not forgotten meanwhile
                meta.put_txn(w, hexid, rec)

        self.engine.checkpoints.queue(write)

    def _committed(self, state: _TxnState) -> None:
        """The MERGE is durable: the transaction is COMMITTED (its LMDB record follows with the
        next checkpoint, invariant 3)."""
        state.ended_ns = time.time_ns()
        for seg in state.staged.values():
            self.engine.segments.pop(seg.uid, None)
        state.staged = {}
        state.status = TxnStatus.COMMITTED

    def _rebase(self, st: "StreamState", pieces: list[_Piece]) -> list[_Piece]:
        """Copy the pieces whose parent was sealed by a scaling to the segments owning their
        keys now (invariant 4)."""
        engine = self.engine
        if st.sealed:
            raise StreamSealedError(f"stream {st.key} is sealed: the transaction cannot commit")
        out = []
        frames = FrameParser()
        for order, parent, refs in pieces:
            if not parent.sealed:
                out.append((order, parent, refs))
                continue
            lows, segs = st.routing
            targets: dict[Segment, Segment] = {}
            batches: dict[Segment, list[tuple[bytes | None, list[bytes]]]] = {}
            rr = 0
            size = 0
            collected: list[tuple[Segment, list[Any]]] = []

            def flush_batches(collected: list[Any]) -> None:
                nonlocal batches, size
                if batches:
                    end = try_append(engine, st, b"", 0, 0, batches, collected)
                    if end is None:
                        raise TxnFailedError("a copy segment was closed")
                batches, size = {}, 0

            for pos, nbytes, _ in refs:
                data = engine.journal.read_section(pos, nbytes)
                for ev in events_from(data, 0, 0, st.names, None, frames, f"copy of {parent.name}"):
                    key = ev[1]  # the key's bytes
                    if key is None:
                        owner = segs[rr % len(segs)]
                        rr += 1
                    else:
                        owner = segs[owner_index(lows, key_point(key.decode("utf-8")))]
                    tseg = targets.get(owner)
                    if tseg is None:
                        tseg = targets[owner] = Segment(0, STAGING_BIT, owner.low, owner.high, 0, False, st)
                    groups = batches.setdefault(tseg, [])
                    if groups and groups[-1][0] == key:
                        groups[-1][1].append(ev.event)
                    else:
                        groups.append((key, [ev.event]))
                    size += len(ev.event) + FRAME_HEADER_SIZE + (len(key) if key else 0)
                    if size >= 4 << 20:
                        flush_batches(collected)
            flush_batches(collected)  # durable with the MERGE after them (staging invariant 1)
            by_target: dict[Segment, list[tuple[int, int, int]]] = {}
            for tseg, e in collected:
                by_target.setdefault(tseg, []).append((e.pos, e.nbytes, e.n_events))
            for owner, tseg in targets.items():
                out.append((order, owner, by_target.get(tseg, [])))
        return out

    def abort(self, state: _TxnState) -> None:
        with state.lock:
            self.engine.check_open()
            if state.status != TxnStatus.OPEN:
                raise TxnFailedError(f"cannot abort transaction {state.id}: it is {state.status.value}")
            self._abort(state)

    def _abort(self, state: _TxnState) -> None:
        state.status = TxnStatus.ABORTING
        try:
            with self.engine.meta.write(f"abort transaction {state.id}") as w:
                state.status = TxnStatus.ABORTED
                self._finish(w, state, time.time_ns())
        except BaseException:
            state.status = TxnStatus.OPEN  # nothing was recorded: still open (it may expire)
            raise
        state.pending, state.pending_bytes, state.pending_n = [], 0, 0

    # ------------------------------------------------------------------ maintenance
    def tick(self) -> None:
        """Abort transactions past their lease; forget long-ended ones."""
        now = time.time_ns()
        with self._lock:
            states = list(self._txns.values())
        gone = []
        for state in states:
            if state.status == TxnStatus.OPEN and now > state.deadline_ns:
                if state.lock.acquire(blocking=False):
                    try:
                        if state.status == TxnStatus.OPEN and time.time_ns() > state.deadline_ns:
                            self._abort(state)
                    finally:
                        state.lock.release()
            elif state.ended_ns and now - state.ended_ns > KEEP_ENDED_NS:
                gone.append(state)
        old = {s.id for s in gone}
        ended = sorted((s for s in states if s.ended_ns and s.id not in old), key=lambda s: s.ended_ns)
        gone += ended[: max(0, len(ended) - KEEP_ENDED_MAX)]
        if gone:
            with self.engine.meta.write("forget ended transactions") as w:
                for state in gone:
                    self.engine.meta.delete_txn(w, state.id.hex)
            with self._lock:
                for state in gone:
                    self._txns.pop(state.id, None)

    def stream_deleted(self, st: "StreamState") -> None:
        """Abort the open transactions of a deleted stream and forget them all."""
        with self._lock:
            states = [s for s in self._txns.values() if s.st is st]
        for state in states:
            with state.lock:
                if state.status == TxnStatus.OPEN:
                    self._abort(state)
        with self.engine.meta.write(f"forget the transactions of {st.key}") as w:
            for state in states:
                self.engine.meta.delete_txn(w, state.id.hex)
        with self._lock:
            for state in states:
                self._txns.pop(state.id, None)

    def stage_pending(self) -> None:
        """Append every open transaction's pending events to its staging segments (the store
        is closing: its last checkpoint makes them durable, so a transaction resumed after the
        reopen holds everything written to it). Later writes raise (invariant 6); a write in
        progress finishes first (it holds the transaction's lock), so every state is visited."""
        with self._lock:
            self._closing = True
            states = [s for s in self._txns.values() if s.status == TxnStatus.OPEN]
        for state in states:
            with state.lock:
                if state.status == TxnStatus.OPEN and state.pending and not state.st.deleted:
                    self._drain(state)

    def open_count(self, st: "StreamState") -> int:
        with self._lock:
            return sum(1 for s in self._txns.values() if s.st is st and s.status == TxnStatus.OPEN)

    def open_of(self, st: "StreamState", writer_id: str) -> list[_TxnState]:
        """The OPEN transactions of ``st`` begun by ``writer_id`` (for display)."""
        with self._lock:
            return [s for s in self._txns.values()
                    if s.st is st and s.writer_id == writer_id and s.status == TxnStatus.OPEN]


def _plan(pieces: list[_Piece]) -> Parts | None:
    """The MERGE parts of ``pieces`` (append lock held): per parent, its pieces' sections in
    ascending order; None if a parent was sealed meanwhile."""
    by_parent: dict[Segment, list[tuple[tuple[int, int], list[tuple[int, int, int]]]]] = {}
    for order, parent, refs in pieces:
        if parent.sealed:
            return None
        if refs:
            by_parent.setdefault(parent, []).append((order, refs))
    parts = []
    for parent, lst in by_parent.items():
        lst.sort(key=lambda x: x[0])
        parts.append((parent, [r for _, refs in lst for r in refs]))
    return parts


class Transaction:
    """One transaction: ``write_event`` stages events, ``commit`` makes them all visible at
    once, ``abort`` drops them. Also a context manager: commit on success, abort on error."""

    def __init__(self, writer: "TransactionalEventStreamWriter", state: _TxnState) -> None:
        self._writer = writer
        self._state = state

    @property
    def txn_id(self) -> uuid.UUID:
        return self._state.id

    def _event(self, event: Any) -> bytes:
        ser = self._writer._ser
        if ser is not None:
            event = ser.serialize(event)
        elif isinstance(event, (bytearray, memoryview)):
            event = bytes(event)
        elif type(event) is not bytes:
            raise SerializationError(f"event must be bytes-like (or use a serializer), not {type(event).__name__}")
        if len(event) > MAX_EVENT_SIZE:
            raise EventTooLargeError(
                f"event of {len(event)} bytes is over the {MAX_EVENT_SIZE}-byte limit of a "
                "transaction's events (large events are written by a plain writer)"
            )
        return event

    def write_event(self, event: object, routing_key: str | None = None) -> None:
        """Stage one event; it becomes visible only when the transaction commits."""
        w = self._writer
        if w._closed or w._engine.closed:
            w._check_open()
        if type(event) is not bytes or w._ser is not None or len(event) > MAX_EVENT_SIZE:
            event = self._event(event)
        w._txns.write(self._state, routing_key, [event])

    def write_events(self, events: Iterable[object], routing_key: str | None = None) -> None:
        """Stage several events with one routing key."""
        self._writer._check_open()
        encode_key(routing_key)  # a bad key is refused before any event is looked at
        evs = [self._event(e) for e in events]
        part: list[bytes] = []
        size = 0
        frame = FRAME_HEADER_SIZE + len(encode_key(routing_key) or b"")  # framing per event
        for ev in evs:  # at most ~32 MiB framed per hand-over, so a staged record stays small
            if part and (size + len(ev) + frame > _PART_BYTES or len(part) >= _DRAIN_EVENTS):
                self._writer._txns.write(self._state, routing_key, part)
                part, size = [], 0
            part.append(ev)
            size += len(ev) + frame
        if part:
            self._writer._txns.write(self._state, routing_key, part)

    def flush(self) -> None:
        """Make every staged event durable (still invisible)."""
        self._writer._txns.flush(self._state)

    def commit(self, timestamp: int | None = None) -> None:
        """Make every event of the transaction visible, atomically; returns once that is
        durable. ``timestamp`` notes event time for the writer (docs/event-time.md)."""
        if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)
                                      or not 0 <= timestamp < (1 << 63)):
            raise InvalidConfigurationError(f"commit timestamp must be an int >= 0, got {timestamp!r}")
        self._writer._txns.commit(self._state)
        if timestamp is not None:
            self._writer._engine.watermarks.note(self._state.st, self._state.writer_id, timestamp)

    def abort(self) -> None:
        """Drop every event of the transaction."""
        self._writer._txns.abort(self._state)

    def ping(self, lease: float | None = None) -> None:
        """Renew the lease (for ``lease`` seconds from now; default: the current lease)."""
        self._writer._txns.ping(self._state, lease)

    def status(self) -> TxnStatus:
        """The status now; an OPEN transaction past its lease is aborted first."""
        return self._writer._txns.status(self._state)

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._state.status != TxnStatus.OPEN:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def __repr__(self) -> str:
        st = self._state
        return f"<Transaction {st.id} on {st.st.key} {st.status.value}>"

    def _repr_html_(self) -> str:
        from .notebook import transaction_html, txn_view
        return transaction_html(self._state.st.key, txn_view(self._state))


class TransactionalEventStreamWriter:
    """Begins transactions on one stream. Create with ``store.create_transactional_writer``."""

    def __init__(self, engine: "Engine", st: "StreamState", writer_id: str, serializer: Any) -> None:
        self._engine = engine
        self._st = st
        self.scope, self.stream = st.scope, st.name
        self.writer_id = writer_id
        self._ser = resolve(serializer)
        self._txns: Transactions = engine.txns
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise WriterClosedError(f"transactional writer {self.writer_id!r} on {self._st.key} is closed")
        self._engine.check_open()

    def begin_txn(self, lease: float | None = None) -> Transaction:
        """A new OPEN transaction; it is aborted if not committed within ``lease`` seconds
        (default 120) of its last ``ping``."""
        self._check_open()
        return Transaction(self, self._txns.begin(self._st, self.writer_id, lease))

    def get_txn(self, txn_id: uuid.UUID | str) -> Transaction:
        """The transaction with this id (from any writer object or process run)."""
        self._check_open()
        return Transaction(self, self._txns.get(self._st, txn_id))

    def commit_transactions(self, txns: Iterable["Transaction | uuid.UUID | str"], *,
                            mark: int | None = None) -> bool:
        """Commit several OPEN transactions of this stream as one: one atomic, durable step
        makes every event of them all visible, or none, after a crash too. With ``mark`` (an
        int >= 0, such as a batch number) that step also records it as this writer's last
        mark, and a mark not above the last one commits nothing: the transactions are aborted
        and False is returned (a replayed batch). True when committed."""
        self._check_open()
        if mark is not None and (isinstance(mark, bool) or not isinstance(mark, int)
                                 or not 0 <= mark < NO_SEQUENCE):
            raise InvalidConfigurationError(f"mark must be an int >= 0, got {mark!r}")
        if isinstance(txns, (str, bytes, uuid.UUID, Transaction)) or not isinstance(txns, Iterable):
            raise InvalidConfigurationError(
                f"commit_transactions takes a list of transactions or ids, got {type(txns).__name__}")
        states = []
        for t in itertools.islice(txns, MAX_GROUP + 1):
            state = t._state if isinstance(t, Transaction) else self._txns.get(self._st, t)
            if state.st is not self._st:
                raise TxnNotFoundError(f"transaction {state.id} is not one of {self._st.key}'s")
            states.append(state)
        if not states:
            raise InvalidConfigurationError("commit_transactions needs at least one transaction")
        if len(states) > MAX_GROUP:
            raise InvalidConfigurationError(f"commit_transactions takes at most {MAX_GROUP} transactions")
        return self._txns.commit_many(states, self.writer_id, NO_SEQUENCE if mark is None else mark)

    def last_mark(self) -> int | None:
        """The last mark ``commit_transactions`` recorded for this writer id (None: none)."""
        self._check_open()
        return self._engine.seqs.last(self._st.key, self.writer_id)

    def close(self) -> None:
        """Idempotent. Open transactions stay open (until committed, aborted or expired); the
        time noted by ``commit(timestamp=)`` stops holding the stream's watermark back."""
        if not self._closed:
            self._closed = True
            if not self._engine.closed:
                self._engine.watermarks.forget(self._st.key, self.writer_id)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "TransactionalEventStreamWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<TransactionalEventStreamWriter {self.writer_id!r} on {self._st.key}>"

    def _repr_html_(self) -> str:
        from .notebook import transactions_html, txn_view
        return transactions_html("TransactionalEventStreamWriter", f"{self.writer_id!r} on {self._st.key}",
                                 [txn_view(t) for t in self._txns.open_of(self._st, self.writer_id)])
