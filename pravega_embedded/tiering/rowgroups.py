"""Row groups of a tier-2 file read with every page's checksum checked, then decoded by pyarrow.

Owns: where a row group's column chunks lie in its file (``GroupSpan``, from the footer) and
reading them: the bytes are read into memory, the CRC-32 of every page is checked in C
(``pe_parquet_check_pages``: PCLMULQDQ, several times faster than the check pyarrow does
itself, which took about a tenth of a catch-up read), and pyarrow decodes those same bytes
with its own check off.

Invariants:
  1. A row group is decoded only from bytes whose every page was checked: the buffer pyarrow
     reads is the one the check ran over, and nothing writes to its group's range after.
  2. The buffer is addressed by file position; pyarrow is given the file's footer as metadata
     and a view of the buffer that ends where the group's last column chunk ends, so it reads
     only the group's chunks, all of which were filled and checked (the bytes before the
     group are never touched: allocated, not filled, so virtual memory costs nothing for them).
     It would pad a chunk past its end for files of some old writers: files not written by
     pyarrow are refused (``parquetfile._check``).
  3. The spans come from the footer, data from disk, parsed in C (``pe_parquet_footer_groups``,
     never pyarrow's column-chunk accessors, which abort the process on some damaged footers):
     each group has the layout's columns, chunks lie in the file before its footer, in order,
     and neither chunks nor groups overlap; else CorruptDataError, before any allocation.

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

__all__ = ["GroupSpan", "file_size", "group_spans", "read_footer", "read_group"]

_MAGIC_SIZE = 4  # "PAR1" before the first column chunk


@dataclass(frozen=True)
class GroupSpan:
    """Where row group ``index``'s column chunks lie: ``chunks`` holds (start, length) of each,
    flattened; ``lo``/``hi`` bound them all. ``first``/``last``: the ``offset`` column's min and
    max from the footer's statistics (None without them)."""

    index: int
    lo: int
    hi: int
    chunks: tuple[int, ...]
    first: int | None = None
    last: int | None = None


def file_size(fh: object, where: str) -> int:
    """The size of the open file ``fh`` (StorageError if the file system fails)."""
    try:
        return int(fh.seek(0, 2))  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - every file-system failure is translated here
        raise tier2_error(exc, "read a tier-2 file", url=where) from exc


def read_footer(fh: object, size: int, where: str) -> bytes:
    """The footer bytes of the open file ``fh`` of ``size`` bytes (``footer length | PAR1`` at
    its end): CorruptDataError if they are not there, StorageError if reading fails."""
    tail = _pread(fh, size - 8, 8, where) if size >= 12 else b""
    n = int.from_bytes(tail[:4], "little") if len(tail) == 8 else -1
    if tail[4:] != b"PAR1" or not 0 < n <= size - 12:
        raise CorruptDataError(f"tier-2 file {where} does not end in a Parquet footer of its "
                               f"{size} bytes: it was cut short, damaged or replaced")
    return _pread(fh, size - 8 - n, n, where)


def group_spans(footer: bytes, groups: int, columns: int, size: int,
                where: str) -> tuple[GroupSpan, ...]:
    """Each row group's span in a file of ``size`` bytes whose footer is ``footer`` (pyarrow
    counted ``groups`` row groups of ``columns`` columns in it), parsed in C without trusting
    it (invariant 3): chunks inside the file, in order, not overlapping, in groups that do not
    overlap either; else CorruptDataError. pyarrow's own accessors of a column chunk's metadata
    abort the process on some damaged footers, so they are not used."""
    cap = max(groups, 1)
    out = ffi.new("pe_parquet_group[]", cap)
    flat = ffi.new("uint64_t[]", cap * columns * 2)
    n = ffi.new("uint32_t *")
    status = lib.pe_parquet_footer_groups(footer, len(footer), columns, out, cap, flat, n)
    if status == lib.PE_ERR_CORRUPT or (status == lib.PE_OK and n[0] != groups):
        raise CorruptDataError(f"tier-2 file {where}: its footer's row groups do not parse as "
                               "this layout's (a column chunk missing, extra or damaged): it is damaged")
    check(status, f"read the footer of tier-2 file {where}")
    spans, prev_end, limit = [], _MAGIC_SIZE, size - 8 - len(footer)
    for i in range(groups):
        chunks = tuple(flat[2 * columns * i:2 * columns * (i + 1)])
        starts, lens = chunks[0::2], chunks[1::2]
        for j, (start, length) in enumerate(zip(starts, lens)):
            if start < prev_end or start + length > limit:
                raise CorruptDataError(
                    f"tier-2 file {where}: its footer puts column {j} of row group {i} at bytes "
                    f"[{start}, {start + length}), outside the file's {size} bytes, before the "
                    "chunk it follows or over it: it is damaged")
            prev_end = start + length
        g = out[i]
        first, last = (int(g.first), int(g.last)) if g.has_stats else (None, None)
        spans.append(GroupSpan(i, starts[0], prev_end, chunks, first, last))
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
    # pyarrow sees the buffer up to the span's end only: nothing it reads (a chunk, or the
    # padding it adds after chunks of some old writers, refused by the footer check) lies
    # past what was read and checked
    view = buf if buf.size == span.hi else buf.slice(0, span.hi)
    return pq.ParquetFile(pa.BufferReader(view), metadata=md).read_row_group(span.index)


def _fileno(fh: object) -> int | None:
    """The descriptor of a local file opened by pyarrow (read with pread in C), else None."""
    if isinstance(fh, pa.OSFile):
        try:
            return int(fh.fileno())
        except (OSError, ValueError):
            return None
    return None


def _pread(fh: object, pos: int, n: int, where: str) -> bytes:
    """``n`` bytes at ``pos`` of a file-like object (StorageError if reading fails)."""
    buf = bytearray(n)
    _read_into(fh, memoryview(buf), pos, where)
    return bytes(buf)


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
