"""The store's journal (tier 1): one append-only sequence of records for every segment.

Owns: the files under ``<store>/journal`` (``<base:020d>.pej``), recovery (scan, cut a torn
tail, refuse corruption, remove the leftover of an unfinished roll), the C journal that appends
with group commit, the positions that say what is written, acknowledged and durable in every
durability mode, and reads of sections from the files, checked against their CRC. EVENTS
payloads are parsed here, BYTES and MERGE payloads by ``records``.

Invariants:
  1. Positions are global: a file named ``B`` holds positions [B, B + size); its first record
     is at B + 32. A file that is not the newest ends with a ROLL record whose end is the next
     file's base (journal format 2 on; a format-1 file, and the last file of an older format
     before an upgrade's first file, simply end where the next one begins).
  2. Recovery scans from the file holding the metadata's applied position. The position known
     durable, K, is the larger of that applied position and every durable mark (position - lag)
     carried by a valid record. Damage before K, damage in a file that is not the newest, a gap,
     a missing file (one a ROLL names, or one holding the applied position), a ROLL that is not
     its file's last record: CorruptDataError, and nothing on disk is changed. Damage at or
     after K in the newest file is a torn tail: writes never synced that reached the disk partly
     or out of order (valid records after it were never acknowledged); it is cut (the bytes are
     saved under ``<store>/recovery/`` first). A newest file with no record whose predecessor
     has no ROLL to it is the leftover of a roll a crash interrupted, and is removed.
  3. Nothing recovered counts as durable before it is fdatasynced with its directory (every
     scanned file here, the file appended to in ``pe_journal_open``), unless durability is
     "none".
  4. A record, and so a section of one segment, never spans two files.
  5. A read that reaches a file checks the section against its header's length and CRC
     (format 2). A file is closed only when no read is using it (reference count), so a read
     never gets another file's bytes through a reused descriptor; a read of a deleted file's
     data raises StorageError (the store turns it into TruncatedDataError).
  6. Every failed sync trips the store's fail-stop latch (``failstop``); the C journal then
     refuses appends and acknowledgements for good.

Thread-safety: appends, waits, positions and reads may be called from any thread (the C journal
serialises appends; the file table is guarded by a lock). ``recover``/``open``/``close`` are
called by the store's open and close.
"""

from __future__ import annotations

import errno as _errno
import mmap
import os
import re
import struct
import threading
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Union

from ._native import check, ffi, lib
from .errors import CorruptDataError, StorageError, StoreClosedError, storage_error
from .failstop import ENGINE_LOG, FailStop
from .records import BytesRecord, MergeRecord, parse_bytes_record, parse_merge_record

__all__ = ["Journal", "JournalStatus", "Recovery", "EventsRecord", "Section", "DURABILITY_MODES",
           "Record", "parse_events_record", "file_name", "FILE_HEADER_SIZE", "SECTION_HEADER_SIZE",
           "check_section", "file_version"]

DURABILITY_MODES = {"fsync": lib.PE_DURABILITY_FSYNC, "os": lib.PE_DURABILITY_OS, "none": lib.PE_DURABILITY_NONE}
FILE_HEADER_SIZE = lib.PE_FILE_HEADER_SIZE
RECORD_HEADER_SIZE = lib.PE_RECORD_HEADER_SIZE
SECTION_HEADER_SIZE = lib.PE_SECTION_HEADER_SIZE
_FILE = re.compile(r"([0-9]{20})\.pej")
_EVH = struct.Struct("<QQQIH")
_SEC = {1: struct.Struct("<QQII"), 2: struct.Struct("<QQIIII"), 3: struct.Struct("<QQIIII")}
_SECTION = struct.Struct("<QQIIII")  # uid, offset, events, bytes, crc32c, reserved


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


Record = Union[EventsRecord, BytesRecord, MergeRecord]


@dataclass(frozen=True, slots=True)
class JournalStatus:
    """Positions of the journal now (``pe_journal_status``)."""

    written: int  # end of the last appended record
    acked: int  # end of what the durability mode acknowledges (fsync: fdatasynced)
    durable: int  # end of what is known fdatasynced
    file_base: int  # base of the file appended to
    failed_errno: int  # 0 unless the journal failed


@dataclass(frozen=True, slots=True)
class Recovery:
    """What recovery found: where appending goes on and the records to replay."""

    base: int  # base of the file to append to (created by ``open`` if missing)
    end: int  # the position to append at
    records: tuple[Record, ...]  # valid records at or after the applied position, in order
    torn_bytes: int  # bytes cut from the newest file's tail
    durable_mark: int  # the highest position known durable (invariant 2)
    removed: tuple[str, ...] = ()  # files removed (the leftover of an unfinished roll)


def file_name(base: int) -> str:
    return f"{base:020d}.pej"


def parse_events_record(buf: bytes | memoryview, off: int, pos: int, total: int,
                        version: int = lib.PE_FORMAT_VERSION) -> EventsRecord:
    """Parse the EVENTS record whose header starts at ``buf[off]`` (already CRC-checked) from a
    file of journal format ``version``. Inconsistent contents raise CorruptDataError, never
    another exception."""
    if off < 0 or total < RECORD_HEADER_SIZE + _EVH.size or off + total > len(buf):
        raise CorruptDataError(f"journal record at {pos}: too short for an EVENTS record")
    try:
        return _parse_events(buf, off, pos, total, _SEC[version])
    except (struct.error, KeyError) as exc:
        raise CorruptDataError(f"journal record at {pos}: {exc!r}") from None


def _parse_events(buf: bytes | memoryview, off: int, pos: int, total: int,
                  sec: struct.Struct) -> EventsRecord:
    p = off + RECORD_HEADER_SIZE
    end = off + total
    first, last, ts, nsec, wlen = _EVH.unpack_from(buf, p)
    p += _EVH.size
    wid = bytes(buf[p : p + wlen]).decode("utf-8", "surrogateescape")
    p += wlen
    sections = []
    if p > end:
        raise CorruptDataError(f"journal record at {pos}: writer id runs past the record end")
    for _ in range(nsec):
        if p + sec.size > end:
            raise CorruptDataError(f"journal record at {pos}: section header runs past the record end")
        uid, soff, nev, nbytes = sec.unpack_from(buf, p)[:4]
        p += sec.size
        if p + nbytes > end:
            raise CorruptDataError(f"journal record at {pos}: section runs past the record end")
        sections.append(Section(uid, soff, nev, nbytes, pos + (p - off)))
        p += nbytes
    if p != end:
        raise CorruptDataError(f"journal record at {pos}: {end - p} trailing bytes")
    return EventsRecord(pos, pos + total, wid, first, last, ts, tuple(sections))


@dataclass(slots=True)
class _Scan:
    """One journal file as recovery found it."""

    base: int
    path: str
    size: int
    header: int  # PE_OK or the header's PE_ERR_* status
    version: int = 0
    valid_end: int = 0
    tail: int = lib.PE_TAIL_CLEAN
    bad_pos: int = 0
    next_valid: int = 0
    mark: int = 0
    n_records: int = 0
    roll_end: int | None = None  # end of the ROLL record that ends the file, if any
    records: list[Record] = field(default_factory=list)


class _File:
    """A journal file open for reading; closed when retired and no read uses it."""

    __slots__ = ("base", "fd", "version", "users", "retired", "end")

    def __init__(self, base: int, fd: int, version: int) -> None:
        self.base, self.fd, self.version = base, fd, version
        self.users = 0
        self.retired = False
        self.end: int | None = None  # journal position after its last byte, once it is rolled


class _Use:
    """``with journal.use() as handle``: a class, not a generator, as appends and waits use it on
    every flush."""

    __slots__ = ("_journal",)

    def __init__(self, journal: "Journal") -> None:
        self._journal = journal

    def __enter__(self) -> Any:
        return self._journal._enter()

    def __exit__(self, *exc: object) -> None:
        self._journal._exit()


class Journal:
    """Files, recovery, appends, positions and reads of one store's journal."""

    def __init__(self, directory: str, recovery_dir: str, durability: str, roll_bytes: int,
                 latch: FailStop) -> None:
        self.dir = directory
        self.recovery_dir = recovery_dir
        self.durability = durability
        self.mode = DURABILITY_MODES[durability]
        self.roll_bytes = roll_bytes
        self.latch = latch
        self._handle = ffi.NULL
        self._users = 0
        self._closing = False
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._guard = _Use(self)
        self._read_lock = threading.Lock()
        self._files: dict[int, _File] = {}
        self._bases: list[int] = []
        latch.on_trip(self._stop)
        latch.add_probe(self._failed_errno)

    # ------------------------------------------------------------------ files
    def files(self) -> list[int]:
        """Bases of the journal files, ascending."""
        try:
            names = os.listdir(self.dir)
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "list the journal", path=self.dir) from exc
        return sorted(int(m.group(1)) for n in names if (m := _FILE.fullmatch(n)))

    def path(self, base: int) -> str:
        return os.path.join(self.dir, file_name(base))

    def file_of(self, pos: int) -> int | None:
        """Base of the file holding position ``pos`` (None: before the first file)."""
        bases = self.files()
        i = bisect_right(bases, pos) - 1
        return None if i < 0 else bases[i]

    # ------------------------------------------------------------------ recovery
    def recover(self, applied_pos: int | None) -> Recovery:
        """Validate the journal from ``applied_pos`` on (invariant 2) and make it durable
        (invariant 3); returns where to append and the records to replay. Raises before
        changing anything on disk if the journal is damaged or incomplete."""
        bases = self.files()
        if not bases:
            if applied_pos is not None:
                raise CorruptDataError(
                    f"journal {self.dir} holds no file, but the metadata says journal position "
                    f"{applied_pos} was applied: the journal is missing")
            return Recovery(0, FILE_HEADER_SIZE, (), 0, 0)
        start = bases[0] + FILE_HEADER_SIZE if applied_pos is None else applied_pos
        first = bisect_right(bases, start - 1) - 1  # the file holding the last applied byte
        if first < 0:
            raise CorruptDataError(
                f"metadata says journal position {start} was applied, but the journal file "
                f"holding it is missing (the oldest file, {file_name(bases[0])}, starts at "
                f"{bases[0]}): journal data is missing")
        self._check_older(bases[: first + 1])
        scans = [self._scan(b, start) for b in bases[first:]]
        leftover = self._leftover(scans, applied_pos)
        known = max([applied_pos or 0] + [s.mark for s in scans])
        self._validate(scans, known)
        # valid: from here on recovery changes the disk
        for s in leftover:
            try:
                self._save_torn(s.path, 0, s.size, s.base)
                os.unlink(s.path)
            except OSError as exc:
                if isinstance(exc, StorageError):
                    raise
                raise storage_error(exc.errno or _errno.EIO, "remove a journal file a roll left",
                                    path=self.recovery_dir) from exc
            ENGINE_LOG.warning("journal: removed %s, left by a roll a crash cut short", s.path)
        last = scans[-1] if scans else None
        torn = self._cut(last) if last is not None and last.tail != lib.PE_TAIL_CLEAN else 0
        if self.mode != lib.PE_DURABILITY_NONE:
            for s in scans:
                self._fdatasync_file(s.path)
            if torn or leftover:
                self.latch.fsync_dir(self.dir, "recovery")
        records = tuple(r for s in scans for r in s.records)
        removed = tuple(s.path for s in leftover)
        if last is None:  # the store's only file was the leftover of its creation
            return Recovery(bases[0], bases[0] + FILE_HEADER_SIZE, (), 0, known, removed)
        if last.version < lib.PE_FORMAT_VERSION:
            # never append to a file of an older format: go on in a new file at its end
            return Recovery(last.valid_end, last.valid_end + FILE_HEADER_SIZE, records, torn,
                            known, removed)
        return Recovery(last.base, last.valid_end, records, torn, known, removed)

    def _check_older(self, bases: list[int]) -> None:
        """Files recovery does not scan (wholly before the applied position; retention may have
        deleted any of them) must still be whole: a readable header and, from format 2 on, a
        valid ROLL record as their last bytes (invariant 1) — or, for the last file of an older
        format, an end exactly where the next file (of a newer format) starts: an upgrade goes
        on in a new file without writing into the old one. Else a read of their data would
        fail later instead of the open now."""
        for base, nxt in zip(bases, bases[1:]):
            path = self.path(base)
            try:
                size = os.path.getsize(path)
                with open(path, "rb") as f:
                    status, version = _header(f.read(FILE_HEADER_SIZE), base)
                    if status == lib.PE_OK and version >= 2 and size >= FILE_HEADER_SIZE + RECORD_HEADER_SIZE:
                        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                            rolled = _roll_at_end(mm, base, size) is not None
                    else:
                        rolled = version < 2
                if not rolled and status == lib.PE_OK and base + size == nxt:
                    with open(self.path(nxt), "rb") as f:
                        rolled = version < _header(f.read(FILE_HEADER_SIZE), nxt)[1]
            except OSError as exc:
                raise storage_error(exc.errno or _errno.EIO, "read journal file", path=path) from exc
            if status == lib.PE_ERR_FORMAT:
                check(status, f"journal file {path} header")
            if status != lib.PE_OK:
                raise CorruptDataError(f"journal file {path}: its header is damaged or cut short "
                                       f"({size} bytes)")
            if not rolled:
                raise CorruptDataError(
                    f"journal file {path} ({size} bytes) does not end with its ROLL record: it "
                    "was cut short or damaged at its end; restore it from a backup")

    def _scan(self, base: int, start: int) -> _Scan:
        path = self.path(base)
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                head = f.read(FILE_HEADER_SIZE)
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "read journal file", path=path) from exc
        status, version = _header(head, base)
        s = _Scan(base, path, size, status, version)
        if status != lib.PE_OK:
            return s
        scan_from = max(start, base + FILE_HEADER_SIZE)
        if scan_from > base + size:
            raise CorruptDataError(
                f"metadata says journal position {start} was applied but {path} ends at "
                f"{base + size}: journal data is missing")
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            res = ffi.new("pe_scan_result *")
            check(lib.pe_scan(ffi.from_buffer(mm), size, base, scan_from, res), f"scan {path}")
            s.valid_end, s.tail, s.bad_pos = res.valid_end, res.tail_state, res.bad_pos
            s.next_valid, s.mark, s.n_records = res.next_valid_pos, res.durable_mark, res.n_records
            self._collect(mm, s, scan_from)
            if s.roll_end is None and version >= 2 and s.tail == lib.PE_TAIL_CLEAN:
                s.roll_end = _roll_at_end(mm, base, size)  # a ROLL before the scan's start
        return s

    @staticmethod
    def _leftover(scans: list[_Scan], applied_pos: int | None) -> list[_Scan]:
        """Take off ``scans`` (for removal once the rest is valid) a newest file that holds no
        record and was never part of the journal: left by a roll a crash cut short (its
        predecessor has no ROLL to it, journal.c), or by the creation of the store's first file
        (nothing applied in it yet)."""
        new = scans[-1]
        empty = (new.header != lib.PE_OK and new.size <= FILE_HEADER_SIZE) or (
            new.header == lib.PE_OK and new.n_records == 0 and new.tail == lib.PE_TAIL_CLEAN)
        if not empty:
            return []
        if len(scans) > 1:
            prev = scans[-2]
            if prev.roll_end == new.base or (prev.version < lib.PE_FORMAT_VERSION
                                             and new.header == lib.PE_OK):
                return []  # a completed roll, or the first file after an older-format one
        elif new.header == lib.PE_OK or (applied_pos is not None and applied_pos > new.base):
            return []  # the file being appended to, or one the metadata counts data in
        scans.pop()
        return [new]

    @staticmethod
    def _validate(scans: list[_Scan], known: int) -> None:
        for i, s in enumerate(scans):
            last = i == len(scans) - 1
            if s.header == lib.PE_ERR_FORMAT:
                check(s.header, f"journal file {s.path} header")
            if s.header != lib.PE_OK:
                raise CorruptDataError(
                    f"journal file {s.path}: its header is damaged or cut short ({s.size} bytes)")
            if i:
                prev = scans[i - 1]
                if prev.valid_end != s.base:
                    raise CorruptDataError(
                        f"journal gap: {file_name(prev.base)} ends at {prev.valid_end} but the "
                        f"next file {file_name(s.base)} starts at {s.base}")
                if prev.version >= 2 and prev.roll_end is None and prev.version >= s.version:
                    # (the last file of an older format ends without one: an upgrade goes on
                    # in a new file without writing into the old one)
                    raise CorruptDataError(
                        f"journal {prev.path} does not end with a ROLL record though "
                        f"{file_name(s.base)} follows it")
            if s.tail != lib.PE_TAIL_CLEAN and not last:
                raise CorruptDataError(
                    f"journal {s.path}: damaged bytes at position {s.bad_pos} in a file that is "
                    "not the newest (restore the file from a backup or move it aside to accept "
                    "the loss)")
            if s.tail != lib.PE_TAIL_CLEAN and s.bad_pos < known:
                follow = (f", followed by valid data at {s.next_valid}"
                          if s.tail == lib.PE_TAIL_CORRUPT else "")
                raise CorruptDataError(
                    f"journal {s.path}: damaged record at position {s.bad_pos}{follow}, before "
                    f"position {known}, which was durable; refusing to drop it (restore the file "
                    "from a backup or move it aside to accept the loss)")
            if last and s.roll_end is not None:
                raise CorruptDataError(
                    f"journal file {file_name(s.roll_end)} is missing: {s.path} ends with a ROLL "
                    "record to it")

    def _cut(self, s: _Scan) -> int:
        """Cut the torn tail of the newest file (saved under recovery/ first)."""
        cut = s.size - (s.valid_end - s.base)
        try:
            self._save_torn(s.path, s.valid_end - s.base, s.size, s.base)
        except OSError as exc:
            if isinstance(exc, StorageError):
                raise
            raise storage_error(exc.errno or _errno.EIO, "save a torn journal tail before cutting it",
                                path=self.recovery_dir) from exc
        try:
            with open(s.path, "r+b") as f:
                f.truncate(s.valid_end - s.base)
                if self.mode != lib.PE_DURABILITY_NONE:
                    os.fsync(f.fileno())
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "cut the torn tail of the journal",
                                path=s.path) from exc
        ENGINE_LOG.warning("journal %s: cut a torn tail of %d bytes at position %d (damage at %d)",
                           s.path, cut, s.valid_end, s.bad_pos)
        return cut

    def _save_torn(self, path: str, start: int, size: int, base: int) -> None:
        if size <= start:
            return
        with open(path, "rb") as f:
            f.seek(start)
            tail = f.read(size - start)
        if not tail.strip(b"\0"):
            return  # an all-zero tail carries nothing worth keeping
        new_dir = not os.path.isdir(self.recovery_dir)
        os.makedirs(self.recovery_dir, exist_ok=True)
        dest = os.path.join(self.recovery_dir, f"torn-{base + start:020d}.bin")
        with open(dest, "wb") as f:
            f.write(tail)
            os.fsync(f.fileno())
        self.latch.fsync_dir(self.recovery_dir, "save a torn journal tail")
        if new_dir:
            self.latch.fsync_dir(os.path.dirname(self.recovery_dir), "create recovery/")

    def _fdatasync_file(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "open journal file", path=path) from exc
        try:
            os.fdatasync(fd)
        except OSError as exc:
            raise self.latch.trip(exc.errno or _errno.EIO, f"recovery: fdatasync of {path}", exc) from exc
        finally:
            os.close(fd)

    @staticmethod
    def _collect(mm: mmap.mmap, s: _Scan, start: int) -> None:
        """Parse the valid records of ``s`` from ``start`` (replay) and note a final ROLL."""
        typ = ffi.new("uint32_t *")
        plen = ffi.new("uint32_t *")
        total = ffi.new("uint64_t *")
        view = memoryview(mm)
        buf = ffi.from_buffer(mm)
        base, end, out = s.base, s.valid_end, s.records
        try:
            pos = start
            while pos < end:
                off = pos - base
                check(lib.pe_record_header(buf + off, end - pos, pos, typ, plen, total), "journal replay")
                t = typ[0]
                if s.roll_end is not None:
                    raise CorruptDataError(
                        f"journal {s.path}: a record at {pos} follows the file's ROLL record")
                if t == lib.PE_RECORD_EVENTS:
                    out.append(parse_events_record(view, off, pos, total[0], s.version))
                elif t == lib.PE_RECORD_BYTES:
                    out.append(parse_bytes_record(view, off, pos, total[0], s.version))
                elif t == lib.PE_RECORD_MERGE:
                    out.append(parse_merge_record(view, off, pos, total[0]))
                elif t == lib.PE_RECORD_ROLL and s.version >= 2 and plen[0] == 0:
                    s.roll_end = pos + total[0]
                else:
                    raise CorruptDataError(
                        f"journal record at {pos} has type {t}, which this release does not know")
                pos += total[0]
        finally:
            view.release()

    # ------------------------------------------------------------------ the C journal
    def open(self, base: int, pos: int) -> None:
        out = ffi.new("pe_journal **")
        check(lib.pe_journal_open(self.dir.encode(), base, pos, self.roll_bytes, self.mode, out),
              f"open journal {self.dir}")
        self._handle = out[0]

    def use(self) -> "_Use":
        """The C handle, guarded: close() waits until no call on it is in flight (so a thread
        blocked in a sync wait or an append never touches freed memory)."""
        return self._guard

    def _enter(self) -> Any:
        with self._lock:
            if self._closing or self._handle == ffi.NULL:
                raise StoreClosedError(f"journal {self.dir} is closed")
            self._users += 1
            return self._handle

    def _exit(self) -> None:
        with self._lock:
            self._users -= 1
            if self._closing and self._users == 0:
                self._cv.notify_all()

    @property
    def handle(self) -> Any:
        """The raw C handle (unguarded; for tests such as fault injection)."""
        if self._handle == ffi.NULL:
            raise StoreClosedError(f"journal {self.dir} is closed")
        return self._handle

    def _stop(self, err: int) -> None:
        """Latch listener: the store failed elsewhere; append and acknowledge nothing more."""
        with self._cv:
            if self._handle != ffi.NULL and not self._closing:
                lib.pe_journal_fail(self._handle, err)

    def _failed_errno(self) -> int:
        with self._cv:
            if self._handle == ffi.NULL or self._closing:
                return 0
            st = ffi.new("pe_journal_status *")
            lib.pe_journal_status_get(self._handle, st)
            return st.failed_errno

    def status(self) -> JournalStatus:
        st = ffi.new("pe_journal_status *")
        with self.use() as h:
            lib.pe_journal_status_get(h, st)
        return JournalStatus(st.written, st.acked, st.durable, st.file_base, st.failed_errno)

    def written(self) -> int:
        """End of the last appended record."""
        st = ffi.new("pe_journal_status *")
        with self.use() as h:
            lib.pe_journal_status_get(h, st)
        return st.written

    def acked(self) -> int:
        """End of what the durability mode acknowledges: readers see up to here."""
        st = ffi.new("pe_journal_status *")
        with self.use() as h:
            lib.pe_journal_status_get(h, st)
        return st.acked

    def _failure(self, status: int, what: str) -> None:
        """Raise for a failed C call; a journal that is failed now trips the latch."""
        err = self._failed_errno() if status in (lib.PE_ERR_FAILED, lib.PE_ERR_IO) else 0
        if err:
            raise self.latch.trip(err, what)
        if status == lib.PE_ERR_FAILED:
            raise StoreClosedError(f"{what}: the journal {self.dir} is closed")
        if status == lib.PE_ERR_IO:
            raise storage_error(ffi.errno or _errno.EIO, what, path=self.dir)
        check(status, what)

    def wait_acked(self, pos: int, timeout: float | None, what: str) -> None:
        """Wait until everything before ``pos`` is acknowledged (fsync: fdatasynced; os, none:
        written). DurabilityTimeoutError after ``timeout`` seconds."""
        ns = -1 if timeout is None else max(0, int(timeout * 1e9))
        with self.use() as h:
            status = lib.pe_journal_sync(h, pos, ns)
        if status != lib.PE_OK:
            self._failure(status, f"{what}: waiting for the journal to be durable")

    def make_durable(self, pos: int, what: str) -> None:
        """Make everything before ``pos`` durable whatever the mode (fsync: wait for group
        commit; os: fdatasync, in C, under the latch; none: nothing), before metadata that
        refers to it is committed."""
        with self.use() as h:
            status = lib.pe_journal_make_durable(h, pos, -1)
        if status != lib.PE_OK:
            self._failure(status, f"{what}: making the journal durable")

    def append_events(self, *args: Any, what: str) -> None:
        """``pe_journal_append_events`` with ``args`` after the handle."""
        with self.use() as h:
            status = lib.pe_journal_append_events(h, *args)
        if status != lib.PE_OK:
            self._failure(status, what)

    def append_events_v(self, *args: Any, what: str) -> None:
        """``pe_journal_append_events_v`` (payloads written from their own buffers)."""
        with self.use() as h:
            status = lib.pe_journal_append_events_v(h, *args)
        if status != lib.PE_OK:
            self._failure(status, what)

    def append_record(self, rtype: int, payload: bytes, what: str) -> tuple[int, int]:
        """Append one record (MERGE) with ``payload``; returns (its position, its end)."""
        outs = ffi.new("uint64_t[2]")
        with self.use() as h:
            status = lib.pe_journal_append_record(h, rtype, payload, len(payload), outs, outs + 1)
        if status != lib.PE_OK:
            self._failure(status, what)
        return outs[0], outs[1]

    def append_section(self, uid: int, offset: int, n_events: int, data: Any, write_ns: int,
                       what: str) -> tuple[int, int]:
        """Append one BYTES record holding ``data`` (any bytes-like object, written from its
        own memory) as a section of segment ``uid`` at ``offset`` (uid 0: staged), written at
        ``write_ns`` (ns since the epoch); returns (its position, its end). The data starts at
        position + BYTES_DATA_OFFSET."""
        outs = ffi.new("uint64_t[2]")
        buf = ffi.from_buffer(data)
        with self.use() as h:
            status = lib.pe_journal_append_section(h, uid, offset, n_events, write_ns, buf,
                                                   len(buf), outs, outs + 1)
        if status != lib.PE_OK:
            self._failure(status, what)
        return outs[0], outs[1]

    def close(self) -> None:
        """Make everything durable, wait for in-flight calls, free the C journal. Idempotent."""
        with self._cv:
            if self._closing or self._handle == ffi.NULL:
                return
            self._closing = True
            h = self._handle
        # release every waiter: each waits for a position <= what is written now
        st = ffi.new("pe_journal_status *")
        if lib.pe_journal_status_get(h, st) == lib.PE_OK and not st.failed_errno:
            lib.pe_journal_sync(h, st.written, 5_000_000_000)
        with self._cv:
            while self._users:
                self._cv.wait(0.05)
            self._handle = ffi.NULL
        status = lib.pe_journal_close(h)
        err = ffi.errno
        with self._read_lock:
            for f in self._files.values():
                f.retired = True
                if f.users == 0:
                    os.close(f.fd)
            self._files.clear()
            self._bases = []
        if status in (lib.PE_ERR_IO, lib.PE_ERR_FAILED):  # a sync failed (maybe the last one)
            raise self.latch.trip(err, f"close journal {self.dir}")
        check(status, f"close journal {self.dir}", errno=err)

    # ------------------------------------------------------------------ reading
    def _open_file(self, base: int) -> _File | None:
        """Open file ``base`` for reading (read lock held); None if it does not exist."""
        path = self.path(base)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "open journal file", path=path) from exc
        try:
            version = file_version(os.pread(fd, FILE_HEADER_SIZE, 0), base, path)
        except BaseException:
            os.close(fd)
            raise
        return _File(base, fd, version)

    def _acquire(self, pos: int, refresh: bool = False) -> _File:
        """The file holding ``pos`` as far as the open files say (a newer file than the newest
        open one shows as a short read: the caller retries with ``refresh``), with a reference
        the caller releases (invariant 5)."""
        with self._read_lock:
            if refresh or not self._bases:
                self._refresh()
            i = bisect_right(self._bases, pos) - 1
            if i < 0:
                raise StorageError(_errno.ENOENT,
                                   f"journal position {pos} is in no journal file (deleted)")
            f = self._files[self._bases[i]]
            f.users += 1
            return f

    def holds(self, pos: int) -> bool:
        """Whether journal position ``pos`` (at most ``written()``) is in a journal file that is
        still there: False once reclaiming deleted its file (its data tiered or truncated)."""
        with self._read_lock:
            if not self._bases:
                self._refresh()
            bases = self._bases
            i = bisect_right(bases, pos) - 1
            if i < 0:
                return False
            if i == len(bases) - 1:
                self._refresh()  # a newer file may have been rolled to since
                bases = self._bases
                i = bisect_right(bases, pos) - 1
                if i == len(bases) - 1:
                    return True  # the file being written holds everything after its base
            f = self._files[bases[i]]
            if f.end is None:  # rolled: its size is final (files follow each other, no gap)
                try:
                    f.end = f.base + os.fstat(f.fd).st_size
                except OSError:
                    return False
            return pos < f.end

    def _refresh(self) -> None:
        """Open every journal file not open yet (read lock held)."""
        for base in self.files():
            if base not in self._files:
                f = self._open_file(base)
                if f is not None:
                    self._files[base] = f
        self._bases = sorted(self._files)

    def _release(self, f: _File) -> None:
        with self._read_lock:
            f.users -= 1
            if f.retired and f.users == 0:
                os.close(f.fd)

    def drop_files(self, bases: list[int]) -> None:
        """Delete journal files ``bases`` (all their data is truncated or tiered): unlink each,
        then fsync the directory once; reads in flight finish on an unlinked file, later ones
        raise StorageError. A failed unlink raises StorageError once the files unlinked before
        it are durably gone; a file already gone is not an error."""
        with self._read_lock:
            for base in bases:
                f = self._files.pop(base, None)
                if f is not None:
                    f.retired = True
                    if f.users == 0:
                        os.close(f.fd)
            self._bases = sorted(self._files)
        unlinked = 0
        try:
            for base in bases:
                try:
                    os.unlink(self.path(base))
                    unlinked += 1
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise storage_error(exc.errno or _errno.EIO, "delete journal file",
                                        path=self.path(base)) from exc
        finally:
            if unlinked:
                names = ", ".join(file_name(b) for b in bases)
                self.latch.fsync_dir(self.dir, f"delete journal files {names}")

    def read_section(self, pos: int, nbytes: int, start: int = 0, stop: int | None = None) -> bytes:
        """Bytes [start, stop) of the section whose ``nbytes`` of data begin at journal position
        ``pos``, read from its file and checked (invariant 5): the whole section is read and its
        CRC verified (format 2; format-1 sections have none)."""
        stop = nbytes if stop is None else stop
        for refresh in (False, True):
            f = self._acquire(pos, refresh)
            try:
                if f.version < 2:
                    return self._pread(f, pos + start, stop - start)
                head = self._pread(f, pos - SECTION_HEADER_SIZE, SECTION_HEADER_SIZE)
                data = self._pread(f, pos, nbytes)
                self._verify(f, pos, head, data)
                return data if start == 0 and stop == nbytes else data[start:stop]
            except _ShortRead as short:
                if refresh:
                    raise short.error() from None
            finally:
                self._release(f)
        raise AssertionError("unreachable")

    def read_section_into(self, pos: int, nbytes: int, buf: Any) -> None:
        """Read the whole section at ``pos`` (``nbytes``) straight into the writable ``buf``
        and check it (invariant 5)."""
        view = memoryview(buf).cast("B")
        if len(view) != nbytes:
            raise ValueError("buffer size differs from the section's")
        for refresh in (False, True):
            f = self._acquire(pos, refresh)
            try:
                got = 0
                while got < nbytes:
                    try:
                        k = os.preadv(f.fd, [view[got:]], pos - f.base + got)
                    except OSError as exc:
                        raise storage_error(exc.errno or _errno.EIO, "read journal file",
                                            path=file_name(f.base)) from exc
                    if k <= 0:
                        raise _ShortRead(f, pos, nbytes, got)
                    got += k
                if f.version >= 2:
                    self._verify(f, pos, self._pread(f, pos - SECTION_HEADER_SIZE, SECTION_HEADER_SIZE), view)
                return
            except _ShortRead as short:
                if refresh:
                    raise short.error() from None
            finally:
                self._release(f)

    @staticmethod
    def _pread(f: _File, pos: int, n: int) -> bytes:
        try:
            data = os.pread(f.fd, n, pos - f.base)
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "read journal file",
                                path=file_name(f.base)) from exc
        if len(data) != n:
            raise _ShortRead(f, pos, n, len(data))
        return data

    @staticmethod
    def _verify(f: _File, pos: int, head: bytes, data: Any) -> None:
        check_section(head, data, file_name(f.base), pos)

    def bases(self) -> list[int]:
        """The bases of the journal files there now, in order (a fresh look at the directory)."""
        with self._read_lock:
            self._refresh()
            return list(self._bases)


class _ShortRead(Exception):
    """A read found fewer bytes than the index says: a newer file may hold them (the reader
    looks again), else the file is cut short or the data was reclaimed."""

    def __init__(self, f: _File, pos: int, want: int, got: int) -> None:
        super().__init__(pos)
        self.path, self.pos, self.want, self.got = file_name(f.base), pos, want, got

    def error(self) -> CorruptDataError:
        return CorruptDataError(f"journal {self.path}: expected {self.want} bytes at position "
                                f"{self.pos}, read {self.got}")


def _roll_at_end(mm: mmap.mmap, base: int, size: int) -> int | None:
    """The end of a valid ROLL record that ends the file, or None."""
    at = size - RECORD_HEADER_SIZE
    if at < FILE_HEADER_SIZE:
        return None
    res = ffi.new("pe_scan_result *")
    buf = ffi.from_buffer(mm)
    lib.pe_scan(buf + at, RECORD_HEADER_SIZE, base + at, base + at, res)
    if res.n_records != 1 or mm[at + 16] != lib.PE_RECORD_ROLL:
        return None
    return base + size


def check_section(head: Any, data: Any, name: str, pos: int) -> None:
    """Check a format-2 section's ``data`` against its ``head`` (SECTION_HEADER_SIZE bytes):
    CorruptDataError unless its length and CRC-32C match (invariant 5)."""
    _, _, _, n, crc, _ = _SECTION.unpack(head)
    out = ffi.new("uint32_t *")
    lib.pe_crc32c(ffi.from_buffer(data), len(data), 0, out)
    if n != len(data) or out[0] != crc:
        raise CorruptDataError(
            f"journal {name}: the section of {len(data)} bytes at position {pos} "
            f"fails its check (header says {n} bytes, CRC {crc:#010x}, data has "
            f"{out[0]:#010x}): the file is damaged")


def file_version(head: bytes, base: int, path: str) -> int:
    """The journal format version of the file at ``path`` named ``base``, from its first
    FILE_HEADER_SIZE bytes; CorruptDataError if they are damaged or cut short."""
    status, version = _header(head, base)
    if status == lib.PE_ERR_FORMAT:
        check(status, f"journal file {path} header")
    if status != lib.PE_OK:
        raise CorruptDataError(f"journal file {path}: its header is damaged or cut short")
    return version


def _header(head: bytes, base: int) -> tuple[int, int]:
    """(PE_OK or a PE_ERR_* status, format version) of a journal file's first bytes."""
    out_base = ffi.new("uint64_t *")
    version = ffi.new("uint32_t *")
    status = lib.pe_file_header_parse(head, len(head), out_base, version)
    if status == lib.PE_OK and out_base[0] != base:
        return lib.PE_ERR_CORRUPT, 0
    return status, version[0] if status == lib.PE_OK else 0
