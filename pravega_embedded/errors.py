"""The exception tree of pravega_embedded.

Every error a user can act on is a subclass of :class:`PravegaEmbeddedError` and also of the
fitting builtin, so ``except LookupError`` or ``except ValueError`` work as expected. Messages
name the scope, stream, segment or writer involved. The base class is never raised directly.
An OS error number becomes a StorageError here, in one place (:func:`storage_error`), with the
path and a hint; the C core's status codes (``_native.check``) and the engine's translation of
OSError and LMDB errors (``translate``) both go through it.

::

    PravegaEmbeddedError
    ├── InvalidNameError                  (ValueError)   bad scope/stream/writer/group name
    ├── InvalidConfigurationError         (ValueError)   bad StreamConfiguration, durability, ...
    ├── InvalidStreamCutError             (ValueError)   garbage text, wrong stream, bad offsets
    ├── InvalidEventPointerError          (ValueError)   bytes that are not an EventPointer
    ├── InvalidPositionError              (ValueError)   a reader Position that does not fit
    ├── EventTooLargeError                (ValueError)   event over the size limit
    ├── InvalidRoutingKeyError            (ValueError)   routing key not a str or too long
    ├── InvalidSequenceError              (ValueError)   explicit sequence not an int >= 0
    ├── SerializationError                (ValueError, TypeError) event not encodable/decodable
    ├── NotFoundError                     (LookupError)
    │   ├── ScopeNotFoundError
    │   ├── StreamNotFoundError
    │   ├── SegmentNotFoundError
    │   ├── ReaderGroupNotFoundError
    │   ├── ReaderNotFoundError                          reader id not in the group
    │   ├── TxnNotFoundError                             no transaction with that id
    │   └── StoreNotFoundError                           no store at a path that must not create one
    ├── AlreadyExistsError                (FileExistsError)
    │   ├── ScopeExistsError
    │   ├── StreamExistsError
    │   ├── WriterExistsError                            writer id already open on the stream
    │   ├── ReaderGroupExistsError
    │   ├── ReaderExistsError                            reader id already open in the group
    │   └── CheckpointExistsError                        checkpoint name already outstanding
    ├── ScopeNotEmptyError                (OSError)
    ├── StreamKindError                   (TypeError)    event API on a byte stream, or back
    ├── TxnFailedError                    (RuntimeError) commit/abort/write of an ended txn
    ├── StreamSealedError                 (RuntimeError)  writes to a sealed stream
    │   └── SegmentSealedError
    ├── TruncatedDataError                (LookupError)  position before the stream's head
    ├── ClosedError                       (ValueError)   like io's "operation on closed file"
    │   ├── StoreClosedError
    │   ├── WriterClosedError
    │   ├── ReaderClosedError
    │   └── ReaderGroupClosedError
    ├── StoreLockedError                  (BlockingIOError) another process holds the store
    ├── ConnectionLostError               (ConnectionError) the owner of a shared store went away
    ├── ProtocolError                     (ConnectionError) bytes on a connection that are not
    │                                                     the wire protocol (or over its limits)
    ├── PermissionDeniedError             (PermissionError) not authenticated, or not allowed
    ├── StorageError                      (OSError)      the disk failed (errno attached)
    │   ├── StorageFullError                              ENOSPC: nothing acknowledged is lost
    │   │   └── LocalBudgetError                          local_budget reached: tier 2 is behind
    │   └── StoragePermissionError        (PermissionError) EACCES, EPERM, EROFS
    ├── CorruptDataError                  (OSError)      damaged bytes on disk
    │   └── FormatVersionError                           unknown magic / format version
    ├── DurabilityTimeoutError            (TimeoutError) flush(timeout=) expired
    ├── TieringTimeoutError               (TimeoutError) flush_tier2(timeout=) expired
    ├── ReinitializationRequiredError     (RuntimeError) reader group was reset
    ├── ReaderNotInGroupError             (RuntimeError) reader was put offline by the group
    ├── MaxCheckpointsExceededError       (RuntimeError) too many checkpoints outstanding
    └── CheckpointFailedError             (RuntimeError) checkpoint dropped by reset/delete
"""

from __future__ import annotations

import errno as _errno
import os as _os

__all__ = [
    "PravegaEmbeddedError",
    "InvalidNameError",
    "InvalidConfigurationError",
    "InvalidStreamCutError",
    "InvalidEventPointerError",
    "InvalidPositionError",
    "EventTooLargeError",
    "InvalidRoutingKeyError",
    "InvalidSequenceError",
    "SerializationError",
    "NotFoundError",
    "ScopeNotFoundError",
    "StreamNotFoundError",
    "SegmentNotFoundError",
    "ReaderGroupNotFoundError",
    "ReaderNotFoundError",
    "TxnNotFoundError",
    "StoreNotFoundError",
    "AlreadyExistsError",
    "ScopeExistsError",
    "StreamExistsError",
    "WriterExistsError",
    "ReaderGroupExistsError",
    "ReaderExistsError",
    "CheckpointExistsError",
    "ScopeNotEmptyError",
    "StreamKindError",
    "TxnFailedError",
    "StreamSealedError",
    "SegmentSealedError",
    "TruncatedDataError",
    "ClosedError",
    "StoreClosedError",
    "WriterClosedError",
    "ReaderClosedError",
    "ReaderGroupClosedError",
    "StoreLockedError",
    "ConnectionLostError",
    "ProtocolError",
    "PermissionDeniedError",
    "StorageError",
    "StorageFullError",
    "StoragePermissionError",
    "CorruptDataError",
    "FormatVersionError",
    "DurabilityTimeoutError",
    "TieringTimeoutError",
    "LocalBudgetError",
    "ReinitializationRequiredError",
    "ReaderNotInGroupError",
    "MaxCheckpointsExceededError",
    "CheckpointFailedError",
]


class PravegaEmbeddedError(Exception):
    """Base of every pravega_embedded error. Never raised directly."""


class InvalidNameError(PravegaEmbeddedError, ValueError):
    """A scope, stream, writer or reader-group name breaks the naming rules."""


class InvalidConfigurationError(PravegaEmbeddedError, ValueError):
    """A configuration value is out of range or of the wrong type."""


class InvalidStreamCutError(PravegaEmbeddedError, ValueError):
    """A StreamCut is malformed, belongs to another stream, or names impossible offsets."""


class InvalidEventPointerError(PravegaEmbeddedError, ValueError):
    """Bytes or text that are not a valid EventPointer."""


class InvalidPositionError(PravegaEmbeddedError, ValueError):
    """A reader Position that is not a Position or does not cover the reader's segments."""


class EventTooLargeError(PravegaEmbeddedError, ValueError):
    """An event is larger than the store accepts."""


class InvalidRoutingKeyError(PravegaEmbeddedError, ValueError):
    """A routing key is not a str (or None) or is longer than 4096 UTF-8 bytes."""


class InvalidSequenceError(PravegaEmbeddedError, ValueError):
    """An explicit writer sequence number is not an int in [0, 2**63)."""


class SerializationError(PravegaEmbeddedError, ValueError, TypeError):
    """A serializer could not turn a value into bytes or bytes into a value (also raised for a
    non-bytes event written without a serializer)."""


class NotFoundError(PravegaEmbeddedError, LookupError):
    """Something named does not exist."""


class ScopeNotFoundError(NotFoundError):
    """The scope does not exist."""


class StreamNotFoundError(NotFoundError):
    """The stream does not exist (or was deleted)."""


class SegmentNotFoundError(NotFoundError):
    """The segment does not exist in this stream."""


class ReaderGroupNotFoundError(NotFoundError):
    """The reader group does not exist (or was deleted)."""


class ReaderNotFoundError(NotFoundError):
    """No reader with this id is in the reader group."""


class TxnNotFoundError(NotFoundError):
    """No transaction with this id is known on the stream (never begun, or ended long ago)."""


class StoreNotFoundError(NotFoundError):
    """No store lives at the path, and the operation only reads (it never creates one)."""


class AlreadyExistsError(PravegaEmbeddedError, FileExistsError):
    """Something with this name exists already (pass exist_ok=True to accept it)."""


class ScopeExistsError(AlreadyExistsError):
    """The scope exists already."""


class StreamExistsError(AlreadyExistsError):
    """The stream exists already."""


class WriterExistsError(AlreadyExistsError):
    """A writer with this id is already open on the stream (close it first)."""


class ReaderGroupExistsError(AlreadyExistsError):
    """A reader group with this name exists already."""


class ReaderExistsError(AlreadyExistsError):
    """A reader with this id is already open in the reader group (close it first)."""


class CheckpointExistsError(AlreadyExistsError):
    """A checkpoint with this name is already outstanding in the reader group."""


class ScopeNotEmptyError(PravegaEmbeddedError, OSError):
    """A scope that still holds streams cannot be deleted."""


class StreamKindError(PravegaEmbeddedError, TypeError):
    """The event API used on a byte stream, or the byte API on an event stream: a stream is
    one or the other for its whole life."""


class TxnFailedError(PravegaEmbeddedError, RuntimeError):
    """A transaction cannot do this any more: it was committed, aborted, or its lease expired.
    A commit or abort of an ended transaction is refused, never applied twice."""


class StreamSealedError(PravegaEmbeddedError, RuntimeError):
    """The stream is sealed: it accepts no more writes."""


class SegmentSealedError(StreamSealedError):
    """The segment is sealed: it accepts no more writes."""


class TruncatedDataError(PravegaEmbeddedError, LookupError):
    """The requested position lies before the stream's head (it was truncated away)."""


class ClosedError(PravegaEmbeddedError, ValueError):
    """An operation on a closed object."""


class StoreClosedError(ClosedError):
    """The store is closed."""


class WriterClosedError(ClosedError):
    """The writer is closed."""


class ReaderClosedError(ClosedError):
    """The reader is closed."""


class ReaderGroupClosedError(ClosedError):
    """The reader group handle is closed (or its group was deleted)."""


class StoreLockedError(PravegaEmbeddedError, BlockingIOError):
    """Another process (or another open handle) owns the store directory."""

    def __init__(self, message: str, *, path: str = "", pid: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.pid = pid


class ConnectionLostError(PravegaEmbeddedError, ConnectionError):
    """The connection to the process that owns a shared store (or to a server) was lost: the
    owner exited or died, or the network failed. What was acknowledged before is durable; open
    the store again (it connects to the new owner or becomes it) and re-create writers with the
    same ``writer_id``: they resume from ``last_sequence`` and resent events are dropped."""


class ProtocolError(PravegaEmbeddedError, ConnectionError):
    """Bytes on a connection that are not the wire protocol (docs/wire-protocol.md): a bad
    magic, an unknown version or message kind, a frame over its size limit, a truncated
    message. The connection is closed."""


class PermissionDeniedError(PravegaEmbeddedError, PermissionError):
    """The server refused: no or a wrong token, another user on a unix socket, or a request
    outside the token's permissions (read / write / admin on a scope or stream)."""


class StorageError(PravegaEmbeddedError, OSError):
    """The disk failed under the store. ``errno`` holds the OS error number."""


class StorageFullError(StorageError):
    """The disk is full (ENOSPC). Unacknowledged events stay buffered; retry after freeing space."""


class LocalBudgetError(StorageFullError):
    """The store's local journal stayed at its ``local_budget`` for ``local_budget_timeout``
    seconds: tier 2 is down or slower than ingest (``store.tiering_status()`` says why).
    Nothing of the refused batch was written; a writer keeps it and its next flush or write
    tries again; ingest resumes by itself once tiering catches up."""


class StoragePermissionError(StorageError, PermissionError):
    """The store's files or directories cannot be read or written by this process (EACCES,
    EPERM, EROFS): another user's store, a read-only mount, changed permissions."""


_HINTS = {
    _errno.ENOSPC: "the disk is full: free space, then flush again (unacknowledged events stay "
                   "buffered)",
    _errno.EDQUOT: "the disk quota is used up: free space or raise the quota",
    _errno.EACCES: "check the owner and permissions of this path: the store must be readable and "
                   "writable by this process",
    _errno.EPERM: "the operation is not permitted here: check the owner and permissions",
    _errno.EROFS: "the file system is read-only: remount it read-write or open a copy",
    _errno.EIO: "the device reported an I/O error: check the disk (dmesg), then reopen the store",
    _errno.EISDIR: "a directory is where a file belongs: the store directory was changed by "
                   "hand",
    _errno.ENOTDIR: "a file is where a directory belongs: the store directory was changed by hand",
    _errno.EMFILE: "too many open files: raise the limit (ulimit -n)",
    _errno.ENFILE: "the system has too many open files",
}


def storage_error(err: int, what: str, *, path: str | None = None,
                  hint: str | None = None) -> StorageError:
    """The StorageError for OS error number ``err`` in operation ``what`` on ``path``:
    StorageFullError for ENOSPC and EDQUOT, StoragePermissionError for EACCES, EPERM and EROFS,
    StorageError otherwise. The message names the operation, the path, the OS's words and a hint
    (``hint``, or the usual one for that error)."""
    if err in (_errno.ENOSPC, _errno.EDQUOT):
        cls: type[StorageError] = StorageFullError
    elif err in (_errno.EACCES, _errno.EPERM, _errno.EROFS):
        cls = StoragePermissionError
    else:
        cls = StorageError
    text = _os.strerror(err) if err else "failed"
    where = f" ({path})" if path and path not in what else ""
    hint = hint or _HINTS.get(err)
    return cls(err, f"{what}{where}: {text}" + (f"; {hint}" if hint else ""))



_TIER2_HINT = ("tier 2 could not be reached or refused the request: check the URL, the network, "
               "the credentials and free space there; the store keeps the data locally meanwhile")


def tier2_error(exc: BaseException, what: str, *, url: str) -> StorageError:
    """The StorageError for a failure ``exc`` of a tier-2 file system (fsspec, s3fs, the network)
    in operation ``what`` on ``url``: the OS error number when the file system gave one (so
    ENOSPC is a StorageFullError and EACCES a StoragePermissionError), EIO otherwise; the
    message keeps the file system's own words."""
    err = exc.errno if isinstance(exc, OSError) and isinstance(exc.errno, int) else 0
    if not err:
        if isinstance(exc, PermissionError):
            err = _errno.EACCES
        elif isinstance(exc, FileNotFoundError):
            err = _errno.ENOENT
    if err and err != _errno.EIO and err in _HINTS:
        return storage_error(err, what, path=url)
    text = str(exc) or type(exc).__name__
    return StorageError(err or _errno.EIO, f"{what} ({url}): {type(exc).__name__}: {text}; {_TIER2_HINT}")

class CorruptDataError(PravegaEmbeddedError, OSError):
    """Bytes on disk are damaged where valid data must be. The store does not repair them."""


class FormatVersionError(CorruptDataError):
    """A file has an unknown magic number or an unsupported format version."""


class DurabilityTimeoutError(PravegaEmbeddedError, TimeoutError):
    """Events did not become durable within the given timeout."""


class TieringTimeoutError(PravegaEmbeddedError, TimeoutError):
    """``flush_tier2`` did not get everything durable into tier 2 within its timeout (tier 2
    is unreachable or slow: ``store.tiering_status()`` shows the last error)."""


class ReinitializationRequiredError(PravegaEmbeddedError, RuntimeError):
    """The reader group was reset; the reader must be re-created (raised once)."""


class ReaderNotInGroupError(PravegaEmbeddedError, RuntimeError):
    """The reader was put offline (``reader_offline``) while open; create a new reader to go on
    (raised once, then the reader is closed)."""


class MaxCheckpointsExceededError(PravegaEmbeddedError, RuntimeError):
    """More checkpoints are outstanding than ``max_outstanding_checkpoints`` allows; wait for
    one to complete."""


class CheckpointFailedError(PravegaEmbeddedError, RuntimeError):
    """The checkpoint can never complete: it was cancelled, or its reader group was reset or
    deleted."""
