"""The metadata store: scopes, streams, segments, writer sequences, the segment index and
reader-group state, in LMDB.

Owns: the LMDB environment under ``<store>/meta`` and every key in it (layout in
docs/format.md, "Metadata").

Invariants:
  1. ``applied_pos`` is the journal position up to which ``seglen``, ``writers`` and ``index``
     reflect the journal. Everything at or after it is replayed from the journal at open, so the
     metadata never has to be written per event.
  2. A checkpoint is written only after the journal is durable up to its position, so LMDB never
     refers to journal bytes that a crash could lose.
  3. Topology changes (create, seal, scale, truncate, delete) are single LMDB write transactions,
     committed after the journal data they depend on is durable; the journal is then replayed
     against them (records of deleted segments are ignored).
  4. Segment uids are never reused (``next_uid`` only grows).
  5. A reader group's state is one JSON value whose ``revision`` grows by one per write;
     ``put_group`` writes only if the stored revision is the expected one (optimistic
     concurrency: a writer that lost the race re-reads and retries).
  6. The ``files`` table says, per journal file, which segments have data in it and where that
     data ends; it is written with the checkpoint that indexes the data, so every section
     before ``applied_pos`` is accounted for (retention deletes files by it).

Thread-safety: every method may be called from any thread; LMDB serialises write transactions.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Any, Callable, Iterable, Iterator

import lmdb

from .errors import CorruptDataError, FormatVersionError, StorageError

__all__ = ["Metadata", "META_FORMAT_VERSION"]

META_FORMAT_VERSION = 3  # 2: scaling (segment graph), files and retention tables
# 3: transactions (txns table, staging segments), BYTES/MERGE journal records, byte streams
_U64 = struct.Struct(">Q")
_IDX_KEY = struct.Struct(">QQ")  # uid, segment offset
_IDX_VAL = struct.Struct("<QII")  # journal position, framed bytes, events
_LE64 = struct.Struct("<Q")


def _writer_prefix(stream_key: str) -> bytes:
    """16-byte BLAKE2b of ``scope/stream``: keeps writer keys under LMDB's 511-byte key limit
    (a stream key alone may be 511 bytes) and groups a stream's writers for deletion."""
    return hashlib.blake2b(stream_key.encode(), digest_size=16).digest()


def _writer_key(stream_key: str, writer_id: str) -> bytes:
    return _writer_prefix(stream_key) + writer_id.encode()


def _floor(bases: list[int], pos: int) -> int | None:
    """Index of the file holding journal position ``pos`` (None: before the first file)."""
    from bisect import bisect_right
    i = bisect_right(bases, pos) - 1
    return None if i < 0 else i


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


class Metadata:
    """Typed access to the LMDB environment of one store."""

    def __init__(self, path: str, *, sync: bool, map_size: int = 1 << 32) -> None:
        os.makedirs(path, exist_ok=True)
        try:
            self.env = lmdb.open(
                path, max_dbs=16, map_size=map_size, sync=sync, metasync=sync, subdir=True,
                readahead=False, max_readers=256,
            )
        except lmdb.Error as exc:
            raise StorageError(f"cannot open metadata store {path}: {exc}") from exc
        self.path = path
        e = self.env
        self._store = e.open_db(b"store")
        self._scopes = e.open_db(b"scopes")
        self._streams = e.open_db(b"streams")
        self._segments = e.open_db(b"segments")
        self._seglen = e.open_db(b"seglen")
        self._writers = e.open_db(b"writers")
        self._index = e.open_db(b"index")
        self._groups = e.open_db(b"groups")
        self._files = e.open_db(b"files")
        self._retention = e.open_db(b"retention")
        self._watermarks = e.open_db(b"watermarks")
        self._txns = e.open_db(b"txns")
        self._check_format()

    # ------------------------------------------------------------------ format / store keys
    def _check_format(self) -> None:
        with self.env.begin(write=True) as txn:
            raw = txn.get(b"format_version", db=self._store)
            if raw is None:
                txn.put(b"format_version", _LE64.pack(META_FORMAT_VERSION), db=self._store)
                txn.put(b"next_uid", _LE64.pack(1), db=self._store)
                txn.put(b"files_built", b"1", db=self._store)
                return
            version = _LE64.unpack(raw)[0]
            if not 1 <= version <= META_FORMAT_VERSION:
                raise FormatVersionError(
                    f"metadata store {self.path} has format version {version}; this release "
                    f"reads 1..{META_FORMAT_VERSION}"
                )
            if version < META_FORMAT_VERSION:
                # upgrade in place (docs/format.md, "Versions"): records without the new fields
                # read as unscaled; the files table is rebuilt at open (``rebuild_files``). A
                # release that reads only version 1 refuses the store from now on, as it should:
                # it would misread scaled streams and deleted journal files.
                txn.put(b"format_version", _LE64.pack(META_FORMAT_VERSION), db=self._store)

    def applied_pos(self) -> int | None:
        with self.env.begin() as txn:
            raw = txn.get(b"applied_pos", db=self._store)
        return None if raw is None else _LE64.unpack(raw)[0]

    def allocate_uids(self, txn: lmdb.Transaction, n: int) -> list[int]:
        first = _LE64.unpack(txn.get(b"next_uid", db=self._store))[0]
        txn.put(b"next_uid", _LE64.pack(first + n), db=self._store)
        return list(range(first, first + n))

    def write(self) -> lmdb.Transaction:
        """A write transaction (use as a context manager)."""
        return self.env.begin(write=True)

    # ------------------------------------------------------------------ scopes / streams
    def scopes(self) -> list[str]:
        with self.env.begin() as txn:
            return [k.decode() for k, _ in txn.cursor(db=self._scopes)]

    def has_scope(self, scope: str, txn: lmdb.Transaction | None = None) -> bool:
        if txn is not None:
            return txn.get(scope.encode(), db=self._scopes) is not None
        with self.env.begin() as t:
            return t.get(scope.encode(), db=self._scopes) is not None

    def put_scope(self, txn: lmdb.Transaction, scope: str, info: dict[str, Any]) -> None:
        txn.put(scope.encode(), _json(info), db=self._scopes)

    def delete_scope(self, txn: lmdb.Transaction, scope: str) -> None:
        txn.delete(scope.encode(), db=self._scopes)

    def streams(self, txn: lmdb.Transaction | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """All streams as (``scope/stream``, record)."""
        if txn is None:
            with self.env.begin() as t:
                items = [(k.decode(), json.loads(v)) for k, v in t.cursor(db=self._streams)]
            yield from items
            return
        for k, v in txn.cursor(db=self._streams):
            yield k.decode(), json.loads(v)

    def get_stream(self, txn: lmdb.Transaction, key: str) -> dict[str, Any] | None:
        raw = txn.get(key.encode(), db=self._streams)
        return None if raw is None else json.loads(raw)

    def put_stream(self, txn: lmdb.Transaction, key: str, record: dict[str, Any]) -> None:
        txn.put(key.encode(), _json(record), db=self._streams)

    def delete_stream(self, txn: lmdb.Transaction, key: str, uids: Iterable[int]) -> None:
        """Remove a stream with its segments, lengths, index entries and writer sequences."""
        txn.delete(key.encode(), db=self._streams)
        self.delete_segments(txn, uids)
        txn.delete(key.encode(), db=self._retention)
        txn.delete(key.encode(), db=self._watermarks)
        prefix = _writer_prefix(key)
        cur = txn.cursor(db=self._writers)
        if cur.set_range(prefix):
            while cur.key().startswith(prefix):
                if not cur.delete():
                    break

    # ------------------------------------------------------------------ segments
    def segments(self) -> Iterator[tuple[int, dict[str, Any], int]]:
        """All segments as (uid, record, checkpointed length)."""
        with self.env.begin() as txn:
            lens = {_U64.unpack(k)[0]: _LE64.unpack(v)[0] for k, v in txn.cursor(db=self._seglen)}
            items = [(_U64.unpack(k)[0], json.loads(v)) for k, v in txn.cursor(db=self._segments)]
        for uid, rec in items:
            yield uid, rec, lens.get(uid, 0)

    def put_segment(self, txn: lmdb.Transaction, uid: int, record: dict[str, Any]) -> None:
        txn.put(_U64.pack(uid), _json(record), db=self._segments)

    def delete_segments(self, txn: lmdb.Transaction, uids: Iterable[int]) -> None:
        """Remove segments with their lengths and index entries."""
        for uid in uids:
            k = _U64.pack(uid)
            txn.delete(k, db=self._segments)
            txn.delete(k, db=self._seglen)
            cur = txn.cursor(db=self._index)
            if cur.set_range(k):
                while cur.key()[:8] == k:
                    if not cur.delete():
                        break

    # ------------------------------------------------------------------ transactions
    def txns(self) -> list[tuple[str, dict[str, Any]]]:
        """Every transaction record as (id hex, record)."""
        with self.env.begin() as txn:
            return [(k.decode(), json.loads(v)) for k, v in txn.cursor(db=self._txns)]

    def put_txn(self, txn: lmdb.Transaction, txn_id: str, record: dict[str, Any]) -> None:
        txn.put(txn_id.encode(), _json(record), db=self._txns)

    def delete_txn(self, txn: lmdb.Transaction, txn_id: str) -> None:
        txn.delete(txn_id.encode(), db=self._txns)

    # ------------------------------------------------------------------ writers
    def writer_seq(self, stream_key: str, writer_id: str) -> int | None:
        with self.env.begin() as txn:
            raw = txn.get(_writer_key(stream_key, writer_id), db=self._writers)
        return None if raw is None else _LE64.unpack(raw)[0]

    # ------------------------------------------------------------------ reader groups
    def groups(self) -> list[tuple[str, bytes]]:
        """Every reader group as (name, raw JSON state)."""
        with self.env.begin() as txn:
            return [(k.decode(), bytes(v)) for k, v in txn.cursor(db=self._groups)]

    def put_group(self, name: str, raw: bytes, expected_revision: int | None) -> bool:
        """Write a group's state if its stored revision is ``expected_revision`` (None: the
        group must not exist). False when another writer got there first (invariant 5)."""
        key = name.encode()
        with self.env.begin(write=True) as txn:
            cur = txn.get(key, db=self._groups)
            stored = None if cur is None else json.loads(cur).get("revision")
            if stored != expected_revision:
                return False
            txn.put(key, raw, db=self._groups)
        return True

    def delete_group(self, name: str) -> bool:
        with self.env.begin(write=True) as txn:
            return txn.delete(name.encode(), db=self._groups)

    # ------------------------------------------------------------------ journal files
    def files(self) -> dict[int, dict[int, int]] | None:
        """``{file base: {segment uid: end offset of its last section in that file}}``, or
        None if this store predates the table (``rebuild_files`` fills it)."""
        with self.env.begin() as txn:
            if txn.get(b"files_built", db=self._store) is None:
                return None
            return {_U64.unpack(k)[0]: {int(u): e for u, e in json.loads(v).items()}
                    for k, v in txn.cursor(db=self._files)}

    def rebuild_files(self, bases: list[int]) -> dict[int, dict[int, int]]:
        """Fill the files table from the segment index (stores written before it existed)."""
        out: dict[int, dict[int, int]] = {}
        with self.env.begin(write=True) as txn:
            for k, v in txn.cursor(db=self._index):
                uid, start = _IDX_KEY.unpack(k)
                pos, nbytes, _ = _IDX_VAL.unpack(v)
                i = _floor(bases, pos)
                if i is None:
                    continue
                d = out.setdefault(bases[i], {})
                d[uid] = max(d.get(uid, 0), start + nbytes)
            for base, d in out.items():
                txn.put(_U64.pack(base), _json({str(u): e for u, e in d.items()}), db=self._files)
            txn.put(b"files_built", b"1", db=self._store)
        return out

    def drop_files(self, bases: Iterable[int]) -> None:
        with self.env.begin(write=True) as txn:
            for base in bases:
                txn.delete(_U64.pack(base), db=self._files)

    # ------------------------------------------------------------------ marks per stream
    # Retention marks ``[ns, total, cut]`` and watermarks ``[lower, upper, cut]``: per stream, a
    # JSON list of (two ints, a frontier ``{sid: offset}``), rewritten whole.
    def retention_marks(self) -> list[tuple[str, list[Any]]]:
        """Every stream's retention marks as (``scope/stream``, [[ns, total, {sid: off}]])."""
        return self._marks(self._retention)

    def put_retention_marks(self, marks: dict[str, list[Any]]) -> None:
        self._put_marks(self._retention, marks)

    def watermarks(self) -> list[tuple[str, list[Any]]]:
        """Every stream's watermarks as (``scope/stream``, [[lower, upper, {sid: off}]])."""
        return self._marks(self._watermarks)

    def put_watermarks(self, marks: dict[str, list[Any]]) -> None:
        self._put_marks(self._watermarks, marks)

    def _marks(self, db: Any) -> list[tuple[str, list[Any]]]:
        with self.env.begin() as txn:
            return [(k.decode(), json.loads(v)) for k, v in txn.cursor(db=db)]

    def _put_marks(self, db: Any, marks: dict[str, list[Any]]) -> None:
        with self.env.begin(write=True) as txn:
            for key, lst in marks.items():
                if txn.get(key.encode(), db=self._streams) is None:
                    continue  # deleted meanwhile
                txn.put(key.encode(), _json([[a, b, {str(k): v for k, v in cut.items()}]
                                             for a, b, cut in lst]), db=db)

    def drop_index_before(self, txn: lmdb.Transaction, uid: int, offset: int) -> None:
        """Delete segment ``uid``'s index entries of sections ending at or before ``offset``
        (truncated: never read again)."""
        k = _U64.pack(uid)
        cur = txn.cursor(db=self._index)
        if not cur.set_range(k):
            return
        while cur.key()[:8] == k:
            _, start = _IDX_KEY.unpack(cur.key())
            _, nbytes, _ = _IDX_VAL.unpack(cur.value())
            if start + nbytes > offset:
                break
            if not cur.delete():
                break

    # ------------------------------------------------------------------ index
    def index_entries(self, uid: int) -> list[tuple[int, int, int, int]]:
        """Every index entry of segment ``uid`` as (start offset, journal position, bytes,
        events), in offset order."""
        k = _U64.pack(uid)
        out = []
        with self.env.begin() as txn:
            cur = txn.cursor(db=self._index)
            if cur.set_range(k):
                while cur.key()[:8] == k:
                    _, start = _IDX_KEY.unpack(cur.key())
                    out.append((start, *_IDX_VAL.unpack(cur.value())))
                    if not cur.next():
                        break
        return out

    def index_floor(self, uid: int, offset: int) -> tuple[int, int, int, int] | None:
        """The index entry of segment ``uid`` with the greatest start <= offset:
        (start offset, journal position, framed bytes, events), or None."""
        key = _IDX_KEY.pack(uid, offset)
        with self.env.begin() as txn:
            cur = txn.cursor(db=self._index)
            if cur.set_range(key):
                if cur.key() != key and not cur.prev():
                    return None
            elif not cur.last():
                return None
            k = cur.key()
            if len(k) != 16:
                raise CorruptDataError(f"metadata index key of wrong size in {self.path}")
            kuid, start = _IDX_KEY.unpack(k)
            if kuid != uid:
                return None
            pos, nbytes, nevents = _IDX_VAL.unpack(cur.value())
            return start, pos, nbytes, nevents

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(
        self,
        applied_pos: int,
        lengths: dict[int, int],
        writers: dict[tuple[str, str], int],
        index: Iterable[tuple[int, int, int, int, int]],
        files: dict[int, dict[int, int]] | None = None,
        extra: Iterable[Callable[[lmdb.Transaction], None]] = (),
    ) -> None:
        """Record that the journal up to ``applied_pos`` is reflected here (invariant 1);
        ``files`` are rows of the files table to write (see ``files``); each of ``extra`` is
        called with the write transaction, last (writes that belong to this checkpoint)."""
        live = set()
        with self.env.begin(write=True) as txn:
            for uid, length in lengths.items():
                k = _U64.pack(uid)
                if txn.get(k, db=self._segments) is None:
                    continue  # deleted meanwhile
                live.add(uid)
                txn.put(k, _LE64.pack(length), db=self._seglen)
            for (skey, wid), seq in writers.items():
                if txn.get(skey.encode(), db=self._streams) is not None:
                    txn.put(_writer_key(skey, wid), _LE64.pack(seq), db=self._writers)
            put = txn.put
            for uid, start, pos, nbytes, nevents in index:
                if uid in live or txn.get(_U64.pack(uid), db=self._segments) is not None:
                    live.add(uid)
                    put(_IDX_KEY.pack(uid, start), _IDX_VAL.pack(pos, nbytes, nevents), db=self._index)
            for base, d in (files or {}).items():
                txn.put(_U64.pack(base), _json({str(u): e for u, e in d.items()}), db=self._files)
            for fn in extra:
                fn(txn)
            txn.put(b"applied_pos", _LE64.pack(applied_pos), db=self._store)

    def sync(self) -> None:
        self.env.sync(True)

    def close(self) -> None:
        self.env.close()
