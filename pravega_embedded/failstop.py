"""The fail-stop latch: after a failed sync the store acknowledges nothing more.

Owns: a store's first durability failure — a failed fdatasync of the journal (in any durability
mode), a failed LMDB commit or sync, a failed fsync of a directory — and the error every later
call gets. Also the engine's loggers: ``pravega_embedded.engine`` (journal, metadata, recovery,
checkpoints, this latch) and ``pravega_embedded.streams`` (writers, readers, scaling,
retention, transactions, the background threads); the package adds only a NullHandler, so
nothing is printed unless the application configures logging.

Invariants:
  1. The latch trips once and never resets. A failed fsync cannot be retried safely (the kernel
     may have dropped the dirty pages and marked them clean), so the only way on is to close the
     store and open it again, which recovers from what is on disk.
  2. Tripping stops the journal before ``trip`` returns (its listeners run first), so no append
     and no acknowledgement follow a failed sync anywhere in the store, and no checkpoint moves
     the metadata's applied position past it.
  3. The first failure is kept with its traceback: it is the ``__cause__`` of every error raised
     after it, and it is logged once (ERROR, with the traceback).

Thread-safety: every method may be called from any thread; listeners and probes are called
without the latch's lock held.
"""

from __future__ import annotations

import errno as _errno
import logging
import os
import threading
from typing import Callable

from .errors import _HINTS, StorageError, storage_error

__all__ = ["FailStop", "ENGINE_LOG", "STREAMS_LOG"]

ENGINE_LOG = logging.getLogger("pravega_embedded.engine")
STREAMS_LOG = logging.getLogger("pravega_embedded.streams")

_HINT = ("the store stopped at this failed sync (fail-stop): nothing acknowledged before it is "
         "lost and nothing after it was acknowledged; close the store and open it again to "
         "recover from what is on disk")
_HINT_OPENING = ("the store could not be opened (nothing acknowledged is lost); open it again "
                 "once this is fixed")


class FailStop:
    """The fail-stop latch of one store (module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.opening = True  # until the store is open: a failure fails the open itself
        self._lock = threading.Lock()
        self._error: StorageError | None = None
        self._listeners: list[Callable[[int], None]] = []
        self._probes: list[Callable[[], int]] = []
        self._quiet: set[int] = set()  # background threads: an error raised there reaches nobody
        self.reported = False  # the error reached a caller (close() need not raise it again)

    def quiet(self) -> None:
        """The calling thread is a background thread: errors raised in it are not reported."""
        with self._lock:
            self._quiet.add(threading.get_ident())

    def on_trip(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(errno)`` when the latch trips (the journal stops appending)."""
        with self._lock:
            self._listeners.append(listener)

    def add_probe(self, probe: Callable[[], int]) -> None:
        """``probe()`` returns the errno of a sync that failed without a caller seeing it (the
        journal's own sync thread), or 0; checked by ``error``."""
        with self._lock:
            self._probes.append(probe)

    def trip(self, err: int, what: str, cause: BaseException | None = None) -> StorageError:
        """Record a failed sync (the first one wins) and stop the store; returns the error to
        raise (a fresh one, whose cause is the first failure)."""
        with self._lock:
            first = self._error is None
            if first:
                hint = _HINT_OPENING if self.opening else _HINT
                if err in (_errno.ENOSPC, _errno.EDQUOT):
                    hint = f"{_HINTS[err]}; {hint}"
                exc = storage_error(err or _errno.EIO, what, path=self.path, hint=hint)
                exc.__cause__ = cause
                self._error = exc
                listeners = list(self._listeners)
        if first:
            ENGINE_LOG.error("store %s: %s", self.path, self._error, exc_info=cause)
            for listener in listeners:
                listener(err or _errno.EIO)
        return self._fresh()

    @property
    def error(self) -> StorageError | None:
        """The first failure, or None while the store is healthy."""
        if self._error is None:
            for probe in list(self._probes):
                err = probe()
                if err:
                    self.trip(err, "journal sync (noticed after the fact)")
                    break
        return self._error

    @property
    def tripped(self) -> bool:
        return self.error is not None

    @property
    def failed(self) -> bool:
        """Tripped, as far as the store has noticed (no probe: cheap enough per event)."""
        return self._error is not None

    def check(self) -> None:
        """Raise the latch's error (a fresh StorageError caused by the first failure) if it has
        tripped."""
        if self.error is not None:
            raise self._fresh()

    def fresh(self) -> StorageError:
        """A fresh copy of the first failure (to raise), its cause the first failure."""
        return self._fresh()

    def _fresh(self) -> StorageError:
        first = self._error
        assert first is not None
        if threading.get_ident() not in self._quiet:
            self.reported = True
        exc = type(first)(*first.args)
        exc.__cause__ = first
        return exc

    def fsync_dir(self, path: str, what: str) -> None:
        """fsync directory ``path`` (so the names in it are durable); a failed fsync trips the
        latch; a directory that cannot be opened raises the translated error."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, f"{what}: open directory", path=path) from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise self.trip(exc.errno or _errno.EIO, f"{what}: fsync of directory {path}", exc) from exc
        finally:
            os.close(fd)
