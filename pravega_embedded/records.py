"""Journal records besides EVENTS: BYTES (raw bytes of one segment) and MERGE (sections spliced
into segments by reference). Building MERGE payloads and parsing both back.

Owns: the byte layout of the BYTES and MERGE payloads (docs/format.md, "Journal records"). The
record header around them, and a BYTES payload (a section header and the data, appended from
the caller's buffer by ``pe_journal_append_section``), are the C journal's (csrc/journal.c); a
MERGE payload goes through ``pe_journal_append_record``.

Invariants:
  1. A parser of bytes from disk raises CorruptDataError for any inconsistency (counts that run
     past the record, trailing bytes, a MERGE reference that is not before the record itself),
     never another exception and never a partial result.
  2. BYTES data starts ``BYTES_DATA_OFFSET`` bytes after the record's position (journal format
     3; 56 in format 2, which has no write time; 48 in format 1), so the journal position of
     its first data byte is known before the record is written.

Thread-safety: pure functions.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from ._native import lib
from .errors import CorruptDataError

__all__ = [
    "BytesRecord", "MergeRecord", "MergePart", "build_merge",
    "parse_bytes_record", "parse_merge_record", "BYTES_DATA_OFFSET", "NO_SEQUENCE",
]

_HDR = lib.PE_RECORD_HEADER_SIZE
_BYTES = {1: struct.Struct("<QQII"),  # segment uid, segment offset, events starting here, bytes
          2: struct.Struct("<QQIIII"),  # ... and the data's CRC32C, reserved (a section header)
          3: struct.Struct("<QQQIIII")}  # the write time (ns), then a section header
_MERGE = struct.Struct("<QQ16sIH")  # timestamp, last_seq, txn id, n_parts, writer id length
_PART = struct.Struct("<QQII")  # parent uid, parent offset, n_refs, reserved (0)
_REF = struct.Struct("<QII")  # journal position, bytes, events starting in them
BYTES_DATA_OFFSET = lib.PE_BYTES_DATA_OFFSET
NO_SEQUENCE = (1 << 64) - 1  # a MERGE that carries no writer sequence (a transaction's)
MAX_REFS = 1 << 24


@dataclass(frozen=True, slots=True)
class BytesRecord:
    """A parsed BYTES record: ``n_bytes`` raw bytes of segment ``segment_uid`` (0: staged data
    not attached to a segment yet) at ``segment_offset``, the first at journal ``data_pos``,
    appended at ``timestamp_ns`` (0: unknown, a file of journal format 1 or 2)."""

    pos: int
    end: int
    segment_uid: int
    segment_offset: int
    n_events: int
    n_bytes: int
    data_pos: int
    timestamp_ns: int = 0


@dataclass(frozen=True, slots=True)
class MergePart:
    """The sections a MERGE appends to one segment: ``refs`` = (journal position, bytes,
    events), in order, starting at ``segment_offset``."""

    segment_uid: int
    segment_offset: int
    refs: tuple[tuple[int, int, int], ...]

    @property
    def n_bytes(self) -> int:
        return sum(r[1] for r in self.refs)


@dataclass(frozen=True, slots=True)
class MergeRecord:
    """A parsed MERGE record: a committed transaction (``txn_id``) or a large event (the
    writer's ``last_seq``)."""

    pos: int
    end: int
    timestamp_ns: int
    last_seq: int
    txn_id: uuid.UUID | None
    writer_id: str
    parts: tuple[MergePart, ...]


def build_merge(timestamp_ns: int, last_seq: int, txn_id: uuid.UUID | None, writer_id: bytes,
                parts: list[tuple[int, int, list[tuple[int, int, int]]]]) -> bytes:
    """A MERGE payload: ``parts`` = [(segment uid, segment offset, [(pos, bytes, events)])]."""
    out = [_MERGE.pack(timestamp_ns, last_seq, b"\0" * 16 if txn_id is None else txn_id.bytes,
                       len(parts), len(writer_id)), writer_id]
    for uid, offset, refs in parts:
        out.append(_PART.pack(uid, offset, len(refs), 0))
        out.extend(_REF.pack(*r) for r in refs)
    return b"".join(out)


def parse_bytes_record(buf: bytes | memoryview, off: int, pos: int, total: int,
                       version: int = lib.PE_FORMAT_VERSION) -> BytesRecord:
    """Parse the BYTES record whose header starts at ``buf[off]`` (CRC already checked) in a
    journal file of format ``version``."""
    head = _BYTES.get(version)
    if head is None:
        raise CorruptDataError(f"journal record at {pos}: unknown journal format {version}")
    data_off = _HDR + head.size
    if off < 0 or total < data_off or off + total > len(buf):
        raise CorruptDataError(f"journal record at {pos}: too short for a BYTES record")
    fields = head.unpack_from(buf, off + _HDR)
    ts = fields[0] if version >= 3 else 0
    uid, soff, nev, nbytes = fields[1:5] if version >= 3 else fields[:4]
    if data_off + nbytes != total:
        raise CorruptDataError(
            f"journal record at {pos}: BYTES record says {nbytes} bytes but holds "
            f"{total - data_off}"
        )
    if nev > 1:
        raise CorruptDataError(f"journal record at {pos}: BYTES record starts {nev} events (at most 1)")
    return BytesRecord(pos, pos + total, uid, soff, nev, nbytes, pos + data_off, ts)


def parse_merge_record(buf: bytes | memoryview, off: int, pos: int, total: int) -> MergeRecord:
    """Parse the MERGE record whose header starts at ``buf[off]`` (CRC already checked)."""
    if off < 0 or total < _HDR + _MERGE.size or off + total > len(buf):
        raise CorruptDataError(f"journal record at {pos}: too short for a MERGE record")
    end = off + total
    ts, seq, tid, nparts, wlen = _MERGE.unpack_from(buf, off + _HDR)
    p = off + _HDR + _MERGE.size
    if p + wlen > end:
        raise CorruptDataError(f"journal record at {pos}: writer id runs past the record end")
    wid = bytes(buf[p : p + wlen]).decode("utf-8", "surrogateescape")
    p += wlen
    parts = []
    for _ in range(nparts):
        if p + _PART.size > end:
            raise CorruptDataError(f"journal record at {pos}: MERGE part runs past the record end")
        uid, soff, nrefs, _ = _PART.unpack_from(buf, p)
        p += _PART.size
        if nrefs > MAX_REFS or p + nrefs * _REF.size > end:
            raise CorruptDataError(f"journal record at {pos}: MERGE references run past the record end")
        refs = []
        for _ in range(nrefs):
            rpos, rbytes, rev = _REF.unpack_from(buf, p)
            p += _REF.size
            if rpos + rbytes > pos or rbytes == 0:
                raise CorruptDataError(
                    f"journal record at {pos}: MERGE references {rbytes} bytes at {rpos}, "
                    "which is not data written before it"
                )
            refs.append((rpos, rbytes, rev))
        parts.append(MergePart(uid, soff, tuple(refs)))
    if p != end:
        raise CorruptDataError(f"journal record at {pos}: {end - p} trailing bytes")
    txn = None if tid == b"\0" * 16 else uuid.UUID(bytes=bytes(tid))
    return MergeRecord(pos, pos + total, ts, seq, txn, wid, tuple(parts))
