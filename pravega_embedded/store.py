"""The store: one directory, one journal, one metadata environment, many streams.

Owns: the public API of an open store (scopes, streams, seal, scale, truncate, delete, writers,
readers, slices, byte streams, transactions, reader groups, checkpoints, status, close), the
services built on the engine (auto-scaler, retention, watermarks, transactions) and the
background threads (``background``). The internals are the engine's (``engine``).

Directory layout (bytes in docs/format.md)::

    <dir>/LOCK          flock()ed by the owning process; holds its pid
    <dir>/STORE         the marker: a store lives here (JSON: format, id, creation time)
    <dir>/meta/         LMDB environment (metadata)
    <dir>/journal/      journal files <base:020d>.pej
    <dir>/recovery/     torn journal tails cut at recovery, kept for inspection
    <dir>/tier2/        tier 2 when no other target is given (``tiering``; docs/format.md)

Invariants:
  1. One process (one open handle) owns the directory at a time (storedir).
  2. Every public method raises StoreClosedError once the store is closed, and the fail-stop
     error once a sync has failed (``failstop``); close() always releases everything.
  3. Topology changes hold the engine's topology lock and commit to LMDB only after the journal
     is durable (engine invariant 3).
  4. Nothing the store's threads reach refers to the Store object (``storecore``): a Store the
     program drops is garbage-collected and closed as ``close()`` would; the handles it gave
     out keep it alive while they are referenced.

Thread-safety: all public methods are thread-safe.
"""

from __future__ import annotations

import os
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from . import eventcount
from .append import append_events
from .background import Background, StoreStatus
from .batch import (SegmentRange, Truncation, range_slice, segment_ranges, skip_truncated, split_ranges,
                    step_cut)
from .budget import LocalBudget
from .bytestream import ByteStream
from .config import (DEFAULT_FILE_AGE_S, DEFAULT_FILE_BYTES, StreamConfiguration, TieringOptions, one_stream,
                     stream_configuration)
from .engine import Engine, EngineOptions
from .errors import (
    InvalidConfigurationError,
    InvalidEventPointerError,
    ScopeExistsError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentNotFoundError,
    StreamExistsError,
    StreamKindError,
    StreamNotFoundError,
    StreamSealedError,
    WriterExistsError,
)
from .events import EventPointer, EventRead
from .failstop import STREAMS_LOG
from .journal import DURABILITY_MODES
from .largeevents import DEFAULT_LARGE_EVENT_LIMIT
from .names import validate_scope, validate_stream, validate_writer_id
from .reader import EventStreamReader, Slice
from .retention import Retention
from .routing import equal_ranges
from .scaling import DEFAULT_WINDOWS, AutoScaler, commit_scale, rescale_ranges
from .segment import Segment
from .segsource import SegmentSource, resolve_cut
from .serializers import Serializer
from .storecore import ServerService, StoreCore, TieringService, keep, register_service, segment_change
from .storedir import StoreDir, new_store_id
from .stream import StreamInfo, StreamState
from .streamcut import StreamCut, segment_id
from .timelookup import Timestamp, cut_at, timestamp_ns, write_times
from .transactions import TransactionalEventStreamWriter, TransactionInfo, Transactions
from .watch import SegmentCountChange, SegmentWatcher
from .watermarks import Watermarks
from .writer import MAX_BATCH_BYTES, MAX_EVENT_SIZE, EventStreamWriter, WriterControl

if TYPE_CHECKING:
    from .readergroup import ReaderGroup, ReaderGroupConfig
    from .tiering import TieringStatus

__all__ = ["Store", "open", "open_temporary", "register_service", "register_tiering", "register_server"]

TIERED_EVENT_LIMIT = (1 << 31) - (1 << 16)  # the largest large_event_limit with tiering on

_SERVER: list[Callable[["Store"], ServerService]] = []


def register_server(factory: Callable[["Store"], ServerService]) -> None:
    """Make ``factory(store)`` what serves a store to other processes (``remote.OwnerServer``);
    a store opened with ``serve=True`` (the default) starts it once it is open."""
    _SERVER[:] = [factory]

_TIERING: list[Callable[[Engine, TieringOptions], TieringService]] = []


def register_tiering(factory: Callable[[Engine, TieringOptions], TieringService]) -> None:
    """Make ``factory(engine, options)`` the tierer a store opened with tiering starts."""
    _TIERING[:] = [factory]


def _tiering_options(path: str, tier2: "str | os.PathLike[str] | bool | None",
                     storage_options: Mapping[str, object] | None, file_bytes: int,
                     file_age: float, local_budget: int | None, budget_timeout: float,
                     roll_bytes: int, delete_grace: float) -> TieringOptions | None:
    """The store's tiering options: None with ``tier2=False``; ``<store>/tier2`` by default."""
    if tier2 is False:
        if local_budget is not None:
            raise InvalidConfigurationError(
                "local_budget needs tier 2 to move the journal to: it cannot be set with tier2=False")
        return None
    url = os.path.join(path, "tier2") if tier2 is None or tier2 is True else tier2
    if not isinstance(url, (str, os.PathLike)):
        raise InvalidConfigurationError(f"tier2 must be a URL, a path or False, got {tier2!r}")
    options = TieringOptions(os.fspath(url), {} if storage_options is None else storage_options,
                             file_bytes, file_age, local_budget=local_budget,
                             budget_timeout=budget_timeout, delete_grace=delete_grace)
    if local_budget is not None and local_budget < 2 * roll_bytes:
        raise InvalidConfigurationError(
            f"local_budget {local_budget:,} is under two journal files (roll_bytes {roll_bytes:,}): "
            "the file being written is never reclaimed, so writers could wait for ever; raise it "
            "or lower roll_bytes")
    return options


def _check_options(durability: str, roll_bytes: int, maintenance_interval: float,
                   retention_interval: float, large_event_limit: int) -> None:
    if durability not in DURABILITY_MODES:
        raise InvalidConfigurationError(
            f"durability must be one of {sorted(DURABILITY_MODES)}, got {durability!r}")
    if not isinstance(roll_bytes, int) or roll_bytes < (1 << 20):
        raise InvalidConfigurationError(f"roll_bytes must be an int >= 1 MiB, got {roll_bytes!r}")
    for what, x in (("maintenance_interval", maintenance_interval), ("retention_interval", retention_interval)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x <= 86400:
            raise InvalidConfigurationError(f"{what} must be seconds in (0, 86400], got {x!r}")
    if isinstance(large_event_limit, bool) or not isinstance(large_event_limit, int) or \
            not MAX_EVENT_SIZE <= large_event_limit <= (1 << 32) - (1 << 16):
        raise InvalidConfigurationError(
            f"large_event_limit must be an int in [8 MiB, 4 GiB - 64 KiB], got {large_event_limit!r}")


class Store:
    """An open store. Use :func:`open` (or ``with pe.open(path) as store``)."""

    def __init__(self, path: str, durability: str = "fsync", *, roll_bytes: int = 64 << 20,
                 tail_cache_bytes: int = 64 << 20, checkpoint_interval: float = 1.0,
                 map_size: int = 1 << 32, scale_windows: tuple[float, ...] = DEFAULT_WINDOWS,
                 scale_cooldown: float = 600.0, maintenance_interval: float = 10.0,
                 retention_interval: float = 60.0, large_event_limit: int = DEFAULT_LARGE_EVENT_LIMIT,
                 tier2: "str | os.PathLike[str] | bool | None" = None,
                 tier2_options: Mapping[str, object] | None = None,
                 tier2_file_bytes: int = DEFAULT_FILE_BYTES, tier2_file_age: float = DEFAULT_FILE_AGE_S,
                 local_budget: int | None = None, local_budget_timeout: float = 60.0,
                 tier2_delete_grace: float = 60.0, serve: bool = True, reader_timeout: float = 30.0,
                 _temporary: bool = False) -> None:
        _check_options(durability, roll_bytes, maintenance_interval, retention_interval, large_event_limit)
        tiering = _tiering_options(os.path.abspath(os.fspath(path)), tier2, tier2_options,
                                   tier2_file_bytes, tier2_file_age, local_budget,
                                   local_budget_timeout, roll_bytes, tier2_delete_grace)
        if tiering is not None and large_event_limit > TIERED_EVENT_LIMIT:
            raise InvalidConfigurationError(
                f"large_event_limit {large_event_limit} is over {TIERED_EVENT_LIMIT} (2 GiB - 64 KiB), "
                "the largest event tier 2 holds (a Parquet value is under 2 GiB): lower it, or open "
                "the store with tier2=False")
        if isinstance(reader_timeout, bool) or not isinstance(reader_timeout, (int, float)) \
                or not 0 < reader_timeout < float("inf"):
            raise InvalidConfigurationError(f"reader_timeout must be seconds > 0, got {reader_timeout!r}")
        self.reader_timeout = float(reader_timeout)  # a dead client's group readers go offline after it
        self.large_event_limit = large_event_limit
        self.maintenance_interval = float(maintenance_interval)
        self.retention_interval = float(retention_interval)
        self.checkpoint_interval = checkpoint_interval
        self.path = os.path.abspath(os.fspath(path))
        self.durability = durability
        self._finalizer: weakref.finalize | None = None
        self._tiering: TieringService | None = None
        self._dir = StoreDir.acquire(self.path)
        try:
            if self._dir.new:
                self._dir.prepare()
            e = self._engine = Engine(self.path, durability,
                                      EngineOptions(roll_bytes, tail_cache_bytes, map_size),
                                      new=self._dir.new)
            try:
                core = self._core = StoreCore(self.path, e, self._dir, _temporary)
                self._servers = core.servers
                self._autoscaler = AutoScaler(e, scale_windows, scale_cooldown)
                self._open_engine()
                if tiering is not None and tiering.local_budget is not None:
                    e.budget = LocalBudget(self.path, e.journal, e.latch, tiering.local_budget,
                                           tiering.budget_timeout)
                if tiering is not None and _TIERING:
                    self._tiering = core.tiering = _TIERING[0](e, tiering)
            except BaseException:
                e.close()
                raise
        except BaseException:
            self._dir.release()
            raise
        self._bg = core.bg = Background(e, checkpoint_interval=checkpoint_interval,
                              maintenance_interval=self.maintenance_interval,
                              maintenance=[("auto-scaling", self._autoscaler.tick),
                                           ("retention", e.retention.tick),
                                           ("watermarks", e.watermarks.tick),
                                           ("transaction leases", e.txns.tick)])
        e.wake_linger = self._bg.wake_linger
        self._bg.start()
        if self._tiering is not None:
            self._tiering.start()
        # dropped without close(), the store closes when garbage-collected (storecore)
        self._finalizer = weakref.finalize(self, core.release)
        self._finalizer.atexit = False
        if serve and not _temporary and _SERVER:
            self._serve()

    def _serve(self) -> None:
        """Serve the store to other processes that open its directory (``remote``). A store
        that cannot serve still works here; others then get StoreLockedError, as before."""
        try:
            self._servers.append(_SERVER[0](self._view()))
        except Exception as exc:  # noqa: BLE001 - logged; the store works here without it
            STREAMS_LOG.warning("store %s: cannot serve it to other processes (%s); they will get "
                                "StoreLockedError while it is open here", self.path, exc,
                                exc_info=not isinstance(exc, OSError))

    def _view(self) -> "Store":
        """Another Store object over the same parts and without a finalizer: what the
        store's own server holds, so it does not keep this one alive (storecore invariant 1)."""
        view = object.__new__(Store)
        view.__dict__.update(self.__dict__)
        view._finalizer = None
        return view

    def add_server(self, server: ServerService) -> None:
        """A server of this store (TCP: ``remote.serve_tcp``) closed first when it closes."""
        self._engine.check_open()
        self._servers.append(server)

    def _open_engine(self) -> None:
        """Recover, start the services, take the first checkpoint, mark the store."""
        e = self._engine
        e.latch.on_trip(self._core.stopped)
        committed = e.open(self._dir.store_id)
        try:
            # replayed commits are recorded in LMDB before the checkpoint moves applied_pos past
            # their MERGE records (transactions invariant 3)
            e.txns = Transactions(e, e.staged, committed)
            e.checkpoint()
            e.retention = Retention(e, self.retention_interval)
            e.watermarks = Watermarks(e)
            e.subscribers = self._core.subscriber_cuts
            e.on_scaled = self._core.scaled
            if not self._dir.marked:  # a new store, or one that predates (or lost) its marker
                store_id = e.meta.store_id()
                if store_id is None:
                    store_id = new_store_id()
                    e.meta.put_store_id(store_id)
                self._dir.mark(e.latch, store_id)
        except BaseException:
            e.close()
            raise
        e.latch.opening = False

    # ------------------------------------------------------------------ status
    @property
    def recovered_records(self) -> int:
        """Journal records replayed at open."""
        return self._engine.recovered_records

    @property
    def torn_bytes_cut(self) -> int:
        """Bytes of torn journal tail cut at open."""
        return self._engine.torn_bytes_cut

    def status(self) -> StoreStatus:
        """The store's health: a failed sync (the store must be reopened), recent failures of
        background tasks (with tracebacks), journal positions."""
        e = self._engine
        failed = e.latch.error
        js = e.journal.status() if not e.closed and failed is None else None
        return StoreStatus(
            path=self.path, durability=self.durability, failed=None if failed is None else str(failed),
            background_failures=self._bg.failures,
            journal_written=js.written if js else 0, journal_durable=js.durable if js else 0,
            recovered_records=e.recovered_records, torn_bytes_cut=e.torn_bytes_cut)

    # ------------------------------------------------------------------ tier 2
    def _tierer(self) -> TieringService:
        self._engine.check_open()
        if self._tiering is None:
            raise InvalidConfigurationError(
                f"store {self.path} was opened with tier2=False: it does not tier")
        return self._tiering

    def tiering_status(self) -> "TieringStatus":
        """Where tiering to tier 2 stands: state, tiered and untiered bytes, files, lag, the
        last error (a ``TieringStatus``; docs/tiering.md)."""
        return self._tierer().status()

    def flush_tier2(self, timeout: float | None = None) -> None:
        """Return once everything durable now is in tier 2 and in its stream's manifest.
        While tier 2 fails it retries; after ``timeout`` seconds (None: no limit) it raises
        TieringTimeoutError with the last failure."""
        self._tierer().flush(timeout)

    # ------------------------------------------------------------------ scopes
    def create_scope(self, scope: str, *, exist_ok: bool = False) -> bool:
        """Create a scope; return False if it existed (and exist_ok)."""
        validate_scope(scope)
        e = self._engine
        with e.lock:
            e.check_open()
            with e.meta.write(f"create scope {scope!r}") as txn:
                if e.meta.has_scope(scope, txn):
                    if exist_ok:
                        return False
                    raise ScopeExistsError(f"scope {scope!r} already exists")
                e.meta.put_scope(txn, scope, {"created_ns": time.time_ns()})
        return True

    def list_scopes(self) -> list[str]:
        self._engine.check_open()
        return self._engine.meta.scopes()

    def delete_scope(self, scope: str) -> None:
        """Delete an empty scope."""
        validate_scope(scope)
        e = self._engine
        with e.lock:
            e.check_open()
            if not e.meta.has_scope(scope):
                raise ScopeNotFoundError(f"scope {scope!r} does not exist")
            if self.list_streams(scope):
                raise ScopeNotEmptyError(f"scope {scope!r} still has streams; delete them first")
            with e.meta.write(f"delete scope {scope!r}") as txn:
                e.meta.delete_scope(txn, scope)

    # ------------------------------------------------------------------ streams
    def create_stream(self, scope: str, stream: str, config: StreamConfiguration | int | None = None,
                      *, exist_ok: bool = False, _kind: str = "events") -> bool:
        """Create a stream (``config``: a StreamConfiguration, or a segment count for a fixed
        number of segments); return False if it existed (and exist_ok)."""
        validate_scope(scope)
        validate_stream(stream)
        config = stream_configuration(config)
        key = f"{scope}/{stream}"
        e = self._engine
        with e.lock:
            e.check_open()
            if key in e.streams:
                if exist_ok:
                    return False
                raise StreamExistsError(f"stream {key} already exists")
            n = config.scaling.min_segments
            now = time.time_ns()
            with e.meta.write(f"create stream {key}") as txn:
                if not e.meta.has_scope(scope, txn):
                    raise ScopeNotFoundError(f"scope {scope!r} does not exist (create_scope first)")
                uids = e.meta.allocate_uids(txn, n)
                st = StreamState(scope, stream, config, now, False, {}, None, n)
                st.kind = _kind
                for i, (uid, (low, high)) in enumerate(zip(uids, equal_ranges(n))):
                    seg = Segment(uid, segment_id(i, 0), low, high, 0, False, st, created_ns=now)
                    e.meta.put_segment(txn, uid, seg.record())
                    st.add_segment(seg)
                e.meta.put_stream(txn, key, st.record())
            e.streams[key] = st
            for seg in st.segments.values():
                e.segments[seg.uid] = seg
        return True

    def list_streams(self, scope: str) -> list[str]:
        validate_scope(scope)
        e = self._engine
        e.check_open()
        if not e.meta.has_scope(scope):
            raise ScopeNotFoundError(f"scope {scope!r} does not exist")
        return sorted(st.name for st in list(e.streams.values()) if st.scope == scope)

    def stream_info(self, scope: str, stream: str) -> StreamInfo:
        """A snapshot of the stream: its configuration, segments (with their events from head
        to length: ``info.events``), head and tail cuts, and scaling history."""
        e = self._engine
        st = e.stream(scope, stream)
        with e.append_lock:
            info = st.info()
            segs = dict(st.segments)
        if info.kind != "events":
            return info
        return replace(info, segments=tuple(
            replace(s, events=eventcount.count(e, segs[s.segment_id], s.head, s.length, remember=True))
            for s in info.segments))

    def tiered_bytes(self, scope: str, stream: str) -> int:
        """Bytes of the stream's live data that are in tier 2: per segment, from its head to
        its tiered end (data truncated away no longer counts, even while its tier-2 file is
        still there). 0 for a stream none of whose data was tiered (docs/tiering.md)."""
        e = self._engine
        st = e.stream(scope, stream)
        with e.append_lock:
            return sum(max(0, e.tiered.get(seg.uid, 0) - st.head.get(sid, 0))
                       for sid, seg in st.segments.items())

    def seal_stream(self, scope: str, stream: str) -> None:
        """Seal a stream: open writers are flushed, then no more writes are accepted."""
        e = self._engine
        with e.lock:
            self._core.seal(e.stream(scope, stream))

    def delete_stream(self, scope: str, stream: str) -> None:
        """Delete a stream (sealing it first, as Pravega requires)."""
        e = self._engine
        with e.lock:
            st = e.stream(scope, stream)
            self._core.seal(st)
            deleted = f"stream {st.key} was deleted"
            for w in list(st.writers):
                w.refuse(lambda: StreamNotFoundError(deleted), flush=False)
            with e.meta.write(f"delete stream {st.key}") as txn:
                e.meta.delete_stream(txn, st.key, [s.uid for s in st.segments.values()])
            with e.append_lock:
                e.forget_stream(st)
                e.retention.forget(st.key)
                e.watermarks.forget(st.key)
            st.notify()
            for w in list(st.scale_watchers):
                w.close()
        e.txns.stream_deleted(st)  # outside the topology lock: txn lock before topology lock
        e.checkpoint()
        e.reclaim()

    # ------------------------------------------------------------------ scaling
    def scale_stream(self, scope: str, stream: str, seal: list[int],
                     new_ranges: list[tuple[float, float]]) -> list[int]:
        """Seal the open segments ``seal`` and create successors owning ``new_ranges``, which
        must cover exactly the sealed key ranges, atomically (one new epoch). Writers move to
        the successors by themselves; readers read a successor only after its predecessors.
        Returns the new segment ids in key order."""
        e = self._engine
        with e.lock:
            st = e.stream(scope, stream, "events")
            return commit_scale(e, st, list(seal) if isinstance(seal, (list, tuple)) else seal,
                                new_ranges)

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Change a stream's scaling and retention policies. A fixed count different from the
        current one (or a rate policy's min_segments above it) rescales the stream into equal
        key ranges at once."""
        if not isinstance(config, StreamConfiguration):
            raise InvalidConfigurationError(f"config must be a StreamConfiguration, got {config!r}")
        e = self._engine
        with e.lock:
            st = e.stream(scope, stream)
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
                    commit_scale(e, st, plan[0], plan[1])  # writes the stream record too
                else:
                    with e.meta.write(f"update {st.key}") as txn:
                        e.meta.put_stream(txn, st.key, st.record())
            except BaseException:
                st.config = old
                raise

    def watch_segments(self, scope: str, stream: str,
                       callback: Callable[[SegmentCountChange], object] | None = None, *,
                       initial: bool = True) -> SegmentWatcher:
        """Watch a stream's scalings: iterate the returned watcher (or pass ``callback``, run
        on the watcher's own thread) to get a SegmentCountChange per scaling; with ``initial``
        the current epoch comes first. Close the watcher to stop."""
        if callback is not None and not callable(callback):
            raise InvalidConfigurationError(f"callback must be callable, got {callback!r}")
        e = self._engine
        with e.lock:
            st = e.stream(scope, stream)

            def drop(w: SegmentWatcher) -> None:
                with e.lock:
                    if w in st.scale_watchers:
                        st.scale_watchers.remove(w)

            w = SegmentWatcher(st.scope, st.name, callback, drop)
            if initial:
                w.publish(segment_change(st, len(st.open_segments)))
            st.scale_watchers.append(w)
        w._start()
        keep(self, w)  # an open watcher keeps its store open
        return w

    # ------------------------------------------------------------------ truncation
    def truncate_stream(self, scope: str, stream: str, cut: StreamCut) -> None:
        """Make ``cut`` the stream's head: data before it is no longer readable, and journal
        files holding only truncated data are deleted (docs/retention.md)."""
        e = self._engine
        with e.lock:
            st = e.stream(scope, stream)
            positions = resolve_cut(e, st, cut, "truncate", check_boundaries=st.kind == "events")
            if positions is None:
                return
            moved = e.truncate(st, positions, "truncate")
        if moved:
            e.checkpoint()  # so every file before the one being written can be judged now
            e.reclaim()

    def reclaim(self) -> int:
        """Delete journal files that hold only truncated or deleted data now (retention does
        this by itself after truncating); returns the bytes freed."""
        e = self._engine
        e.check_open()
        e.checkpoint()
        return e.reclaim()

    # ------------------------------------------------------------------ writers and readers
    def create_writer(self, scope: str, stream: str, writer_id: str | None = None, *,
                      serializer: Serializer | str | None = None, linger: float = 0.001,
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
        if not isinstance(automatically_note_time, bool):
            raise InvalidConfigurationError(
                f"automatically_note_time must be a bool, got {automatically_note_time!r}")
        e, core = self._engine, self._core
        with e.lock:
            st = e.stream(scope, stream, "events")
            e.admit_writer()
            if st.sealed:
                raise StreamSealedError(f"stream {st.key} is sealed")
            if any(w.writer_id == writer_id for w in st.writers):
                raise WriterExistsError(f"writer {writer_id!r} is already open on {st.key}")
            last = e.seqs.last(st.key, writer_id)
            control: list[WriterControl] = []
            w = EventStreamWriter(
                e, st, writer_id, serializer, -1 if last is None else last, linger=float(linger),
                batch_bytes=batch_bytes, auto_time=automatically_note_time,
                large_event_limit=self.large_event_limit,
                append=lambda s, wid, first, lst, batch: append_events(e, s, wid, first, lst, batch),
                on_close=lambda: core.writer_closed(st, control[0]))
            control.append(WriterControl(w))
            st.writers.add(control[0])
            e.writers.add(control[0])
        keep(self, w)
        return w

    def list_transactions(self, scope: str, stream: str) -> list[TransactionInfo]:
        """The transactions of a stream this store knows (open ones, and ended ones until
        they are forgotten), oldest first; abort one with
        ``create_transactional_writer(scope, stream).get_txn(txn_id).abort()``."""
        e = self._engine
        return e.txns.infos(e.stream(scope, stream, "events"))

    def create_transactional_writer(self, scope: str, stream: str, writer_id: str | None = None, *,
                                    serializer: Serializer | str | None = None) -> TransactionalEventStreamWriter:
        """A writer of transactions on one stream (docs/transactions.md)."""
        if writer_id is None:
            writer_id = f"tw-{os.getpid()}-{time.monotonic_ns():x}"
        validate_writer_id(writer_id)
        st = self._engine.stream(scope, stream, "events")
        tw = TransactionalEventStreamWriter(self._engine, st, writer_id, serializer)
        keep(self, tw)
        return tw

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
        e = self._engine
        with e.lock:
            e.check_open()
            if f"{scope}/{stream}" not in e.streams:
                self.create_stream(scope, stream, config, _kind="bytes")
            st = e.stream(scope, stream, "bytes")
        core = self._core
        bs = ByteStream(e, st, seal=lambda: core.seal(st))
        keep(self, bs)
        return bs

    def create_reader(self, scope: str, stream: str, start: StreamCut | None = None,
                      end: StreamCut | None = None, *,
                      serializer: Serializer | str | None = None,
                      starting_timestamp: Timestamp | None = None) -> EventStreamReader:
        """A standalone reader of one stream from ``start`` (default: head; or the cut at
        ``starting_timestamp``, ``get_stream_cut_at``) to ``end`` (default: unbounded,
        following the tail)."""
        if starting_timestamp is not None:
            start = self.get_stream_cut_at(scope, stream, _instead(starting_timestamp, start))
        e = self._engine
        st = e.stream(scope, stream, "events")
        start_pos = resolve_cut(e, st, start, "create_reader start")
        end_pos = resolve_cut(e, st, end, "create_reader end")
        r = EventStreamReader(e, st, start_pos, end_pos, serializer)
        e.admit_reader(r)
        keep(self, r)
        return r

    def read_slice(self, scope: str, stream: str, start: StreamCut | None = None,
                   end: StreamCut | None = None, *, serializer: Serializer | str | None = None) -> Slice:
        """The events between two cuts (default: head to the current tail), per segment in
        order: iterate it, or turn it into Arrow/pandas with ``.to_arrow()``/``.to_pandas()``."""
        e = self._engine
        st = e.stream(scope, stream, "events")
        start_pos = resolve_cut(e, st, start, "read_slice start")
        end_pos = resolve_cut(e, st, end, "read_slice end")
        sl = Slice(e, st, start_pos, end_pos, serializer)
        keep(self, sl)
        return sl

    # ------------------------------------------------------------------ batch API
    def get_segments(self, scope: str, stream: str, start: StreamCut | None = None,
                     end: StreamCut | None = None, *, max_bytes: int | None = None) -> list[SegmentRange]:
        """The slice between two cuts (default: head to the current tail) as one SegmentRange
        per segment with events in it, predecessors first: independent units of work that
        ``read_segment_range`` reads, in any process, in parallel (Pravega's BatchClient).
        ``max_bytes``: split ranges into pieces of about that size at event boundaries."""
        sl = self.read_slice(scope, stream, start, end)
        return split_ranges(self._engine, segment_ranges(scope, stream, sl.ranges), max_bytes)

    def read_segment_range(self, rng: SegmentRange, *,
                           serializer: Serializer | str | None = None) -> Slice:
        """The events of one SegmentRange: iterate them, or ``.to_arrow()`` /
        ``.arrow_batches()``. Its bounds must be event boundaries of the segment, the start
        not before its head (TruncatedDataError) and the end within the segment."""
        sl = range_slice(self._engine, rng, serializer)
        keep(self, sl)
        return sl

    def get_next_stream_cut(self, scope: str, stream: str, start: StreamCut | None,
                            approx_bytes: int, *, max_events: int | None = None,
                            end: StreamCut | None = None, min_events: int | None = None) -> StreamCut:
        """The cut about ``approx_bytes`` of events (and at most about ``max_events`` events)
        after ``start`` (None: the head), on event boundaries, within acknowledged data and not
        past ``end``: bounded steps through a stream (successors only once their predecessors
        are read). Limits are soft: a step always moves if it can. At the tail (or ``end``) it
        returns ``start``'s position, and so it does while fewer than ``min_events`` events
        are there to take."""
        return step_cut(self._engine, scope, stream, start, approx_bytes, max_events, end, min_events)

    def get_stream_cut_at(self, scope: str, stream: str, timestamp: Timestamp) -> StreamCut:
        """The cut at a point in time (Kafka's offsets_for_times): per segment, the first event
        written at or after ``timestamp`` (a datetime, seconds since the epoch, or ISO-8601
        text with a zone), the end where everything was written before it, never before the
        head. Read from it to get what was written since; end a slice at it for what was
        written before (docs/event-time.md)."""
        return cut_at(self._engine, scope, stream, timestamp_ns(timestamp))

    def get_stream_cut_from_tail(self, scope: str, stream: str, events: int) -> StreamCut:
        """The tail cut moved back ``events`` events in each segment of the current epoch, not
        before its head (kcat's ``-o -N``): read from it to get the last ``events`` events of
        each current segment."""
        if not isinstance(events, int) or isinstance(events, bool) or events < 0:
            raise InvalidConfigurationError(f"events must be an int >= 0, got {events!r}")
        return eventcount.cut_back(self._engine, scope, stream, events)

    def skip_truncated(self, scope: str, stream: str, cut: StreamCut) -> Truncation:
        """``cut`` moved up to the stream's head where retention (or a truncate) deleted data
        it had not read, and what was deleted (``Truncation.lost``: empty if nothing)."""
        return skip_truncated(self._engine, scope, stream, cut)

    def write_times(self, pointers: Sequence[EventPointer]) -> list[int | None]:
        """When each event was written (ns since the epoch; None for records of the first
        journal formats, which carry no write time), in the order given: events of one append
        share its time (docs/event-time.md)."""
        return write_times(self._engine, list(pointers))

    def fetch_event(self, pointer: EventPointer, *, serializer: Serializer | str | None = None) -> EventRead:
        """Read the one event an EventPointer points to."""
        if not isinstance(pointer, EventPointer):
            raise InvalidEventPointerError(f"expected an EventPointer, got {type(pointer).__name__}")
        e = self._engine
        st = e.stream(pointer.scope, pointer.stream, "events")
        seg = st.segments.get(pointer.segment_id)
        if seg is None:
            raise SegmentNotFoundError(f"{st.key} has no segment {pointer.segment_id}")
        return SegmentSource(e, seg).fetch(pointer.offset, pointer.length, serializer)

    # ------------------------------------------------------------------ reader groups
    def _service(self, name: str) -> Any:
        return self._core.service(name)

    def create_reader_group(self, group_name: str,
                            config: "ReaderGroupConfig | list[tuple[str, str]] | str",
                            stream: str | None = None, *, exist_ok: bool = False,
                            starting_timestamp: Timestamp | None = None) -> "ReaderGroup":
        """Create a reader group reading ``config`` (a ReaderGroupConfig, a list of
        ``(scope, stream)``, or a scope and ``stream``: one stream); with exist_ok, return the
        existing group of that name instead. ``starting_timestamp``: every stream starts at
        its cut at that time (``get_stream_cut_at``), not at the config's start."""
        t_ns = None if starting_timestamp is None else timestamp_ns(starting_timestamp, "starting_timestamp")
        group: ReaderGroup = self._service("readergroups").create(group_name, one_stream(config, stream),
                                                                  exist_ok, start_ns=t_ns)
        keep(self, group)
        return group

    def get_reader_group(self, group_name: str) -> "ReaderGroup":
        """The reader group of that name (ReaderGroupNotFoundError if none)."""
        group: ReaderGroup = self._service("readergroups").get(group_name)
        keep(self, group)
        return group

    def delete_reader_group(self, group_name: str) -> None:
        """Delete a reader group; its open readers raise ReaderGroupNotFoundError."""
        self._service("readergroups").delete(group_name)

    def list_reader_groups(self) -> list[str]:
        """The names of the store's reader groups, sorted."""
        names: list[str] = self._service("readergroups").names()
        return names

    # ------------------------------------------------------------------ checkpoints and closing
    def checkpoint(self) -> int:
        """Write lengths, writer sequences and the section index to LMDB up to the current
        journal position (after making the journal durable there). Returns that position."""
        self._engine.check_open()
        return self._engine.checkpoint()

    @property
    def closed(self) -> bool:
        return self._engine.closed

    def close(self) -> None:
        """Flush and close writers, checkpoint, close files, release the lock. Idempotent.
        After a failed sync (fail-stop) it releases everything and raises that failure only if
        no call has reported it yet. A store dropped without close() is closed like this when
        it is garbage-collected (storecore)."""
        self._core.close()
        if self._finalizer is not None:  # after: a close cut short is finished by the collector
            self._finalizer.detach()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Store {self.path!r} durability={self.durability}{' closed' if self.closed else ''}>"

    def _repr_html_(self) -> str:
        import html
        e = self._engine
        if e.closed:
            return f"<b>Store</b> {html.escape(self.path)} (closed)"
        rows = "".join(
            f"<tr><td>{html.escape(st.scope)}</td><td>{html.escape(st.name)}</td><td>{len(st.segments)}</td>"
            f"<td>{sum(s.length for s in st.segments.values()):,}</td><td>{'sealed' if st.sealed else 'open'}</td></tr>"
            for st in sorted(e.streams.values(), key=lambda s: s.key)
        )
        failed = e.latch.error
        state = "" if failed is None else f"<br><b style='color:red'>stopped</b>: {html.escape(str(failed))}"
        return (f"<b>Store</b> {html.escape(self.path)} (durability={self.durability}){state}<table><tr><th>scope</th>"
                f"<th>stream</th><th>segments</th><th>bytes</th><th>state</th></tr>{rows}</table>")


def open(path: str | os.PathLike[str] = "./data", durability: str = "fsync", **options: Any) -> Store:  # noqa: A001
    """Open (creating if needed) the store in directory ``path``.

    durability: "fsync" (default; acknowledged after fdatasync, with group commit), "os"
    (acknowledged once in the OS page cache; fdatasynced at checkpoints) or "none" (tests only).
    """
    return Store(os.fspath(path), durability, **options)


def open_temporary(durability: str = "none", **options: object) -> Store:
    """A fast store in a new temporary directory, deleted again on close (for tests)."""
    path = tempfile.mkdtemp(prefix="pravega-embedded-")
    return Store(path, durability, _temporary=True, **options)


def _instead(starting_timestamp: Timestamp, start: StreamCut | None) -> Timestamp:
    """``starting_timestamp``, refused beside a start cut (two starts)."""
    if start is not None:
        raise InvalidConfigurationError("give start or starting_timestamp, not both")
    return starting_timestamp
