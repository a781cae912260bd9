"""Tier-2 data files: one Parquet file per offset range of a segment, written and read back.

Owns: turning a segment's events (offsets, keys, payloads, write times) into one Parquet file in
the layout's place and form, and reading an offset range of such a file back as Arrow.

Invariants:
  1. A file holds the events of ``[first, end)`` of one segment, sorted by ``offset``, in
     ``layout.SCHEMA``, zstd-compressed, with statistics on ``layout.STATISTICS_COLUMNS``, a
     dictionary on ``layout.DICTIONARY_COLUMNS`` only and page checksums, in row groups of
     at most ``layout.ROW_GROUP_ROWS`` rows and about ``layout.ROW_GROUP_BYTES`` of events, and
     its range and event count in the file's key-value metadata ``layout.PARQUET_METADATA_KEY``.
     Its row groups are encoded side by side, each as a file of its own, and joined
     (``footer.join_footers``): the file is byte for byte the one ``pq.ParquetWriter`` writes
     with the same options, one group after the other.
  2. Reading checks the file against the manifest's ``TieredFile``: the same range and event
     count in its metadata, else CorruptDataError; only row groups whose offset statistics
     reach the asked range are read, each with the CRC-32 of every page checked before pyarrow
     decodes those same bytes (``rowgroups.read_group``).

Thread-safety: pure functions of their arguments; the target is shared safely (target.py). A
write encodes its row groups in ``_ENCODERS`` threads of its own (started by the writing thread,
so they inherit its CPU priority); the writing thread alone writes to the sink. A read of
several row groups decodes them side by side in a process-wide pool of reader threads
(``_reader_pool``), each row group through its own handle, all into one buffer addressed by
file position (the groups' byte ranges are disjoint).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import CorruptDataError, InvalidConfigurationError, PravegaEmbeddedError, tier2_error
from .layout import (COMPRESSION, DICTIONARY_COLUMNS, LAYOUT_VERSION, PARQUET_METADATA_KEY, ROW_GROUP_BYTES,
                     ROW_GROUP_ROWS, SCHEMA, STATISTICS_COLUMNS, file_name, segment_dir)
from .footer import MAGIC, add_key_value, decode, encode, join_footers
from .manifest import TieredFile
from .rowgroups import GroupSpan, file_size, group_spans, read_footer, read_group
from .target import Tier2Target

LOG = logging.getLogger("pravega_embedded.tiering")
_READERS = max(2, min(4, os.cpu_count() or 1))  # row groups of one read decoded at once
_ENCODERS = max(2, min(4, os.cpu_count() or 1))  # row groups of one write encoded at once

__all__ = ["SegmentRows", "rows_table", "split_groups", "write_segment_file", "read_segment_file",
           "iter_segment_file", "group_starts", "as_slice_table",
           "verify_segment_file", "file_rel", "OpenedFile"]


class SegmentRows:
    """The events of ``[first, end)`` of a segment as the row groups of one file: tables in
    ``layout.SCHEMA`` sorted by ``offset`` (``write_time`` µs since the epoch, UTC), produced
    lazily (the copier reads the journal while the previous group is encoded)."""

    __slots__ = ("first", "end", "groups")

    def __init__(self, first: int, end: int, groups: Iterable[pa.Table]) -> None:
        if not 0 <= first < end:
            raise InvalidConfigurationError(f"a tier-2 file needs a range first < end, not [{first}, {end})")
        self.first, self.end, self.groups = first, end, groups

    @classmethod
    def from_table(cls, table: pa.Table, end: int) -> "SegmentRows":
        """Rows from one table (split into row groups here)."""
        if table.num_rows == 0:
            raise InvalidConfigurationError("a tier-2 file needs one or more events")
        return cls(table.column("offset")[0].as_py(), end, split_groups(table))

    @classmethod
    def from_lists(cls, offsets: Sequence[int], keys: Sequence[str | None], events: Sequence[bytes],
                   write_us: Sequence[int], end: int) -> "SegmentRows":
        """Rows from one Python list per column (``write_us``: µs since the epoch)."""
        return cls.from_table(rows_table(offsets, keys, events, write_us), end)


def rows_table(offsets: Sequence[int], keys: Sequence[str | None], events: Sequence[bytes],
               write_us: Sequence[int]) -> pa.Table:
    """A table in ``SCHEMA`` from one Python list per column (``write_us``: µs since the epoch)."""
    n = len(offsets)
    if not (len(keys) == len(events) == len(write_us) == n) or n == 0:
        raise InvalidConfigurationError("a tier-2 file needs one or more events, with one "
                                        "offset, key, payload and write time each")
    return pa.table(
        [pa.array(offsets, pa.int64()), pa.array(keys, pa.string()), pa.array(events, pa.binary()),
         pa.array(write_us, pa.int64()).cast(SCHEMA.field("write_time").type)],
        schema=SCHEMA)


def split_groups(table: pa.Table) -> Iterator[pa.Table]:
    """``table`` in row groups of at most ``ROW_GROUP_ROWS`` rows and about ``ROW_GROUP_BYTES``
    bytes of events (at least one row each)."""
    n = table.num_rows
    per_row = max(1, table.column("event").nbytes // max(1, n))
    step = max(1, min(ROW_GROUP_ROWS, ROW_GROUP_BYTES // per_row))
    for i in range(0, n, step):
        yield table.slice(i, step)


def file_rel(scope: str, stream: str, f: TieredFile) -> str:
    """The file's path relative to the tier-2 root."""
    return f"{segment_dir(scope, stream, f.segment_id)}/{f.name}"


def write_segment_file(target: Tier2Target, scope: str, stream: str, segment_id: int,
                       rows: SegmentRows) -> TieredFile:
    """Write ``rows`` as one file of ``segment_id`` (invariant 1), published complete and only
    if no file of that name is there (``Tier2Target.put_streamed``, AlreadyExistsError); returns its
    manifest entry. Row groups are encoded side by side in helper threads while the next is
    produced, and written in order as each is ready (``_encoded_parts``)."""
    name = file_name(rows.first, rows.end)  # checks the range
    rel = f"{segment_dir(scope, stream, segment_id)}/{name}"
    count = _Count(rows.first, rows.end, f"tier-2 file {target.where(rel)}")

    def write(sink: pa.NativeFile, written: Callable[[], None]) -> None:
        sink.write(MAGIC)
        footers, starts = [], []
        with closing(_encoded_parts(rows.groups, count)) as parts:
            for part in parts:
                body, footer = _body_and_footer(part)
                starts.append(sink.tell())
                sink.write(body)
                footers.append(decode(footer))
                written()
        count.check()
        meta = {"format": LAYOUT_VERSION, "scope": scope, "stream": stream,
                "segment": segment_id, "first": rows.first, "end": rows.end,
                "events": count.events}
        joined = add_key_value(join_footers(footers, starts), PARQUET_METADATA_KEY,
                               json.dumps(meta, sort_keys=True))
        data = encode(joined)
        sink.write(data)
        sink.write(len(data).to_bytes(4, "little"))
        sink.write(MAGIC)

    # exclusive: a file of that name in tier 2 is not ours to replace (a crashed copy's file is
    # deleted before its range is copied again, copier invariant 2); on a local folder the row
    # groups go straight to the staged file as they are encoded
    size = target.put_streamed(rel, write, exclusive=True)
    return TieredFile(segment_id, rows.first, rows.end, count.events, size, count.lo, count.hi)


def _encoded_parts(groups: Iterable[pa.Table], count: "_Count") -> Iterator[pa.Buffer]:
    """Each of ``groups`` as a Parquet file of one row group, in order, encoded ``_ENCODERS``
    at a time in helper threads while the next groups are produced (pyarrow and the C frame
    parser release the GIL: every core works; invariant 1). A group is handed on as soon as it
    and those before it are encoded (so it goes to the disk early); at most ``_ENCODERS``
    groups are encoded at once and one more waits for a helper, while one more is written."""
    with ThreadPoolExecutor(_ENCODERS, thread_name_prefix="pe-parquet") as pool:
        pending: deque[Future[pa.Buffer]] = deque()
        try:
            for group in groups:
                count.add(group)
                # queued before the wait for the oldest: a helper that finishes takes it at once
                pending.append(pool.submit(_encode_part, group))
                while len(pending) > _ENCODERS or (pending and pending[0].done()):
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def _encode_part(group: pa.Table) -> pa.Buffer:
    """``group`` as a Parquet file of one row group, in memory, in the layout's options: into a
    buffer of ``_part_bound`` bytes (virtual memory: only the pages written are ever touched,
    and nothing is copied as it grows), or, should the encoding not fit, a growing one."""
    buf = pa.allocate_buffer(_part_bound(group))
    sink = pa.FixedSizeBufferWriter(buf)
    try:
        _encode_into(sink, group)
    except OSError:  # out of bounds: more than the bound (not seen; a safety net)
        grown = pa.BufferOutputStream()
        _encode_into(grown, group)
        return grown.getvalue()
    return buf.slice(0, sink.tell())


def _part_bound(group: pa.Table) -> int:
    """More bytes than ``group`` takes as Parquet: its plain values, zstd's worst case on top,
    and a dictionary page of every column (at most 1 MiB each; only DICTIONARY_COLUMNS try
    one) before a fallback to plain."""
    n = group.nbytes
    return n + n // 64 + group.num_columns * (2 << 20) + (1 << 20)


def _encode_into(sink: pa.NativeFile, group: pa.Table) -> None:
    # no page index: its page locations are file positions inside the body, which the join
    # of the footers cannot move (footer.join_footers refuses a part that has one)
    with pq.ParquetWriter(sink, SCHEMA, compression=COMPRESSION,
                          write_statistics=list(STATISTICS_COLUMNS),
                          use_dictionary=list(DICTIONARY_COLUMNS),
                          write_page_checksum=True, write_page_index=False) as writer:
        writer.write_table(group, group.num_rows)


def _body_and_footer(part: pa.Buffer) -> tuple[memoryview, bytes]:
    """The column chunks of a Parquet file in memory (what lies between its leading magic and
    its footer) and its footer."""
    view = memoryview(part)
    n = len(view)
    size = int.from_bytes(view[n - 8:n - 4], "little") if n >= 12 else -1
    if (n < 12 or view[:4] != MAGIC or view[n - 4:] != MAGIC
            or not 0 < size <= n - 12):
        raise CorruptDataError(f"pyarrow encoded a row group as {n} bytes that are no Parquet file")
    return view[4:n - 8 - size], bytes(view[n - 8 - size:n - 8])


class _Count:
    """Checks the row groups of one file as they go by: offsets ascending from ``first``, all
    before ``end``; counts the events and the range of write times."""

    def __init__(self, first: int, end: int, what: str) -> None:
        self.first, self.end, self.what = first, end, what
        self.events = 0
        self.last = -1
        self.lo: int = 0
        self.hi: int = 0

    def add(self, group: pa.Table) -> None:
        if group.num_rows == 0:
            return
        if not group.schema.equals(SCHEMA, check_metadata=False):
            raise InvalidConfigurationError(f"tier-2 rows must have the schema {SCHEMA}, not {group.schema}")
        offs = group.column("offset")
        lo_off, hi_off = offs[0].as_py(), offs[-1].as_py()
        if (self.events == 0 and lo_off != self.first) or lo_off <= self.last or hi_off >= self.end:
            raise CorruptDataError(f"{self.what}: rows at offsets {lo_off}..{hi_off} do not follow "
                                   f"offset {self.last} within [{self.first}, {self.end})")
        lo, hi = pc.min_max(group.column("write_time").cast(pa.int64())).values()
        self.lo = lo.as_py() if self.events == 0 else min(self.lo, lo.as_py())
        self.hi = hi.as_py() if self.events == 0 else max(self.hi, hi.as_py())
        self.events += group.num_rows
        self.last = hi_off

    def check(self) -> None:
        if self.events == 0:
            raise InvalidConfigurationError(f"{self.what}: a tier-2 file needs one or more events")


def as_slice_table(table: pa.Table, segment_id: int, timed: bool) -> pa.Table:
    """A file's rows (``read_segment_file``) in a slice's schema: ``arrow.SCHEMA``, or with
    ``timed`` ``arrow.TIMED_SCHEMA`` (write_time last)."""
    from ..arrow import SCHEMA as SLICE_SCHEMA
    from ..arrow import TIMED_SCHEMA, WRITE_TIME
    n = table.num_rows
    cols = [table.column("event").cast(pa.large_binary()),
            table.column("routing_key").cast(pa.large_string()),
            pa.repeat(pa.scalar(segment_id, pa.int64()), n), table.column("offset")]
    if timed:
        cols.append(table.column("write_time").cast(WRITE_TIME))
    return pa.Table.from_arrays(cols, schema=TIMED_SCHEMA if timed else SLICE_SCHEMA)


def read_segment_file(target: Tier2Target, scope: str, stream: str, f: TieredFile,
                      start: int = 0, end: int | None = None) -> pa.Table:
    """The events of ``f`` with ``start <= offset < end`` (invariant 2), in ``SCHEMA``, each
    page's checksum checked (``rowgroups.read_group``); several row groups are decoded side by
    side (``_read_parallel``)."""
    rel = file_rel(scope, stream, f)
    where = target.where(rel)
    with _opened(target, rel) as fh:
        with _translated(where, "read a tier-2 file"):
            md, spans = _footer(fh, f, scope, stream, where)
            chosen = [spans[i] for i in _groups(spans, start, end)]
            if len(chosen) > 1:
                table = _read_parallel(target, rel, md, chosen)
            else:
                table = read_group(fh, md, chosen[0], where) if chosen else SCHEMA.empty_table()
    return _within(table, start <= f.first and (end is None or end >= f.end), start, end)


def iter_segment_file(target: Tier2Target, scope: str, stream: str, f: TieredFile,
                      start: int = 0, end: int | None = None) -> Iterator[pa.Table]:
    """``read_segment_file``'s rows a row group at a time, in order, read and checked as the
    consumer asks for them: one group in memory, and a consumer that works on each (Spark
    sending it to the JVM) overlaps its work with the reads."""
    rel = file_rel(scope, stream, f)
    where = target.where(rel)
    with _opened(target, rel) as fh:
        with _translated(where, "read a tier-2 file"):
            md, spans = _footer(fh, f, scope, stream, where)
        for i in _groups(spans, start, end):
            s = spans[i]
            with _translated(where, "read a tier-2 file"):
                table = read_group(fh, md, s, where)
            whole = (s.first is not None and s.last is not None and s.first >= start
                     and (end is None or s.last < end))
            yield _within(table, whole, start, end)


@contextmanager
def _translated(where: str, what: str) -> Iterator[None]:
    """pyarrow's and the file system's failures while reading an open file as the library's
    errors (``_parse_error``); the library's own, and running out of memory, as they are."""
    try:
        yield
    except (PravegaEmbeddedError, MemoryError):
        raise  # CorruptDataError, a StorageError of opening a handle (_opened), no memory
    except Exception as exc:  # noqa: BLE001 - translated in one place
        raise _parse_error(exc, where, what) from exc


def _footer(fh: Any, f: TieredFile, scope: str, stream: str,
            where: str) -> tuple[pq.FileMetaData, tuple[GroupSpan, ...]]:
    """The open file's footer, checked against ``f`` (``_check``), and its row groups' spans."""
    pf = pq.ParquetFile(fh)
    _check(pf, f, scope, stream, where)
    md = pf.metadata
    return md, _spans(fh, md, where)


def _within(table: pa.Table, whole: bool, start: int, end: int | None) -> pa.Table:
    """``table``'s rows with ``start <= offset < end`` (all of them when ``whole``)."""
    table = table.replace_schema_metadata(None)
    if whole:
        return table
    offs = table.column("offset")
    mask = pc.greater_equal(offs, start)
    if end is not None:
        mask = pc.and_(mask, pc.less(offs, end))
    return table.filter(mask)


def group_starts(target: Tier2Target, scope: str, stream: str, f: TieredFile) -> tuple[int, ...]:
    """The first offset of each row group of ``f`` after its first, from its footer (checked
    against ``f``): where a range of the file may be split so each piece reads whole groups.
    Empty for a file whose groups have no offset statistics."""
    rel = file_rel(scope, stream, f)
    where = target.where(rel)
    with _opened(target, rel) as fh:
        with _translated(where, "read a tier-2 file's footer"):
            spans = _footer(fh, f, scope, stream, where)[1]
    firsts = [s.first for s in spans]
    if any(x is None for x in firsts):
        return ()
    return tuple(x for x in firsts[1:] if x is not None and f.first < x < f.end)


class OpenedFile:
    """A data file kept open for reading its row groups one at a time (cold reads): its footer
    is read and checked against the manifest's ``TieredFile`` once (invariant 2), and each read
    is then one call into C (read and check the pages, ``rowgroups.read_group``) and one into
    pyarrow: two releases of the GIL, so a read-ahead thread is not held up by a reader's
    Python loop for each step of opening a file. Reads are serialized by ``lock``; ``close``
    (idempotent) releases the handle, and a read after it opens it again.
    ``firsts``: each row group's first offset (None: a row group without statistics, so
    every read takes them all); ``sizes``: each row group's decoded bytes."""

    def __init__(self, target: Tier2Target, scope: str, stream: str, f: TieredFile) -> None:
        self._target, self._scope, self._stream, self.file = target, scope, stream, f
        self._rel = file_rel(scope, stream, f)
        self._where = target.where(self._rel)
        self.lock = threading.Lock()
        self._fh: Any = None
        with self.lock:
            md = self._open(None)
            try:
                self._spans = _spans(self._fh, md, self._where)
            except BaseException:
                self._close()
                raise
            firsts: list[int] | None = [s.first for s in self._spans if s.first is not None]
            if len(firsts) != len(self._spans):
                firsts = None
            sizes = [int(md.row_group(i).total_byte_size) for i in range(md.num_row_groups)]
        self.metadata = md
        self.firsts: tuple[int, ...] | None = None if firsts is None else tuple(firsts)
        self.sizes: tuple[int, ...] = tuple(sizes)

    def group_at(self, offset: int) -> pa.Table:
        """Every row of the row group holding ``offset`` (the last that starts at or before
        it; all of them without statistics), unfiltered."""
        firsts = self.firsts
        if firsts is None:
            groups = list(range(self.metadata.num_row_groups))
        else:
            i = bisect_right(firsts, offset) - 1
            groups = [i] if i >= 0 else []
        if not groups:
            return SCHEMA.empty_table()
        with self.lock:
            if self._fh is None:
                self._open(self.metadata)
            try:
                tables = [read_group(self._fh, self.metadata, self._spans[i], self._where)
                          for i in groups]
            except BaseException as exc:
                self._close()  # a failed read leaves no handle in doubt: the next one reopens
                if isinstance(exc, (PravegaEmbeddedError, MemoryError)) or not isinstance(exc, Exception):
                    raise
                raise _parse_error(exc, self._where, "read a tier-2 file") from exc
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    @property
    def names(self) -> tuple[str, str]:
        """The file's scope and stream."""
        return self._scope, self._stream

    def close(self, *, wait: bool = True) -> None:
        """Close the handle (a later read opens it again); with ``wait=False`` only if no
        read is in progress (that read's handle is then freed with the object)."""
        if self.lock.acquire(blocking=wait):
            try:
                self._close()
            finally:
                self.lock.release()

    def _open(self, md: "pq.FileMetaData | None") -> pq.FileMetaData:
        """Open the file (lock held); without ``md``, read and check its footer. Returns the
        footer."""
        try:
            fh = self._target.open_read(self._rel)
        except FileNotFoundError as exc:
            raise CorruptDataError(f"tier-2 file {self._where} is in the manifest but missing: it "
                                   "was deleted by hand or by another program") from exc
        except Exception as exc:  # noqa: BLE001 - every file-system failure is translated here
            raise tier2_error(exc, "open a tier-2 file", url=self._where) from exc
        if md is None:
            try:
                pf = pq.ParquetFile(fh)
                _check(pf, self.file, self._scope, self._stream, self._where)
                md = pf.metadata
            except BaseException as exc:
                fh.close()
                if isinstance(exc, PravegaEmbeddedError) or not isinstance(exc, Exception):
                    raise
                raise _parse_error(exc, self._where, "read a tier-2 file's footer") from exc
        self._fh = fh
        return md

    def _close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except Exception:  # noqa: BLE001 - a read-only handle: nothing is lost
                LOG.debug("closing tier-2 file %s failed", self._where, exc_info=True)


def _read_parallel(target: Tier2Target, rel: str, md: pq.FileMetaData,
                   spans: list[GroupSpan]) -> pa.Table:
    """Row groups ``spans`` of the file at ``rel`` (footer ``md``), read side by side in
    ``_READERS`` threads, each through its own handle (pyarrow decodes one row group's columns
    in parallel, not several row groups; the event column is most of the work)."""
    where = target.where(rel)
    buf = pa.allocate_buffer(max(s.hi for s in spans))

    def one(span: GroupSpan) -> pa.Table:
        with _opened(target, rel) as fh:
            return read_group(fh, md, span, where, buf)

    return pa.concat_tables(list(_reader_pool().map(one, spans)))


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _forget_pool_after_fork() -> None:
    """A forked child has none of the pool's threads: it starts a pool of its own."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _reader_pool() -> ThreadPoolExecutor:
    """The process's pool of row-group readers (created at first use, like pyarrow's own
    thread pools; its threads only run pyarrow reads and exit with the interpreter)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(_READERS, thread_name_prefix="pe-parquet-read")
        return _POOL


def verify_segment_file(target: Tier2Target, scope: str, stream: str, f: TieredFile) -> None:
    """Check the published file against ``f`` from its footer alone (size, range, count,
    schema): CorruptDataError if it differs, StorageError if tier 2 fails."""
    rel = file_rel(scope, stream, f)
    where = target.where(rel)
    try:
        size = target.size(rel)
    except FileNotFoundError as exc:
        raise CorruptDataError(f"tier-2 file {where} is missing right after it was written") from exc
    except Exception as exc:  # noqa: BLE001 - every file-system failure is translated here
        raise tier2_error(exc, "check a tier-2 file", url=where) from exc
    if size != f.size:
        raise CorruptDataError(f"tier-2 file {where} has {size} bytes, not the {f.size} written")
    with _opened(target, rel) as fh:
        try:
            _check(pq.ParquetFile(fh), f, scope, stream, where)
        except CorruptDataError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated in one place
            raise _parse_error(exc, where, "check a tier-2 file") from exc


@contextmanager
def _opened(target: Tier2Target, rel: str) -> Iterator[Any]:
    """The file at ``rel`` open for reading: CorruptDataError if it is missing (the manifest
    lists it), StorageError if tier 2 fails to open it."""
    where = target.where(rel)
    try:
        fh = target.open_read(rel)
    except FileNotFoundError as exc:
        raise CorruptDataError(f"tier-2 file {where} is in the manifest but missing: it was "
                               "deleted by hand or by another program") from exc
    except Exception as exc:  # noqa: BLE001 - every file-system failure is translated here
        raise tier2_error(exc, "open a tier-2 file", url=where) from exc
    with fh:
        yield fh


def _parse_error(exc: BaseException, where: str, what: str) -> Exception:
    """What a failure while pyarrow parses an open file is: pyarrow's complaints about the
    bytes (ArrowInvalid, or an OSError without an error number, such as "Couldn't deserialize
    thrift") are CorruptDataError; an OS or network error with a number, or anything else from
    the file system, is a StorageError."""
    if isinstance(exc, pa.ArrowInvalid) or (isinstance(exc, OSError) and exc.errno is None):
        return CorruptDataError(f"tier-2 file {where} is not a readable Parquet file of this "
                                f"layout ({exc}): it is damaged or was replaced")
    return tier2_error(exc, what, url=where)


def _check(pf: pq.ParquetFile, f: TieredFile, scope: str, stream: str, where: str) -> None:
    raw = (pf.metadata.metadata or {}).get(PARQUET_METADATA_KEY)
    try:
        meta = json.loads(raw) if raw is not None else None
    except ValueError:
        meta = None
    want = {"format": LAYOUT_VERSION, "scope": scope, "stream": stream, "segment": f.segment_id,
            "first": f.first, "end": f.end, "events": f.events}
    # written by pyarrow (rowgroups: pyarrow pads the column chunks of some old writers' files
    # past their ends when it reads them)
    if (meta != want or pf.metadata.num_rows != f.events
            or not str(pf.metadata.created_by or "").startswith("parquet-cpp-arrow")
            or not pf.schema_arrow.equals(SCHEMA, check_metadata=False)):
        raise CorruptDataError(f"tier-2 file {where} does not hold what the manifest says "
                               f"(offsets [{f.first}, {f.end}), {f.events} events): it was "
                               "replaced or damaged")


def _spans(fh: Any, md: pq.FileMetaData, where: str) -> tuple[GroupSpan, ...]:
    """The row groups' spans, from the footer read again and parsed in C (``rowgroups``)."""
    size = file_size(fh, where)
    return group_spans(read_footer(fh, size, where), md.num_row_groups, len(SCHEMA), size, where)


def _groups(spans: Sequence[GroupSpan], start: int, end: int | None) -> list[int]:
    """The row groups whose offset statistics reach ``[start, end)`` (all without them)."""
    return [s.index for s in spans
            if s.first is None or s.last is None
            or not (s.last < start or (end is not None and s.first >= end))]
