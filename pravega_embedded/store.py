"""The store: one directory, one journal, one metadata environment, many streams.

Owns: the store directory and its process lock, recovery at open, every topology operation
(scopes, streams, seal, scale, truncate, delete; scaling itself is in ``scaling``, the append
path in ``append``), the tail cache, and three background threads: the linger thread (drains
writers whose batch is older than their linger), the checkpoint thread (writes segment lengths,
writer sequences, the section index and the files table to LMDB so recovery replays only the
journal after the last checkpoint) and the maintenance thread (auto-scaling, retention and
reclaiming disk, every ``maintenance_interval`` seconds).

Directory layout (bytes in docs/format.md)::

    <dir>/LOCK          flock()ed by the owning process; holds its pid
    <dir>/meta/         LMDB environment (metadata)
    <dir>/journal/      journal files <base:020d>.pej
    <dir>/recovery/     torn journal tails cut at recovery, kept for inspection

Invariants:
  1. One process (one open handle) owns the directory at a time (flock on LOCK).
  2. Appends happen under ``_append_lock``: a segment's offsets are assigned and its sections
     reach the journal in the same order, so segment offsets match journal order.
  3. A topology change is committed to LMDB only after the journal is durable up to the
     current write position (metadata never refers to data a crash could lose).
  4. Readers see only durable data: a section is visible once the journal is synced past it.

Thread-safety: all public methods are thread-safe.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable

from .append import append_events
from .bytestream import ByteStream
from .checkpoint import file_rows, write_checkpoint
from .config import StreamConfiguration
from .errors import (
    InvalidConfigurationError,
    InvalidEventPointerError,
    InvalidStreamCutError,
    ScopeExistsError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentNotFoundError,
    StoreClosedError,
    StoreLockedError,
    StreamExistsError,
    StreamKindError,
    StreamNotFoundError,
    StreamSealedError,
    WriterExistsError,
)
from .events import EventPointer, EventRead
from .journal import DURABILITY_MODES, Journal
from .largeevents import DEFAULT_LARGE_EVENT_LIMIT
from .metadata import Metadata
from .names import validate_scope, validate_stream, validate_writer_id
from .reader import EventStreamReader, SegmentSource, Slice
from .replay import replay
from .retention import Retention
from .routing import equal_ranges
from .scaling import DEFAULT_WINDOWS, AutoScaler, commit_scale, rescale_ranges
from .segment import Segment
from .stream import StreamInfo, StreamState
from .streamcut import StreamCut, segment_id
from .topology import check_cut, upper_bound
from .transactions import TransactionalEventStreamWriter, Transactions
from .watch import SegmentCountChange, SegmentWatcher
from .watermarks import Watermarks
from .writer import MAX_BATCH_BYTES, MAX_EVENT_SIZE, EventStreamWriter

__all__ = ["Store", "open", "open_temporary", "register_service"]

# Services of higher layers (reader groups), registered when their package is imported, so the
# core offers ``store.create_reader_group`` without importing the layer above it.
_SERVICES: dict[str, Callable[["Store"], Any]] = {}


def register_service(name: str, factory: Callable[["Store"], Any]) -> None:
    """Make ``factory(store)`` the store's ``name`` service (created on first use)."""
    _SERVICES[name] = factory



class Store:
    """An open store. Use :func:`open` (or ``with pe.open(path) as store``)."""

    def __init__(self, path: str, durability: str = "fsync", *, roll_bytes: int = 64 << 20,
                 tail_cache_bytes: int = 64 << 20, checkpoint_interval: float = 1.0,
                 map_size: int = 1 << 32, scale_windows: tuple[float, ...] = DEFAULT_WINDOWS,
                 scale_cooldown: float = 600.0, maintenance_interval: float = 10.0,
                 retention_interval: float = 60.0, large_event_limit: int = DEFAULT_LARGE_EVENT_LIMIT,
                 _temporary: bool = False) -> None:
        if durability not in DURABILITY_MODES:
            raise InvalidConfigurationError(
                f"durability must be one of {sorted(DURABILITY_MODES)}, got {durability!r}"
            )
        if not isinstance(roll_bytes, int) or roll_bytes < (1 << 20):
            raise InvalidConfigurationError(f"roll_bytes must be an int >= 1 MiB, got {roll_bytes!r}")
        for what, x in (("maintenance_interval", maintenance_interval), ("retention_interval", retention_interval)):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x <= 86400:
                raise InvalidConfigurationError(f"{what} must be seconds in (0, 86400], got {x!r}")
        if isinstance(large_event_limit, bool) or not isinstance(large_event_limit, int) or \
                not MAX_EVENT_SIZE <= large_event_limit <= (1 << 32) - (1 << 16):
            raise InvalidConfigurationError(
                f"large_event_limit must be an int in [8 MiB, 4 GiB - 64 KiB], got {large_event_limit!r}")
        self.large_event_limit = large_event_limit
        self._autoscaler = AutoScaler(self, scale_windows, scale_cooldown)
        self.maintenance_interval = float(maintenance_interval)
        self.retention_interval = float(retention_interval)
        self.path = os.path.abspath(os.fspath(path))
        self.durability = durability
        self._temporary = _temporary
        self._closed = True
        os.makedirs(self.path, exist_ok=True)
        self._lock_fd = self._acquire_lock()
        try:
            self._open(roll_bytes, tail_cache_bytes, checkpoint_interval, map_size)
        except BaseException:
            os.close(self._lock_fd)
            raise

    # ------------------------------------------------------------------ opening
    def _acquire_lock(self) -> int:
        lock_path = os.path.join(self.path, "LOCK")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            pid = int(holder) if holder.isdigit() else None
            raise StoreLockedError(
                f"store {self.path} is already open in process {holder or '?'}"
                f"{' (this process)' if pid == os.getpid() else ''}; close it there first",
                path=self.path, pid=pid,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def _open(self, roll_bytes: int, tail_cache_bytes: int, checkpoint_interval: float,
              map_size: int) -> None:
        self._lock = threading.RLock()
        self._append_lock = threading.Lock()
        self._index_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._pins: dict[int, int] = {}  # journal positions retention must keep (staging)
        self._ckpt_extra: list[Callable[[Any], None]] = []  # checkpoint invariant 4
        self._streams: dict[str, StreamState] = {}
        self._seg_by_uid: dict[int, Segment] = {}
        self._writer_seqs: dict[tuple[str, str], int] = {}
        self._dirty_writers: dict[tuple[str, str], int] = {}
        self._dirty_lengths: set[int] = set()
        self._idx_pending: list[tuple[Segment, list[Any], int]] = []
        self._tail: deque[tuple[int, list[list[Any]]]] = deque()
        self._tail_bytes = 0
        self.tail_cache_bytes = tail_cache_bytes
        self._writers: set[EventStreamWriter] = set()
        self._readers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._services: dict[str, Any] = {}
        self.checkpoint_interval = checkpoint_interval
        self._meta = Metadata(os.path.join(self.path, "meta"), sync=self.durability != "none", map_size=map_size)
        self._journal = Journal(os.path.join(self.path, "journal"),
                                os.path.join(self.path, "recovery"), self.durability, roll_bytes)
        try:
            self._load_topology()
            base, end, records = self._journal.recover(self._meta.applied_pos())
            self._committed_at_replay = replay(self, records)
            self.recovered_records = len(records)
            self.torn_bytes_cut = self._journal.torn_bytes_cut
            self._journal.open(base, end)
            self._load_file_ends()
            # replayed commits are recorded in LMDB before the checkpoint moves applied_pos past
            # their MERGE records (transactions invariant 3)
            self._txns = Transactions(self, self._staged, self._committed_at_replay)
            self.checkpoint()
            self._retention = Retention(self)
            self._watermarks = Watermarks(self)
        except BaseException:
            try:
                self._journal.close()
            finally:
                self._meta.close()
            raise
        self._closed = False
        self._stop = threading.Event()
        self._linger_wake = threading.Event()
        self._linger_thread = threading.Thread(target=self._linger_loop, name="pe-linger", daemon=True)
        self._ckpt_thread = threading.Thread(target=self._checkpoint_loop, name="pe-checkpoint", daemon=True)
        self._maint_thread = threading.Thread(target=self._maintenance_loop, name="pe-maintenance", daemon=True)
        self._linger_thread.start()
        self._ckpt_thread.start()
        self._maint_thread.start()

    def _load_topology(self) -> None:
        for key, rec in self._meta.streams():
            scope, name = key.split("/", 1)
            epochs = [(int(e), int(t)) for e, t in rec.get("epochs", [(0, rec["created_ns"])])]
            st = StreamState(scope, name, StreamConfiguration.from_json(rec["config"]),
                             rec["created_ns"], rec["sealed"], {int(k): v for k, v in rec["head"].items()},
                             epochs, rec.get("next_number", 0))
            st.kind = rec.get("kind", "events")
            self._streams[key] = st
        self._staged: dict[int, Segment] = {}
        stale = []
        for uid, rec, length in sorted(self._meta.segments(), key=lambda x: x[1]["id"]):
            st = self._streams.get(rec["stream"])
            if st is None:  # a crash between deleting a stream and its transactions' staging
                stale.append(uid)
                continue
            seg = Segment(uid, rec["id"], rec["low"], rec["high"], length, rec["sealed"], st,
                          preds=tuple(rec.get("preds", ())), sealed_epoch=rec.get("sealed_epoch"),
                          created_ns=rec.get("created_ns", st.created_ns))
            if "txn" in rec:  # a transaction's staging segment: hidden (staging invariant 3)
                self._staged[uid] = seg
            else:
                st.add_segment(seg)
            self._seg_by_uid[uid] = seg
        if stale:
            with self._meta.write() as txn:
                self._meta.delete_segments(txn, stale)
        for st in self._streams.values():
            if not st.next_number:
                st.next_number = max((sid & 0xFFFFFFFF for sid in st.segments), default=-1) + 1

    def _load_file_ends(self) -> None:
        """Which segments have data in which journal file (retention deletes files by it)."""
        bases = self._journal.files()
        ends = self._meta.files()
        if ends is None:
            ends = self._meta.rebuild_files(bases)
        missing = [b for b in ends if b not in set(bases)]
        if missing:  # deleted by retention just before a crash (retention invariant 2)
            self._meta.drop_files(missing)
            for b in missing:
                del ends[b]
        self._file_ends: dict[int, dict[int, int]] = ends

    # ------------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")

    def _stream(self, scope: str, stream: str, kind: str | None = None) -> StreamState:
        """The stream's state; with ``kind``, StreamKindError unless it is that kind."""
        self._check_open()
        st = self._streams.get(f"{scope}/{stream}")
        if st is None:
            validate_scope(scope)
            validate_stream(stream)
            if not self._meta.has_scope(scope):
                raise ScopeNotFoundError(f"scope {scope!r} does not exist")
            raise StreamNotFoundError(f"stream {scope}/{stream} does not exist")
        if kind is not None and st.kind != kind:
            raise StreamKindError(
                f"{st.key} is a byte stream: use store.create_byte_stream for it, not the event API"
                if st.kind == "bytes" else
                f"{st.key} is an event stream: the byte-stream API cannot open it"
            )
        return st

    def _segments_of(self, stream_key: str) -> dict[int, Segment] | None:
        """A snapshot of a stream's segments by id (None if the stream does not exist)."""
        st = self._streams.get(stream_key)
        return None if st is None else dict(st.segments)

    def _sync_all(self, what: str) -> None:
        """Invariant 3: make everything written durable before a topology commit (every mode)."""
        self._journal.make_durable(self._journal.state()[0], what)

    # ------------------------------------------------------------------ scopes
    def create_scope(self, scope: str, *, exist_ok: bool = False) -> bool:
        """Create a scope; return False if it existed (and exist_ok)."""
        validate_scope(scope)
        with self._lock:
            self._check_open()
            with self._meta.write() as txn:
                if self._meta.has_scope(scope, txn):
                    if exist_ok:
                        return False
                    raise ScopeExistsError(f"scope {scope!r} already exists")
                self._meta.put_scope(txn, scope, {"created_ns": time.time_ns()})
        return True

    def list_scopes(self) -> list[str]:
        self._check_open()
        return self._meta.scopes()

    def delete_scope(self, scope: str) -> None:
        """Delete an empty scope."""
        validate_scope(scope)
        with self._lock:
            self._check_open()
            if not self._meta.has_scope(scope):
                raise ScopeNotFoundError(f"scope {scope!r} does not exist")
            if self.list_streams(scope):
                raise ScopeNotEmptyError(f"scope {scope!r} still has streams; delete them first")
            with self._meta.write() as txn:
                self._meta.delete_scope(txn, scope)

    # ------------------------------------------------------------------ streams
    def create_stream(self, scope: str, stream: str, config: StreamConfiguration | None = None,
                      *, exist_ok: bool = False, _kind: str = "events") -> bool:
        """Create a stream; return False if it existed (and exist_ok)."""
        validate_scope(scope)
        validate_stream(stream)
        config = StreamConfiguration() if config is None else config
        if not isinstance(config, StreamConfiguration):
            raise InvalidConfigurationError(f"config must be a StreamConfiguration, got {config!r}")
        key = f"{scope}/{stream}"
        with self._lock:
            self._check_open()
            if key in self._streams:
                if exist_ok:
                    return False
                raise StreamExistsError(f"stream {key} already exists")
            n = config.scaling.min_segments
            now = time.time_ns()
            with self._meta.write() as txn:
                if not self._meta.has_scope(scope, txn):
                    raise ScopeNotFoundError(f"scope {scope!r} does not exist (create_scope first)")
                uids = self._meta.allocate_uids(txn, n)
                st = StreamState(scope, stream, config, now, False, {}, None, n)
                st.kind = _kind
                for i, (uid, (low, high)) in enumerate(zip(uids, equal_ranges(n))):
                    seg = Segment(uid, segment_id(i, 0), low, high, 0, False, st, created_ns=now)
                    self._meta.put_segment(txn, uid, seg.record())
                    st.add_segment(seg)
                self._meta.put_stream(txn, key, st.record())
            self._streams[key] = st
            for seg in st.segments.values():
                self._seg_by_uid[seg.uid] = seg
        return True

    def list_streams(self, scope: str) -> list[str]:
        validate_scope(scope)
        self._check_open()
        if not self._meta.has_scope(scope):
            raise ScopeNotFoundError(f"scope {scope!r} does not exist")
        return sorted(st.name for st in list(self._streams.values()) if st.scope == scope)

    def stream_info(self, scope: str, stream: str) -> StreamInfo:
        st = self._stream(scope, stream)
        with self._append_lock:
            return st.info()

    def seal_stream(self, scope: str, stream: str) -> None:
        """Seal a stream: open writers are flushed, then no more writes are accepted."""
        with self._lock:
            st = self._stream(scope, stream)
            if st.sealed:
                return
            for w in list(st.writers):
                w._refuse(StreamSealedError, f"stream {st.key} is sealed", flush=True)
            with self._append_lock:
                st.sealed = True
                for seg in st.segments.values():
                    seg.sealed = True
            self._sync_all(f"seal {st.key}")
            with self._meta.write() as txn:
                for seg in st.segments.values():
                    self._meta.put_segment(txn, seg.uid, seg.record())
                self._meta.put_stream(txn, st.key, st.record())
            st.notify()

    def delete_stream(self, scope: str, stream: str) -> None:
        """Delete a stream (sealing it first, as Pravega requires)."""
        with self._lock:
            st = self._stream(scope, stream)
            self.seal_stream(scope, stream)
            for w in list(st.writers):
                w._refuse(StreamNotFoundError, f"stream {st.key} was deleted", flush=False)
            with self._meta.write() as txn:
                self._meta.delete_stream(txn, st.key, [s.uid for s in st.segments.values()])
            with self._append_lock:
                st.deleted = True
                del self._streams[st.key]
                self._retention.forget(st.key)
                self._watermarks.forget(st.key)
                for seg in st.segments.values():
                    self._seg_by_uid.pop(seg.uid, None)
                    self._dirty_lengths.discard(seg.uid)
                for wk in [k for k in self._writer_seqs if k[0] == st.key]:
                    self._writer_seqs.pop(wk, None)
                    self._dirty_writers.pop(wk, None)
            st.notify()
            for w in list(st.scale_watchers):
                w.close()
        self._txns.stream_deleted(st)  # outside the store lock: txn lock before store lock
        self.checkpoint()
        self._retention.reclaim()

    # ------------------------------------------------------------------ scaling
    def scale_stream(self, scope: str, stream: str, seal: list[int],
                     new_ranges: list[tuple[float, float]]) -> list[int]:
        """Seal the open segments ``seal`` and create successors owning ``new_ranges``, which
        must cover exactly the sealed key ranges, atomically (one new epoch). Writers move to
        the successors by themselves; readers read a successor only after its predecessors.
        Returns the new segment ids in key order."""
        with self._lock:
            st = self._stream(scope, stream, "events")
            return commit_scale(self, st, list(seal) if isinstance(seal, (list, tuple)) else seal,
                                new_ranges)

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Change a stream's scaling and retention policies. A fixed count different from the
        current one (or a rate policy's min_segments above it) rescales the stream into equal
        key ranges at once."""
        if not isinstance(config, StreamConfiguration):
            raise InvalidConfigurationError(f"config must be a StreamConfiguration, got {config!r}")
        with self._lock:
            st = self._stream(scope, stream)
            n = len(st.open_segments)
            policy = config.scaling
            if st.kind == "bytes" and (policy.kind != "fixed" or policy.min_segments != 1):
                raise StreamKindError(f"{st.key} is a byte stream: it keeps exactly one segment")
            plan = None
            if policy.kind == "fixed" and not st.sealed:
                plan = rescale_ranges(st, policy.min_segments)
            elif n < policy.min_segments and not st.sealed:
                plan = rescale_ranges(st, policy.min_segments)
            old = st.config
            st.config = config
            try:
                if plan is not None:
                    commit_scale(self, st, plan[0], plan[1])  # writes the stream record too
                else:
                    with self._meta.write() as txn:
                        self._meta.put_stream(txn, st.key, st.record())
            except BaseException:
                st.config = old
                raise

    def watch_segments(self, scope: str, stream: str,
                       callback: Callable[[SegmentCountChange], Any] | None = None, *,
                       initial: bool = True) -> SegmentWatcher:
        """Watch a stream's scalings: iterate the returned watcher (or pass ``callback``, run
        on the watcher's own thread) to get a SegmentCountChange per scaling; with ``initial``
        the current epoch comes first. Close the watcher to stop."""
        if callback is not None and not callable(callback):
            raise InvalidConfigurationError(f"callback must be callable, got {callback!r}")
        with self._lock:
            st = self._stream(scope, stream)

            def drop(w: SegmentWatcher) -> None:
                with self._lock:
                    if w in st.scale_watchers:
                        st.scale_watchers.remove(w)

            w = SegmentWatcher(st.scope, st.name, callback, drop)
            if initial:
                w.publish(self._change(st, len(st.open_segments)))
            st.scale_watchers.append(w)
        w._start()
        return w

    def _change(self, st: StreamState, previous: int) -> SegmentCountChange:
        epoch, ns = st.epochs[-1]
        return SegmentCountChange(scope=st.scope, stream=st.name, epoch=epoch, time_ns=ns,
                                  segment_count=len(st.open_segments), previous_count=previous,
                                  segment_ids=tuple(s.segment_id for s in st.open_segments))

    def _scaled(self, st: StreamState) -> None:
        """After a committed scaling (store lock held): tell the stream's watchers."""
        if st.scale_watchers:
            prev = len(st.history()[-2].segments) if len(st.epochs) > 1 else 0
            change = self._change(st, prev)
            for w in list(st.scale_watchers):
                w.publish(change)

    def truncate_stream(self, scope: str, stream: str, cut: StreamCut) -> None:
        """Make ``cut`` the stream's head: data before it is no longer readable, and journal
        files holding only truncated data are deleted (docs/retention.md)."""
        with self._lock:
            st = self._stream(scope, stream)
            positions = self._resolve_cut(st, cut, "truncate", check_boundaries=st.kind == "events")
            if positions is None:
                return
            moved = self._truncate_full(st, positions, "truncate")
        if moved:
            self.checkpoint()  # so every file before the one being written can be judged now
            self._retention.reclaim()

    def _truncate_full(self, st: StreamState, positions: dict[int, int], what: str) -> bool:
        """Move the head of ``st`` forward to the full map ``positions`` (retention invariant
        1) and drop the index entries of truncated sections. False if nothing moved."""
        with self._lock:
            if st.deleted or self._closed:
                return False
            old = st.head
            head = upper_bound(st.full_head(), positions)
            if head == st.full_head():
                return False
            self._sync_all(f"{what} {st.key}")
            with self._meta.write() as txn:
                st.head = head
                try:
                    self._meta.put_stream(txn, st.key, st.record())
                    for sid, off in head.items():
                        if off > old.get(sid, 0):
                            self._meta.drop_index_before(txn, st.segments[sid].uid, off)
                except BaseException:
                    st.head = old
                    raise
        st.notify()
        return True

    def _subscriber_cuts(self, stream_key: str) -> list[dict[int, int] | None]:
        """The retention cuts of the reader groups subscribed to a stream (frontiers; None for
        a subscriber with no cut yet)."""
        if "readergroups" not in _SERVICES:
            return []
        return self._service("readergroups").subscriber_cuts(stream_key)

    def reclaim(self) -> int:
        """Delete journal files that hold only truncated or deleted data now (retention does
        this by itself after truncating); returns the bytes freed."""
        self._check_open()
        self.checkpoint()
        return self._retention.reclaim()

    def _resolve_cut(self, st: StreamState, cut: StreamCut | None, what: str,
                     *, check_boundaries: bool = True) -> dict[int, int] | None:
        """Validate a cut against the stream; None for UNBOUNDED/None."""
        if cut is None or (isinstance(cut, StreamCut) and cut.positions is None):
            return None
        if not isinstance(cut, StreamCut):
            raise InvalidStreamCutError(f"{what}: expected a StreamCut, got {type(cut).__name__}")
        if (cut.scope, cut.stream) != st.names:
            raise InvalidStreamCutError(
                f"{what}: the StreamCut is of {cut.scope}/{cut.stream}, not of {st.key}"
            )
        named = cut.as_dict()
        full = check_cut(dict(st.segments), named, what, st.key)
        if check_boundaries:
            for sid, off in named.items():
                SegmentSource(self, st.segments[sid]).check_boundary(off, what)
        return full

    # ------------------------------------------------------------------ writers and readers
    def create_writer(self, scope: str, stream: str, writer_id: str | None = None, *,
                      serializer: Any = None, linger: float = 0.001,
                      batch_bytes: int = 256 * 1024,
                      automatically_note_time: bool = False) -> EventStreamWriter:
        """A writer for one stream. ``writer_id`` names it for exactly-once resumption."""
        if writer_id is None:
            writer_id = f"w-{os.getpid()}-{time.monotonic_ns():x}-{id(object()):x}"
        validate_writer_id(writer_id)
        if not (isinstance(linger, (int, float)) and 0 <= linger <= 60):
            raise InvalidConfigurationError(f"linger must be 0..60 seconds, got {linger!r}")
        if not (isinstance(batch_bytes, int) and 1 <= batch_bytes <= MAX_BATCH_BYTES):
            raise InvalidConfigurationError(f"batch_bytes must be 1..{MAX_BATCH_BYTES}, got {batch_bytes!r}")
        with self._lock:
            st = self._stream(scope, stream, "events")
            if st.sealed:
                raise StreamSealedError(f"stream {st.key} is sealed")
            if any(w.writer_id == writer_id for w in st.writers):
                raise WriterExistsError(f"writer {writer_id!r} is already open on {st.key}")
            wk = (st.key, writer_id)
            last = self._writer_seqs.get(wk)
            if last is None:
                last = self._meta.writer_seq(st.key, writer_id)
            if not isinstance(automatically_note_time, bool):
                raise InvalidConfigurationError(
                    f"automatically_note_time must be a bool, got {automatically_note_time!r}")
            w = EventStreamWriter(self, st, writer_id, serializer, -1 if last is None else last,
                                  linger=float(linger), batch_bytes=batch_bytes,
                                  auto_time=automatically_note_time)
            st.writers.add(w)
            self._writers.add(w)
            return w

    def create_transactional_writer(self, scope: str, stream: str, writer_id: str | None = None, *,
                                    serializer: Any = None) -> TransactionalEventStreamWriter:
        """A writer of transactions on one stream (docs/transactions.md)."""
        if writer_id is None:
            writer_id = f"tw-{os.getpid()}-{time.monotonic_ns():x}"
        validate_writer_id(writer_id)
        st = self._stream(scope, stream, "events")
        return TransactionalEventStreamWriter(self, st, writer_id, serializer)

    def create_byte_stream(self, scope: str, stream: str,
                           config: StreamConfiguration | None = None) -> ByteStream:
        """Open the byte stream ``scope/stream``, creating it (one segment; ``config`` may set
        its retention) if needed: a seekable, append-only byte sequence (docs/byte-streams.md)."""
        validate_scope(scope)
        validate_stream(stream)
        config = StreamConfiguration() if config is None else config
        if not isinstance(config, StreamConfiguration) or config.scaling.kind != "fixed" or \
                config.scaling.min_segments != 1:
            raise InvalidConfigurationError(
                f"a byte stream has one segment: its config needs ScalingPolicy.fixed(1), got {config!r}")
        with self._lock:
            self._check_open()
            if f"{scope}/{stream}" not in self._streams:
                self.create_stream(scope, stream, config, _kind="bytes")
            st = self._stream(scope, stream, "bytes")
        return ByteStream(self, st)

    def _writer_closed(self, w: EventStreamWriter) -> None:
        with self._lock:
            w._stream.writers.discard(w)
            self._writers.discard(w)
        self._watermarks.forget(w._stream.key, w.writer_id)

    def create_reader(self, scope: str, stream: str, start: StreamCut | None = None,
                      end: StreamCut | None = None, *, serializer: Any = None) -> EventStreamReader:
        """A standalone reader of one stream from ``start`` (default: head) to ``end``
        (default: unbounded, following the tail)."""
        st = self._stream(scope, stream, "events")
        start_pos = self._resolve_cut(st, start, "create_reader start")
        end_pos = self._resolve_cut(st, end, "create_reader end")
        r = EventStreamReader(self, st, start_pos, end_pos, serializer)
        self._readers.add(r)
        return r

    def read_slice(self, scope: str, stream: str, start: StreamCut | None = None,
                   end: StreamCut | None = None, *, serializer: Any = None) -> Slice:
        """The events between two cuts (default: head to the current tail), per segment in
        order: iterate it, or turn it into Arrow/pandas with ``.to_arrow()``/``.to_pandas()``."""
        st = self._stream(scope, stream, "events")
        start_pos = self._resolve_cut(st, start, "read_slice start")
        end_pos = self._resolve_cut(st, end, "read_slice end")
        return Slice(self, st, start_pos, end_pos, serializer)

    def fetch_event(self, pointer: EventPointer, *, serializer: Any = None) -> EventRead:
        """Read the one event an EventPointer points to."""
        if not isinstance(pointer, EventPointer):
            raise InvalidEventPointerError(f"expected an EventPointer, got {type(pointer).__name__}")
        st = self._stream(pointer.scope, pointer.stream, "events")
        seg = st.segments.get(pointer.segment_id)
        if seg is None:
            raise SegmentNotFoundError(f"{st.key} has no segment {pointer.segment_id}")
        return SegmentSource(self, seg).fetch(pointer.offset, pointer.length, serializer)

    # ------------------------------------------------------------------ reader groups
    def _service(self, name: str) -> Any:
        svc = self._services.get(name)
        if svc is None:
            with self._lock:
                self._check_open()
                svc = self._services.get(name)
                if svc is None:
                    svc = self._services[name] = _SERVICES[name](self)
        return svc

    def create_reader_group(self, group_name: str, config: Any, *, exist_ok: bool = False) -> Any:
        """Create a reader group reading ``config`` (a ReaderGroupConfig, or a list of
        ``(scope, stream)``); with exist_ok, return the existing group of that name instead."""
        return self._service("readergroups").create(group_name, config, exist_ok)

    def get_reader_group(self, group_name: str) -> Any:
        """The reader group of that name (ReaderGroupNotFoundError if none)."""
        return self._service("readergroups").get(group_name)

    def delete_reader_group(self, group_name: str) -> None:
        """Delete a reader group; its open readers raise ReaderGroupNotFoundError."""
        self._service("readergroups").delete(group_name)

    def list_reader_groups(self) -> list[str]:
        """The names of the store's reader groups, sorted."""
        return self._service("readergroups").names()

    # ------------------------------------------------------------------ the append path
    def _append_events(self, st: StreamState, wid: bytes, first: int, last: int,
                       by_seg: dict[Segment, list[tuple[bytes | None, list[bytes]]]]) -> int:
        """Append one writer batch (see ``append.append_events``); returns its journal end."""
        return append_events(self, st, wid, first, last, by_seg)

    # ------------------------------------------------------------------ background threads
    def _wake_linger(self) -> None:
        self._linger_wake.set()

    def _linger_loop(self) -> None:
        wake = self._linger_wake
        while not self._stop.is_set():
            now = time.monotonic()
            nxt = None
            for w in list(self._writers):
                due = w._linger_tick(now)
                if due is not None and (nxt is None or due < nxt):
                    nxt = due
            timeout = None if nxt is None else max(0.0, nxt - time.monotonic())
            if timeout is None or timeout > 0:
                wake.wait(timeout)
            wake.clear()

    def _maintenance_loop(self) -> None:
        """Auto-scaling and retention, every ``maintenance_interval`` seconds."""
        while not self._stop.wait(self.maintenance_interval):
            try:
                self._autoscaler.tick()
                self._retention.tick()
                self._watermarks.tick()
                self._txns.tick()
            except Exception:  # noqa: BLE001 - the journal or metadata failed; retried next tick
                if self._closed:
                    return

    def _checkpoint_loop(self) -> None:
        while not self._stop.wait(self.checkpoint_interval):
            try:
                self.checkpoint()
            except Exception:  # noqa: BLE001 - the journal failed; appends will report it
                if self._closed:
                    return

    def _file_rows(self, idx: list[tuple[Segment, list[Any], int]]) -> dict[int, dict[int, int]]:
        """The files-table rows changed by indexing ``idx`` (caller holds ``_ckpt_lock``)."""
        return file_rows(self, idx)

    def checkpoint(self) -> int:
        """Write lengths, writer sequences and the section index to LMDB up to the current
        journal position (after making the journal durable there). Returns that position."""
        return write_checkpoint(self)

    # ------------------------------------------------------------------ closing
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush and close writers, checkpoint, close files, release the lock. Idempotent."""
        if self._closed:
            return
        first_error: BaseException | None = None
        for w in list(self._writers):
            try:
                w.close()
            except BaseException as exc:  # noqa: BLE001
                first_error = first_error or exc
        try:
            self._txns.stage_pending()  # open transactions keep what was written to them
        except BaseException as exc:  # noqa: BLE001
            first_error = first_error or exc
        for r in list(self._readers):
            r.close()
        self._stop.set()
        self._linger_wake.set()
        self._linger_thread.join()
        self._ckpt_thread.join()
        self._maint_thread.join()
        try:
            self.checkpoint()
        except BaseException as exc:  # noqa: BLE001
            first_error = first_error or exc
        with self._lock:
            self._closed = True
            for st in self._streams.values():
                st.notify()
                for w in list(st.scale_watchers):
                    w.close()
            try:
                self._journal.close()
            except BaseException as exc:  # noqa: BLE001
                first_error = first_error or exc
            self._meta.close()
            os.close(self._lock_fd)
        if self._temporary:
            shutil.rmtree(self.path, ignore_errors=True)
        if first_error is not None:
            raise first_error

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Store {self.path!r} durability={self.durability}{' closed' if self._closed else ''}>"

    def _repr_html_(self) -> str:
        if self._closed:
            return f"<b>Store</b> {self.path} (closed)"
        rows = "".join(
            f"<tr><td>{st.scope}</td><td>{st.name}</td><td>{len(st.segments)}</td>"
            f"<td>{sum(s.length for s in st.segments.values()):,}</td><td>{'sealed' if st.sealed else 'open'}</td></tr>"
            for st in sorted(self._streams.values(), key=lambda s: s.key)
        )
        return (f"<b>Store</b> {self.path} (durability={self.durability})<table><tr><th>scope</th>"
                f"<th>stream</th><th>segments</th><th>bytes</th><th>state</th></tr>{rows}</table>")


def open(path: str | os.PathLike[str] = "./data", durability: str = "fsync", **options: Any) -> Store:  # noqa: A001
    """Open (creating if needed) the store in directory ``path``.

    durability: "fsync" (default; acknowledged after fdatasync, with group commit), "os"
    (acknowledged once in the OS page cache) or "none" (tests only).
    """
    return Store(os.fspath(path), durability, **options)


def open_temporary(durability: str = "none", **options: Any) -> Store:
    """A fast store in a new temporary directory, deleted again on close (for tests)."""
    path = tempfile.mkdtemp(prefix="pravega-embedded-")
    return Store(path, durability, _temporary=True, **options)
