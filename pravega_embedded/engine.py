"""The engine: the core of one open store that every higher module shares.

Owns: opening a store's parts in order (the fail-stop latch, LMDB, the journal, recovery and
replay, the files table, the first checkpoint), the registry of streams and segments with the
locks that guard them, and the typed components the modules above call: ``journal``
(appends, positions, reads), ``meta`` (LMDB), ``index`` (sections and the tail cache),
``files`` (the files table, pins, reclaiming), ``seqs`` (writer sequences), ``checkpoints``.

Invariants:
  1. One engine per open store directory (the store's flock on LOCK).
  2. Appends happen under ``append_lock``: a segment's offsets are assigned and its sections
     reach the journal in the same order, so segment offsets match journal order.
  3. A topology change is committed to LMDB only after the journal is durable up to the
     current write position (``sync_all``): metadata never refers to data a crash could lose.
  4. Readers see only acknowledged data: a section is visible once the journal acknowledges
     its ``visible_at`` (fsync: fdatasynced).
  5. Nothing is written to disk at open before the whole store checked out: metadata
     readable, journal valid from the applied position, no missing file with live data.
  6. Once ``closing`` is set (the first step of the store's close) no writer or reader is
     admitted: ``admit_writer`` refuses under ``lock``, and ``admit_reader`` registers first and
     then looks, so a reader either is in the set the close takes afterwards or closes itself;
     none reads on with progress the close never records.

Thread-safety: all methods are thread-safe. Lock order: ``lock`` (topology, re-entrant), then a
transaction's lock, then ``checkpoints.lock``, then ``append_lock``, then ``index.lock``.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from .budget import LocalBudget
from .checkpoint import Checkpointer
from .config import StreamConfiguration
from .errors import (
    CorruptDataError,
    ScopeNotFoundError,
    StoreClosedError,
    StreamKindError,
    StreamNotFoundError,
)
from .failstop import ENGINE_LOG, FailStop
from .journal import FILE_HEADER_SIZE, Journal
from .journalfiles import JournalFiles
from .metadata import Metadata
from .names import validate_scope, validate_stream
from .replay import replay
from .segindex import SegmentIndex
from .segment import Segment
from .sequences import WriterSequences
from .stream import StreamState
from .topology import upper_bound

if TYPE_CHECKING:
    from .retention import Retention
    from .transactions import Transactions
    from .watermarks import Watermarks

__all__ = ["Engine", "EngineOptions"]


class Closable(Protocol):
    """What the store's close needs of a reader (standalone or in a group)."""

    def close(self) -> None: ...


class ColdReads(Protocol):
    """Reads of segment data whose journal file was reclaimed after it went to tier 2 (the
    tiering layer's ``coldreads.ColdReads``)."""

    def read(self, seg: Segment, offset: int, limit: int) -> tuple[Any, int]: ...

    def table(self, seg: Segment, start: int, end: int) -> Any: ...

    def rows(self, seg: Segment, offset: int, limit: int) -> tuple[list[bytes], list[bytes | None], list[int], int]: ...


class EngineOptions:
    """Sizes and intervals of an engine (validated by ``Store``)."""

    __slots__ = ("roll_bytes", "tail_cache_bytes", "map_size")

    def __init__(self, roll_bytes: int, tail_cache_bytes: int, map_size: int) -> None:
        self.roll_bytes, self.tail_cache_bytes, self.map_size = roll_bytes, tail_cache_bytes, map_size


class Engine:
    """The internals of one open store (module docstring)."""

    def __init__(self, path: str, durability: str, options: EngineOptions, *, new: bool) -> None:
        self.path = path
        self.durability = durability
        self.closed = True
        self.closing = False  # invariant 6
        self.latch = FailStop(path)
        self.lock = threading.RLock()
        self.append_lock = threading.Lock()
        self.streams: dict[str, StreamState] = {}
        self.segments: dict[int, Segment] = {}  # by uid, staging segments too
        self.staged: dict[int, Segment] = {}  # staging segments found at open (transactions)
        self.writers: set[Any] = set()  # WriterControls of open writers (the linger thread drains them)
        self._orphans: list[Closable] = []  # writers dropped without close(), to be closed
        self.on_orphan: Callable[[], None] = lambda: None  # storecore: queue their closing
        self.readers: weakref.WeakSet[Closable] = weakref.WeakSet()
        self.wake_linger: Callable[[float], None] = lambda due: None
        self.subscribers: Callable[[str], list[dict[int, int] | None]] = lambda key: []
        self.on_scaled: Callable[[StreamState], None] = lambda st: None
        self.txns: "Transactions"
        self.tiered: dict[int, int] = {}  # segment uid -> tiered end (its data before is in tier 2)
        self.cold: ColdReads | None = None  # set while the store tiers: reads tier 2, reclaims
        self.budget: LocalBudget | None = None  # set with pe.open(local_budget=...)
        self.retention: "Retention"
        self.watermarks: "Watermarks"
        self.meta = Metadata(os.path.join(path, "meta"), sync=durability != "none", latch=self.latch,
                             map_size=options.map_size, create=new)
        try:
            self.journal = Journal(os.path.join(path, "journal"), os.path.join(path, "recovery"),
                                   durability, options.roll_bytes, self.latch)
            self.index = SegmentIndex(self.meta, options.tail_cache_bytes)
            self.files = JournalFiles(self.journal, self.meta)
            self.seqs = WriterSequences(self.meta)
            self.checkpoints = Checkpointer(self.journal, self.meta, self.index, self.files,
                                            self.seqs, self.append_lock)
        except BaseException:
            self.meta.close()
            raise

    # ------------------------------------------------------------------ opening
    def open(self, store_id: str | None) -> list[Any]:
        """Load the topology, recover and replay the journal, check the files table (nothing
        written before all of it checked out, invariant 5); returns the ids of the transactions
        whose commit was replayed (``transactions`` finishes them). ``store_id``: the STORE
        marker's (None: no marker yet)."""
        try:
            self._check_identity(store_id)
            stale = self._load_topology()
            self.meta.verify()
            self.tiered = {uid: end for uid, (end, _) in self.meta.tiering_segments().items()}
            self.files.load(self.is_dead)  # raises before anything is written (invariant 5)
            rec = self.journal.recover(self.meta.applied_pos())
            committed = replay(self.index, self.seqs, self.segments, rec.records)
            self.recovered_records = len(rec.records)
            self.torn_bytes_cut = rec.torn_bytes
            self.journal.open(rec.base, rec.end)
            self.files.settle()
            if stale:
                with self.meta.write("drop stale staging segments") as txn:
                    self.meta.delete_segments(txn, stale)
        except BaseException:
            self.journal.close()
            self.meta.close()
            raise
        self.closed = False
        return committed

    def _check_identity(self, marker_id: str | None) -> None:
        """The metadata must be this store's: the id the marker names, and no empty metadata
        beside a journal that holds data (a replaced or re-created meta/, invariant 5)."""
        meta_id = self.meta.store_id()
        if marker_id is not None and meta_id != marker_id:
            raise CorruptDataError(
                f"store {self.path}: {self.meta.path} is not this store's metadata (it records "
                f"{'no store id' if meta_id is None else 'store ' + meta_id}, the STORE marker "
                f"names {marker_id}); restore meta/ from a backup; the store was not changed")
        if self.meta.applied_pos() is None:
            for base in self.journal.files():
                if os.path.getsize(self.journal.path(base)) > FILE_HEADER_SIZE:
                    raise CorruptDataError(
                        f"store {self.path}: the metadata was never checkpointed but the journal "
                        f"holds data ({self.journal.path(base)}): {self.meta.path} was replaced or lost; "
                        "restore it from a backup; the store was not changed")

    def _load_topology(self) -> list[int]:
        """Streams and segments from LMDB; returns the uids of staging segments whose stream no
        longer exists (a crash between deleting a stream and its transactions' staging)."""
        for key, rec in self.meta.streams():
            scope, name = key.split("/", 1)
            epochs = [(int(e), int(t)) for e, t in rec.get("epochs", [(0, rec["created_ns"])])]
            st = StreamState(scope, name, StreamConfiguration.from_json(rec["config"]),
                             rec["created_ns"], rec["sealed"], {int(k): v for k, v in rec["head"].items()},
                             epochs, rec.get("next_number", 0))
            st.kind = rec.get("kind", "events")
            self.streams[key] = st
        stale = []
        for uid, rec, length in sorted(self.meta.segments(), key=lambda x: x[1]["id"]):
            st = self.streams.get(rec["stream"])
            if st is None:
                stale.append(uid)
                continue
            seg = Segment(uid, rec["id"], rec["low"], rec["high"], length, rec["sealed"], st,
                          preds=tuple(rec.get("preds", ())), sealed_epoch=rec.get("sealed_epoch"),
                          created_ns=rec.get("created_ns", st.created_ns))
            if "txn" in rec:  # a transaction's staging segment: hidden (staging invariant 3)
                self.staged[uid] = seg
            else:
                st.add_segment(seg)
            self.segments[uid] = seg
        for st in self.streams.values():
            if not st.next_number:
                st.next_number = max((sid & 0xFFFFFFFF for sid in st.segments), default=-1) + 1
        return stale

    # ------------------------------------------------------------------ lookups
    def check_open(self) -> None:
        """StoreClosedError once closed; the fail-stop error once the store has failed."""
        if self.closed:
            raise StoreClosedError(f"store {self.path} is closed")
        self.latch.check()

    def admit_writer(self) -> None:
        """Called under ``lock`` before a writer is registered: StoreClosedError once the
        store's close has begun (invariant 6)."""
        self.check_open()
        if self.closing:
            raise StoreClosedError(f"store {self.path} is closing")

    def admit_reader(self, reader: Closable) -> None:
        """Register a reader for the store's close; once the close has begun, close it and
        raise StoreClosedError (invariant 6)."""
        self.readers.add(reader)
        if self.closing or self.closed:
            reader.close()
            raise StoreClosedError(f"store {self.path} is closing")

    def adopt(self, writer: Closable) -> None:
        """A writer was dropped without close() (its ``__del__``): keep it until the store's
        reaper (or its close) closes it, so its pending events are still appended. Called by
        the collector, holding who knows what lock: only a list append and ``on_orphan``."""
        self._orphans.append(writer)
        self.on_orphan()

    def take_orphans(self) -> list[Closable]:
        """The adopted writers, handed to the caller to close."""
        taken: list[Closable] = []
        while self._orphans:
            taken.append(self._orphans.pop())
        return taken[::-1]

    def admit_bytes(self, what: str) -> None:
        """Called before an append of new data, holding no lock: waits while the local journal
        is at ``local_budget`` (``budget``; LocalBudgetError after its timeout)."""
        budget = self.budget
        if budget is not None:
            budget.admit(what)

    @contextmanager
    def unbudgeted(self) -> Iterator[None]:
        """No append waits for the local budget while the block runs (a writer's close; a
        seal's flush under ``lock``: budget invariant 3)."""
        budget = self.budget
        if budget is None:
            yield
        else:
            with budget.suspended():
                yield

    def stream(self, scope: str, stream: str, kind: str | None = None) -> StreamState:
        """The stream's state; with ``kind``, StreamKindError unless it is that kind."""
        self.check_open()
        st = self.streams.get(f"{scope}/{stream}")
        if st is None:
            validate_scope(scope)
            validate_stream(stream)
            if not self.meta.has_scope(scope):
                raise ScopeNotFoundError(f"scope {scope!r} does not exist")
            raise StreamNotFoundError(f"stream {scope}/{stream} does not exist")
        if kind is not None and st.kind != kind:
            raise StreamKindError(
                f"{st.key} is a byte stream: use store.create_byte_stream for it, not the event API"
                if st.kind == "bytes" else
                f"{st.key} is an event stream: the byte-stream API cannot open it"
            )
        return st

    def segments_of(self, stream_key: str) -> dict[int, Segment] | None:
        """A snapshot of a stream's segments by id (None if the stream does not exist)."""
        st = self.streams.get(stream_key)
        return None if st is None else dict(st.segments)

    def segment(self, uid: int) -> Segment | None:
        return self.segments.get(uid)

    def is_dead(self, uid: int, end: int) -> bool:
        """Whether segment ``uid``'s data up to ``end`` is never read from the journal again
        (deleted, truncated past it, or in tier 2 up to it)."""
        seg = self.segments.get(uid)
        if seg is None:
            return True
        return seg.stream.head.get(seg.segment_id, 0) >= end or self.tiered.get(uid, 0) >= end

    def is_truncated(self, uid: int, end: int) -> bool:
        """Whether segment ``uid``'s data up to ``end`` is deleted or truncated."""
        seg = self.segments.get(uid)
        return seg is None or seg.stream.head.get(seg.segment_id, 0) >= end

    def local_read_gone(self, seg: Segment, offset: int, pos: int) -> bool:
        """Whether the section at journal position ``pos`` holding ``offset`` of ``seg`` must be
        read from tier 2: tiered, and its journal file reclaimed."""
        return offset < self.tiered.get(seg.uid, 0) and not self.journal.holds(pos)

    # ------------------------------------------------------------------ durability
    def sync_all(self, what: str) -> None:
        """Invariant 3: make everything written durable before a topology commit (every mode)."""
        self.journal.make_durable(self.journal.written(), what)

    def checkpoint(self) -> int:
        """Write lengths, writer sequences and the section index to LMDB up to the current
        journal position (after making the journal durable there). Returns that position."""
        return self.checkpoints.run()

    def reclaim(self) -> int:
        """Delete journal files that hold only truncated or deleted data; returns bytes freed."""
        applied = self.meta.applied_pos() or 0
        with self.lock:
            if self.closed:
                return 0
            # tiered data is reclaimed only while the store can read it back from tier 2
            freed = self.files.reclaim(applied, self.is_dead if self.cold is not None else self.is_truncated)
        if freed and self.budget is not None:
            self.budget.released()  # appends waiting for the local budget look again
        return freed

    # ------------------------------------------------------------------ topology changes
    def truncate(self, st: StreamState, positions: dict[int, int], what: str) -> bool:
        """Move the head of ``st`` forward to the full map ``positions`` (retention invariant
        1) and drop the index entries of truncated sections. False if nothing moved."""
        with self.lock:
            if st.deleted or self.closed:
                return False
            old = st.head
            head = upper_bound(st.full_head(), positions)
            if head == st.full_head():
                return False
            self.sync_all(f"{what} {st.key}")
            with self.meta.write(f"{what} {st.key}") as txn:
                st.head = head
                try:
                    self.meta.put_stream(txn, st.key, st.record())
                    for sid, off in head.items():
                        if off > old.get(sid, 0):
                            self.meta.drop_index_before(txn, st.segments[sid].uid, off)
                except BaseException:
                    st.head = old
                    raise
        st.notify()
        return True

    def forget_stream(self, st: StreamState) -> None:
        """Drop a deleted stream from memory (append lock held)."""
        st.deleted = True
        del self.streams[st.key]
        for seg in st.segments.values():
            self.segments.pop(seg.uid, None)
            self.tiered.pop(seg.uid, None)
        self.index.forget(st.segments.values())
        self.seqs.forget_stream(st.key)

    def now_ns(self) -> int:
        return time.time_ns()

    def close(self) -> None:
        """Close the journal and LMDB (the store's close did the rest). Idempotent."""
        self.closed = True
        if self.budget is not None:
            self.budget.lift()
        try:
            self.journal.close()
        finally:
            self.meta.close()
            ENGINE_LOG.debug("store %s closed", self.path)
