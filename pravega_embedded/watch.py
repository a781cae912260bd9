"""Segment watchers: the hook for scaling consumers with a stream (``store.watch_segments``).

Owns: :class:`SegmentCountChange` (one scaling of a stream, as a value) and
:class:`SegmentWatcher` (a queue of them that is iterated, or drained into a callback by the
watcher's own thread).

Invariants:
  1. A watcher receives one change per scaling of its stream, in epoch order, each exactly once;
     with ``initial=True`` the first item is the stream's current epoch.
  2. A callback runs on the watcher's thread, never on the thread that scaled the stream, so a
     slow or failing callback delays nothing but its own watcher (its exceptions are kept in
     ``errors``; the watcher goes on).
  3. ``close()`` is idempotent; it ends iteration and the callback thread. Deleting the stream
     or closing the store closes its watchers.

Thread-safety: ``publish`` and ``close`` from any thread; iterate from one thread.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator

__all__ = ["SegmentCountChange", "SegmentWatcher"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentCountChange:
    """A stream's segments after one scaling: its epoch, when it began, how many segments it has
    (and had before), and their ids in key order."""

    scope: str
    stream: str
    epoch: int
    time_ns: int
    segment_count: int
    previous_count: int
    segment_ids: tuple[int, ...]

    @property
    def delta(self) -> int:
        """Segments added (positive) or removed (negative) by this change."""
        return self.segment_count - self.previous_count


class SegmentWatcher:
    """Changes of one stream's segments. Iterate it (blocks until the next change; ends when
    closed), call ``get(timeout)``, or give ``store.watch_segments`` a callback."""

    def __init__(self, scope: str, stream: str, callback: Callable[[SegmentCountChange], object] | None,
                 on_close: Callable[["SegmentWatcher"], None]) -> None:
        self.scope, self.stream = scope, stream
        self._items: deque[SegmentCountChange] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._on_close = on_close
        self.errors: list[BaseException] = []
        self._thread: threading.Thread | None = None
        if callback is not None:
            self._thread = threading.Thread(target=self._run, args=(callback,),
                                            name=f"pe-watch-{scope}/{stream}", daemon=True)

    def _start(self) -> None:
        if self._thread is not None:
            self._thread.start()

    def publish(self, change: SegmentCountChange) -> None:
        with self._cond:
            if self._closed:
                return
            self._items.append(change)
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> SegmentCountChange | None:
        """The next change, or None when ``timeout`` passes (or the watcher is closed)."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait_for(lambda: self._items or self._closed, timeout)
            return self._items.popleft() if self._items else None

    def __iter__(self) -> Iterator[SegmentCountChange]:
        while True:
            item = self.get(None)
            if item is None:
                return
            yield item

    def _run(self, callback: Callable[[SegmentCountChange], object]) -> None:
        for change in self:
            try:
                callback(change)
            except Exception as exc:  # noqa: BLE001 - invariant 2: kept, the watcher goes on
                self.errors.append(exc)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop watching (idempotent); changes already queued are still handed out."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._on_close(self)  # the callback thread ends by itself once the queue is drained

    def __enter__(self) -> "SegmentWatcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SegmentWatcher {self.scope}/{self.stream}{' closed' if self._closed else ''}>"
