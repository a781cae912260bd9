"""A handle opened in the background: what the async writer and the async transactional
writer share.

Owns: ``LaneHandle`` — the sync handle it wraps, opened in a worker thread through the
handle's lane (``threads.Lane``), awaiting it to see the open's outcome, and closing it
behind every earlier call.

Invariants:
  1. The open is the lane's first call: every later call runs after it, and raises its
     error if it failed (``_handle``).
  2. ``close()`` is queued behind every earlier call, is idempotent (every caller awaits the
     same close) and completes even if the task awaiting it is cancelled; ``on_close`` runs
     once it is done, whatever the sync close raised.

Thread-safety: use a handle from one event loop; its calls run one at a time in its lane.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Generator, Generic, Protocol, Self, TypeVar

from ..errors import WriterClosedError
from .threads import Lane, Runner

__all__ = ["LaneHandle", "retrieve"]


class _Closeable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=_Closeable)


def retrieve(fut: "asyncio.Future[object]") -> None:
    """Mark a future's failure as seen (it is raised to every caller that awaits it)."""
    if not fut.cancelled():
        fut.exception()


class LaneHandle(Generic[S]):
    """A sync handle (``S``) opened by ``opener`` in a worker thread (module docstring)."""

    def __init__(self, runner: Runner, opener: Callable[[], S], what: str,
                 on_close: Callable[[Self], None]) -> None:
        self._runner = runner
        self._lane = Lane(runner, what)
        self._what = what
        self._on_close = on_close
        self._sync: S | None = None
        self._open_error: BaseException | None = None
        self._close: asyncio.Future[None] | None = None
        self._opened = self._lane.submit(self._open, opener, what=f"opening {what}")
        self._opened.add_done_callback(retrieve)  # type: ignore[arg-type]

    def _open(self, opener: Callable[[], S]) -> None:
        try:
            self._sync = opener()
        except BaseException as exc:
            self._open_error = exc  # every later call raises it (invariant 1)
            raise

    def _handle(self) -> S:
        """The sync handle (in the lane: opened by then, or its open failed)."""
        if self._sync is None:
            if self._open_error is not None:
                raise self._open_error
            raise WriterClosedError(f"{self._what} is not open yet: await it first")
        return self._sync

    def __await__(self) -> Generator[object, None, Self]:
        return self._wait_open().__await__()

    async def _wait_open(self) -> Self:
        await asyncio.shield(self._opened)
        return self

    async def close(self) -> None:
        """Close after every earlier call (invariant 2). Idempotent."""
        if self._close is None:
            self._close = self._lane.submit(self._close_sync, what=f"closing {self._what}")
        await asyncio.shield(self._close)

    def _close_sync(self) -> None:
        try:
            if self._sync is not None:
                self._sync.close()
        finally:
            self._on_close(self)

    @property
    def closed(self) -> bool:
        return self._close is not None

    async def __aenter__(self) -> Self:
        return await self._wait_open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
