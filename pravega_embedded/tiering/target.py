"""The tier-2 target: one fsspec file system and a root inside it, with complete-or-nothing puts.

Owns: every call into fsspec for tier 2 (a local folder, ``memory://``, S3 through s3fs, any
fsspec URL) and the translation of its failures into ``pravega_embedded.errors``.

Invariants:
  1. ``put`` publishes a file complete or not at all. On a local folder it writes a staged name
     (``layout.stage_name``: no reader globs it), fsyncs it, renames it into place and fsyncs
     the folder (and the parent of every folder it had to create); elsewhere it is one
     ``pipe_file`` (a single PUT on S3). With ``exclusive``, an
     existing file is not replaced (AlreadyExistsError instead): atomically on a local folder
     (a hard link), by a look before the PUT elsewhere (one owner writes a tier-2 root).
     ``put_streamed`` is the same for a file written piece by piece: on a local folder the
     pieces go straight to the staged file (never all in memory) and each is handed to the disk
     once written (a writeback hint: the fsync before the rename is what makes it durable),
     elsewhere into one buffer and one PUT; a failure while writing leaves nothing behind.
  2. Every path handed in is relative to the root and made of layout's names: no ``..``, no
     leading ``/``; ``_rel`` refuses anything else, so nothing is read or written outside it.
  3. A read never allocates more than its ``max_bytes``: the size is asked first.
  4. Every failure of the file system reaches the caller as a StorageError (``errors.tier2_error``)
     naming the operation and the URL; a missing file is None or [] where the method says so.

Thread-safety: the methods hold no state of their own beyond the file system object; fsspec
file systems are safe to share between threads.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import fsspec
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from .._native import ffi, lib
from ..errors import (AlreadyExistsError, CorruptDataError, InvalidConfigurationError,
                      PravegaEmbeddedError, tier2_error)
from .layout import stage_name

__all__ = ["Tier2Target"]

LOG = logging.getLogger("pravega_embedded.tiering")


class _Exists(Exception):
    """An exclusive put found the file there (only that: not any FileExistsError on the way)."""


class Tier2Target:
    """A tier-2 root: ``Tier2Target("./data/tier2")``, ``Tier2Target("s3://bucket/prefix",
    {"client_kwargs": {...}})``."""

    def __init__(self, url: str, storage_options: Mapping[str, object] | None = None) -> None:
        if not isinstance(url, str) or not url:
            raise InvalidConfigurationError(f"tier2 must be a non-empty URL or path, got {url!r}")
        self.url = url.rstrip("/") or url
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
        except (ImportError, ValueError, TypeError) as exc:
            raise InvalidConfigurationError(
                f"tier2 {url!r} cannot be used: {exc}; for s3:// install the [s3] extra "
                "(pip install 'pravega-embedded[s3]')") from exc
        self.root = root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)
        # nothing is created or checked here: a target unreachable at open (a mount not there
        # yet, no network) is retried by the tierer like any outage; ``put`` makes the folders

    def __repr__(self) -> str:
        return f"<Tier2Target {self.url!r}>"

    # ------------------------------------------------------------------ paths
    def _rel(self, rel: str) -> str:
        """The file system path of ``rel`` (invariant 2)."""
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise InvalidConfigurationError(f"not a tier-2 relative path: {rel!r}")
        return f"{self.root}/{rel}"

    def where(self, rel: str) -> str:
        """``rel`` as a URL for messages."""
        return f"{self.url}/{rel}"

    # ------------------------------------------------------------------ reading
    def open_read(self, rel: str) -> Any:
        """The file at ``rel`` open for reading (raises what the file system raises: the
        caller translates). A local file is opened natively by pyarrow: its reads need no
        GIL, so a read-ahead thread is not held up by a reader's Python loop."""
        path = self._rel(rel)
        if self.local:
            return pa.OSFile(path, "r")
        return self.fs.open(path, "rb")

    def size(self, rel: str) -> int:
        """The size of the file at ``rel`` (raises what the file system raises)."""
        return int(self.fs.size(self._rel(rel)))

    # ------------------------------------------------------------------ writing
    def put(self, rel: str, data: "bytes | pa.Buffer", *, exclusive: bool = False) -> None:
        """Publish ``data`` (any bytes-like object) at ``rel`` complete or not at all
        (invariant 1)."""
        path = self._rel(rel)
        try:
            if self.local:
                self._put_local(path, data, exclusive)
            else:
                if exclusive and self.fs.exists(path):
                    raise _Exists(path)
                parent = path.rsplit("/", 1)[0]
                self.fs.makedirs(parent, exist_ok=True)
                self.fs.pipe_file(path, data if isinstance(data, bytes) else bytes(memoryview(data)))
        except _Exists as exc:
            raise AlreadyExistsError(f"tier-2 file {self.where(rel)} exists already") from exc
        except Exception as exc:  # noqa: BLE001 - every file-system failure is translated here
            raise tier2_error(exc, "write a tier-2 file", url=self.where(rel)) from exc

    def put_streamed(self, rel: str, write: Callable[[pa.NativeFile, Callable[[], None]], None],
                     *, exclusive: bool = False) -> int:
        """Publish at ``rel``, complete or not at all (invariant 1), what ``write(sink,
        written)`` writes into ``sink``; returns its size. ``write`` calls ``written()`` after
        each piece (a row group): on a local folder it starts writing what is in the staged
        file back to the disk (``pe_start_writeback``), so the fsync before the publication
        waits for the last piece only; elsewhere it does nothing. An error ``write`` raises is
        raised as it is, but an OSError of the file system's (ENOSPC, EIO) becomes a
        StorageError."""
        path = self._rel(rel)
        try:
            if not self.local:
                sink = pa.BufferOutputStream()
                write(sink, _nothing)
                data = sink.getvalue()
                self.put(rel, data, exclusive=exclusive)
                return data.size
            parent, final = os.path.split(path)
            _makedirs_durable(parent)
            tmp = os.path.join(parent, stage_name(final))
            with _removed_on_error(tmp):
                with pa.OSFile(tmp, "w") as sink:
                    fd = os.open(tmp, os.O_RDONLY)
                    try:
                        write(sink, lambda: _start_writeback(fd, tmp))
                        size = sink.tell()
                        sink.close()
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                self._publish_local(tmp, path, exclusive)
            _fsync_dir(parent)
            return size
        except _Exists as exc:
            raise AlreadyExistsError(f"tier-2 file {self.where(rel)} exists already") from exc
        except PravegaEmbeddedError:
            raise
        except OSError as exc:  # the file system's (pyarrow's I/O errors are OSErrors too)
            raise tier2_error(exc, "write a tier-2 file", url=self.where(rel)) from exc

    @classmethod
    def _put_local(cls, path: str, data: "bytes | pa.Buffer", exclusive: bool) -> None:
        parent, final = os.path.split(path)
        _makedirs_durable(parent)
        tmp = os.path.join(parent, stage_name(final))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with _removed_on_error(tmp):
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            cls._publish_local(tmp, path, exclusive)
        _fsync_dir(parent)

    @staticmethod
    def _publish_local(tmp: str, path: str, exclusive: bool) -> None:
        """Move the fsynced staged file ``tmp`` to ``path`` (the caller fsyncs the folder)."""
        if exclusive:
            try:
                os.link(tmp, path)  # EEXIST instead of replacing
            except FileExistsError as exc:
                raise _Exists(path) from exc
            os.unlink(tmp)
        else:
            os.replace(tmp, path)

    def delete(self, rel: str) -> None:
        """Remove the file at ``rel``; a file already gone is not an error."""
        path = self._rel(rel)
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return
        except Exception as exc:  # noqa: BLE001
            raise tier2_error(exc, "delete a tier-2 file", url=self.where(rel)) from exc

    def delete_tree(self, rel_dir: str) -> None:
        """Remove folder ``rel_dir`` with everything in it; a folder already gone is not an
        error."""
        path = self._rel(rel_dir)
        try:
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            return
        except Exception as exc:  # noqa: BLE001
            raise tier2_error(exc, "delete a tier-2 folder", url=self.where(rel_dir)) from exc

    # ------------------------------------------------------------------ reading
    def list(self, rel_dir: str) -> list[str]:
        """The names (not paths) of the entries of folder ``rel_dir`` ("": the root); [] if it
        does not exist."""
        path = self.root if rel_dir == "" else self._rel(rel_dir)
        try:
            entries = self.fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:  # noqa: BLE001
            raise tier2_error(exc, "list a tier-2 folder", url=self.where(rel_dir)) from exc
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def read(self, rel: str, max_bytes: int) -> bytes | None:
        """The bytes of the file at ``rel`` (None if it does not exist); CorruptDataError if it
        is larger than ``max_bytes`` (invariant 3)."""
        path = self._rel(rel)
        try:
            size = self.fs.size(path)
            if size is None:
                raise OSError(errno.EIO, "the file system gave no size")
            if size > max_bytes:
                raise CorruptDataError(f"tier-2 file {self.where(rel)} is {size:,} bytes, more than "
                                       f"the {max_bytes:,} such a file may have: it is damaged or "
                                       "not ours")
            data = self.fs.cat_file(path, start=0, end=max_bytes + 1)
        except FileNotFoundError:
            return None
        except CorruptDataError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise tier2_error(exc, "read a tier-2 file", url=self.where(rel)) from exc
        if len(data) > max_bytes:  # it grew between the two calls
            raise CorruptDataError(f"tier-2 file {self.where(rel)} is larger than {max_bytes:,} bytes")
        return bytes(data)


def _nothing() -> None:
    return None


def _start_writeback(fd: int, path: str) -> None:
    """Start writing back what is written to ``fd`` so far (a hint: the fsync that follows
    makes it durable and reports any error again, so a failure here is only logged)."""
    if lib.pe_start_writeback(fd) != lib.PE_OK:
        LOG.debug("starting the writeback of %s failed: errno %d", path, ffi.errno)


@contextmanager
def _removed_on_error(tmp: str) -> Iterator[None]:
    """Delete the staged file ``tmp`` if the block fails (invariant 1: nothing left behind)."""
    try:
        yield
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _fsync_dir(path: str) -> None:
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _makedirs_durable(path: str) -> None:
    """``os.makedirs`` whose new folders survive a power cut: each new folder's parent is
    fsynced once the folder is in it (invariant 1: a published file's path is durable)."""
    missing = []
    d = path
    while not os.path.isdir(d):
        missing.append(d)
        up = os.path.dirname(d)
        if up == d:
            break
        d = up
    os.makedirs(path, exist_ok=True)
    for d in reversed(missing):
        _fsync_dir(os.path.dirname(d))
