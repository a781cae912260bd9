"""Tier-2 data files: one Parquet file per offset range of a segment, written and read back.

Owns: turning a segment's events (offsets, keys, payloads, write times) into one Parquet file in
the layout's place and form, and reading an offset range of such a file back as Arrow.

Invariants:
  1. A file holds the events of ``[first, end)`` of one segment, sorted by ``offset``, in
     ``layout.SCHEMA``, zstd-compressed, with statistics, ``layout.ROW_GROUP_ROWS`` rows per row
     group, and its range in the key-value metadata ``layout.PARQUET_METADATA_KEY``.
  2. Reading checks the file against the manifest's ``TieredFile``: the same range and event
     count in its metadata, else CorruptDataError; only row groups whose offset statistics
     reach the asked range are read.

Thread-safety: pure functions of their arguments; the target is shared safely (target.py).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import CorruptDataError, InvalidConfigurationError, tier2_error
from .layout import (COMPRESSION, LAYOUT_VERSION, PARQUET_METADATA_KEY, ROW_GROUP_ROWS, SCHEMA,
                     file_name, segment_dir)
from .manifest import TieredFile
from .target import Tier2Target

__all__ = ["SegmentRows", "write_segment_file", "read_segment_file", "verify_segment_file", "file_rel"]


class SegmentRows:
    """The events of one offset range of a segment, column by column: ``offsets`` (sorted),
    ``keys`` (str or None), ``events`` (bytes-like), ``write_us`` (µs since the epoch, UTC);
    ``end`` is the offset just past the last event."""

    __slots__ = ("offsets", "keys", "events", "write_us", "end")

    def __init__(self, offsets: Sequence[int], keys: Sequence[str | None], events: Sequence[bytes],
                 write_us: Sequence[int], end: int) -> None:
        n = len(offsets)
        if not (len(keys) == len(events) == len(write_us) == n) or n == 0:
            raise InvalidConfigurationError("a tier-2 file needs one or more events, with one "
                                            "offset, key, payload and write time each")
        if end <= offsets[-1]:
            raise InvalidConfigurationError(f"end {end} is not past the last offset {offsets[-1]}")
        self.offsets, self.keys, self.events, self.write_us, self.end = offsets, keys, events, write_us, end


def file_rel(scope: str, stream: str, f: TieredFile) -> str:
    """The file's path relative to the tier-2 root."""
    return f"{segment_dir(scope, stream, f.segment_id)}/{f.name}"


def write_segment_file(target: Tier2Target, scope: str, stream: str, segment_id: int,
                       rows: SegmentRows) -> TieredFile:
    """Write ``rows`` as one file of ``segment_id`` (invariant 1), published complete and only
    if no file of that name is there (``Tier2Target.put``, AlreadyExistsError); returns its
    manifest entry."""
    first = rows.offsets[0]
    name = file_name(first, rows.end)  # checks the range
    table = pa.table(
        [pa.array(rows.offsets, pa.int64()), pa.array(rows.keys, pa.string()),
         pa.array(rows.events, pa.binary()),
         pa.array(rows.write_us, pa.int64()).cast(SCHEMA.field("write_time").type)],
        schema=SCHEMA,
    )
    meta = {"format": LAYOUT_VERSION, "scope": scope, "stream": stream, "segment": segment_id,
            "first": first, "end": rows.end, "events": len(rows.offsets)}
    table = table.replace_schema_metadata({PARQUET_METADATA_KEY: json.dumps(meta, sort_keys=True)})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS,
                   write_statistics=True, write_page_checksum=True)
    data = buf.getvalue()
    tf = TieredFile(segment_id, first, rows.end, len(rows.offsets), len(data),
                    min(rows.write_us), max(rows.write_us))
    # exclusive: a file of that name in tier 2 is not ours to replace (a crashed copy's file is
    # deleted before its range is copied again, copier invariant 2)
    target.put(f"{segment_dir(scope, stream, segment_id)}/{name}", data, exclusive=True)
    return tf


def read_segment_file(target: Tier2Target, scope: str, stream: str, f: TieredFile,
                      start: int = 0, end: int | None = None, *, whole_groups: bool = False) -> pa.Table:
    """The events of ``f`` with ``start <= offset < end`` (invariant 2), in ``SCHEMA``. With
    ``whole_groups``: every row of the row group holding offset ``start`` (the last one that
    starts at or before it), unfiltered."""
    rel = file_rel(scope, stream, f)
    where = target.where(rel)
    with _opened(target, rel) as fh:
        try:
            pf = pq.ParquetFile(fh, page_checksum_verification=True)
            _check(pf, f, scope, stream, where)
            groups = _group_at(pf, start) if whole_groups else _groups(pf, start, end)
            table = pf.read_row_groups(groups) if groups else SCHEMA.empty_table()
        except CorruptDataError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated in one place
            raise _parse_error(exc, where, "read a tier-2 file") from exc
    table = table.replace_schema_metadata(None)
    if not whole_groups and (start > f.first or (end is not None and end < f.end)):
        offs = table.column("offset")
        mask = pc.greater_equal(offs, start)
        if end is not None:
            mask = pc.and_(mask, pc.less(offs, end))
        table = table.filter(mask)
    return table


def verify_segment_file(target: Tier2Target, scope: str, stream: str, f: TieredFile) -> None:
    """Check the published file against ``f`` from its footer alone (size, range, count,
    schema): CorruptDataError if it differs, StorageError if tier 2 fails."""
    rel = file_rel(scope, stream, f)
    where = target.where(rel)
    try:
        size = target.fs.size(f"{target.root}/{rel}")
    except FileNotFoundError as exc:
        raise CorruptDataError(f"tier-2 file {where} is missing right after it was written") from exc
    except Exception as exc:  # noqa: BLE001 - every file-system failure is translated here
        raise tier2_error(exc, "check a tier-2 file", url=where) from exc
    if size != f.size:
        raise CorruptDataError(f"tier-2 file {where} has {size} bytes, not the {f.size} written")
    with _opened(target, rel) as fh:
        try:
            _check(pq.ParquetFile(fh, page_checksum_verification=True), f, scope, stream, where)
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
        fh = target.fs.open(f"{target.root}/{rel}", "rb")
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
    raw = (pf.schema_arrow.metadata or {}).get(PARQUET_METADATA_KEY)
    try:
        meta = json.loads(raw) if raw is not None else None
    except ValueError:
        meta = None
    want = {"format": LAYOUT_VERSION, "scope": scope, "stream": stream, "segment": f.segment_id,
            "first": f.first, "end": f.end, "events": f.events}
    if (meta != want or pf.metadata.num_rows != f.events
            or not pf.schema_arrow.equals(SCHEMA, check_metadata=False)):
        raise CorruptDataError(f"tier-2 file {where} does not hold what the manifest says "
                               f"(offsets [{f.first}, {f.end}), {f.events} events): it was "
                               "replaced or damaged")


def _group_at(pf: pq.ParquetFile, offset: int) -> list[int]:
    """The row group holding ``offset``: the last whose first offset is at or before it (all of
    them if statistics are missing)."""
    md = pf.metadata
    found = []
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(0).statistics
        if st is None or not st.has_min_max:
            return list(range(md.num_row_groups))
        if st.min <= offset:
            found = [i]
    return found


def _groups(pf: pq.ParquetFile, start: int, end: int | None) -> list[int]:
    """The row groups whose offset statistics reach ``[start, end)``."""
    out = []
    md = pf.metadata
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(0).statistics
        if st is None or not st.has_min_max:
            out.append(i)
            continue
        if st.max < start or (end is not None and st.min >= end):
            continue
        out.append(i)
    return out
