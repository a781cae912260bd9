"""Row groups of a tier-2 file read with every page's checksum checked, then decoded by pyarrow.

Owns: where a row group's column chunks lie in its file (``GroupSpan``, from the footer) and
reading them: the bytes are read into memory, the CRC-32 of every page is checked in C
(``pe_parquet_check_pages``: PCLMULQDQ, several times faster than the check pyarrow does
itself, which took about a third of a catch-up read), and pyarrow decodes those same bytes
with its own check off.

Invariants:
  1. A row group is decoded only from bytes whose every page was checked: the buffer pyarrow
     reads is the one the check ran over, and nothing writes to it after (no window in which
     the file could change between check and decode).
  2. The buffer is addressed by file position (its length is the span's end): pyarrow is given
     the file's footer as metadata and reads only the group's column chunks, all of which were
     filled; the bytes before the span are never touched (allocated, not filled, so virtual
     memory costs nothing for them).
  3. A span comes from the footer, which is data from disk: chunk positions outside the file
     are CorruptDataError before any allocation.

Thread-safety: pure functions of their arguments. A local file is read with ``pread`` in the C
call (threads may share a handle); another file system's handle is read with seek + readinto,
so the caller serializes reads of one such handle (parquetfile does: one handle per thread, or
``OpenedFile.lock``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from .._native import check, ffi, lib
from ..errors import CorruptDataError, tier2_error

__all__ = ["GroupSpan", "group_spans", "read_group"]

_MAGIC_SIZE = 4  # "PAR1" before the first column chunk


@dataclass(frozen=True)
class GroupSpan:
    """Where row group ``index``'s column chunks lie: ``chunks`` holds (start, length) of each,
    flattened; ``lo``/``hi`` bound them all."""

    index: int
    lo: int
    hi: int
    chunks: tuple[int, ...]


def group_spans(md: pq.FileMetaData, size: int, where: str) -> tuple[GroupSpan, ...]:
    """Each row group's span in a file of ``size`` bytes with footer ``md`` (invariant 3)."""
    spans = []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        chunks: list[int] = []
        for j in range(rg.num_columns):
            col = rg.column(j)
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                start = min(start, col.dictionary_page_offset)
            length = col.total_compressed_size
            if start < _MAGIC_SIZE or length < 0 or start + length > size:
                raise CorruptDataError(
                    f"tier-2 file {where}: its footer puts column {j} of row group {i} at bytes "
                    f"[{start}, {start + length}), outside the file's {size} bytes: it is damaged")
            chunks += (start, length)
        starts, ends = chunks[0::2], [s + n for s, n in zip(chunks[0::2], chunks[1::2])]
        if any(starts[k] < ends[k - 1] for k in range(1, len(starts))):
            raise CorruptDataError(f"tier-2 file {where}: its footer has column chunks of row "
                                   f"group {i} out of order or overlapping: it is damaged")
        lo, hi = (starts[0], ends[-1]) if starts else (_MAGIC_SIZE, _MAGIC_SIZE)
        spans.append(GroupSpan(i, lo, hi, tuple(chunks)))
    return tuple(spans)


def read_group(fh: object, md: pq.FileMetaData, span: GroupSpan, where: str,
               buf: pa.Buffer | None = None) -> pa.Table:
    """Row group ``span.index`` of the open file ``fh`` (footer ``md``), its pages checked
    (invariants 1, 2): CorruptDataError naming the damaged page, StorageError if reading
    fails. pyarrow's own errors while decoding propagate (the caller translates them)."""
    if buf is None:
        buf = pa.allocate_buffer(max(span.hi, 1))
    pages = ffi.new("uint32_t *")
    bad = ffi.new("uint64_t *")
    chunks = ffi.new("uint64_t[]", span.chunks)
    n = len(span.chunks) // 2
    target = ffi.from_buffer("uint8_t[]", buf, require_writable=True)
    fd = _fileno(fh)
    if fd is not None:
        status = lib.pe_parquet_read_pages(fd, target, buf.size, span.lo, span.hi, chunks, n,
                                          pages, bad)
        err = ffi.errno
    else:
        _read_into(fh, memoryview(buf)[span.lo:span.hi], span.lo, where)
        status = lib.pe_parquet_check_pages(target, buf.size, chunks, n, pages, bad)
        err = 0
    if status == lib.PE_ERR_CORRUPT:
        raise CorruptDataError(
            f"tier-2 file {where}: the page at byte {bad[0]} of row group {span.index} is damaged "
            "(its checksum does not match its data, its header does not parse, or the file ends "
            "before it): the file was damaged on disk or replaced; restore it from a copy")
    if status == lib.PE_ERR_IO:
        raise tier2_error(OSError(err, f"reading bytes {span.lo}..{span.hi}"),
                          "read a tier-2 file", url=where)
    check(status, f"check the pages of tier-2 file {where}")
    return pq.ParquetFile(pa.BufferReader(buf), metadata=md).read_row_group(span.index)


def _fileno(fh: object) -> int | None:
    """The descriptor of a local file opened by pyarrow (read with pread in C), else None."""
    if isinstance(fh, pa.OSFile):
        try:
            return int(fh.fileno())
        except (OSError, ValueError):
            return None
    return None


def _read_into(fh: object, view: memoryview, pos: int, where: str) -> None:
    """Fill ``view`` from position ``pos`` of a file-like object (fsspec's, pyarrow's)."""
    try:
        fh.seek(pos)  # type: ignore[attr-defined]
        done = 0
        while done < len(view):
            got = fh.readinto(view[done:])  # type: ignore[attr-defined]
            if not got:
                raise CorruptDataError(
                    f"tier-2 file {where} ends at byte {pos + done}, before its footer says its "
                    f"row group ends ({pos + len(view)}): it was truncated or replaced")
            done += got
    except CorruptDataError:
        raise
    except Exception as exc:  # noqa: BLE001 - every file-system failure is translated here
        raise tier2_error(exc, "read a tier-2 file", url=where) from exc
