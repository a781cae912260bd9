"""Parquet footers of row groups encoded apart, joined into one file's footer.

Owns: a codec of the Thrift compact protocol (the encoding of a Parquet footer, the
``FileMetaData`` struct of parquet.thrift) sufficient to read a footer pyarrow wrote and write it
back, and ``join_footers``: the footer of one file made of the bodies of several single-row-group
Parquet files written one after the other (``parquetfile`` encodes row groups side by side this
way; pyarrow's writer encodes one row group at a time).

A Parquet file is ``PAR1``, the column chunks of each row group, the footer, the footer's length
(4 bytes, little endian) and ``PAR1``. Nothing in a column chunk (page headers, pages) names a
position in the file: only the footer does. So the bodies of files ``p0, p1, ...`` (each file
without its first 4 and its footer) laid end to end after one ``PAR1`` are a valid file's column
chunks, and its footer is ``p0``'s with every row group of every part, each with its positions
moved by where its body now starts.

Invariants:
  1. ``decode`` accepts only a complete, well-formed compact-protocol struct that ends exactly
     where the buffer ends, nested at most ``MAX_DEPTH`` deep, with sizes capped by the bytes
     left and varints of at most 64 bits; anything else is CorruptDataError. ``encode(decode(b))
     == b`` for any footer pyarrow writes (fields kept in their order, their types and values
     as read). It reads footers pyarrow has just written in memory, never bytes from disk or
     the network (a hostile footer of n bytes could make ~140 n bytes of Python objects).
  2. ``join_footers`` moves every file position a footer holds (a row group's ``file_offset``;
     a column chunk's ``file_offset``; its metadata's data, index and dictionary page offsets
     and bloom filter offset; 0, which is no position, stays 0), numbers the row groups'
     ``ordinal`` 0, 1, ..., sums ``num_rows``, and refuses (CorruptDataError) parts without a
     schema or with another schema than the first, and parts with a page index or encrypted
     column metadata (positions or row-group ordinals inside the bodies it cannot move).

Thread-safety: pure functions of their arguments.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

from ..errors import CorruptDataError

__all__ = ["Field", "List", "Map", "Struct", "decode", "encode", "join_footers", "add_key_value", "MAGIC",
           "MAX_DEPTH"]

MAGIC = b"PAR1"
MAX_DEPTH = 16  # parquet.thrift nests 6 deep at most (FileMetaData > RowGroup > ... > Statistics)

# compact-protocol types
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
_INTS = (_BYTE, _I16, _I32, _I64)
_DBL = struct.Struct("<d")

# parquet.thrift field ids
_FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_SCHEMA, _FMD_KEY_VALUES = 3, 4, 2, 5
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_POSITIONS = (2,)  # file_offset
_CC_PAGE_INDEX = (4, 6)  # offset_index_offset, column_index_offset
_CC_ENCRYPTED = (8, 9)  # crypto_metadata, encrypted_column_metadata
_CC_META = 3
_CMD_POSITIONS = (9, 10, 11, 14)  # data, index, dictionary page offsets; bloom filter offset

Value = Union[int, float, bytes, "Struct", "List", "Map", None]


@dataclass
class Field:
    """One field of a struct: its id, compact type and value (None for a bool: its type says)."""

    fid: int
    ftype: int
    value: Value


@dataclass
class List:
    """A list or set: its compact type, element type and elements."""

    ltype: int
    etype: int
    items: list[Value]


@dataclass
class Map:
    """A map: key and value types and its pairs (parquet.thrift has none; kept for a round trip)."""

    ktype: int
    vtype: int
    items: list[tuple[Value, Value]]


@dataclass
class Struct:
    """A struct's fields in the order they were read."""

    fields: list[Field]

    def get(self, fid: int) -> Field | None:
        return next((f for f in self.fields if f.fid == fid), None)


# ---------------------------------------------------------------------------- decode
class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def fail(self, why: str) -> CorruptDataError:
        return CorruptDataError(f"a Parquet footer is damaged at byte {self.pos} of {len(self.buf)}: {why}")

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise self.fail("it ends early")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def _peek(self) -> int:
        return self.buf[self.pos] if self.pos < len(self.buf) else 0

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 63 or (shift == 63 and self._peek() > 1):
                raise self.fail("a varint of more than 64 bits")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n > len(self.buf) - self.pos:
            raise self.fail(f"{n} bytes are named, {len(self.buf) - self.pos} are left")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def value(self, t: int, depth: int) -> Value:
        if depth > MAX_DEPTH:
            raise self.fail(f"values nested more than {MAX_DEPTH} deep")
        if t in _INTS:
            if t == _BYTE:
                return self.byte()
            return self.zigzag()
        if t == _DOUBLE:
            return _DBL.unpack(self.take(8))[0]
        if t == _BINARY:
            return self.take(self.varint())
        if t in (_LIST, _SET):
            return self.list(t, depth)
        if t == _MAP:
            return self.map(depth)
        if t == _STRUCT:
            return self.struct(depth + 1)
        if t in (_TRUE, _FALSE):  # a bool inside a list: one byte
            return self.byte()
        raise self.fail(f"unknown type {t}")

    def list(self, t: int, depth: int) -> List:
        head = self.byte()
        size, etype = head >> 4, head & 0x0F
        if size == 15:
            size = self.varint()
        if size > len(self.buf) - self.pos:  # every element takes a byte at least
            raise self.fail(f"a list of {size} elements in {len(self.buf) - self.pos} bytes")
        return List(t, etype, [self.value(etype, depth + 1) for _ in range(size)])

    def map(self, depth: int) -> Map:
        size = self.varint()
        if size == 0:
            return Map(0, 0, [])
        if 2 * size > len(self.buf) - self.pos:
            raise self.fail(f"a map of {size} pairs in {len(self.buf) - self.pos} bytes")
        head = self.byte()
        kt, vt = head >> 4, head & 0x0F
        return Map(kt, vt, [(self.value(kt, depth + 1), self.value(vt, depth + 1)) for _ in range(size)])

    def struct(self, depth: int) -> Struct:
        if depth > MAX_DEPTH:
            raise self.fail(f"values nested more than {MAX_DEPTH} deep")
        fields: list[Field] = []
        last = 0
        while True:
            head = self.byte()
            if head == _STOP:
                return Struct(fields)
            t, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            if t in (_TRUE, _FALSE):
                fields.append(Field(fid, t, None))
            else:
                fields.append(Field(fid, t, self.value(t, depth)))


def decode(buf: bytes) -> Struct:
    """The struct ``buf`` holds, all of it (invariant 1)."""
    r = _Reader(bytes(buf))
    out = r.struct(1)
    if r.pos != len(r.buf):
        raise r.fail(f"{len(r.buf) - r.pos} bytes follow the struct")
    return out


# ---------------------------------------------------------------------------- encode
def _varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(out: bytearray, n: int) -> None:
    _varint(out, ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _value(out: bytearray, t: int, v: Value) -> None:
    if t == _BYTE or t in (_TRUE, _FALSE):
        assert isinstance(v, int)
        out.append(v & 0xFF)
    elif t in _INTS:
        assert isinstance(v, int)
        _zigzag(out, v)
    elif t == _DOUBLE:
        assert isinstance(v, float)
        out += _DBL.pack(v)
    elif t == _BINARY:
        assert isinstance(v, bytes)
        _varint(out, len(v))
        out += v
    elif isinstance(v, List):
        n = len(v.items)
        if n < 15:
            out.append(n << 4 | v.etype)
        else:
            out.append(0xF0 | v.etype)
            _varint(out, n)
        for item in v.items:
            _value(out, v.etype, item)
    elif isinstance(v, Map):
        _varint(out, len(v.items))
        if v.items:
            out.append(v.ktype << 4 | v.vtype)
            for k, x in v.items:
                _value(out, v.ktype, k)
                _value(out, v.vtype, x)
    elif isinstance(v, Struct):
        _struct(out, v)
    else:
        raise ValueError(f"cannot encode a value of type {t}: {v!r}")


def _struct(out: bytearray, s: Struct) -> None:
    last = 0
    for f in s.fields:
        delta = f.fid - last
        if 0 < delta <= 15:
            out.append(delta << 4 | f.ftype)
        else:
            out.append(f.ftype)
            _zigzag(out, f.fid)
        last = f.fid
        if f.ftype not in (_TRUE, _FALSE):
            _value(out, f.ftype, f.value)
    out.append(_STOP)


def encode(s: Struct) -> bytes:
    """The compact-protocol bytes of ``s``."""
    out = bytearray()
    _struct(out, s)
    return bytes(out)


# ---------------------------------------------------------------------------- join
def _shift(s: Struct, fids: Sequence[int], by: int) -> None:
    for f in s.fields:
        if f.fid in fids and isinstance(f.value, int) and f.ftype in _INTS and f.value > 0:
            f.value += by  # 0 is no position (pyarrow writes a column chunk's file_offset so)


def _row_groups(footer: Struct, what: str) -> list[Struct]:
    f = footer.get(_FMD_ROW_GROUPS)
    if f is None or not isinstance(f.value, List) or not all(isinstance(g, Struct) for g in f.value.items):
        raise CorruptDataError(f"{what}: a Parquet footer without a list of row groups")
    return [g for g in f.value.items if isinstance(g, Struct)]


def _schema(footer: Struct, i: int) -> bytes:
    f = footer.get(_FMD_SCHEMA)
    if f is None:
        raise CorruptDataError(f"part {i} of a Parquet file has a footer without a schema")
    return encode(Struct([f]))


def join_footers(footers: Sequence[Struct], starts: Sequence[int]) -> Struct:
    """The footer of one file whose row groups are those of ``footers`` in order, the body of
    part ``i`` starting at byte ``starts[i]`` of it (invariant 2). The footers are changed."""
    if not footers or len(footers) != len(starts):
        raise ValueError("join_footers needs one start per footer, and one footer or more")
    first = footers[0]
    schema = _schema(first, 0)
    groups: list[Struct] = []
    rows = 0
    for i, (footer, start) in enumerate(zip(footers, starts)):
        if _schema(footer, i) != schema:
            raise CorruptDataError(f"part {i} of a Parquet file has another schema than part 0")
        by = start - len(MAGIC)  # the body was written right after the part's own PAR1
        for g in _row_groups(footer, f"part {i}"):
            _shift(g, (_RG_FILE_OFFSET,), by)
            cols = g.get(_RG_COLUMNS)
            for cc in (cols.value.items if cols is not None and isinstance(cols.value, List) else []):
                if not isinstance(cc, Struct):
                    raise CorruptDataError(f"part {i} of a Parquet file has a column chunk that is no struct")
                if any(cc.get(fid) is not None for fid in _CC_PAGE_INDEX + _CC_ENCRYPTED):
                    raise CorruptDataError(f"part {i} of a Parquet file has a page index or "
                                           f"encrypted metadata: its positions cannot be moved")
                _shift(cc, _CC_POSITIONS, by)
                meta = cc.get(_CC_META)
                if meta is not None and isinstance(meta.value, Struct):
                    _shift(meta.value, _CMD_POSITIONS, by)
            ordinal = g.get(_RG_ORDINAL)
            if ordinal is not None:
                ordinal.value = len(groups)
            groups.append(g)
        n = footer.get(_FMD_NUM_ROWS)
        rows += n.value if n is not None and isinstance(n.value, int) else 0
    out = Struct([Field(f.fid, f.ftype, f.value) for f in first.fields])
    for f in out.fields:
        if f.fid == _FMD_NUM_ROWS:
            f.value = rows
        elif f.fid == _FMD_ROW_GROUPS:
            f.value = List(_LIST, _STRUCT, list(groups))
    return out


def add_key_value(footer: Struct, key: str | bytes, value: str | bytes) -> Struct:
    """``footer`` with ``key: value`` first in its key-value metadata, where pyarrow's
    ``ParquetWriter.add_key_value_metadata`` puts it (before the ``ARROW:schema`` the writer
    adds when it closes); changed in place and returned."""
    k = key.encode() if isinstance(key, str) else bytes(key)
    v = value.encode() if isinstance(value, str) else bytes(value)
    kv = Struct([Field(1, _BINARY, k), Field(2, _BINARY, v)])
    f = footer.get(_FMD_KEY_VALUES)
    if f is None:
        f = Field(_FMD_KEY_VALUES, _LIST, List(_LIST, _STRUCT, []))
        at = next((i for i, g in enumerate(footer.fields) if g.fid > _FMD_KEY_VALUES), len(footer.fields))
        footer.fields.insert(at, f)
    if not isinstance(f.value, List) or f.value.etype != _STRUCT:
        raise CorruptDataError("a Parquet footer whose key-value metadata is not a list of pairs")
    f.value.items.insert(0, kv)
    return footer
