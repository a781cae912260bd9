"""The check of LMDB's ``data.mdb`` before LMDB maps it.

Owns: deciding, with plain reads of the file (never through a mapping), whether LMDB can map
``data.mdb`` without reading past its end. LMDB reads its pages through a read-only mapping, so a
page it reaches beyond the end of a truncated file kills the process with SIGBUS; no exception
can be raised for it afterwards.

The layout read here is LMDB 0.9's (lmdb.h and mdb.c; docs/format.md, "Metadata"): pages of
``psize`` bytes; pages 0 and 1 are meta pages (the one with the higher transaction id is
current), each holding the free-list database and the main database (root page numbers) and
the last page number used; every other page starts with a 16-byte header (page number, flags,
and for branch and leaf pages the end of the node-offset array; for overflow pages the number
of pages in the run).

Invariants:
  1. A file that is missing, empty or without a valid meta page is refused.
  2. ``last_pg`` in the meta page may name pages that were never written (pages allocated and
     freed in the same write transaction are not written out), so a file shorter than
     ``last_pg + 1`` pages is not by itself damage. Then every page LMDB can reach — the pages
     of both databases' trees, the named databases' trees, and the overflow runs of large
     values — is found by walking the trees from their roots; the file is refused if one of them
     lies past its end or a page on the way is not the page it should be.
  3. Nothing is written.

Thread-safety: a pure function of the file.
"""

from __future__ import annotations

import errno as _errno
import os
import struct

from .errors import CorruptDataError, PravegaEmbeddedError, storage_error

__all__ = ["check_lmdb_file"]

MDB_MAGIC = 0xBEEFC0DE
# MDB_meta after the 16-byte page header: magic u32, version u32, address u64, mapsize u64,
# then two MDB_db of 48 bytes (free list, main; md_pad of the first is the page size), then
# last_pg u64 and txnid u64
_META = struct.Struct("<16xII8x8x48s48sQQ")
# MDB_db: md_pad u32, md_flags u16, md_depth u16, branch, leaf, overflow pages, entries, root
_DB = struct.Struct("<IHHQQQQQ")
PAGE_HEADER_SIZE = 16
_PAGE_HEADER = struct.Struct("<QHHHH")  # pgno, pad, flags, lower, upper (overflow: pages u32)
_NODE_HEADER = struct.Struct("<HHHH")  # lo, hi, flags, key size
_NODE_HEADER_SIZE = 8
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_LEAF2 = 0x01, 0x02, 0x04, 0x20
_F_BIGDATA, _F_SUBDATA, _F_DUPDATA = 0x01, 0x02, 0x04
_P_INVALID = (1 << 64) - 1
_MAX_DEPTH = 64


class _Damaged(Exception):
    """A page of the tree is not what it should be (the walk stops)."""


def check_lmdb_file(path: str) -> None:
    """Refuse (CorruptDataError) a ``<path>/data.mdb`` that LMDB would misread or that would
    kill the process when mapped (module invariants); nothing is changed."""
    data = os.path.join(path, "data.mdb")
    try:
        with open(data, "rb") as f:
            _check(f, data)
    except PravegaEmbeddedError:
        raise  # (an OSError too)
    except FileNotFoundError:
        raise CorruptDataError(
            f"metadata file {data} is missing, but the store exists: it cannot be opened without "
            "it (restore meta/ from a backup); the store was not changed") from None
    except OSError as exc:
        raise storage_error(exc.errno or _errno.EIO, "read the metadata file", path=data) from exc


def _check(f, data: str) -> None:  # noqa: ANN001 - a binary file
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise CorruptDataError(f"metadata file {data} is empty, but the store exists: restore "
                               "meta/ from a backup; the store was not changed")
    meta = _current_meta(f)
    if meta is None:
        raise CorruptDataError(f"metadata file {data} has no valid LMDB meta page: it is damaged "
                               "or not an LMDB file; the store was not changed")
    psize, last_pg, roots = meta
    pages = size // psize
    if pages < 2:
        raise _cut_short(data, size, f"it must hold at least its two meta pages of {psize} bytes")
    if pages > last_pg:
        return  # every page the meta page can name is there (invariant 2)
    try:
        end = _reachable_end(f, psize, pages, roots)
    except _Damaged as exc:
        raise CorruptDataError(f"metadata file {data} is damaged: {exc}; restore meta/ from a "
                               "backup; the store was not changed") from None
    if end > pages:
        raise _cut_short(data, size, f"its trees reach page {end - 1} of {psize} bytes")


def _cut_short(data: str, size: int, why: str) -> CorruptDataError:
    return CorruptDataError(f"metadata file {data} is cut short: {size} bytes, but {why}; "
                            "restore meta/ from a backup; the store was not changed")


def _current_meta(f) -> tuple[int, int, list[int]] | None:  # noqa: ANN001
    """(page size, last page number, [free-list root, main root]) of the valid meta page with
    the higher transaction id, or None if neither is valid."""
    f.seek(0)
    head = f.read(_META.size)
    if len(head) < _META.size:
        return None
    found = []
    magic, _version, free, main, last_pg, txnid = _META.unpack(head)
    psize = _DB.unpack(free)[0]
    if magic != MDB_MAGIC or psize < 512 or psize & (psize - 1):
        return None
    found.append((txnid, last_pg, free, main))
    f.seek(psize)
    other = f.read(_META.size)
    if len(other) == _META.size:
        magic2, _v, free2, main2, last2, txn2 = _META.unpack(other)
        if magic2 == MDB_MAGIC:
            found.append((txn2, last2, free2, main2))
    _, last_pg, free, main = max(found)
    return psize, last_pg, [_DB.unpack(free)[7], _DB.unpack(main)[7]]


def _reachable_end(f, psize: int, pages: int, roots: list[int]) -> int:  # noqa: ANN001
    """One past the highest page number reachable from ``roots`` (invariant 2). Pages within
    the file are read and followed; a page past the end only raises the result."""
    end = 0
    todo = [(root, 0) for root in roots if root != _P_INVALID]
    seen: set[int] = set()
    while todo:
        pgno, depth = todo.pop()
        if pgno in seen:
            raise _Damaged(f"page {pgno} is reached twice")
        seen.add(pgno)
        if pgno < 2 or depth > _MAX_DEPTH:
            raise _Damaged(f"a tree names page {pgno} at depth {depth}")
        end = max(end, pgno + 1)
        if pgno >= pages:
            continue
        f.seek(pgno * psize)
        page = f.read(psize)
        got, _pad, flags, lower, upper = _PAGE_HEADER.unpack_from(page)
        if got != pgno or not flags & (_P_BRANCH | _P_LEAF) or flags & (_P_OVERFLOW | _P_LEAF2):
            raise _Damaged(f"page {pgno} is not a tree page (header names page {got}, flags {flags:#x})")
        if not PAGE_HEADER_SIZE <= lower <= upper <= psize:
            raise _Damaged(f"page {pgno} has a bad node array ({lower}, {upper})")
        for at in struct.unpack_from(f"<{(lower - PAGE_HEADER_SIZE) // 2}H", page, PAGE_HEADER_SIZE):
            if not upper <= at <= psize - _NODE_HEADER_SIZE:
                raise _Damaged(f"page {pgno} has a node at {at}")
            lo, hi, nflags, ksize = _NODE_HEADER.unpack_from(page, at)
            if flags & _P_BRANCH:
                todo.append((lo | hi << 16 | nflags << 32, depth + 1))
                continue
            data_at = at + _NODE_HEADER_SIZE + ksize
            if nflags & _F_DUPDATA:
                raise _Damaged(f"page {pgno} holds a duplicate-data node (not used by this store)")
            if nflags & _F_BIGDATA:
                end = max(end, _overflow_end(f, psize, pages, page, data_at, pgno))
            elif nflags & _F_SUBDATA:
                if data_at + _DB.size > psize:
                    raise _Damaged(f"page {pgno} has a cut named-database record")
                root = _DB.unpack_from(page, data_at)[7]
                if root != _P_INVALID:
                    todo.append((root, 0))
    return end


def _overflow_end(f, psize: int, pages: int, page: bytes, data_at: int, pgno: int) -> int:  # noqa: ANN001
    """One past the last page of the overflow run a large value's node names."""
    if data_at + 8 > psize:
        raise _Damaged(f"page {pgno} has a cut large-value node")
    first = struct.unpack_from("<Q", page, data_at)[0]
    if first < 2:
        raise _Damaged(f"page {pgno} names overflow page {first}")
    if first >= pages:
        return first + 1
    f.seek(first * psize)
    head = f.read(PAGE_HEADER_SIZE)
    got, _pad, flags = struct.unpack_from("<QHH", head)
    n = struct.unpack_from("<I", head, 12)[0]
    if got != first or not flags & _P_OVERFLOW or n < 1:
        raise _Damaged(f"overflow page {first} (named by page {pgno}) is not an overflow page")
    return first + n
