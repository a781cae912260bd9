"""The async store: ``pe.open_async`` and ``AsyncStore``, an asyncio façade over whatever
``pe.open`` returns (the owning ``Store``, or a ``RemoteStore`` client of another owner).

Owns: opening and closing the sync store off the loop, the thread pools (``threads.Runner``),
the admin calls as coroutines, and the async handles it made (closed before the store).

Invariants:
  1. Nothing that may block runs on the event loop: open, close, every admin call, slices and
     every handle's reads and writes run in the store's threads (``threads``).
  2. The handles it creates (writers, readers, group readers, transactional writers) open in
     the background and may be awaited to open at once; errors are the sync API's.
  3. ``close()`` (and ``async with`` exit) is idempotent, completes even if the awaiting task
     is cancelled, and never hangs on reads in flight: async readers are closed first (their
     in-flight reads end within ``wait_slice``; ``reader`` invariant 3), then async writers
     (each after the calls queued before it: flushed, as the sync close flushes), then the
     sync store, then the threads.
  4. After close every call raises StoreClosedError.

Thread-safety: an AsyncStore belongs to the event loop that opened it; its tasks may share it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TYPE_CHECKING, Callable, Generator, TypeVar, Union

from ..errors import InvalidConfigurationError, StoreClosedError
from .reader import AsyncReader
from .readergroup import AsyncGroupReader, AsyncReaderGroup
from .slice import AsyncSlice
from .threads import LOG, Runner
from .transaction import AsyncTransactionalWriter
from .writer import AsyncWriter

if TYPE_CHECKING:
    from ..background import StoreStatus
    from ..batch import SegmentRange, Truncation
    from ..config import StreamConfiguration
    from ..events import EventPointer, EventRead
    from ..readergroup import ReaderGroupConfig
    from ..remote import RemoteStore
    from ..serializers import Serializer
    from ..store import Store
    from ..stream import StreamInfo
    from ..streamcut import StreamCut
    from ..timelookup import Timestamp

__all__ = ["AsyncStore", "open_async"]

SyncStore = Union["Store", "RemoteStore"]
Handle = Union[AsyncWriter, AsyncReader, AsyncGroupReader, AsyncTransactionalWriter]
T = TypeVar("T")

DEFAULT_WAIT_THREADS = 64
DEFAULT_WAIT_SLICE = 1.0


def _check_options(work_threads: int | None, wait_threads: int, wait_slice: float) -> None:
    for what, n in (("work_threads", work_threads), ("wait_threads", wait_threads)):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024):
            raise InvalidConfigurationError(f"{what} must be an int in [1, 1024], got {n!r}")
    if isinstance(wait_slice, bool) or not isinstance(wait_slice, (int, float)) or not 0.01 <= wait_slice <= 60:
        raise InvalidConfigurationError(f"wait_slice must be seconds in [0.01, 60], got {wait_slice!r}")


def open_async(path: "str | os.PathLike[str]" = "./data", durability: str = "fsync", *,
               work_threads: int | None = None, wait_threads: int = DEFAULT_WAIT_THREADS,
               wait_slice: float = DEFAULT_WAIT_SLICE, **options: object) -> "AsyncStore":
    """The store in directory ``path`` for asyncio: ``async with pe.open_async(path) as
    store:`` or ``store = await pe.open_async(path)``. It opens with ``pe.open(path,
    durability, **options)`` in a worker thread (so it is a ``RemoteStore`` client when the
    store is open elsewhere, in this process or another).

    ``work_threads``: threads for writes, flushes, admin calls and slices (default
    ``min(32, cpus + 4)``); ``wait_threads``: threads for reads waiting at a tail (more
    concurrently waiting readers than this take turns); ``wait_slice``: the longest a read
    waits in a thread before it is started again (bounds how long a cancelled or closed
    read keeps its thread).
    """
    from ..remote import open as pe_open
    _check_options(work_threads, wait_threads, wait_slice)
    where = os.fspath(path)
    return AsyncStore(lambda: pe_open(where, durability, **options), os.path.abspath(where),  # type: ignore[arg-type]
                      work_threads=work_threads, wait_threads=wait_threads, wait_slice=wait_slice)


class AsyncStore:
    """A store for asyncio (``pe.open_async``): the sync store's API as coroutines; writers,
    readers, reader groups, slices and transactions as async handles."""

    def __init__(self, opener: "Callable[[], SyncStore] | SyncStore", path: str | None = None, *,
                 work_threads: int | None = None, wait_threads: int = DEFAULT_WAIT_THREADS,
                 wait_slice: float = DEFAULT_WAIT_SLICE) -> None:
        """``opener``: makes the sync store (in a worker thread), or an open sync store to
        wrap (closed with this one)."""
        _check_options(work_threads, wait_threads, wait_slice)
        if callable(opener):
            self._opener: Callable[[], SyncStore] = opener
            self.path = path if path is not None else "?"
        else:
            store = opener
            self._opener = lambda: store
            self.path = store.path
        self._runner = Runner(self.path, work_threads, wait_threads)
        self._slice = float(wait_slice)
        self._store: SyncStore | None = None
        self._opening: asyncio.Future[SyncStore] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._handles: dict[int, Handle] = {}
        self._handles_lock = threading.Lock()  # handles forget themselves from worker threads

    # ------------------------------------------------------------------ opening
    async def _open(self) -> "AsyncStore":
        if self._closing is not None:
            raise StoreClosedError(f"store {self.path} is closed")
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._runner.run(self._opener, what=f"opening {self.path}"))
        try:
            store = await asyncio.shield(self._opening)
        except Exception:
            if self._closing is None:  # it never opened: nothing to close but the threads
                self._closing = asyncio.ensure_future(asyncio.to_thread(self._runner.shutdown))
            raise
        if self._store is None:
            self._store = store
            self.path = store.path
        return self

    def __await__(self) -> Generator[object, None, "AsyncStore"]:
        return self._open().__await__()

    async def __aenter__(self) -> "AsyncStore":
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _s(self) -> SyncStore:
        """The open sync store (StoreClosedError if closed or not opened yet)."""
        if self._closing is not None:
            raise StoreClosedError(f"store {self.path} is closed")
        if self._store is None:
            raise StoreClosedError(f"store {self.path} is not open yet: use `async with "
                                   "pe.open_async(...)` or `await pe.open_async(...)`")
        return self._store

    async def _run(self, fn: Callable[..., T], *args: object, wait: bool = False) -> T:
        self._s()
        return await self._runner.run(fn, *args, wait=wait, what=f"a call on store {self.path}")

    @property
    def sync(self) -> SyncStore:
        """The sync store underneath (``Store`` or ``RemoteStore``): for calls that never block."""
        return self._s()

    @property
    def is_remote(self) -> bool:
        """True when this is a client of a store another handle owns (a ``RemoteStore``)."""
        from ..remote import RemoteStore
        return isinstance(self._s(), RemoteStore)

    @property
    def durability(self) -> str:
        return self._s().durability

    # ------------------------------------------------------------------ handles
    def _track(self, h: Handle) -> None:
        with self._handles_lock:
            self._handles[id(h)] = h

    def _forget(self, h: object) -> None:
        with self._handles_lock:
            self._handles.pop(id(h), None)

    def create_writer(self, scope: str, stream: str, writer_id: str | None = None, *,
                      serializer: "Serializer | str | None" = None, linger: float = 0.001,
                      batch_bytes: int = 256 * 1024, automatically_note_time: bool = False) -> AsyncWriter:
        """An async writer (opens in a worker thread; ``await`` it to see errors at once)."""
        s = self._s()
        w = AsyncWriter(self._runner, lambda: s.create_writer(
            scope, stream, writer_id, serializer=serializer, linger=linger, batch_bytes=batch_bytes,
            automatically_note_time=automatically_note_time), f"writer on {scope}/{stream}", self._forget)
        self._track(w)
        return w

    def create_reader(self, scope: str, stream: str, start: "StreamCut | None" = None,
                      end: "StreamCut | None" = None, *, serializer: "Serializer | str | None" = None,
                      starting_timestamp: "Timestamp | None" = None) -> AsyncReader:
        """An async standalone reader (``async for ev in reader``; opens in a worker thread)."""
        s = self._s()
        r = AsyncReader(self._runner, lambda: s.create_reader(
            scope, stream, start, end, serializer=serializer, starting_timestamp=starting_timestamp),
            f"reader of {scope}/{stream}", self._slice, self._forget)
        self._track(r)
        return r

    def create_transactional_writer(self, scope: str, stream: str, writer_id: str | None = None, *,
                                    serializer: "Serializer | str | None" = None) -> AsyncTransactionalWriter:
        """An async transactional writer (opens in a worker thread)."""
        s = self._s()
        w = AsyncTransactionalWriter(self._runner, lambda: s.create_transactional_writer(
            scope, stream, writer_id, serializer=serializer), f"transactional writer on {scope}/{stream}",
            self._forget)
        self._track(w)
        return w

    async def read_slice(self, scope: str, stream: str, start: "StreamCut | None" = None,
                         end: "StreamCut | None" = None, *,
                         serializer: "Serializer | str | None" = None) -> AsyncSlice:
        """The events between two cuts (made in a worker thread: it may wait for durability)."""
        s = self._s()
        sl = await self._run(lambda: s.read_slice(scope, stream, start, end, serializer=serializer))
        return AsyncSlice(self._runner, sl)

    async def read_segment_range(self, rng: "SegmentRange", *,
                                 serializer: "Serializer | str | None" = None) -> AsyncSlice:
        """The events of one SegmentRange (the batch API)."""
        s = self._s()
        return AsyncSlice(self._runner, await self._run(lambda: s.read_segment_range(rng, serializer=serializer)))

    async def create_reader_group(self, group_name: str,
                                  config: "ReaderGroupConfig | list[tuple[str, str]] | str",
                                  stream: str | None = None, *, exist_ok: bool = False,
                                  starting_timestamp: "Timestamp | None" = None) -> AsyncReaderGroup:
        """Create a reader group (the sync ``create_reader_group``)."""
        s = self._s()
        g = await self._run(lambda: s.create_reader_group(group_name, config, stream, exist_ok=exist_ok,
                                                          starting_timestamp=starting_timestamp))
        return AsyncReaderGroup(self._runner, g, self._slice, self._track, self._forget)

    async def get_reader_group(self, group_name: str) -> AsyncReaderGroup:
        """The reader group of that name (ReaderGroupNotFoundError if none)."""
        g = await self._run(self._s().get_reader_group, group_name)
        return AsyncReaderGroup(self._runner, g, self._slice, self._track, self._forget)

    async def delete_reader_group(self, group_name: str) -> None:
        await self._run(self._s().delete_reader_group, group_name)

    async def list_reader_groups(self) -> list[str]:
        return await self._run(self._s().list_reader_groups)

    # ------------------------------------------------------------------ admin
    async def create_scope(self, scope: str, *, exist_ok: bool = False) -> bool:
        s = self._s()
        return await self._run(lambda: s.create_scope(scope, exist_ok=exist_ok))

    async def list_scopes(self) -> list[str]:
        return await self._run(self._s().list_scopes)

    async def delete_scope(self, scope: str) -> None:
        await self._run(self._s().delete_scope, scope)

    async def create_stream(self, scope: str, stream: str, config: "StreamConfiguration | int | None" = None,
                            *, exist_ok: bool = False) -> bool:
        s = self._s()
        return await self._run(lambda: s.create_stream(scope, stream, config, exist_ok=exist_ok))

    async def list_streams(self, scope: str) -> list[str]:
        return await self._run(self._s().list_streams, scope)

    async def stream_info(self, scope: str, stream: str) -> "StreamInfo":
        return await self._run(self._s().stream_info, scope, stream)

    async def seal_stream(self, scope: str, stream: str) -> None:
        await self._run(self._s().seal_stream, scope, stream)

    async def delete_stream(self, scope: str, stream: str) -> None:
        await self._run(self._s().delete_stream, scope, stream)

    async def scale_stream(self, scope: str, stream: str, seal: list[int],
                           new_ranges: list[tuple[float, float]]) -> None:
        await self._run(self._s().scale_stream, scope, stream, seal, new_ranges)

    async def update_stream(self, scope: str, stream: str, config: "StreamConfiguration") -> None:
        await self._run(self._s().update_stream, scope, stream, config)

    async def truncate_stream(self, scope: str, stream: str, cut: "StreamCut") -> None:
        await self._run(self._s().truncate_stream, scope, stream, cut)

    async def status(self) -> "StoreStatus":
        return await self._run(self._s().status)

    async def checkpoint(self) -> int:
        return await self._run(self._s().checkpoint)

    async def fetch_event(self, pointer: "EventPointer", *,
                          serializer: "Serializer | str | None" = None) -> "EventRead":
        s = self._s()
        return await self._run(lambda: s.fetch_event(pointer, serializer=serializer))

    async def get_segments(self, scope: str, stream: str, start: "StreamCut | None" = None,
                           end: "StreamCut | None" = None, *, max_bytes: int | None = None) -> "list[SegmentRange]":
        s = self._s()
        return await self._run(lambda: s.get_segments(scope, stream, start, end, max_bytes=max_bytes))

    async def get_next_stream_cut(self, scope: str, stream: str, start: "StreamCut | None",
                                  approx_bytes: int, *, max_events: int | None = None,
                                  end: "StreamCut | None" = None, min_events: int | None = None) -> "StreamCut":
        s = self._s()
        return await self._run(lambda: s.get_next_stream_cut(scope, stream, start, approx_bytes,
                                                             max_events=max_events, end=end, min_events=min_events))

    async def get_stream_cut_at(self, scope: str, stream: str, timestamp: "Timestamp") -> "StreamCut":
        return await self._run(self._s().get_stream_cut_at, scope, stream, timestamp)

    async def skip_truncated(self, scope: str, stream: str, cut: "StreamCut") -> "Truncation":
        return await self._run(self._s().skip_truncated, scope, stream, cut)

    # ------------------------------------------------------------------ closing
    @property
    def closed(self) -> bool:
        return self._closing is not None

    async def close(self) -> None:
        """Close the handles, then the store, then the threads (module invariant 3).
        Idempotent; a client (``RemoteStore``) closes only its connections."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        errors: list[BaseException] = []
        try:
            if self._opening is not None:
                try:
                    await asyncio.shield(self._opening)
                except (Exception, asyncio.CancelledError) as exc:
                    if not self._opening.done():
                        raise  # this close was cancelled, not the open
                    # it never opened: its awaiter got this error; nothing to close
                    LOG.debug("closing an async store whose open failed: %r", exc)
            with self._handles_lock:
                handles = list(self._handles.values())
            readers = [h for h in handles if isinstance(h, (AsyncReader, AsyncGroupReader))]
            others = [h for h in handles if not isinstance(h, (AsyncReader, AsyncGroupReader))]
            for group in (readers, others):
                for res in await asyncio.gather(*(h.close() for h in group), return_exceptions=True):
                    if isinstance(res, BaseException):
                        errors.append(res)
            if self._store is not None:
                try:
                    await self._runner.run(self._store.close, what=f"closing store {self.path}")
                except BaseException as exc:  # noqa: BLE001 - raised below, after the threads stop
                    errors.append(exc)
        finally:
            await asyncio.to_thread(self._runner.shutdown)
        for exc in errors[1:]:
            LOG.warning("closing store %s: a further failure: %r", self.path, exc, exc_info=exc)
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        state = " closed" if self._closing is not None else "" if self._store is not None else " not open"
        return f"<AsyncStore {self.path!r}{state}>"
