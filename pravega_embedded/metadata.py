"""The metadata store: scopes, streams, segments, writer sequences, the segment index and
reader-group state, in LMDB.

Owns: the LMDB environment under ``<store>/meta`` and every key in it (layout in
docs/format.md, "Metadata"), checking it before LMDB maps it, the checksum of every value, and
turning every LMDB failure into an error of ``pravega_embedded.errors``.

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
  7. Every value but ``format_version`` (kept as every release wrote it, so an older release
     refuses the store cleanly) is stored with a CRC32 of its key and bytes (format 4); a value that fails it,
     or does not parse, is CorruptDataError, never a wrong answer or another exception. A
     ``data.mdb`` that is missing, empty or shorter than its own meta page says is refused before
     LMDB maps it (a truncated file would kill the process with SIGBUS).
  8. A write transaction is durable when ``write()`` returns (commit, then ``env.sync``; not in
     durability "none"); a failed commit or sync trips the store's fail-stop latch, and no write
     begins after it.
  9. ``close()`` waits for the reads and writes in flight and closes the environment after
     them; a call after it raises StoreClosedError (a call racing a store's close is told the
     store is closed: never an LMDB error, never a tripped latch).

Thread-safety: every method may be called from any thread; LMDB serialises write transactions.
The gate's lock is held only to count calls in flight, never during one.
"""

from __future__ import annotations

import errno as _errno
import hashlib
import json
import os
import struct
import threading
import time
import zlib
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

import lmdb

from .errors import (
    CorruptDataError,
    FormatVersionError,
    PravegaEmbeddedError,
    StorageError,
    StoreClosedError,
    StorageFullError,
    storage_error,
)
from .failstop import FailStop
from .lmdbfile import check_lmdb_file

__all__ = ["Metadata", "META_FORMAT_VERSION"]

META_FORMAT_VERSION = 5  # 2: scaling (segment graph), files and retention tables
# 3: transactions (txns table, staging segments), BYTES/MERGE journal records, byte streams
# 4: a CRC32 after every value; journal format 2 (durable marks, section CRCs, ROLL records)
# 5: index entries carry their write time; journal format 3 (BYTES records carry it too)
_U64 = struct.Struct(">Q")
_IDX_KEY = struct.Struct(">QQ")  # uid, segment offset
_IDX_VAL = struct.Struct("<QIIQ")  # journal position, framed bytes, events, write time (ns)
_IDX_VAL4 = struct.Struct("<QII")  # format 4 and before: no write time
_LE64 = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_DBS = (b"store", b"scopes", b"streams", b"segments", b"seglen", b"writers", b"index", b"groups",
        b"files", b"retention", b"watermarks", b"txns", b"tiering")
_TIER_FILE = struct.Struct("<QQQQQ")  # end offset, events, size, min and max write time (µs)
# MDB error codes that mean the file is damaged or not an LMDB file of this version
_DAMAGE = {-30796, -30797, -30795, -30794, -30793, -30786, -30782, -30781, -30780, -30784}


def _writer_prefix(stream_key: str) -> bytes:
    """16-byte BLAKE2b of ``scope/stream``: keeps writer keys under LMDB's 511-byte key limit
    (a stream key alone may be 511 bytes) and groups a stream's writers for deletion."""
    return hashlib.blake2b(stream_key.encode(), digest_size=16).digest()


def _writer_key(stream_key: str, writer_id: str) -> bytes:
    return _writer_prefix(stream_key) + writer_id.encode("utf-8", "surrogateescape")


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _seal(key: bytes, payload: bytes) -> bytes:
    """A value as stored: the payload and the CRC32 of key and payload (invariant 7)."""
    return payload + _CRC.pack(zlib.crc32(payload, zlib.crc32(key)))


def _nearly_full(path: str) -> bool:
    """Whether the file system holding ``path`` has less than 1 MiB free."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (1 << 20)



def _index_value(raw: bytes) -> tuple[int, int, int, int]:
    """(journal position, bytes, events, write time ns) of an index value (checksum removed):
    24 bytes, or 16 from format 4 and before (write time 0: unknown)."""
    if len(raw) == _IDX_VAL.size:
        return _IDX_VAL.unpack(raw)
    if len(raw) == _IDX_VAL4.size:
        return (*_IDX_VAL4.unpack(raw), 0)
    raise CorruptDataError(f"a metadata index value of {len(raw)} bytes: damaged")

class Metadata:
    """Typed, checked access to the LMDB environment of one store."""

    def __init__(self, path: str, *, sync: bool, latch: FailStop, map_size: int = 1 << 32,
                 create: bool = True) -> None:
        self.path = path
        self._sync = sync
        self._latch = latch
        self._gate = threading.Condition(threading.Lock())  # invariant 9
        self._users = 0
        self._closing = False
        if not create:
            check_lmdb_file(path)
        try:
            if create:
                os.makedirs(path, exist_ok=True)
            self.env = lmdb.open(path, max_dbs=16, map_size=map_size, sync=sync, metasync=False,
                                 subdir=True, readahead=False, max_readers=256, create=create)
        except (lmdb.Error, OSError) as exc:
            raise self._translate(exc, "open the metadata store") from exc
        try:
            with self._guard("open the metadata store"):
                self._db = {name: self.env.open_db(name) for name in _DBS}
            self._check_format()
        except BaseException:
            self.env.close()  # else a retry in this process finds the environment still open
            raise

    # ------------------------------------------------------------------ errors and values
    def _translate(self, exc: BaseException, what: str) -> PravegaEmbeddedError:
        """The library error for an LMDB or OS failure (invariants 7, 8)."""
        if isinstance(exc, PravegaEmbeddedError):
            return exc
        code = getattr(exc, "code", 0) or getattr(exc, "errno", 0) or 0
        if isinstance(exc, lmdb.MapFullError):
            return StorageFullError(_errno.ENOSPC, f"{what}: the metadata store {self.path} is "
                                    "full; open the store with a larger map_size")
        if code in _DAMAGE or isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError,
                                                lmdb.InvalidError, lmdb.VersionMismatchError,
                                                lmdb.BadTxnError, lmdb.PanicError,
                                                lmdb.PageFullError)):
            return CorruptDataError(f"{what}: the metadata store {os.path.join(self.path, 'data.mdb')} "
                                    f"is damaged ({exc}); restore meta/ from a backup")
        if isinstance(exc, (ValueError, UnicodeDecodeError, KeyError, TypeError, struct.error)):
            return CorruptDataError(f"{what}: a damaged value in the metadata store {self.path} "
                                    f"({exc!r})")
        if code == _errno.EIO and _nearly_full(self.path):
            code = _errno.ENOSPC  # LMDB reports a short write (a full disk) as EIO
        if code > 0:
            return storage_error(code, what, path=self.path)
        return StorageError(_errno.EIO, f"{what}: the metadata store {self.path} failed ({exc})")

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except (lmdb.Error, OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            if isinstance(exc, PravegaEmbeddedError):
                raise
            raise self._translate(exc, what) from exc

    def _get(self, txn: lmdb.Transaction, db: bytes, key: bytes) -> bytes | None:
        raw = txn.get(key, db=self._db[db])
        return None if raw is None else self._open(db, key, raw)

    def _open(self, db: bytes, key: bytes, raw: bytes) -> bytes:
        """The payload of a stored value, checked (invariant 7)."""
        if len(raw) < 4 or _CRC.unpack_from(raw, len(raw) - 4)[0] != \
                zlib.crc32(raw[:-4], zlib.crc32(key)):
            raise CorruptDataError(
                f"metadata store {self.path}: the value of {db.decode()}/{key!r} fails its "
                "checksum: the metadata is damaged (restore meta/ from a backup)")
        return raw[:-4]

    def _put(self, txn: lmdb.Transaction, db: bytes, key: bytes, payload: bytes) -> None:
        txn.put(key, _seal(key, payload), db=self._db[db])

    def _items(self, txn: lmdb.Transaction, db: bytes) -> Iterator[tuple[bytes, bytes]]:
        for k, v in txn.cursor(db=self._db[db]):
            yield k, self._open(db, k, v)

    def _enter(self, what: str) -> None:
        with self._gate:
            if self._closing:
                raise StoreClosedError(f"{what}: the store is closed (metadata {self.path})")
            self._users += 1

    def _exit(self) -> None:
        with self._gate:
            self._users -= 1
            if self._closing and not self._users:
                self._gate.notify_all()

    @contextmanager
    def _read(self, what: str) -> Iterator[lmdb.Transaction]:
        self._enter(what)
        try:
            with self._guard(what), self.env.begin() as txn:
                yield txn
        finally:
            self._exit()

    @contextmanager
    def write(self, what: str = "metadata write") -> Iterator[lmdb.Transaction]:
        """A write transaction, durable when the ``with`` block ends (invariant 8)."""
        self._latch.check()
        self._enter(what)
        try:
            yield from self._write(what)
        finally:
            self._exit()

    def _write(self, what: str) -> Iterator[lmdb.Transaction]:
        try:
            with self.env.begin(write=True) as txn:
                yield txn
            if self._sync:
                self.env.sync(True)
        except (lmdb.Error, OSError) as exc:
            if isinstance(exc, PravegaEmbeddedError):
                raise  # raised by the caller's block: the transaction was aborted
            err = self._translate(exc, what)
            if isinstance(err, StorageError) and not isinstance(exc, lmdb.MapFullError):
                raise self._latch.trip(err.errno or _errno.EIO, f"{what}: metadata commit", exc) from exc
            raise err from exc

    # ------------------------------------------------------------------ format / store keys
    def _check_format(self) -> None:
        with self._guard("check the metadata format"), self.write("check the metadata format") as txn:
            # the one value stored without a checksum, as every release wrote it, so that an
            # older release reads it and refuses a newer store cleanly
            raw = txn.get(b"format_version", db=self._db[b"store"])
            if raw is None:
                if any(txn.stat(self._db[n])["entries"] for n in _DBS if n != b"store"):
                    raise CorruptDataError(f"metadata store {self.path} has no format version")
                txn.put(b"format_version", _LE64.pack(META_FORMAT_VERSION), db=self._db[b"store"])
                for key, val in ((b"next_uid", _LE64.pack(1)), (b"files_built", b"1")):
                    self._put(txn, b"store", key, val)
                return
            version = _LE64.unpack(raw)[0] if len(raw) == 8 else 0
            if not 1 <= version <= META_FORMAT_VERSION:
                raise FormatVersionError(
                    f"metadata store {self.path} has format version {version}; this release "
                    f"reads 1..{META_FORMAT_VERSION}")
            if version < META_FORMAT_VERSION:
                self._upgrade(txn, version)

    def _upgrade(self, txn: lmdb.Transaction, version: int) -> None:
        """Upgrade a store of format 1..4 in place (docs/format.md, "Versions"): before format
        4 every value gets its checksum; records without the fields of later formats read with
        defaults (an index entry of format 4 or before has write time 0: unknown) and a
        version-1 store's files table is rebuilt at open (``rebuild_files``). A release that
        reads only older versions refuses the store from now on, as it should."""
        if version < 4:
            for name in _DBS:
                db = self._db[name]
                items = list(txn.cursor(db=db))
                for k, v in items:
                    if (name, k) != (b"store", b"format_version"):
                        txn.put(k, _seal(k, bytes(v)), db=db)
        txn.put(b"format_version", _LE64.pack(META_FORMAT_VERSION), db=self._db[b"store"])

    def verify(self, tables: Iterable[bytes] = (b"scopes", b"writers")) -> None:
        """Check every value of ``tables`` (the ones open does not read whole anyway), so a
        damaged writer sequence is refused at open instead of resuming a writer at the wrong
        place (invariant 7)."""
        with self._read("check the metadata") as txn:
            for name in tables:
                for _ in self._items(txn, name):
                    pass

    def store_id(self) -> str | None:
        """The store id recorded with the STORE marker (None: not recorded yet)."""
        with self._read("read the store id") as txn:
            raw = self._get(txn, b"store", b"store_id")
        return None if raw is None else raw.decode("ascii", "replace")

    def put_store_id(self, store_id: str) -> None:
        with self.write("record the store id") as txn:
            self._put(txn, b"store", b"store_id", store_id.encode("ascii"))

    def applied_pos(self) -> int | None:
        with self._read("read the applied position") as txn:
            raw = self._get(txn, b"store", b"applied_pos")
        return None if raw is None else _LE64.unpack(raw)[0]

    def allocate_uids(self, txn: lmdb.Transaction, n: int) -> list[int]:
        with self._guard("allocate segment uids"):
            first = _LE64.unpack(self._get(txn, b"store", b"next_uid") or b"")[0]
            self._put(txn, b"store", b"next_uid", _LE64.pack(first + n))
        return list(range(first, first + n))

    # ------------------------------------------------------------------ scopes / streams
    def scopes(self) -> list[str]:
        with self._read("list scopes") as txn:
            return [k.decode() for k, _ in self._items(txn, b"scopes")]

    def has_scope(self, scope: str, txn: lmdb.Transaction | None = None) -> bool:
        if txn is not None:
            with self._guard(f"look up scope {scope!r}"):
                return self._get(txn, b"scopes", scope.encode()) is not None
        with self._read(f"look up scope {scope!r}") as t:
            return self._get(t, b"scopes", scope.encode()) is not None

    def put_scope(self, txn: lmdb.Transaction, scope: str, info: dict[str, Any]) -> None:
        self._put(txn, b"scopes", scope.encode(), _json(info))

    def delete_scope(self, txn: lmdb.Transaction, scope: str) -> None:
        txn.delete(scope.encode(), db=self._db[b"scopes"])

    def streams(self) -> list[tuple[str, dict[str, Any]]]:
        """All streams as (``scope/stream``, record)."""
        with self._read("read the streams") as txn:
            return [(k.decode(), json.loads(v)) for k, v in self._items(txn, b"streams")]

    def put_stream(self, txn: lmdb.Transaction, key: str, record: dict[str, Any]) -> None:
        self._put(txn, b"streams", key.encode(), _json(record))

    def delete_stream(self, txn: lmdb.Transaction, key: str, uids: Iterable[int]) -> None:
        """Remove a stream with its segments, lengths, index entries and writer sequences."""
        txn.delete(key.encode(), db=self._db[b"streams"])
        self.delete_segments(txn, uids)
        txn.delete(key.encode(), db=self._db[b"retention"])
        txn.delete(key.encode(), db=self._db[b"watermarks"])
        for tag in (b"m", b"p"):
            txn.delete(tag + key.encode(), db=self._db[b"tiering"])
        scope, name = key.split("/", 1)
        folder = f"scope={scope}/stream={name}/".encode()
        graced = [bytes(k) for k, _ in txn.cursor(db=self._db[b"tiering"])
                  if k[:1] == b"g" and k[9:].startswith(folder)]
        for k in graced:  # the folder goes whole; a re-created stream's files must not go too
            txn.delete(k, db=self._db[b"tiering"])
        # the stream's tier-2 folder is deleted by the tierer, which removes this row after it
        self._put(txn, b"tiering", b"d" + key.encode(), _LE64.pack(time.time_ns()))
        prefix = _writer_prefix(key)
        cur = txn.cursor(db=self._db[b"writers"])
        if cur.set_range(prefix):
            while cur.key().startswith(prefix):
                if not cur.delete():
                    break

    # ------------------------------------------------------------------ segments
    def segments(self) -> list[tuple[int, dict[str, Any], int]]:
        """All segments as (uid, record, checkpointed length)."""
        with self._read("read the segments") as txn:
            lens = {_U64.unpack(k)[0]: _LE64.unpack(v)[0] for k, v in self._items(txn, b"seglen")}
            items = [(_U64.unpack(k)[0], json.loads(v)) for k, v in self._items(txn, b"segments")]
        return [(uid, rec, lens.get(uid, 0)) for uid, rec in items]

    def put_segment(self, txn: lmdb.Transaction, uid: int, record: dict[str, Any]) -> None:
        self._put(txn, b"segments", _U64.pack(uid), _json(record))

    def delete_segments(self, txn: lmdb.Transaction, uids: Iterable[int]) -> None:
        """Remove segments with their lengths and index entries."""
        for uid in uids:
            k = _U64.pack(uid)
            txn.delete(k, db=self._db[b"segments"])
            txn.delete(k, db=self._db[b"seglen"])
            txn.delete(b"s" + k, db=self._db[b"tiering"])
            for db, prefix in ((b"index", k), (b"tiering", b"f" + k)):
                cur = txn.cursor(db=self._db[db])
                if cur.set_range(prefix):
                    while cur.key().startswith(prefix):
                        if not cur.delete():
                            break

    # ------------------------------------------------------------------ transactions
    def txns(self) -> list[tuple[str, dict[str, Any]]]:
        """Every transaction record as (id hex, record)."""
        with self._read("read the transactions") as txn:
            return [(k.decode(), json.loads(v)) for k, v in self._items(txn, b"txns")]

    def has_txn(self, txn: lmdb.Transaction, txn_id: str) -> bool:
        return txn.get(txn_id.encode(), db=self._db[b"txns"]) is not None

    def put_txn(self, txn: lmdb.Transaction, txn_id: str, record: dict[str, Any]) -> None:
        self._put(txn, b"txns", txn_id.encode(), _json(record))

    def delete_txn(self, txn: lmdb.Transaction, txn_id: str) -> None:
        txn.delete(txn_id.encode(), db=self._db[b"txns"])

    # ------------------------------------------------------------------ writers
    def writer_seq(self, stream_key: str, writer_id: str) -> int | None:
        with self._read(f"read writer {writer_id!r} of {stream_key}") as txn:
            raw = self._get(txn, b"writers", _writer_key(stream_key, writer_id))
        return None if raw is None else _LE64.unpack(raw)[0]

    # ------------------------------------------------------------------ reader groups
    def groups(self) -> list[tuple[str, bytes | CorruptDataError]]:
        """Every reader group as (name, raw JSON state), or (name, the CorruptDataError of its
        damaged value): one damaged group does not hide the others."""
        out: list[tuple[str, bytes | CorruptDataError]] = []
        with self._read("read the reader groups") as txn:
            for k, raw in txn.cursor(db=self._db[b"groups"]):
                name = bytes(k).decode("utf-8", "replace")
                try:
                    out.append((name, self._open(b"groups", k, raw)))
                except CorruptDataError as exc:
                    out.append((name, exc))
        return out

    def put_group(self, name: str, raw: bytes, expected_revision: int | None) -> bool:
        """Write a group's state if its stored revision is ``expected_revision`` (None: the
        group must not exist). False when another writer got there first (invariant 5)."""
        key = name.encode()
        with self.write(f"update reader group {name!r}") as txn:
            cur = self._get(txn, b"groups", key)
            stored = None if cur is None else json.loads(cur).get("revision")
            if stored != expected_revision:
                return False
            self._put(txn, b"groups", key, raw)
        return True

    def delete_group(self, name: str) -> bool:
        with self.write(f"delete reader group {name!r}") as txn:
            return txn.delete(name.encode(), db=self._db[b"groups"])

    # ------------------------------------------------------------------ journal files
    def files(self) -> dict[int, dict[int, int]] | None:
        """``{file base: {segment uid: end offset of its last section in that file}}``, or
        None if this store predates the table (``rebuild_files`` fills it)."""
        with self._read("read the files table") as txn:
            if self._get(txn, b"store", b"files_built") is None:
                return None
            return {_U64.unpack(k)[0]: {int(u): e for u, e in json.loads(v).items()}
                    for k, v in self._items(txn, b"files")}

    def rebuild_files(self, bases: list[int]) -> dict[int, dict[int, int]]:
        """Fill the files table from the segment index (stores written before it existed)."""
        from bisect import bisect_right
        out: dict[int, dict[int, int]] = {}
        with self.write("rebuild the files table") as txn:
            for k, v in self._items(txn, b"index"):
                uid, start = _IDX_KEY.unpack(k)
                pos, nbytes, _, _ = _index_value(v)
                i = bisect_right(bases, pos) - 1
                if i < 0:
                    continue
                d = out.setdefault(bases[i], {})
                d[uid] = max(d.get(uid, 0), start + nbytes)
            for base, d in out.items():
                self._put(txn, b"files", _U64.pack(base), _json({str(u): e for u, e in d.items()}))
            self._put(txn, b"store", b"files_built", b"1")
        return out

    def drop_files(self, bases: Iterable[int]) -> None:
        with self.write("drop rows of the files table") as txn:
            for base in bases:
                txn.delete(_U64.pack(base), db=self._db[b"files"])

    # ------------------------------------------------------------------ marks per stream
    # Retention marks ``[ns, total, cut]`` and watermarks ``[lower, upper, cut]``: per stream, a
    # JSON list of (two ints, a frontier ``{sid: offset}``), rewritten whole.
    def retention_marks(self) -> list[tuple[str, list[Any]]]:
        """Every stream's retention marks as (``scope/stream``, [[ns, total, {sid: off}]])."""
        return self._marks(b"retention")

    def put_retention_marks(self, marks: dict[str, list[Any]]) -> None:
        self._put_marks(b"retention", marks)

    def watermarks(self) -> list[tuple[str, list[Any]]]:
        """Every stream's watermarks as (``scope/stream``, [[lower, upper, {sid: off}]])."""
        return self._marks(b"watermarks")

    def put_watermarks(self, marks: dict[str, list[Any]]) -> None:
        self._put_marks(b"watermarks", marks)

    def _marks(self, db: bytes) -> list[tuple[str, list[Any]]]:
        with self._read(f"read {db.decode()}") as txn:
            return [(k.decode(), json.loads(v)) for k, v in self._items(txn, db)]

    def _put_marks(self, db: bytes, marks: dict[str, list[Any]]) -> None:
        with self.write(f"write {db.decode()}") as txn:
            for key, lst in marks.items():
                if txn.get(key.encode(), db=self._db[b"streams"]) is None:
                    continue  # deleted meanwhile
                self._put(txn, db, key.encode(), _json([[a, b, {str(k): v for k, v in cut.items()}]
                                                         for a, b, cut in lst]))

    def drop_index_before(self, txn: lmdb.Transaction, uid: int, offset: int) -> None:
        """Delete segment ``uid``'s index entries of sections ending at or before ``offset``
        (truncated: never read again)."""
        k = _U64.pack(uid)
        cur = txn.cursor(db=self._db[b"index"])
        if not cur.set_range(k):
            return
        while cur.key()[:8] == k:
            key = cur.key()
            _, start = _IDX_KEY.unpack(key)
            _, nbytes, _, _ = _index_value(self._open(b"index", key, cur.value()))
            if start + nbytes > offset:
                break
            if not cur.delete():
                break

    # ------------------------------------------------------------------ index
    def index_entries(self, uid: int) -> list[tuple[int, int, int, int, int]]:
        """Every index entry of segment ``uid`` as (start offset, journal position, bytes,
        events, write time in ns or 0), in offset order."""
        k = _U64.pack(uid)
        out = []
        with self._read(f"read the index of segment uid {uid}") as txn:
            cur = txn.cursor(db=self._db[b"index"])
            if cur.set_range(k):
                while cur.key()[:8] == k:
                    key = cur.key()
                    _, start = _IDX_KEY.unpack(key)
                    out.append((start, *_index_value(self._open(b"index", key, cur.value()))))
                    if not cur.next():
                        break
        return out

    def index_run(self, uid: int, offset: int, stop: int,
                  limit: int = 1 << 62) -> list[tuple[int, int, int, int, int]]:
        """Segment ``uid``'s index entries from the one holding ``offset`` on, before ``stop``
        (at most ``limit``), as (start offset, journal position, framed bytes, events, write
        time in ns or 0), in offset order, as far as they are in LMDB, from one read
        transaction. Sections are contiguous, so each is looked up by its exact key from the
        root (a cursor stepping across leaf pages aborts the process in LMDB's asserts on a
        damaged page; a lookup reports the damage)."""
        out: list[tuple[int, int, int, int, int]] = []
        with self._read(f"read the index of segment uid {uid}") as txn:
            at = offset
            raw = self._get(txn, b"index", _IDX_KEY.pack(uid, at))
            if raw is None:  # the offset lies inside a section (a head after a truncation)
                floor = self._floor(txn, uid, offset)
                if floor is None or floor[0] + floor[2] <= offset:
                    return out
                at = floor[0]
                raw = self._get(txn, b"index", _IDX_KEY.pack(uid, at))
            while raw is not None and len(out) < limit:
                pos, nbytes, nev, write_ns = _index_value(raw)
                if nbytes <= 0:
                    raise CorruptDataError(f"metadata index entry of segment uid {uid} at {at} "
                                           f"has {nbytes} bytes: the metadata is damaged")
                out.append((at, pos, nbytes, nev, write_ns))
                at += nbytes
                if at >= stop:
                    break
                raw = self._get(txn, b"index", _IDX_KEY.pack(uid, at))
        return out

    def index_floor(self, uid: int, offset: int) -> tuple[int, int, int, int, int] | None:
        """The index entry of segment ``uid`` with the greatest start <= offset:
        (start offset, journal position, framed bytes, events, write time in ns or 0), or None."""
        with self._read(f"read the index of segment uid {uid}") as txn:
            return self._floor(txn, uid, offset)

    def _floor(self, txn: lmdb.Transaction, uid: int, offset: int) -> tuple[int, int, int, int, int] | None:
        key = _IDX_KEY.pack(uid, offset)
        cur = txn.cursor(db=self._db[b"index"])
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
        return (start, *_index_value(self._open(b"index", k, cur.value())))

    # ------------------------------------------------------------------ tiering
    def tiering_segments(self) -> dict[int, tuple[int, tuple[int, int] | None]]:
        """Every segment's tiering state: uid -> (tiered end, the copy in progress as
        (first, end) or None)."""
        with self._read("read the tiering state") as txn:
            out = {}
            for k, v in self._items(txn, b"tiering"):
                if k[:1] == b"s" and len(k) == 9:
                    d = json.loads(v)
                    copy = d.get("copy")
                    out[_U64.unpack(k[1:])[0]] = (int(d["end"]), None if copy is None else
                                                  (int(copy[0]), int(copy[1])))
            return out

    def tiering_segment(self, uid: int) -> tuple[int, tuple[int, int] | None]:
        """Segment ``uid``'s tiering state: (tiered end, copy in progress or None)."""
        key = b"s" + _U64.pack(uid)
        with self._read(f"read the tiering state of segment uid {uid}") as txn:
            raw = self._get(txn, b"tiering", key)
        if raw is None:
            return 0, None
        d = json.loads(raw)
        copy = d.get("copy")
        return int(d["end"]), None if copy is None else (int(copy[0]), int(copy[1]))

    def tiered_files(self, uid: int) -> list[tuple[int, int, int, int, int, int]]:
        """Segment ``uid``'s tiered files as (first, end, events, size, min and max write µs),
        in offset order."""
        prefix = b"f" + _U64.pack(uid)
        out = []
        with self._read(f"read the tiered files of segment uid {uid}") as txn:
            cur = txn.cursor(db=self._db[b"tiering"])
            if cur.set_range(prefix):
                while cur.key().startswith(prefix):
                    key = cur.key()
                    first = _U64.unpack(key[9:])[0]
                    out.append((first, *_TIER_FILE.unpack(self._open(b"tiering", key, cur.value()))))
                    if not cur.next():
                        break
        return out

    def _tiering_put(self, txn: lmdb.Transaction, uid: int, end: int,
                     copy: tuple[int, int] | None) -> None:
        self._put(txn, b"tiering", b"s" + _U64.pack(uid),
                  _json({"end": end, "copy": None if copy is None else list(copy)}))

    def tiering_begin(self, uid: int, stream_key: str, end: int, copy: tuple[int, int]) -> bool:
        """Record that ``copy`` = (first, end) of segment ``uid`` is being copied to tier 2
        (tiered end ``end`` so far): the state a crash leaves for the next open to clean.
        False (nothing recorded) if the segment was deleted meanwhile, or if the tier-2 data
        of a deleted stream of the same name is still to be deleted."""
        with self.write("record a tier-2 copy") as txn:
            if txn.get(_U64.pack(uid), db=self._db[b"segments"]) is None or \
                    txn.get(b"d" + stream_key.encode(), db=self._db[b"tiering"]) is not None:
                return False
            self._tiering_put(txn, uid, end, copy)
        return True

    def tiering_abort(self, uid: int, end: int) -> None:
        """Forget segment ``uid``'s copy in progress (its file is gone from tier 2); of a
        segment deleted meanwhile, forget its tiering state altogether."""
        with self.write("forget a tier-2 copy") as txn:
            if txn.get(_U64.pack(uid), db=self._db[b"segments"]) is None:
                txn.delete(b"s" + _U64.pack(uid), db=self._db[b"tiering"])
            else:
                self._tiering_put(txn, uid, end, None)

    def tiering_finish(self, uid: int, stream_key: str, file: tuple[int, int, int, int, int, int]) -> int:
        """Record tiered ``file`` (first, end, events, size, min and max write µs) of segment
        ``uid``, move its tiered end to the file's end and take the stream's next manifest
        version, all in one transaction; returns that version (0: the segment was deleted
        meanwhile, nothing recorded)."""
        first, end = file[0], file[1]
        mkey = b"m" + stream_key.encode()
        with self.write("record a tier-2 file") as txn:
            if txn.get(_U64.pack(uid), db=self._db[b"segments"]) is None:
                return 0
            self._put(txn, b"tiering", b"f" + _U64.pack(uid) + _U64.pack(first),
                      _TIER_FILE.pack(*file[1:]))
            self._tiering_put(txn, uid, end, None)
            raw = self._get(txn, b"tiering", mkey)
            version = (_LE64.unpack(raw)[0] if raw is not None else 0) + 1
            self._put(txn, b"tiering", mkey, _LE64.pack(version))
        return version

    def tiering_replace(self, uid: int, stream_key: str, drop: Iterable[int],
                        add: tuple[int, int, int, int, int, int] | None, graced: Iterable[str],
                        due_ns: int) -> int:
        """Of segment ``uid``, forget the tiered files starting at the offsets ``drop`` and
        record ``add`` (a file rewritten from the head on, or None), schedule the tier-2 files
        ``graced`` (paths relative to the root) for deletion at ``due_ns``, clear the copy in
        progress and take the stream's next manifest version, in one transaction; returns that
        version (0: the segment was deleted meanwhile, nothing recorded)."""
        mkey = b"m" + stream_key.encode()
        db = self._db[b"tiering"]
        with self.write("record a truncation in tier 2") as txn:
            if txn.get(_U64.pack(uid), db=self._db[b"segments"]) is None:
                return 0
            for first in drop:
                txn.delete(b"f" + _U64.pack(uid) + _U64.pack(first), db=db)
            if add is not None:
                self._put(txn, b"tiering", b"f" + _U64.pack(uid) + _U64.pack(add[0]),
                          _TIER_FILE.pack(*add[1:]))
            end, _ = self._tiering_state(txn, uid)
            self._tiering_put(txn, uid, end, None)
            for rel in graced:
                self._put(txn, b"tiering", b"g" + _U64.pack(due_ns) + rel.encode(), b"")
            raw = self._get(txn, b"tiering", mkey)
            version = (_LE64.unpack(raw)[0] if raw is not None else 0) + 1
            self._put(txn, b"tiering", mkey, _LE64.pack(version))
        return version

    def _tiering_state(self, txn: lmdb.Transaction, uid: int) -> tuple[int, tuple[int, int] | None]:
        raw = self._get(txn, b"tiering", b"s" + _U64.pack(uid))
        if raw is None:
            return 0, None
        d = json.loads(raw)
        copy = d.get("copy")
        return int(d["end"]), None if copy is None else (int(copy[0]), int(copy[1]))

    def tier2_graced(self, now_ns: int) -> list[tuple[bytes, str]]:
        """The tier-2 files whose deletion is due by ``now_ns``: (row key, relative path)."""
        with self._read("read the tier-2 files to delete") as txn:
            out = []
            cur = txn.cursor(db=self._db[b"tiering"])
            if cur.set_range(b"g"):
                while cur.key()[:1] == b"g":
                    k = bytes(cur.key())
                    if _U64.unpack(k[1:9])[0] > now_ns:
                        break
                    out.append((k, k[9:].decode()))
                    if not cur.next():
                        break
            return out

    def tier2_graced_count(self) -> int:
        """How many tier-2 files wait for their deletion."""
        with self._read("count the tier-2 files to delete") as txn:
            return sum(1 for k, _ in self._items(txn, b"tiering") if k[:1] == b"g")

    def tier2_graced_done(self, key: bytes) -> None:
        """Record that the tier-2 file of row ``key`` (``tier2_graced``) is deleted."""
        with self.write("record a deleted tier-2 file") as txn:
            txn.delete(key, db=self._db[b"tiering"])

    def tier2_deletions(self) -> list[str]:
        """The keys (``scope/stream``) of deleted streams whose tier-2 data is still to be
        deleted, in name order."""
        with self._read("read the tier-2 deletions") as txn:
            return sorted(k[1:].decode() for k, _ in self._items(txn, b"tiering") if k[:1] == b"d")

    def tier2_deleted(self, stream_key: str) -> None:
        """Record that the tier-2 data of deleted stream ``stream_key`` is gone."""
        with self.write("record a deleted tier-2 folder") as txn:
            txn.delete(b"d" + stream_key.encode(), db=self._db[b"tiering"])

    def manifest_versions(self, stream_key: str) -> tuple[int, int]:
        """(the stream's latest manifest version, the latest one published to tier 2)."""
        with self._read("read the tier-2 manifest versions") as txn:
            got = [self._get(txn, b"tiering", tag + stream_key.encode()) for tag in (b"m", b"p")]
        return tuple(0 if raw is None else _LE64.unpack(raw)[0] for raw in got)  # type: ignore[return-value]

    def manifest_published(self, stream_key: str, version: int) -> None:
        """Record that manifest ``version`` of the stream is in tier 2."""
        with self.write("record a published tier-2 manifest") as txn:
            raw = self._get(txn, b"tiering", b"m" + stream_key.encode())
            if raw is None or _LE64.unpack(raw)[0] < version:
                return  # the stream was deleted meanwhile: nothing of it is recorded any more
            self._put(txn, b"tiering", b"p" + stream_key.encode(), _LE64.pack(version))

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(
        self,
        applied_pos: int,
        lengths: dict[int, int],
        writers: dict[tuple[str, str], int],
        index: Iterable[tuple[int, int, int, int, int, int]],
        files: dict[int, dict[int, int]] | None = None,
        extra: Iterable[Callable[[lmdb.Transaction], None]] = (),
    ) -> None:
        """Record that the journal up to ``applied_pos`` is reflected here (invariant 1);
        ``files`` are rows of the files table to write (see ``files``); each of ``extra`` is
        called with the write transaction, last (writes that belong to this checkpoint)."""
        live = set()
        segs = self._db[b"segments"]
        with self.write("checkpoint") as txn:
            for uid, length in lengths.items():
                k = _U64.pack(uid)
                if txn.get(k, db=segs) is None:
                    continue  # deleted meanwhile
                live.add(uid)
                self._put(txn, b"seglen", k, _LE64.pack(length))
            streams = self._db[b"streams"]
            for (skey, wid), seq in writers.items():
                if txn.get(skey.encode(), db=streams) is not None:
                    self._put(txn, b"writers", _writer_key(skey, wid), _LE64.pack(seq))
            put = self._put
            for uid, start, pos, nbytes, nevents, write_ns in index:
                if uid in live or txn.get(_U64.pack(uid), db=segs) is not None:
                    live.add(uid)
                    put(txn, b"index", _IDX_KEY.pack(uid, start),
                        _IDX_VAL.pack(pos, nbytes, nevents, write_ns))
            for base, d in (files or {}).items():
                put(txn, b"files", _U64.pack(base), _json({str(u): e for u, e in d.items()}))
            for fn in extra:
                fn(txn)
            put(txn, b"store", b"applied_pos", _LE64.pack(applied_pos))

    def close(self) -> None:
        """Wait for the calls in flight, then close the environment. Idempotent."""
        with self._gate:
            if self._closing:
                return
            self._closing = True
            while self._users:
                self._gate.wait()
        self.env.close()
