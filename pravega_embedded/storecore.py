"""The parts of an open store that its threads reach, and closing them, also when the ``Store``
object is dropped without ``close()``.

Owns: ``StoreCore`` — the engine, the store directory and its lock, the background threads, the
tierer, the servers, the services of higher layers (reader groups) — and what the engine calls
back into (the fail-stop listener, seal, scaling notices, subscribers' retention cuts, a writer's
close); ``keep``, which ties a handle to the Store that made it.

Invariants:
  1. Nothing the core holds refers to the ``Store`` object the application holds: threads,
     latch listeners, writers' close hooks and the unix-socket server reach only the core (the
     server gets its own view of the store). So a Store the application drops becomes garbage,
     and its finalizer (``release``) has the core closed: writers flushed, a checkpoint, the
     lock released — what ``close()`` does.
  2. A handle made by a Store (writer, reader, slice, reader group, ...) keeps that Store alive
     while the application refers to it (``keep``), so ``pe.open(p).create_writer(...)`` works.
     The engine holds writers weakly (``WriterControl``); a writer dropped without ``close()``
     is adopted by the engine and closed by the reaper (invariant 3), so its pending events
     are still appended. A group reader or a segment watcher is open until closed, and so
     keeps its store open.
  3. The core closes once (``engine.closed``). The collector may run a finalizer or ``__del__``
     on any thread, holding any lock (logging's, an Event's, ...), so ``release`` and a dropped
     writer's ``adopt`` only put a job on a ``SimpleQueue`` (safe there); one process-wide
     thread, ``pe-reaper``, does the closing. Jobs run in order: a store collected together
     with its writers is released after ``__del__`` adopted them, so its close appends them.
  4. A collected store whose server has clients connected (another process, or a second
     ``pe.open`` of the path in this process) stays open for them, and closes once the last
     one has gone.
  5. At interpreter exit the reaper's queue is worked off (at most ``EXIT_WAIT_S``): a store
     dropped just before the program ends is still closed and its writers' events appended.
  6. Only the process that opened a store closes it from the collector: a child made by
     ``fork`` that drops its copy of a Store leaves the parent's store alone (the queue starts
     empty in the child).

Thread-safety: ``close`` and ``release`` may be called from any thread; the callbacks are
called by the engine with the locks its docstring names. Lock order: none is held across a
job; ``_REAPER_LOCK`` only while starting the reaper.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Protocol

from .errors import StreamSealedError
from .failstop import STREAMS_LOG
from .watch import SegmentCountChange

if TYPE_CHECKING:
    from .background import Background
    from .engine import Engine
    from .storedir import StoreDir
    from .stream import StreamState
    from .tiering import TieringStatus
    from .writer import WriterControl

__all__ = ["StoreCore", "TieringService", "ServerService", "register_service", "keep", "segment_change"]

# Services of higher layers (reader groups), registered when their package is imported, so the
# core offers ``store.create_reader_group`` without importing the layer above it.
_SERVICES: dict[str, Callable[["Engine"], Any]] = {}

EXIT_WAIT_S = 60.0  # how long interpreter exit waits for the reaper's queue (invariant 5)

_JOBS: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()  # for pe-reaper (invariant 3)
_REAPER: list[threading.Thread] = []
_REAPER_LOCK = threading.Lock()

# handle -> the Store that made it (invariant 2): the entry goes when the handle does
_KEPT: "weakref.WeakKeyDictionary[object, object]" = weakref.WeakKeyDictionary()


def register_service(name: str, factory: Callable[["Engine"], Any]) -> None:
    """Make ``factory(engine)`` the store's ``name`` service (created on first use)."""
    _SERVICES[name] = factory


def keep(owner: object, handle: object) -> None:
    """``owner`` (a Store) stays alive while ``handle`` does (invariant 2)."""
    _KEPT[handle] = owner  # no lock: the collector may run here and finalize another store


class TieringService(Protocol):
    """What the store needs of the tierer (``tiering``), registered by that package."""

    def start(self) -> None: ...
    def close(self) -> None: ...
    def flush(self, timeout: float | None) -> None: ...
    def status(self) -> "TieringStatus": ...


class ServerService(Protocol):
    """What the store needs of the layer that serves it to other processes (``remote``)."""

    def close(self) -> None: ...
    def when_idle(self, fn: Callable[[], None]) -> bool: ...


def segment_change(st: "StreamState", previous: int) -> SegmentCountChange:
    """The stream's current epoch as a watcher's notice (``previous`` segments before it)."""
    epoch, ns = st.epochs[-1]
    return SegmentCountChange(scope=st.scope, stream=st.name, epoch=epoch, time_ns=ns,
                              segment_count=len(st.open_segments), previous_count=previous,
                              segment_ids=tuple(s.segment_id for s in st.open_segments))


class StoreCore:
    """The parts of one open store (module docstring)."""

    def __init__(self, path: str, engine: "Engine", sdir: "StoreDir", temporary: bool) -> None:
        self.path = path
        self.engine = engine
        self.dir = sdir
        self.temporary = temporary
        self.services: dict[str, Any] = {}
        self.servers: list[ServerService] = []  # the unix socket's, and any added (TCP)
        self.tiering: TieringService | None = None
        self.bg: "Background | None" = None
        self.pid = os.getpid()  # invariant 6
        engine.on_orphan = lambda: _JOBS.put(self.close_orphans)  # invariant 3
        _start_reaper()

    # ------------------------------------------------------------------ engine callbacks
    def service(self, name: str) -> Any:
        """The ``name`` service of this store, created on first use."""
        svc = self.services.get(name)
        if svc is None:
            e = self.engine
            with e.lock:
                e.check_open()
                svc = self.services.get(name)
                if svc is None:
                    svc = self.services[name] = _SERVICES[name](e)
        return svc

    def subscriber_cuts(self, stream_key: str) -> list[dict[int, int] | None]:
        """The retention cuts of the reader groups subscribed to a stream (frontiers; None for
        a subscriber with no cut yet)."""
        if "readergroups" not in _SERVICES:
            return []
        cuts: list[dict[int, int] | None] = self.service("readergroups").subscriber_cuts(stream_key)
        return cuts

    def stopped(self, err: int) -> None:
        """The fail-stop latch tripped: open writers refuse every write from now on (their
        pending events can never be acknowledged)."""
        latch = self.engine.latch
        for w in list(self.engine.writers):
            w.refuse(latch.fresh, flush=False)

    def seal(self, st: "StreamState") -> None:
        """Seal a stream: its open writers are flushed, then refuse more events."""
        e = self.engine
        with e.lock:
            if st.sealed:
                return
            sealed = f"stream {st.key} is sealed"
            with e.unbudgeted():  # under ``lock``, which the tierer needs to free space
                for w in list(st.writers):
                    w.refuse(lambda: StreamSealedError(sealed), flush=True)
            with e.append_lock:
                st.sealed = True
                for seg in st.segments.values():
                    seg.sealed = True
            e.sync_all(f"seal {st.key}")
            with e.meta.write(f"seal {st.key}") as txn:
                for seg in st.segments.values():
                    e.meta.put_segment(txn, seg.uid, seg.record())
                e.meta.put_stream(txn, st.key, st.record())
            st.notify()

    def scaled(self, st: "StreamState") -> None:
        """After a committed scaling (topology lock held): tell the stream's watchers."""
        if st.scale_watchers:
            prev = len(st.history()[-2].segments) if len(st.epochs) > 1 else 0
            change = segment_change(st, prev)
            for w in list(st.scale_watchers):
                w.publish(change)

    def writer_closed(self, st: "StreamState", control: "WriterControl") -> None:
        e = self.engine
        with e.lock:
            st.writers.discard(control)
            e.writers.discard(control)
        e.watermarks.forget(st.key, control.writer_id)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Flush and close writers, checkpoint, close files, release the lock. Idempotent.
        After a failed sync (fail-stop) it releases everything and raises that failure only if
        no call has reported it yet."""
        e = self.engine
        if e.closed:
            return
        reported = e.latch.reported
        errors: list[BaseException] = []
        for server in self.servers:  # clients first: their handles close while the store works
            _attempt(errors, server.close)
        with e.lock:  # engine invariant 6: no writer or reader is admitted from here on
            e.closing = True
            writers = list(e.writers)
        if e.budget is not None:
            e.budget.lift()  # the writers' last batches go in over the budget (budget invariant 3)
        for w in e.take_orphans():  # writers dropped without close() (invariant 2)
            _attempt(errors, w.close)
        for c in writers:
            _attempt(errors, c.close)
        if not e.latch.tripped:
            _attempt(errors, e.txns.stage_pending)  # open transactions keep what was written
        for r in list(e.readers):  # each records its position (a group reader's in the group)
            _attempt(errors, r.close)
        if self.tiering is not None:
            _attempt(errors, self.tiering.close)
        if self.bg is not None:
            self.bg.stop()
        if not e.latch.tripped:
            _attempt(errors, e.checkpoint)
        with e.lock:
            e.closed = True
            for st in e.streams.values():
                st.notify()
                for watcher in list(st.scale_watchers):
                    watcher.close()
            _attempt(errors, e.close)
            self.dir.release()
        if self.temporary:
            shutil.rmtree(self.path, ignore_errors=True)
        if e.latch.tripped and reported:
            return  # the failure reached the caller before: close releases quietly
        if errors:
            raise errors[0]

    def release(self) -> None:
        """The Store was garbage-collected without close(): the reaper closes it (invariant 3;
        called by the collector, so it only queues)."""
        if self.pid == os.getpid():  # invariant 6
            _JOBS.put(self._release)

    def _release(self) -> None:
        """On the reaper: close, unless clients are connected (invariant 4)."""
        if self.engine.closed or self.pid != os.getpid():
            return
        for server in self.servers:
            if not server.when_idle(lambda: _JOBS.put(self._release)):
                return  # it has clients: it queues this again once the last one has gone
        STREAMS_LOG.info("store %s was dropped without close(): closing it", self.path)
        self.close()

    def close_orphans(self) -> None:
        """On the reaper: close the writers dropped without close() (invariant 2)."""
        if self.pid != os.getpid():  # invariant 6
            return
        for w in self.engine.take_orphans():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - logged; nobody holds the writer to raise to
                STREAMS_LOG.error("store %s: closing a writer dropped without close() failed; "
                                  "its pending events are not appended", self.path, exc_info=True)


def _start_reaper() -> None:
    """Start ``pe-reaper`` if it is not running (again in a child process after fork)."""
    with _REAPER_LOCK:
        if not _REAPER or not _REAPER[0].is_alive():
            t = threading.Thread(target=_reap, name="pe-reaper", daemon=True)
            t.start()
            _REAPER[:] = [t]


def _reap() -> None:
    while True:
        job = _JOBS.get()
        try:
            job()
        except Exception:  # noqa: BLE001 - logged; the reaper goes on for other stores
            STREAMS_LOG.error("closing a store dropped without close() failed", exc_info=True)
        del job  # a store freed now is queued, not closed here


def _forked() -> None:
    """In a child made by fork: no jobs of the parent's (invariant 6); no reaper yet."""
    global _JOBS, _REAPER_LOCK
    _JOBS = queue.SimpleQueue()
    _REAPER_LOCK = threading.Lock()  # a parent's thread may have held it at the fork
    _REAPER.clear()


os.register_at_fork(after_in_child=_forked)


@atexit.register
def _finish_at_exit() -> None:
    """Invariant 5: work off the reaper's queue (jobs may queue more: a closed writer frees
    its store) before the interpreter stops its daemon threads."""
    if not _REAPER or not _REAPER[0].is_alive():
        return
    deadline = time.monotonic() + EXIT_WAIT_S
    while not _JOBS.empty() and time.monotonic() < deadline:
        done = threading.Event()
        _JOBS.put(done.set)
        done.wait(max(0.0, deadline - time.monotonic()))


def _attempt(errors: list[BaseException], fn: Callable[[], Any]) -> None:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - close goes on; the first error is raised
        errors.append(exc)
