"""The store directory: its lock, its marker, and creating its parts durably.

Owns: ``<store>/LOCK`` (flock()ed by the owning process, holding its pid), ``<store>/STORE`` (the
marker that says a store lives here: JSON with a format number, a store id and the creation
time, written once the store's metadata and journal exist durably; the metadata records the
same id), and deciding at open whether the directory holds a new store, an existing one, or a
damaged one.

Invariants:
  1. One process (one open handle) owns the directory at a time (flock on LOCK).
  2. A directory with the marker, or with journal files, or with metadata, is an existing
     store: its metadata must be there and readable (``lmdbfile.check_lmdb_file``), else
     CorruptDataError and nothing is changed. Metadata is never created over an existing
     journal, so a lost ``meta/`` can never open as an empty store.
  3. Every directory the store creates is durable (its parent fsynced) before anything depends
     on it; the marker is written to a temporary name, fsynced, renamed, and its directory
     fsynced.

Thread-safety: called by the store's open and close only.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import json
import os
import re
import time
import uuid
from dataclasses import dataclass

from .errors import CorruptDataError, FormatVersionError, StorageError, StoreLockedError, storage_error
from .failstop import FailStop
from .lmdbfile import check_lmdb_file

__all__ = ["StoreDir", "STORE_FORMAT", "new_store_id"]

STORE_FORMAT = 1
_JOURNAL_FILE = re.compile(r"[0-9]{20}\.pej")


@dataclass(frozen=True, slots=True)
class StoreDir:
    """An opened store directory: its path, lock descriptor, and whether it was new."""

    path: str
    lock_fd: int
    new: bool  # no store was here: the metadata is created
    marked: bool  # the STORE marker exists
    store_id: str | None  # the marker's store id (None: no marker yet)

    @classmethod
    def acquire(cls, path: str) -> "StoreDir":
        """Create the directory if needed, take its lock (invariant 1) and classify it
        (invariant 2); raises before changing anything if the store is damaged."""
        created = not os.path.isdir(path)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "create the store directory", path=path) from exc
        if created:
            _fsync_dir(os.path.dirname(path) or ".", path)
        fd = _lock(path)
        try:
            new, store_id = _classify(path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, new, store_id is not None, store_id)

    def prepare(self) -> None:
        """Create the directories of a new store, durably (invariant 3)."""
        for sub in ("meta", "journal"):
            d = os.path.join(self.path, sub)
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as exc:
                raise storage_error(exc.errno or _errno.EIO, f"create {sub}/", path=d) from exc
        _fsync_dir(self.path, "the store's directories")

    def mark(self, latch: FailStop, store_id: str) -> None:
        """Write the STORE marker (a new store, or one that predates the marker or lost it)
        durably, after the names in meta/ and journal/ are (invariant 3); ``store_id`` is the id
        the metadata records too."""
        if self.marked:
            return
        for sub in ("meta", "journal"):
            latch.fsync_dir(os.path.join(self.path, sub), "create the store")
        body = json.dumps({"format": STORE_FORMAT, "id": store_id,
                           "created_ns": time.time_ns()}, sort_keys=True) + "\n"
        tmp = os.path.join(self.path, "STORE.tmp")
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(self.path, "STORE"))
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "write the store marker", path=tmp) from exc
        latch.fsync_dir(self.path, "write the store marker")

    def release(self) -> None:
        os.close(self.lock_fd)


def _fsync_dir(path: str, what: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise storage_error(exc.errno or _errno.EIO, f"fsync the directory holding {what}", path=path) from exc


def _lock(path: str) -> int:
    try:
        return _lock_once(path)
    except StorageError as exc:
        if exc.errno != _errno.ENOENT:
            raise
        # A FUSE file system (LazyFS after a simulated power cut) may answer ENOENT for a LOCK
        # file it has just opened, when the cut dropped the file's unsynced state: the file is
        # only the holder's pid, so open it afresh once
        return _lock_once(path)


def _lock_once(path: str) -> int:
    lock_path = os.path.join(path, "LOCK")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise storage_error(exc.errno or _errno.EIO, "open the store's LOCK file", path=lock_path) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        pid = int(holder) if holder.isdigit() else None
        raise StoreLockedError(
            f"store {path} is already open in process {holder or '?'}"
            f"{' (this process)' if pid == os.getpid() else ''}; close it there first",
            path=path, pid=pid,
        ) from None
    except OSError as exc:
        os.close(fd)
        raise storage_error(exc.errno or _errno.EIO, "lock the store", path=lock_path) from exc
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise storage_error(exc.errno or _errno.EIO, "write the store's LOCK file", path=lock_path) from exc
    return fd


def new_store_id() -> str:
    return uuid.uuid4().hex


def _classify(path: str) -> tuple[bool, str | None]:
    """(new, the marker's store id or None) for the directory (invariant 2)."""
    marker = os.path.join(path, "STORE")
    marked = os.path.exists(marker)
    store_id = _check_marker(marker) if marked else None
    meta = os.path.join(path, "meta")
    journal = os.path.join(path, "journal")
    try:
        has_journal = os.path.isdir(journal) and any(_JOURNAL_FILE.fullmatch(n) for n in os.listdir(journal))
    except OSError as exc:
        raise storage_error(exc.errno or _errno.EIO, "list the journal", path=journal) from exc
    data = os.path.join(meta, "data.mdb")
    has_meta = os.path.exists(data) and os.path.getsize(data) > 0
    if not (marked or has_journal or has_meta):
        return True, None
    if marked and not os.path.isdir(meta):
        raise CorruptDataError(f"store {path}: its metadata directory {meta} is missing; restore "
                               "it from a backup; the store was not changed")
    check_lmdb_file(meta)
    if marked and not os.path.isdir(journal):
        raise CorruptDataError(f"store {path}: its journal directory {journal} is missing; restore "
                               "it from a backup; the store was not changed")
    return False, store_id


def _check_marker(marker: str) -> str:
    """The store id of a valid marker (else CorruptDataError / FormatVersionError)."""
    try:
        with open(marker, encoding="ascii") as f:
            doc = json.load(f)
    except OSError as exc:
        raise storage_error(exc.errno or _errno.EIO, "read the store marker", path=marker) from exc
    except ValueError:
        raise CorruptDataError(f"store marker {marker} is damaged (not JSON)") from None
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if not isinstance(fmt, int) or fmt < 1:
        raise CorruptDataError(f"store marker {marker} is damaged (no format number)")
    if fmt > STORE_FORMAT:
        raise FormatVersionError(f"store {os.path.dirname(marker)} has format {fmt}; this release "
                                 f"reads 1..{STORE_FORMAT}")
    store_id = doc.get("id")
    if not isinstance(store_id, str) or not store_id:
        raise CorruptDataError(f"store marker {marker} is damaged (no store id)")
    return store_id
