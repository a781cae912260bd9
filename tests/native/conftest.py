"""Helpers for the tests of the C core: pure-Python references of the on-disk formats.

The helpers are reached through the session fixture ``h`` (a namespace), so that the test files
need no import of this module.
"""

from __future__ import annotations

import os
import struct
import types
from pathlib import Path

import pytest

from pravega_embedded._native import ffi, lib

# ------------------------------------------------------------------ CRC32C reference

_CRC_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c_ref(data: bytes, seed: int = 0) -> int:
    c = seed ^ 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def crc32c(data: bytes, seed: int = 0) -> int:
    out = ffi.new("uint32_t *")
    assert lib.pe_crc32c(ffi.from_buffer(data), len(data), seed, out) == lib.PE_OK
    return out[0]


# ------------------------------------------------------------------ frames

NO_KEY = 65535


def frame(key: bytes | None, payload: bytes) -> bytes:
    k = b"" if key is None else key
    return struct.pack("<IH", len(payload), NO_KEY if key is None else len(k)) + k + payload


def parse_frames_ref(buf: bytes) -> list[tuple[bytes | None, bytes]]:
    """Parses frames that must fill buf exactly."""
    out, at = [], 0
    while at < len(buf):
        plen, klen = struct.unpack_from("<IH", buf, at)
        at += 6
        key = None
        if klen != NO_KEY:
            assert klen <= 4096
            key = buf[at : at + klen]
            at += klen
        payload = buf[at : at + plen]
        assert len(payload) == plen
        at += plen
        out.append((key, payload))
    assert at == len(buf)
    return out


# ------------------------------------------------------------------ records

MAGIC = 0x4550


def make_record(pos: int, rtype: int, payload: bytes) -> bytes:
    body = struct.pack("<IQBBHI", len(payload), pos, rtype, 0, MAGIC, 0) + payload
    return struct.pack("<I", crc32c(body)) + body


def record_ok(buf: bytes, off: int, pos: int) -> int:
    """Reference validity check of a record: its total size, or 0."""
    if len(buf) - off < 24:
        return 0
    crc, plen, rpos, rtype, _flags, magic, _lag = struct.unpack_from("<IIQBBHI", buf, off)
    if magic != MAGIC or rpos != pos or not 1 <= rtype <= 15 or plen > lib.PE_MAX_RECORD_PAYLOAD:
        return 0
    if 24 + plen > len(buf) - off:
        return 0
    if crc32c_ref(buf[off + 4 : off + 24 + plen]) != crc:
        return 0
    return 24 + plen


def durable_mark(buf: bytes, off: int, pos: int) -> int:
    """The position a valid record says was durable before it (0: it says nothing)."""
    flags, lag = buf[off + 17], struct.unpack_from("<I", buf, off + 20)[0]
    return pos - lag if flags & 1 and lag <= pos else 0


def scan_ref(buf: bytes, buf_pos: int, start_pos: int) -> dict:
    off, n, mark = start_pos - buf_pos, 0, 0
    while off < len(buf):
        size = record_ok(buf, off, buf_pos + off)
        if not size:
            break
        mark = max(mark, durable_mark(buf, off, buf_pos + off))
        n, off = n + 1, off + size
    r = dict(valid_end=buf_pos + off, n_records=n, tail_state=lib.PE_TAIL_CLEAN, bad_pos=0,
             next_valid_pos=0, durable_mark=mark)
    if off == len(buf):
        return r
    r.update(tail_state=lib.PE_TAIL_TORN, bad_pos=buf_pos + off)
    s = off + 1
    while s < len(buf) - 23:
        size = record_ok(buf, s, buf_pos + s) if buf[s + 18 : s + 20] == b"PE" else 0
        if size:
            if r["tail_state"] != lib.PE_TAIL_CORRUPT:
                r.update(tail_state=lib.PE_TAIL_CORRUPT, next_valid_pos=buf_pos + s)
            mark = max(mark, durable_mark(buf, s, buf_pos + s))
            s += size
        else:
            s += 1
    r["durable_mark"] = mark
    return r


def scan(buf: bytes, buf_pos: int = 0, start_pos: int | None = None) -> tuple[int, dict]:
    res = ffi.new("pe_scan_result *")
    if start_pos is None:
        start_pos = buf_pos
    st = lib.pe_scan(ffi.from_buffer(buf), len(buf), buf_pos, start_pos, res)
    return st, dict(valid_end=res.valid_end, n_records=res.n_records, tail_state=res.tail_state,
                    bad_pos=res.bad_pos, next_valid_pos=res.next_valid_pos,
                    durable_mark=res.durable_mark)


def parse_events_record(rec: bytes, pos: int) -> dict:
    """Pure-Python parser of a whole EVENTS record; asserts every fixed field (format 2: a
    durable lag in the header, a CRC in each section header)."""
    crc, plen, rpos, rtype, flags, magic, lag = struct.unpack_from("<IIQBBHI", rec, 0)
    assert len(rec) == 24 + plen
    assert crc == crc32c_ref(rec[4:])
    assert (rpos, rtype, magic) == (pos, 1, MAGIC)
    assert flags in (0, 1) and (flags == 1 or lag == 0) and lag <= pos
    assert rec[18:20] == b"PE"
    first_seq, last_seq, ts, n_sections, wlen = struct.unpack_from("<QQQIH", rec, 24)
    at = 24 + 30
    writer = rec[at : at + wlen]
    at += wlen
    sections = []
    for _ in range(n_sections):
        uid, seg_off, n_events, n_bytes, sec_crc, reserved = struct.unpack_from("<QQIIII", rec, at)
        at += 32
        assert reserved == 0 and sec_crc == crc32c_ref(rec[at : at + n_bytes])
        frames = parse_frames_ref(rec[at : at + n_bytes])
        assert len(frames) == n_events
        sections.append(dict(uid=uid, offset=seg_off, n_bytes=n_bytes, data_pos=pos + at,
                             frames=frames))
        at += n_bytes
    assert at == len(rec)
    return dict(first_seq=first_seq, last_seq=last_seq, ts=ts, writer=writer, sections=sections)


# ------------------------------------------------------------------ journal

def file_name(base: int) -> str:
    return f"{base:020d}.pej"


def open_journal(d: Path, base: int = 0, pos: int | None = None, roll: int = 1 << 30,
                 durability: int = 0):
    out = ffi.new("pe_journal **")
    st = lib.pe_journal_open(os.fsencode(d), base, base + 32 if pos is None else pos, roll,
                             durability, out)
    return st, (out[0] if st == lib.PE_OK else None)


def prepare(spec, writer=b"writer-1", first_seq=1, last_seq=1, ts=123):
    """C arguments of pe_journal_append_events for spec = [(uid, seg_offset, [(key|None,
    [payload, ...]), ...]), ...]. Returns a dict the caller may tweak before append_args()."""
    groups, keys, lens, payload = [], b"", [], b""
    for _uid, _off, grps in spec:
        for key, payloads in grps:
            groups.append((NO_KEY if key is None else len(key), len(payloads)))
            keys += key or b""
            for p in payloads:
                lens.append(len(p))
                payload += p
    size = 24 + 30 + len(writer) + 32 * len(spec) + len(payload)
    size += sum(n * (6 + (0 if k == NO_KEY else k)) for k, n in groups)
    return dict(writer=writer, first_seq=first_seq, last_seq=last_seq, ts=ts,
                sections=[(u, o, len(g)) for u, o, g in spec], groups=groups, keys=keys,
                lens=lens, payload=payload, cap=size, n_sections=None, n_groups=None,
                keys_len=None, n_events=None, payload_len=None, writer_len=None)


def append(j, a: dict):
    """Calls pe_journal_append_events with prepare()'s dict. Returns (status, errno, record
    bytes, pos, end, [(n_events, n_bytes, data_pos)] of the sections)."""
    secs = ffi.new("pe_section[]", max(1, len(a["sections"])))
    for i, (u, o, ng) in enumerate(a["sections"]):
        secs[i].segment_uid, secs[i].segment_offset, secs[i].n_groups = u, o, ng
    grps = ffi.new("pe_group[]", max(1, len(a["groups"])))
    for i, (k, n) in enumerate(a["groups"]):
        grps[i].key_len, grps[i].n_events = k, n
    lens = ffi.new("uint32_t[]", a["lens"] or [0])
    out = ffi.new("char[]", max(1, a["cap"]))
    rl, pos, end = ffi.new("uint64_t *"), ffi.new("uint64_t *"), ffi.new("uint64_t *")
    dflt = lambda k, v: v if a[k] is None else a[k]  # noqa: E731
    st = lib.pe_journal_append_events(
        j, a["writer"], dflt("writer_len", len(a["writer"])), a["first_seq"], a["last_seq"],
        a["ts"], secs, dflt("n_sections", len(a["sections"])), grps,
        dflt("n_groups", len(a["groups"])), a["keys"], dflt("keys_len", len(a["keys"])), lens,
        dflt("n_events", len(a["lens"])), a["payload"], dflt("payload_len", len(a["payload"])),
        out, a["cap"], rl, pos, end)
    err = ffi.errno
    if st != lib.PE_OK:
        return st, err, None, None, None, None
    rec = bytes(ffi.buffer(out, rl[0]))
    souts = [(secs[i].n_events, secs[i].n_bytes, secs[i].data_pos)
             for i in range(len(a["sections"]))]
    return st, err, rec, pos[0], end[0], souts


def state(j) -> dict:
    st = ffi.new("pe_journal_status *")
    assert lib.pe_journal_status_get(j, st) == lib.PE_OK
    return dict(written=st.written, synced=st.acked, durable=st.durable, base=st.file_base,
                errno=st.failed_errno)


def journal_files(d: Path) -> list[tuple[int, bytes]]:
    out = []
    for p in sorted(d.glob("*.pej")):
        out.append((int(p.stem), p.read_bytes()))
    return out


@pytest.fixture(scope="session")
def h():
    return types.SimpleNamespace(
        ffi=ffi, lib=lib, crc32c_ref=crc32c_ref, crc32c=crc32c, frame=frame,
        parse_frames_ref=parse_frames_ref, make_record=make_record, record_ok=record_ok,
        scan_ref=scan_ref, scan=scan, parse_events_record=parse_events_record,
        durable_mark=durable_mark,
        file_name=file_name, open_journal=open_journal, prepare=prepare, append=append,
        state=state, journal_files=journal_files, NO_KEY=NO_KEY,
    )
