"""The store's journal (tier 1): one append-only sequence of records for every segment.

Owns: the files under ``<store>/journal`` (``<base:020d>.pej``), recovery (scan, cut a torn
tail, refuse corruption), replay parsing of EVENTS records (BYTES and MERGE payloads are parsed
by ``records``), the C journal handle that appends with group commit, and positional reads for
catch-up.

Invariants:
  1. Positions are global: a file named ``B`` holds positions [B, B + size); its first record
     is at B + 32; the next file's base is the end of the previous file's last record.
  2. Recovery scans from the file holding the metadata's applied position. It keeps every
     complete, valid record and cuts a torn tail of the *last* file (the cut bytes are saved
     under ``<store>/recovery/`` first). Damage followed by a valid record, damage in a
     non-last file, a gap between the files it scans, or a missing file holding the applied
     position raises CorruptDataError: never dropped. Files wholly before the applied position
     may be missing: retention deletes files whose data is all truncated (``drop_file``).
  3. A record, and so a section of one segment, never spans two files.

Thread-safety: ``append_events``, ``sync``, ``state`` and ``pread`` may be called from any
thread (the C journal serialises appends; reads use pread on per-file descriptors guarded by a
lock). ``recover``/``open``/``close`` are called by the store under its own lock.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import threading
from bisect import bisect_right
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from ._native import check, ffi, lib
from .errors import CorruptDataError, StorageError, StoreClosedError
from .records import parse_bytes_record, parse_merge_record

__all__ = ["Journal", "EventsRecord", "Section", "DURABILITY_MODES"]

DURABILITY_MODES = {"fsync": lib.PE_DURABILITY_FSYNC, "os": lib.PE_DURABILITY_OS, "none": lib.PE_DURABILITY_NONE}
HEADER = lib.PE_FILE_HEADER_SIZE
_FILE = re.compile(r"([0-9]{20})\.pej")
_REC = struct.Struct("<IIQBBHI")
_EVH = struct.Struct("<QQQIH")
_SEC = struct.Struct("<QQII")


@dataclass(frozen=True, slots=True)
class Section:
    """The events of one segment inside an EVENTS record."""

    segment_uid: int
    segment_offset: int
    n_events: int
    n_bytes: int
    data_pos: int  # journal position of the first frame


@dataclass(frozen=True, slots=True)
class EventsRecord:
    """The parsed header of an EVENTS record (frames are not decoded)."""

    pos: int
    end: int
    writer_id: str
    first_seq: int
    last_seq: int
    timestamp_ns: int
    sections: tuple[Section, ...]


def file_name(base: int) -> str:
    return f"{base:020d}.pej"


def parse_events_record(buf: bytes | memoryview, off: int, pos: int, total: int) -> EventsRecord:
    """Parse the EVENTS record whose header starts at ``buf[off]`` (already CRC-checked).
    Inconsistent contents raise CorruptDataError, never another exception."""
    if off < 0 or total < lib.PE_RECORD_HEADER_SIZE + _EVH.size or off + total > len(buf):
        raise CorruptDataError(f"journal record at {pos}: too short for an EVENTS record")
    try:
        return _parse_events(buf, off, pos, total)
    except struct.error as exc:
        raise CorruptDataError(f"journal record at {pos}: {exc}") from None


def _parse_events(buf: bytes | memoryview, off: int, pos: int, total: int) -> EventsRecord:
    p = off + lib.PE_RECORD_HEADER_SIZE
    end = off + total
    first, last, ts, nsec, wlen = _EVH.unpack_from(buf, p)
    p += _EVH.size
    wid = bytes(buf[p : p + wlen]).decode("utf-8", "surrogateescape")
    p += wlen
    sections = []
    if p > end:
        raise CorruptDataError(f"journal record at {pos}: writer id runs past the record end")
    for _ in range(nsec):
        if p + _SEC.size > end:
            raise CorruptDataError(f"journal record at {pos}: section header runs past the record end")
        uid, soff, nev, nbytes = _SEC.unpack_from(buf, p)
        p += _SEC.size
        if p + nbytes > end:
            raise CorruptDataError(f"journal record at {pos}: section runs past the record end")
        sections.append(Section(uid, soff, nev, nbytes, pos + (p - off)))
        p += nbytes
    if p != end:
        raise CorruptDataError(f"journal record at {pos}: {end - p} trailing bytes")
    return EventsRecord(pos, pos + total, wid, first, last, ts, tuple(sections))


class Journal:
    """Files, recovery, appends and reads of one store's journal."""

    def __init__(self, directory: str, recovery_dir: str, durability: str, roll_bytes: int) -> None:
        self.dir = directory
        self.recovery_dir = recovery_dir
        self.durability = durability
        self.mode = DURABILITY_MODES[durability]
        self.roll_bytes = roll_bytes
        os.makedirs(directory, exist_ok=True)
        self._handle = ffi.NULL
        self._read_lock = threading.Lock()
        self._fds: dict[int, int] = {}
        self._bases: list[int] = []
        self.torn_bytes_cut = 0
        self._durable_floor = 0  # "os" mode: fdatasynced up to here by make_durable()

    # ------------------------------------------------------------------ files
    def files(self) -> list[int]:
        """Bases of the journal files, ascending."""
        bases = []
        for name in os.listdir(self.dir):
            m = _FILE.fullmatch(name)
            if m:
                bases.append(int(m.group(1)))
        return sorted(bases)

    def path(self, base: int) -> str:
        return os.path.join(self.dir, file_name(base))

    # ------------------------------------------------------------------ recovery
    def recover(self, applied_pos: int | None) -> tuple[int, int, list[Any]]:
        """Validate the journal from ``applied_pos`` on; return (base of the last file, end
        position, the EVENTS, BYTES and MERGE records at or after applied_pos, parsed). Cuts a
        torn tail (invariant 2)."""
        bases = self.files()
        if not bases:
            base = 0 if applied_pos is None else max(0, applied_pos - HEADER)
            return base, base + HEADER, []
        start = HEADER + bases[0] if applied_pos is None else applied_pos
        first = max(0, bisect_right(bases, start) - 1)
        if bases[first] > start:
            raise CorruptDataError(
                f"metadata says journal position {start} was applied, but the journal file "
                f"holding it is missing (the oldest file, {file_name(bases[0])}, starts at "
                f"{bases[0]}): journal data is missing"
            )
        records: list[Any] = []
        end = start
        for i in range(first, len(bases)):
            base, last_file = bases[i], i == len(bases) - 1
            path = self.path(base)
            if i > first and base != end:
                raise CorruptDataError(
                    f"journal gap: {file_name(bases[i - 1])} ends at {end} but the next file "
                    f"{file_name(base)} starts at {base}"
                )
            size = os.path.getsize(path)
            status = self._header_status(path, base)
            if status != lib.PE_OK:
                if last_file and size <= HEADER:
                    # a crash while the file was being created (rolling) leaves a file with no
                    # record; one the metadata counts as applied has lost data instead
                    if applied_pos is not None and applied_pos > base + HEADER:
                        raise CorruptDataError(
                            f"journal {path} is {size} bytes, shorter than its header, but the "
                            f"metadata says position {applied_pos} was applied: journal data is "
                            "missing"
                        )
                    self._save_torn(path, 0, size, base)
                    os.unlink(path)
                    bases.pop()
                    if not bases:
                        return base, base + HEADER, records
                    return bases[-1], end, records
                check(status, f"journal file {path} header")
            scan_from = max(start, base + HEADER)
            if scan_from > base + size:
                raise CorruptDataError(
                    f"metadata says journal position {start} was applied but {path} ends at "
                    f"{base + size}: journal data is missing"
                )
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                res = ffi.new("pe_scan_result *")
                check(lib.pe_scan(ffi.from_buffer(mm), size, base, scan_from, res), f"scan {path}")
                if res.tail_state == lib.PE_TAIL_CORRUPT:
                    raise CorruptDataError(
                        f"journal {path}: damaged record at position {res.bad_pos} is followed by "
                        f"valid data at {res.next_valid_pos}; refusing to drop it (restore the "
                        "file from a backup or move it aside to accept the loss)"
                    )
                if res.tail_state == lib.PE_TAIL_TORN:
                    if not last_file:
                        raise CorruptDataError(
                            f"journal {path}: damaged bytes at position {res.bad_pos} in a file "
                            "that is not the newest"
                        )
                    self._save_torn(path, res.valid_end - base, size, base)
                self._collect(mm, base, scan_from, res.valid_end, records)
            end = res.valid_end
            if last_file and res.tail_state == lib.PE_TAIL_TORN:
                with open(path, "r+b") as f:
                    f.truncate(end - base)
                    os.fsync(f.fileno())
        return bases[-1], end, records

    @staticmethod
    def _header_status(path: str, base: int) -> int:
        """PE_OK if the file starts with a valid header for ``base``, else a PE_ERR_* code."""
        with open(path, "rb") as f:
            head = f.read(HEADER)
        out_base = ffi.new("uint64_t *")
        version = ffi.new("uint32_t *")
        status = lib.pe_file_header_parse(head, len(head), out_base, version)
        if status == lib.PE_OK and out_base[0] != base:
            return lib.PE_ERR_CORRUPT
        return status

    def _save_torn(self, path: str, start: int, size: int, base: int) -> None:
        if size <= start:
            return
        os.makedirs(self.recovery_dir, exist_ok=True)
        with open(path, "rb") as f:
            f.seek(start)
            tail = f.read(size - start)
        if not tail.strip(b"\0"):
            self.torn_bytes_cut += len(tail)
            return  # an all-zero tail carries nothing worth keeping
        dest = os.path.join(self.recovery_dir, f"torn-{base + start:020d}.bin")
        with open(dest, "wb") as f:
            f.write(tail)
            os.fsync(f.fileno())
        self.torn_bytes_cut += len(tail)

    @staticmethod
    def _collect(mm: mmap.mmap, base: int, start: int, end: int, out: list[Any]) -> None:
        typ = ffi.new("uint32_t *")
        plen = ffi.new("uint32_t *")
        total = ffi.new("uint64_t *")
        view = memoryview(mm)
        buf = ffi.from_buffer(mm)
        try:
            pos = start
            while pos < end:
                off = pos - base
                check(lib.pe_record_header(buf + off, end - pos, pos, typ, plen, total), "journal replay")
                t = typ[0]
                if t == lib.PE_RECORD_EVENTS:
                    out.append(parse_events_record(view, off, pos, total[0]))
                elif t == lib.PE_RECORD_BYTES:
                    out.append(parse_bytes_record(view, off, pos, total[0]))
                elif t == lib.PE_RECORD_MERGE:
                    out.append(parse_merge_record(view, off, pos, total[0]))
                else:
                    raise CorruptDataError(
                        f"journal record at {pos} has type {t}, which this release does not know"
                    )
                pos += total[0]
        finally:
            view.release()

    # ------------------------------------------------------------------ appending
    def open(self, base: int, pos: int) -> None:
        out = ffi.new("pe_journal **")
        check(
            lib.pe_journal_open(self.dir.encode(), base, pos, self.roll_bytes, self.mode, out),
            f"open journal {self.dir}",
        )
        self._handle = out[0]
        self._users = 0
        self._closing = False
        self._cv = threading.Condition(threading.Lock())

    @contextmanager
    def use(self) -> Iterator[Any]:
        """The C handle, guarded: close() waits until no call on it is in flight (so a thread
        blocked in a sync wait or an append never touches freed memory)."""
        with self._cv:
            if self._closing or self._handle == ffi.NULL:
                raise StoreClosedError(f"journal {self.dir} is closed")
            self._users += 1
        try:
            yield self._handle
        finally:
            with self._cv:
                self._users -= 1
                if self._closing and self._users == 0:
                    self._cv.notify_all()

    @property
    def handle(self) -> Any:
        """The raw C handle (unguarded; for tests such as fault injection)."""
        if self._handle == ffi.NULL:
            raise StoreClosedError(f"journal {self.dir} is closed")
        return self._handle

    def state(self) -> tuple[int, int, int, int]:
        """(written, synced, current file base, failed errno)."""
        w = ffi.new("uint64_t[3]")
        err = ffi.new("int32_t *")
        with self.use() as h:
            check(lib.pe_journal_state(h, w, w + 1, w + 2, err), "journal state")
        return w[0], w[1], w[2], err[0]

    def synced(self) -> int:
        return self.state()[1]

    def sync(self, pos: int, timeout: float | None = None, what: str = "flush") -> None:
        ns = -1 if timeout is None else max(0, int(timeout * 1e9))
        with self.use() as h:
            status = lib.pe_journal_sync(h, pos, ns)
            if status != lib.PE_OK:
                err = ffi.new("int32_t *")
                w = ffi.new("uint64_t[3]")
                lib.pe_journal_state(h, w, w + 1, w + 2, err)
                check(status, f"{what}: waiting for the journal to be durable", errno=err[0] or None)

    def make_durable(self, pos: int, what: str) -> None:
        """Make the journal durable up to ``pos`` whatever the mode, before metadata that refers
        to it is committed: "fsync" waits for group commit; "os" fdatasyncs the files written
        since the last call (acknowledgement does not wait for it, metadata does); "none" does
        nothing."""
        if self.durability == "fsync":
            self.sync(pos, None, what=what)
        elif self.durability == "os":
            for base in self.files():
                try:
                    if base + os.path.getsize(self.path(base)) > self._durable_floor:
                        os.fdatasync(self._fd(base))
                except FileNotFoundError:
                    continue  # deleted by retention: nothing in it is needed
            self._durable_floor = max(self._durable_floor, pos)

    def append_record(self, rtype: int, payload: bytes, what: str, body: Any = None) -> tuple[int, int]:
        """Append one BYTES or MERGE record whose payload is ``payload`` followed by ``body``
        (any bytes-like object, not copied in Python); return (its position, its end)."""
        outs = ffi.new("uint64_t[2]")
        if body is None:
            body, blen = ffi.NULL, 0
        else:
            blen = len(body)
            body = ffi.from_buffer(body)
        with self.use() as h:
            status = lib.pe_journal_append_record2(h, rtype, payload, len(payload), body, blen,
                                                   outs, outs + 1)
        if status != lib.PE_OK:
            check(status, what)
        return outs[0], outs[1]

    def close(self) -> None:
        """Make everything durable, wait for in-flight calls, free the C journal. Idempotent."""
        if self._handle == ffi.NULL:
            return
        with self._cv:
            if self._closing:
                return
            self._closing = True
            h = self._handle
        # release every waiter: each waits for a position <= what is written now
        w = ffi.new("uint64_t[3]")
        err = ffi.new("int32_t *")
        if lib.pe_journal_state(h, w, w + 1, w + 2, err) == lib.PE_OK and not err[0]:
            lib.pe_journal_sync(h, w[0], 5_000_000_000)
        with self._cv:
            while self._users:
                self._cv.wait(0.05)
            self._handle = ffi.NULL
        status = lib.pe_journal_close(h)
        with self._read_lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._bases = []
        if status != lib.PE_OK:
            check(status, f"close journal {self.dir}")

    # ------------------------------------------------------------------ reading
    def _fd(self, base: int) -> int:
        with self._read_lock:
            fd = self._fds.get(base)
            if fd is None:
                fd = os.open(self.path(base), os.O_RDONLY | os.O_CLOEXEC)
                self._fds[base] = fd
                self._bases = sorted(self._fds)
            return fd

    def drop_file(self, base: int) -> None:
        """Delete journal file ``base`` (retention: all its data is truncated). Readers that
        still ask for its positions get StorageError/CorruptDataError, which the store turns
        into TruncatedDataError."""
        with self._read_lock:
            fd = self._fds.pop(base, None)
            if fd is not None:
                os.close(fd)
            self._bases = sorted(self._fds)
        try:
            os.unlink(self.path(base))
        except FileNotFoundError:
            return
        dfd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _refresh(self) -> None:
        for base in self.files():
            try:
                self._fd(base)
            except FileNotFoundError:
                pass  # deleted by retention meanwhile

    def _file_at(self, pos: int) -> int:
        bases = self._bases
        if not bases or pos >= bases[-1] or pos < bases[0]:
            if not bases or pos < bases[0] or self.state()[2] > bases[-1]:
                self._refresh()
                bases = self._bases
        i = bisect_right(bases, pos) - 1
        if i < 0:
            raise StorageError(f"journal position {pos} is before the first journal file")
        return bases[i]

    def pread(self, pos: int, n: int) -> bytes:
        """Read n bytes at global position pos (a range within one file, invariant 3)."""
        base = self._file_at(pos)
        data = os.pread(self._fds[base], n, pos - base)
        if len(data) != n:
            raise CorruptDataError(
                f"journal {file_name(base)}: expected {n} bytes at position {pos}, read {len(data)}"
            )
        return data

    def pread_into(self, pos: int, buf: Any) -> None:
        """Read len(buf) bytes at global position pos straight into the writable buffer buf."""
        base = self._file_at(pos)
        view = memoryview(buf)
        n = len(view)
        got = 0
        fd = self._fds[base]
        while got < n:
            k = os.preadv(fd, [view[got:]], pos - base + got)
            if k <= 0:
                raise CorruptDataError(
                    f"journal {file_name(base)}: expected {n} bytes at position {pos}, read {got}"
                )
            got += k
