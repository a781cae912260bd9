"""The tierer: the background thread that moves each segment's history to tier 2, and its status.

Owns: deciding when a segment's untiered data becomes a tier-2 file (size, age, seal, flush),
running the copier (``copier``) and the clean-up after a crash, deleting the tier-2 folders of
deleted streams, retrying with backoff while tier 2 fails, ``store.flush_tier2`` and
``store.tiering_status`` (``TieringStatus``).

Invariants:
  1. The copier's ``claim_root`` and ``recover`` run, and succeed, before any copy or deletion
     of this open.
  2. The tier-2 folder of a deleted stream is deleted before any copy of a round; no copy of a
     re-created stream of that name starts while it is pending (metadata refuses it).
  3. A file covers at most ``file_bytes`` of segment data, unless a single event is larger (a
     large event stays whole), and ends at an event boundary (a section that starts an event,
     any section of a byte stream, or the segment's visible length).
  4. A segment's untiered data (from the later of its tiered end and its head to its visible
     length) becomes a file when it reaches ``file_bytes``, when its oldest section is older
     than ``file_age``, when the segment is sealed, when ``flush`` asks for it, or at once
     while the local journal is past half its ``local_budget`` (``LocalBudget.pressure``).
  5. A failure is never swallowed: it is logged (logger ``pravega_embedded.tiering``, WARNING
     with the traceback), kept as the status's last error, and tried again after a backoff
     doubling from ``RETRY_MIN_S`` to ``RETRY_MAX_S`` (at most ``RETRY_BLOCKED_S`` while
     writers wait for the local budget); nothing is skipped meanwhile. A failed copy backs off
     its own segment only: the round goes on with the other segments, and the tierer's
     background rounds leave that segment out until its backoff ends (``flush`` does not wait
     for it), so one stream that cannot be tiered does not hold up the others. Its failure
     stays in the status until it is copied or has nothing left to copy.
  6. ``close`` stops the thread after the copy in progress; no round starts after it, and once
     the fail-stop latch has tripped no round starts either.
  7. After a round that copied, the journal files whose every live record is tiered or
     truncated are deleted (``Engine.reclaim``, with ``Engine.cold`` set from ``start`` on: the
     engine reclaims tiered data only while it can read it back from tier 2). A background
     round does it itself (after each pass). A ``flush`` does it before a further pass only
     and leaves the rest to the thread (unlinking files that were written and synced waits in
     the kernel: ~4 ms per 16 MiB file on ext4 here, which a flush's caller need not wait
     for): it wakes the thread, whose next round reclaims before anything else, or, if the
     thread is backing off after failures, reclaims itself. ``close`` does what the thread
     had no time to, and the first round of an open what a crash left.
  8. Every round first applies each stream's head to its tier-2 files (``trimmer``): files
     before it leave the manifest and are deleted after ``delete_grace``; a file straddling it
     is rewritten from it on.
  9. The copies of background rounds run in one copy thread at a lower CPU priority (nice
     ``BACKGROUND_NICE`` on Linux; the encoder threads it starts inherit it), so on
     a busy machine ingest and readers come first; tiering catches up when they pause, and
     the local budget holds writers back when it cannot. Only copies run there (journal reads,
     Parquet encoding, the footer check, LMDB, the manifest): nothing that starts pyarrow's
     shared thread pools, whose threads would keep the nice value for the whole process.
     ``flush`` copies at the caller's priority.

Thread-safety: rounds run one at a time (``_round_lock``): the thread and ``flush`` callers take
turns. Lock order: ``_round_lock``, then the copier's lock, then the engine's locks.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import TieringOptions
from ..errors import (
    InvalidConfigurationError,
    StorageError,
    StoreClosedError,
    TieringTimeoutError,
    TruncatedDataError,
)
from .coldreads import ColdReads
from .copier import Copier
from .layout import stream_dir
from .target import Tier2Target
from .trimmer import Trimmer

if TYPE_CHECKING:
    from ..engine import Engine
    from .manifest import TieredFile
    from ..segment import Segment
    from ..stream import StreamState

__all__ = ["Tierer", "TieringStatus"]

LOG = logging.getLogger("pravega_embedded.tiering")

RETRY_MIN_S = 0.5
RETRY_MAX_S = 30.0
RETRY_BLOCKED_S = 1.0  # the backoff's cap while writers wait for the local budget
BACKGROUND_NICE = 10  # the nice value of the background copy thread on Linux (invariant 9)


@dataclass(frozen=True, slots=True)
class TieringStatus:
    """Where tiering stands (``store.tiering_status()``)."""

    target: str  # the tier-2 URL
    state: str  # "ok"; "retrying": tier 2 failed and is tried again; "blocked": writers wait
    #             for local_budget (tier 2 failing or behind); "stopped": the store closed
    tiered_bytes: int  # segment bytes in tier 2 (live streams)
    untiered_bytes: int  # committed segment bytes past the head not in tier 2 yet
    files: int  # tier-2 data files of live streams
    file_bytes: int  # their size in tier 2 (Parquet, compressed)
    lag_seconds: float  # age of the oldest untiered data (0.0: none)
    last_error: str | None  # the last failure, kept until a round succeeds
    failures: int  # failed rounds in a row (0: the last round succeeded)
    pending_deletions: int  # deleted streams whose tier-2 folder is still to be deleted
    local_bytes: int  # the journal's bytes on local disk
    local_budget: int | None  # pe.open(local_budget=...): writers wait at it (None: no budget)

    def _repr_html_(self) -> str:
        from ..notebook import tiering_html
        return tiering_html(self)


@dataclass(slots=True)
class _Failing:
    """A segment whose last copy failed (invariant 5): not copied again by a background round
    before ``retry_at``, or ``RETRY_BLOCKED_S`` after ``since`` while writers wait for the
    local budget (monotonic seconds)."""

    failures: int
    since: float
    retry_at: float
    error: str

    def waits(self, now: float, blocked: bool) -> bool:
        """Whether its backoff is not over at ``now``."""
        return now < (min(self.retry_at, self.since + RETRY_BLOCKED_S) if blocked else self.retry_at)


@dataclass(frozen=True, slots=True)
class _Work:
    """One copy a round will make: ``seg`` of ``st`` from its tiered end to ``end``."""

    st: "StreamState"
    seg: "Segment"
    end: int


class Tierer:
    """Tiers one store's segments to one target (module docstring)."""

    def __init__(self, engine: "Engine", options: TieringOptions) -> None:
        self._engine = engine
        self.options = options
        self.target = Tier2Target(options.url, options.storage_options)
        self.copier = Copier(engine, self.target)
        self.cold = ColdReads(engine, self.target)
        self.trimmer = Trimmer(engine, self.copier, options.delete_grace, self.cold.forget)
        self._round_lock = threading.Lock()
        self._reclaim_due = False  # a flush copied: the thread reclaims (invariant 7)
        self._leftovers = False  # a crash's freed files: the thread's first round reclaims them
        self._recovered = False
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by close and by writers waiting for the budget
        self._failures = 0
        self._last_error: str | None = None
        self._failing: dict[int, _Failing] = {}  # segment uid -> its backoff (invariant 5)
        self._copy_pool: ThreadPoolExecutor | None = None  # background copies (invariant 9)
        self._thread = threading.Thread(target=self._loop, name="pe-tiering", daemon=True)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        e = self._engine
        e.cold = self.cold  # tiered data is read from tier 2 and may be reclaimed
        if e.budget is not None:
            e.budget.on_pressure = self._wake.set
        self._thread.start()

    def close(self) -> None:
        """Stop the thread after the copy in progress (invariant 6). Idempotent."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        if self._copy_pool is not None:
            self._copy_pool.shutdown(wait=True)
        e = self._engine
        try:
            # a flush's files the thread had no time to delete (invariant 7); not behind a
            # flush still running in another thread (the next open's first round does it then)
            if self._round_lock.acquire(blocking=False):
                try:
                    if not (e.closed or e.latch.tripped):
                        if self._reclaim_due:
                            self._reclaim()
                        elif self._leftovers:  # a crash's, when a flush took the first round
                            e.reclaim()
                        self._leftovers = False
                finally:
                    self._round_lock.release()
        finally:
            self.cold.close()

    def _loop(self) -> None:
        self._engine.latch.quiet()
        delay = 0.0
        e = self._engine
        while True:
            if self._failures:
                self._backoff(delay)
            else:
                self._wake.wait(delay)
                self._wake.clear()
            if self._stop.is_set() or e.latch.tripped or e.closed:
                return  # invariant 6
            try:
                self._round(None)
            except Exception as exc:  # noqa: BLE001 - invariant 5: logged, kept, retried
                if self._stop.is_set() or e.closed:
                    return
                delay = self._failed(exc)
            else:
                self._failures = 0
                self._last_error = None
                delay = self.options.interval
                if self._failing:  # wake for the first segment whose backoff ends
                    first = min(f.retry_at for f in list(self._failing.values()))
                    delay = max(0.0, min(delay, first - time.monotonic()))

    def _backoff(self, delay: float) -> None:
        """Wait ``delay`` after a failure; writers' calls for haste do not cut it short, but
        once appends wait for the local budget it ends within ``RETRY_BLOCKED_S``."""
        end = time.monotonic() + delay
        budget = self._engine.budget
        while not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            if budget is not None and budget.blocked():
                self._stop.wait(min(left, RETRY_BLOCKED_S))
                return
            self._stop.wait(min(left, RETRY_BLOCKED_S))

    def _failed(self, exc: BaseException) -> float:
        """Invariant 5: record ``exc``; the backoff before the next try."""
        self._failures += 1
        self._last_error = f"{type(exc).__name__}: {exc}"
        delay = min(RETRY_MAX_S, RETRY_MIN_S * 2 ** min(self._failures - 1, 16))
        budget = self._engine.budget
        if budget is not None and budget.blocked():
            delay = min(delay, RETRY_BLOCKED_S)  # ingest waits: look again soon
        LOG.warning("store %s: tiering to %s failed (%d in a row); trying again in %.1f s",
                    self._engine.path, self.target.url, self._failures, delay, exc_info=exc)
        return delay

    # ------------------------------------------------------------------ rounds
    def _round(self, until: dict[int, int] | None) -> None:
        """Recover once, delete pending folders, then copy what is due (``until``: copy every
        segment up to the offset given, as ``flush`` asks) until nothing is."""
        with self._round_lock:
            if not self._recovered:
                self.copier.claim_root()  # another store's root: nothing is touched there
                self.copier.recover()  # invariant 1
                self._recovered = True
                self._leftovers = True  # what a crash right after a flush left (invariant 7)
            if until is None and self._leftovers:
                # they lie before the open's checkpoint (the tierer starts after it): no
                # checkpoint here, so an idle store checkpoints on its own interval alone
                self._engine.reclaim()
                self._leftovers = False
            if until is None and self._reclaim_due:  # first: no tier-2 call is needed for it
                self._reclaim()
            self._delete_streams()  # invariant 2
            for st in self._streams():  # a manifest whose publication failed earlier
                self.copier.publish_pending(st)
            for st in self._streams():  # invariant 8
                self.trimmer.trim(st)
            self.trimmer.sweep()
            pending = 0  # copies since the last reclaim
            failed: dict[int, BaseException] = {}  # this round's failed segments (invariant 5)
            try:
                while True:
                    copied = 0
                    due = [w for w in self._due(until) if w.seg.uid not in failed]
                    if pending and due:  # a flush's next pass: its last pass's files go first
                        self._reclaim()
                        pending = 0
                    for w in due:
                        if until is None and self._stop.is_set():
                            return
                        try:
                            done = self._copy(w, background=until is None)
                        except Exception as exc:  # noqa: BLE001 - invariant 5: kept, retried
                            failed[w.seg.uid] = exc
                            self._copy_failed(w, exc)
                            continue
                        self._failing.pop(w.seg.uid, None)
                        if done is not None:
                            copied += 1
                            pending += 1
                    if not copied:  # done, or only copies refused (a stream deleted meanwhile)
                        break
                    if until is None:  # after each pass: a long round under ingest stays bounded
                        self._reclaim()
                        pending = 0
            finally:
                self._reclaim_after(until, pending)
            if failed and until is not None:
                raise next(iter(failed.values()))  # flush: everything or its retry/timeout

    def _copy(self, w: _Work, *, background: bool) -> "TieredFile | None":
        """Make copy ``w``: a background round's in the copy thread, which runs at a lower CPU
        priority (invariant 9), a flush's in the caller's thread."""
        if not background:
            return self.copier.copy(w.st, w.seg, w.end)
        if self._copy_pool is None:
            self._copy_pool = ThreadPoolExecutor(1, thread_name_prefix="pe-tier-copy",
                                                 initializer=_lower_priority)
        return self._copy_pool.submit(self.copier.copy, w.st, w.seg, w.end).result()

    def _copy_failed(self, w: _Work, exc: BaseException) -> None:
        """Invariant 5: back off ``w``'s segment after its copy failed."""
        prev = self._failing.get(w.seg.uid)
        n = 1 if prev is None else prev.failures + 1
        delay = min(RETRY_MAX_S, RETRY_MIN_S * 2 ** min(n - 1, 16))
        now = time.monotonic()
        what = f"{w.st.key} segment {w.seg.segment_id}"
        self._failing[w.seg.uid] = _Failing(n, now, now + delay, f"{what}: {type(exc).__name__}: {exc}")
        LOG.warning("store %s: tiering %s to %s failed (%d in a row); trying it again in %.1f s "
                    "(%.1f s while writers wait for the local budget)", self._engine.path, what,
                    self.target.url, n, delay, min(delay, RETRY_BLOCKED_S), exc_info=exc)

    def _reclaim(self) -> None:
        """Delete the journal files whose live data is all in tier 2 now (invariant 7)."""
        e = self._engine
        e.checkpoint()  # a file is deleted only once it lies before the checkpoint position
        e.reclaim()
        self._reclaim_due = False

    def _reclaim_after(self, until: dict[int, int] | None, pending: int) -> None:
        """Invariant 7: the files the last pass of a round freed (``pending`` copies), deleted
        by a background round itself, and left to the thread by a flush (unless the thread is
        backing off after failures: then not soon)."""
        if not pending or self._engine.closed:
            return
        if until is None or self._failures:
            self._reclaim()
        else:
            self._reclaim_due = True
            self._wake.set()

    def _delete_streams(self) -> None:
        meta = self._engine.meta
        for key in meta.tier2_deletions():
            scope, stream = key.split("/", 1)
            LOG.info("deleting the tier-2 data of deleted stream %s", key)
            self.cold.forget_stream(scope, stream)  # no file of it stays open
            self.target.delete_tree(stream_dir(scope, stream))
            meta.tier2_deleted(key)

    def _streams(self) -> list["StreamState"]:
        e = self._engine
        with e.lock:
            e.check_open()
            return [st for st in e.streams.values() if not st.deleted]

    def _due(self, until: dict[int, int] | None) -> list[_Work]:
        """The copies due now (invariant 4), each at most a file (invariant 3)."""
        e = self._engine
        tiered = e.meta.tiering_segments()
        acked = e.journal.acked()
        now_ns = time.time_ns()
        pressed = until is None and e.budget is not None and e.budget.pressure()
        blocked = e.budget is not None and e.budget.blocked()
        out = []
        now = time.monotonic()
        backlog = set()  # segments with committed data not in tier 2
        for st in self._streams():
            for seg in list(st.segments.values()):
                start = max(tiered.get(seg.uid, (0, None))[0], st.head.get(seg.segment_id, 0))
                end = e.index.visible_length(seg, acked)
                if end > start:
                    backlog.add(seg.uid)
                failing = self._failing.get(seg.uid)
                if until is None and failing is not None and failing.waits(now, blocked):
                    continue  # invariant 5: its backoff is not over
                if until is not None:
                    end = min(end, until.get(seg.uid, 0))
                    due = end > start
                else:
                    due = end > start and (pressed or seg.sealed
                                           or end - start >= self.options.file_bytes
                                           or self._aged(seg, start, now_ns))
                if due:
                    out.append(_Work(st, seg, self._file_end(st, seg, start, end)))
        for uid in [u for u in self._failing if u not in backlog]:
            del self._failing[uid]  # nothing of it left to copy: truncated, deleted, scaled away
        return out

    def _aged(self, seg: "Segment", start: int, now_ns: int) -> bool:
        entry, _ = self._engine.index.lookup(seg, start)
        return now_ns - (entry.write_ns or seg.created_ns) >= self.options.file_age * 1e9

    def _file_end(self, st: "StreamState", seg: "Segment", start: int, end: int) -> int:
        """Where a file from ``start`` ends: at most ``file_bytes`` on, at an event boundary
        (invariant 3)."""
        limit = start + self.options.file_bytes
        if end <= limit:
            return end
        index = self._engine.index
        raw = st.kind == "bytes"
        entry, _ = index.lookup(seg, limit)
        while entry.start > start and not (raw or entry.n_events):  # inside a large event
            entry, _ = index.lookup(seg, entry.start - 1)
        if entry.start > start:
            return entry.start
        at = entry.end  # one section (a large event: all its chunks) is larger than a file
        while at < end:
            entry, _ = index.lookup(seg, at)
            if raw or entry.n_events:
                return at
            at = entry.end
        return end

    # ------------------------------------------------------------------ the store's calls
    def flush(self, timeout: float | None) -> None:
        """Copy everything durable now to tier 2 and publish its manifests; retry while tier 2
        fails, up to ``timeout`` seconds (None: without end), then TieringTimeoutError."""
        e = self._engine
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout >= 0):
            raise InvalidConfigurationError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        e.check_open()
        e.journal.make_durable(e.journal.written(), "flush_tier2")
        acked = e.journal.acked()
        until = {seg.uid: e.index.visible_length(seg, acked)
                 for st in self._streams() for seg in list(st.segments.values())}
        delay = RETRY_MIN_S
        while True:
            try:
                self._round(until)
                return
            except (StorageError, TruncatedDataError) as exc:  # tier 2 failed; a truncation raced
                LOG.warning("flush_tier2 of store %s: %s; trying again in %.1f s", e.path, exc, delay)
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise TieringTimeoutError(
                        f"flush_tier2 of store {e.path}: not everything is in tier 2 "
                        f"({self.target.url}) after {timeout} s: {exc}") from exc
                if self._stop.wait(delay):
                    raise StoreClosedError(f"store {e.path} was closed during flush_tier2") from exc
                delay = min(RETRY_MAX_S, delay * 2)

    def status(self) -> TieringStatus:
        """The tiering status now (``TieringStatus``)."""
        e = self._engine
        meta = e.meta
        acked = e.journal.acked()
        tiered_state = meta.tiering_segments()
        now_ns = time.time_ns()
        tiered = untiered = files = size = 0
        oldest: int | None = None
        for st in self._streams():
            for seg in list(st.segments.values()):
                for row in meta.tiered_files(seg.uid):
                    files += 1
                    tiered += row[1] - row[0]
                    size += row[3]
                start = max(tiered_state.get(seg.uid, (0, None))[0], st.head.get(seg.segment_id, 0))
                end = e.index.visible_length(seg, acked)
                if end > start:
                    untiered += end - start
                    entry, _ = e.index.lookup(seg, start)
                    ns = entry.write_ns or seg.created_ns
                    oldest = ns if oldest is None else min(oldest, ns)
        budget = e.budget
        blocked = budget is not None and budget.blocked()
        failing = list(self._failing.values())
        failures = max([self._failures] + [f.failures for f in failing])
        last_error = self._last_error
        if last_error is None and failing:
            last_error = max(failing, key=lambda f: f.retry_at).error
        state = ("stopped" if self._stop.is_set() else "blocked" if blocked
                 else "retrying" if failures else "ok")
        return TieringStatus(
            target=self.target.url, state=state, tiered_bytes=tiered, untiered_bytes=untiered,
            files=files, file_bytes=size,
            lag_seconds=0.0 if oldest is None else max(0.0, (now_ns - oldest) / 1e9),
            last_error=last_error, failures=failures,
            pending_deletions=len(meta.tier2_deletions()),
            local_bytes=_local_bytes(e), local_budget=None if budget is None else budget.limit)


def _lower_priority() -> None:
    """Invariant 9: run the calling thread (and the threads it starts, which inherit it) at
    ``BACKGROUND_NICE`` on Linux, where a thread has a nice value of its own; elsewhere
    setpriority would lower the whole process, so nothing is done."""
    if not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), BACKGROUND_NICE))
    except OSError as exc:  # e.g. a sandbox refusing it: the copies work as before
        LOG.debug("could not lower the tier-2 copy thread's priority: %s", exc)


def _local_bytes(e: "Engine") -> int:
    """The journal's bytes on local disk (the budget's measure when there is one)."""
    if e.budget is not None:
        return e.budget.local_bytes()
    total = 0
    for base in e.journal.files():
        try:
            total += os.path.getsize(e.journal.path(base))
        except FileNotFoundError:
            continue  # reclaimed meanwhile
    return total
