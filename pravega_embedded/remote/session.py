"""One client connection's work in the owner: its handles and the calls it may make.

Owns: the table of handles a connection created (writers, readers), the allowlist of methods
each kind of handle answers, and turning a CALL or a WRITE into a call on the owner's store.

Invariants:
  1. Only the methods in ``STORE_CALLS``, ``WRITER_CALLS`` and ``READER_CALLS`` can be called;
     anything else is refused with InvalidConfigurationError before any work.
  2. A handle is usable only from the connection that created it; closing the connection
     closes its handles (writers flush what they were sent, readers close).
  3. A writer's events are written with the client's sequence numbers (explicit sequences), so
     a batch resent after a lost connection is dropped as duplicates: exactly once.
  4. Serializers never cross the wire: writers and readers in the owner carry bytes; the
     client serializes and deserializes. Keyword arguments starting with ``_`` are refused.
  5. A read never loses an event its reader took: one over MAX_EVENT_SIZE (not carried yet)
     or an error after some events were taken is held and answered by the next read.

Thread-safety: a session is driven by its connection's thread; ``close`` may come from the
server's closing thread as well (it only closes handles, which are thread-safe).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable

from ..errors import (
    EventTooLargeError,
    InvalidConfigurationError,
    InvalidEventPointerError,
    PravegaEmbeddedError,
)
from ..events import EventPointer, EventRead
from ..reader import EventStreamReader
from ..writer import MAX_EVENT_SIZE, EventStreamWriter
from .values import Handle
from .wire import WireEvent, WriteBatch

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["Session", "STORE_CALLS", "WRITER_CALLS", "READER_CALLS", "READ_MAX_EVENTS", "READ_MAX_BYTES"]

LOG = logging.getLogger("pravega_embedded.remote")

STORE_CALLS = frozenset({
    "create_scope", "list_scopes", "delete_scope", "create_stream", "list_streams", "stream_info",
    "seal_stream", "delete_stream", "scale_stream", "update_stream", "truncate_stream",
    "tiered_bytes", "tiering_status", "flush_tier2", "status", "checkpoint", "reclaim",
    "list_reader_groups",
})
WRITER_CALLS = frozenset({"flush", "note_time", "last_sequence", "durable_sequence"})
READER_CALLS = frozenset({"position", "position_before", "get_current_time_window"})
READ_MAX_EVENTS = 4096  # the most events one read answer carries ...
READ_MAX_BYTES = 4 << 20  # ... and about the most payload bytes
HANDLES_MAX = 1024  # handles one connection may hold open


class Session:
    """The handles and calls of one connection to ``store``."""

    def __init__(self, store: "Store", peer: str) -> None:
        self.store = store
        self.peer = peer
        self._handles: dict[int, EventStreamWriter | EventStreamReader] = {}
        self._held: dict[int, EventRead | PravegaEmbeddedError] = {}  # a reader's next answer
        self._next = 1
        self._lock = threading.Lock()
        self.closed = False

    # ------------------------------------------------------------------ calls
    def call(self, handle: int, method: str, args: list[object], kwargs: dict[str, object]) -> object:
        """A CALL (invariant 1); the value to send back."""
        if not isinstance(method, str):
            raise InvalidConfigurationError("a call names its method with a string")
        if any(k.startswith("_") for k in kwargs):  # private arguments stay private
            raise InvalidConfigurationError(f"{method!r} takes no argument "
                                            f"{next(k for k in kwargs if k.startswith('_'))!r}")
        if handle == 0:
            return self._store_call(method, args, kwargs)
        obj = self._get(handle)
        if method == "close":
            self._close_handle(handle)
            return None
        if isinstance(obj, EventStreamWriter):
            if method not in WRITER_CALLS:
                raise _refused("writer", method)
            attr = getattr(obj, method)
            if method in ("last_sequence", "durable_sequence"):
                return attr
            return attr(*args, **kwargs)
        if method not in READER_CALLS:
            raise _refused("reader", method)
        if method == "position_before":
            (unreturned,) = args
            if not isinstance(unreturned, dict):
                raise InvalidConfigurationError("position_before takes {segment_id: offset}")
            return obj.position_before(unreturned)
        return getattr(obj, method)(*args, **kwargs)

    def _store_call(self, method: str, args: list[object], kwargs: dict[str, object]) -> object:
        store = self.store
        if method == "create_writer":
            return self._create_writer(args, kwargs)
        if method == "create_reader":
            kwargs.pop("serializer", None)  # invariant 4
            return self._add("reader", store.create_reader(*args, **kwargs), {})  # type: ignore[arg-type]
        if method not in STORE_CALLS:
            raise _refused("store", method)
        return getattr(store, method)(*args, **kwargs)

    def _create_writer(self, args: list[object], kwargs: dict[str, object]) -> Handle:
        kwargs.pop("serializer", None)  # invariant 4
        w = self.store.create_writer(*args, **kwargs)  # type: ignore[arg-type]
        return self._add("writer", w, {"writer_id": w.writer_id, "last_sequence": w.last_sequence})

    def fetch(self, pointer: object) -> list[WireEvent]:
        if not isinstance(pointer, EventPointer):
            raise InvalidEventPointerError(f"expected an EventPointer, got {type(pointer).__name__}")
        ev = self.store.fetch_event(pointer)
        if len(ev.event) > MAX_EVENT_SIZE:
            raise EventTooLargeError(f"the event at {pointer} is {len(ev.event)} bytes: events over "
                                     f"{MAX_EVENT_SIZE} bytes are read by the owner process only for now")
        return [WireEvent(ev.segment_id, ev.offset, ev.length, ev[1], ev.event)]

    def read(self, handle: int, timeout: float, max_events: int) -> tuple[list[WireEvent], bool]:
        """Up to ``max_events`` events of a reader: the first waits up to ``timeout``, the rest
        are what is there already; and whether the reader has read everything to its end
        (invariant 5)."""
        r = self._get(handle)
        if not isinstance(r, EventStreamReader):
            raise InvalidConfigurationError(f"handle {handle} is not a reader")
        held = self._held.pop(handle, None)
        if isinstance(held, BaseException):
            raise held
        limit = max(1, min(max_events, READ_MAX_EVENTS))
        out: list[WireEvent] = []
        size = 0
        ev = held if held is not None else r.read_next_event(timeout)
        while ev is not None:
            if len(ev.event) > MAX_EVENT_SIZE:  # a large event: not carried yet
                if out:
                    self._held[handle] = ev  # the events before it go first
                    break
                self._held[handle] = ev  # and every later read stops here: never skipped
                raise EventTooLargeError(
                    f"the next event of {r.scope}/{r.stream} (segment {ev.segment_id}, offset "
                    f"{ev.offset}) is {len(ev.event)} bytes: events over {MAX_EVENT_SIZE} bytes "
                    "are read by the owner process only for now (docs/multiprocess.md)")
            out.append(WireEvent(ev.segment_id, ev.offset, ev.length, ev[1], ev.event))
            size += len(ev.event)
            if len(out) >= limit or size >= READ_MAX_BYTES:
                break
            try:
                ev = r.read_next_event(0)
            except PravegaEmbeddedError as exc:  # the events taken already go first
                self._held[handle] = exc
                break
        return out, not out and r.at_end

    def write(self, batch: WriteBatch, atomic: bool = False) -> None:
        """A WRITE (invariant 3); ``atomic`` (WRITE_ATOMIC): one key, one journal record, as
        ``write_events`` (a resend of it is dropped whole)."""
        w = self._get(batch.handle)
        if not isinstance(w, EventStreamWriter):
            raise InvalidConfigurationError(f"handle {batch.handle} is not a writer")
        if not atomic:
            w.write_sequenced(batch.first, batch.events)
            return
        keys = {key for key, _ in batch.events}
        if len(keys) != 1 or batch.first != w.last_sequence + 1:
            if len(keys) == 1 and batch.first <= w.last_sequence:
                return  # a resend of a batch written before
            raise InvalidConfigurationError("an atomic WRITE has one routing key and follows the last sequence")
        w.write_events([ev for _, ev in batch.events], keys.pop())

    # ------------------------------------------------------------------ handles
    def _add(self, kind: str, obj: EventStreamWriter | EventStreamReader, info: dict[str, object]) -> Handle:
        with self._lock:
            if self.closed or len(self._handles) >= HANDLES_MAX:
                obj.close()
                raise InvalidConfigurationError(
                    f"a connection holds at most {HANDLES_MAX} writers and readers: close some")
            hid = self._next
            self._next += 1
            self._handles[hid] = obj
        return Handle(hid, kind, info)

    def _get(self, handle: object) -> EventStreamWriter | EventStreamReader:
        obj = self._handles.get(handle) if isinstance(handle, int) else None
        if obj is None:
            raise InvalidConfigurationError(f"this connection has no open handle {handle!r}")
        return obj

    def _close_handle(self, handle: int) -> None:
        with self._lock:
            obj = self._handles.pop(handle, None)
            self._held.pop(handle, None)
        if obj is not None:
            obj.close()

    def close(self) -> None:
        """Invariant 2. Idempotent; errors are logged (the client is gone)."""
        with self._lock:
            self.closed = True
            handles = list(self._handles.values())
            self._handles.clear()
        for obj in handles:
            _quietly(obj.close, f"closing a handle of {self.peer}")


def _refused(kind: str, method: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"{method!r} is not a call a client can make on a {kind}")


def _quietly(fn: Callable[[], object], what: str) -> None:
    try:
        fn()
    except PravegaEmbeddedError as exc:
        LOG.info("%s: %s", what, exc)
    except Exception:  # noqa: BLE001 - logged in full: a bug, the owner goes on serving
        LOG.exception("%s failed", what)
