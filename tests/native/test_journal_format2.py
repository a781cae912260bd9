"""Journal format 2: durable marks in record headers, section CRCs, BYTES sections appended from
the caller's buffer, ROLL records, make_durable in every mode behind one fail-stop state, and
the external fail latch."""

from __future__ import annotations

import errno
import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

FSYNC, OS_MODE, NONE = 0, 1, 2


def _header(data: bytes, at: int) -> tuple[int, int, int, int, int]:
    """(payload length, position, type, flags, lag) of the record at data[at]."""
    _crc, plen, pos, rtype, flags, _magic, lag = struct.unpack_from("<IIQBBHI", data, at)
    return plen, pos, rtype, flags, lag


def _append(h, j, uid: int, off: int, payload: bytes):
    st, err, rec, pos, end, _ = h.append(j, h.prepare([(uid, off, [(b"k", [payload])])]))
    assert st == h.lib.PE_OK, (st, err)
    return pos, end


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_crc_combine_is_the_crc_of_the_concatenation(h, a, b):
    out = h.ffi.new("uint32_t *")
    assert h.lib.pe_crc32c_combine(h.crc32c(a), h.crc32c(b), len(b), out) == h.lib.PE_OK
    assert out[0] == h.crc32c_ref(a + b)


def test_records_carry_the_durable_position_they_were_appended_after(h, tmp_path):
    st, j = h.open_journal(tmp_path, durability=FSYNC)
    _, end1 = _append(h, j, 1, 0, b"first")
    assert h.lib.pe_journal_sync(j, end1, 5_000_000_000) == h.lib.PE_OK
    pos2, end2 = _append(h, j, 1, 100, b"second")
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    data = (tmp_path / h.file_name(0)).read_bytes()
    _plen, pos, _t, flags, lag = _header(data, pos2)
    assert (pos, flags) == (pos2, 1) and pos2 - lag == end1  # everything before it was synced
    _st, res = h.scan(data, 0, 32)
    assert res["durable_mark"] == end1 == h.durable_mark(data, pos2, pos2)


def test_no_durable_mark_without_syncs(h, tmp_path):
    st, j = h.open_journal(tmp_path, durability=NONE)
    pos, _ = _append(h, j, 1, 0, b"x")
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    data = (tmp_path / h.file_name(0)).read_bytes()
    assert _header(data, pos)[3:] == (0, 0)
    assert h.scan(data, 0, 32)[1]["durable_mark"] == 0


def test_damage_before_a_durable_mark_is_reported_by_the_scan(h, tmp_path):
    """Record 2 is damaged; record 3 (appended after record 2 was synced) says so."""
    st, j = h.open_journal(tmp_path, durability=FSYNC)
    ends = []
    for i in range(3):
        _, end = _append(h, j, 1, i, b"event %d" % i)
        assert h.lib.pe_journal_sync(j, end, 5_000_000_000) == h.lib.PE_OK
        ends.append(end)
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    data = bytearray((tmp_path / h.file_name(0)).read_bytes())
    data[ends[0] + 30] ^= 0xFF  # inside record 2
    _st, res = h.scan(bytes(data), 0, 32)
    assert res["tail_state"] == h.lib.PE_TAIL_CORRUPT and res["bad_pos"] == ends[0]
    assert res["next_valid_pos"] == ends[1] and res["durable_mark"] == ends[1] > res["bad_pos"]
    assert res == h.scan_ref(bytes(data), 0, 32)


def test_os_mode_acknowledges_at_once_and_syncs_in_make_durable(h, tmp_path):
    st, j = h.open_journal(tmp_path, durability=OS_MODE)
    _, end = _append(h, j, 1, 0, b"x")
    s = h.state(j)
    assert (s["written"], s["synced"], s["durable"]) == (end, end, 32)
    assert h.lib.pe_journal_make_durable(j, end, -1) == h.lib.PE_OK
    assert h.state(j)["durable"] == end
    pos2, _ = _append(h, j, 1, 50, b"y")
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    data = (tmp_path / h.file_name(0)).read_bytes()
    _plen, _pos, _t, flags, lag = _header(data, pos2)
    assert flags == 1 and pos2 - lag == end


def test_os_mode_failed_fdatasync_is_fail_stop(h, tmp_path):
    lib = h.lib
    st, j = h.open_journal(tmp_path, durability=OS_MODE)
    _, end = _append(h, j, 1, 0, b"x")
    assert lib.pe_journal_inject_fault(j, lib.PE_FAULT_SYNC, errno.EIO, 1) == lib.PE_OK
    assert lib.pe_journal_make_durable(j, end, -1) == lib.PE_ERR_IO
    assert h.ffi.errno == errno.EIO
    assert h.state(j)["errno"] == errno.EIO and h.state(j)["durable"] == 32
    st, err, *_ = h.append(j, h.prepare([(1, 9, [(None, [b"later"])])]))
    assert (st, err) == (lib.PE_ERR_FAILED, errno.EIO)  # nothing more is acknowledged
    assert lib.pe_journal_sync(j, end, 0) == lib.PE_ERR_FAILED
    assert lib.pe_journal_make_durable(j, end, -1) == lib.PE_ERR_FAILED  # never retried
    assert lib.pe_journal_close(j) == lib.PE_ERR_FAILED


def test_fail_latch_from_outside(h, tmp_path):
    lib = h.lib
    for mode in (FSYNC, OS_MODE, NONE):
        d = tmp_path / str(mode)
        d.mkdir()
        st, j = h.open_journal(d, durability=mode)
        _, end = _append(h, j, 1, 0, b"x")
        assert lib.pe_journal_fail(j, errno.ENOSPC) == lib.PE_OK
        assert lib.pe_journal_fail(j, errno.EIO) == lib.PE_OK  # the first failure is kept
        st, err, *_ = h.append(j, h.prepare([(1, 9, [(None, [b"later"])])]))
        assert (st, err) == (lib.PE_ERR_FAILED, errno.ENOSPC)
        assert lib.pe_journal_make_durable(j, end, -1) == lib.PE_ERR_FAILED
        assert h.state(j)["errno"] == errno.ENOSPC
        assert lib.pe_journal_close(j) == lib.PE_ERR_FAILED


def test_append_section_layout_and_verify(h, tmp_path):
    """A BYTES record (format 3): the write time, a section header, then the data."""
    ffi, lib = h.ffi, h.lib
    st, j = h.open_journal(tmp_path, durability=NONE)
    data = os.urandom(5000)
    p, e = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    ts = 1_764_000_000_123_456_789
    assert lib.pe_journal_append_section(j, 7, 123, 1, ts, data, len(data), p, e) == lib.PE_OK
    assert (p[0], e[0]) == (32, 32 + lib.PE_BYTES_DATA_OFFSET + len(data))
    assert lib.PE_BYTES_DATA_OFFSET == 24 + 8 + 32
    assert lib.pe_journal_append_section(j, 0, 0, 0, 0, ffi.NULL, 0, p, e) == lib.PE_OK
    assert lib.pe_journal_close(j) == lib.PE_OK
    raw = (tmp_path / h.file_name(0)).read_bytes()
    plen, pos, rtype, _f, _l = _header(raw, 32)
    assert (plen, pos, rtype) == (40 + len(data), 32, 2) and h.record_ok(raw, 32, 32)
    assert struct.unpack_from("<Q", raw, 56) == (ts,)
    uid, off, nev, n, crc, res = struct.unpack_from("<QQIIII", raw, 64)
    assert (uid, off, nev, n, crc, res) == (7, 123, 1, len(data), h.crc32c_ref(data), 0)
    assert raw[32 + 64 : 32 + 64 + len(data)] == data
    out = ffi.new("uint64_t *")
    section = raw[64 : 96 + len(data)]  # the section header is right before the data
    assert lib.pe_section_verify(section, len(section), out) == lib.PE_OK and out[0] == len(data)
    bad = bytearray(section)
    bad[100] ^= 1
    assert lib.pe_section_verify(bytes(bad), len(bad), out) == lib.PE_ERR_CORRUPT
    assert lib.pe_section_verify(section[:-1], len(section) - 1, out) == lib.PE_ERR_CORRUPT
    assert lib.pe_section_verify(section, 31, out) == lib.PE_ERR_INVAL


def test_events_sections_carry_the_crc_of_their_frames(h, tmp_path):
    st, j = h.open_journal(tmp_path, durability=NONE)
    big = os.urandom(70_000)  # over the copy-and-checksum threshold
    st, _e, rec, pos, _end, souts = h.append(j, h.prepare(
        [(1, 0, [(b"k", [b"small", big, b"", b"tail"])]), (2, 0, [(None, [big[:5000]])])]))
    assert st == h.lib.PE_OK
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    parsed = h.parse_events_record(rec, pos)  # checks every section's CRC
    assert [len(s["frames"]) for s in parsed["sections"]] == [4, 1]
    out = h.ffi.new("uint64_t *")
    for _n, n_bytes, data_pos in souts:
        section = rec[data_pos - pos - 32 : data_pos - pos + n_bytes]
        assert h.lib.pe_section_verify(section, len(section), out) == h.lib.PE_OK


def test_roll_ends_the_file_with_a_roll_record(h, tmp_path):
    st, j = h.open_journal(tmp_path, durability=FSYNC, roll=2048)
    spans = [_append(h, j, 1, i, b"x" * 700) for i in range(4)]
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    files = h.journal_files(tmp_path)
    assert len(files) == 2
    (b0, d0), (b1, d1) = files
    plen, pos, rtype, flags, lag = _header(d0, len(d0) - 24)
    k = [end for _p, end in spans].index(pos)  # the ROLL follows the file's last record
    assert (plen, rtype, pos + 24, flags) == (0, 4, b1, 1) and 32 <= pos - lag <= pos
    assert spans[k + 1][0] == b1 + 32 and h.scan(d1, b1, b1 + 32)[1]["n_records"] == 3 - k


def test_failed_roll_write_leaves_the_old_file_and_can_be_retried(h, tmp_path):
    lib = h.lib
    st, j = h.open_journal(tmp_path, durability=FSYNC, roll=2048)
    for i in range(2):
        _append(h, j, 1, i, b"x" * 700)
    before = (tmp_path / h.file_name(0)).read_bytes()
    assert lib.pe_journal_inject_fault(j, lib.PE_FAULT_WRITE, errno.ENOSPC, 1) == lib.PE_OK
    st, err, *_ = h.append(j, h.prepare([(1, 5, [(b"k", [b"y" * 700])])]))
    assert (st, err) == (lib.PE_ERR_IO, errno.ENOSPC)  # the ROLL record's write failed
    assert [b for b, _ in h.journal_files(tmp_path)] == [0]  # the new file is gone again
    assert (tmp_path / h.file_name(0)).read_bytes() == before
    pos, end = _append(h, j, 1, 5, b"y" * 700)  # the retry rolls
    assert lib.pe_journal_close(j) == lib.PE_OK
    files = h.journal_files(tmp_path)
    assert [b for b, _ in files] == [0, len(before) + 24] and pos == len(before) + 24 + 32


def test_failed_sync_while_rolling_is_fail_stop(h, tmp_path):
    lib = h.lib
    st, j = h.open_journal(tmp_path, durability=OS_MODE, roll=2048)
    for i in range(2):
        _append(h, j, 1, i, b"x" * 700)
    assert lib.pe_journal_inject_fault(j, lib.PE_FAULT_SYNC, errno.EIO, 1) == lib.PE_OK
    st, err, *_ = h.append(j, h.prepare([(1, 5, [(b"k", [b"y" * 700])])]))
    assert (st, err) == (lib.PE_ERR_IO, errno.EIO)
    assert h.state(j)["errno"] == errno.EIO
    st, err, *_ = h.append(j, h.prepare([(1, 5, [(b"k", [b"y"])])]))
    assert (st, err) == (lib.PE_ERR_FAILED, errno.EIO)
    assert lib.pe_journal_close(j) == lib.PE_ERR_FAILED


def test_no_append_to_a_format_1_file(h, tmp_path):
    """An older file is read but never appended to (the store starts a new file at its end)."""
    raw = bytearray(32)
    raw[0:8] = b"PEJOURNL"
    struct.pack_into("<IIQI", raw, 8, 1, 32, 0, 0)
    struct.pack_into("<I", raw, 28, h.crc32c_ref(bytes(raw[:28])))
    (tmp_path / h.file_name(0)).write_bytes(bytes(raw))
    assert h.open_journal(tmp_path, base=0, pos=32)[0] == h.lib.PE_ERR_FORMAT


def test_append_events_v_writes_the_same_record_as_the_copying_append(h, tmp_path):
    """Payloads written from their own buffers (pwritev) give byte for byte the record the
    copying append builds, with the same section positions."""
    ffi, lib = h.ffi, h.lib
    spec = [(7, 10, [(b"key", [os.urandom(70_000), b"", os.urandom(5)]), (None, [os.urandom(300_000)])]),
            (8, 0, []), (9, 99, [(b"", [os.urandom(1 << 20)])])]
    a = h.prepare(spec, writer=b"w-v", first_seq=3, last_seq=4, ts=77)
    (tmp_path / "copy").mkdir()
    (tmp_path / "iov").mkdir()
    st, j = h.open_journal(tmp_path / "copy", durability=NONE)
    st, _e, rec, pos, end, souts = h.append(j, a)
    assert st == lib.PE_OK and lib.pe_journal_close(j) == lib.PE_OK
    st, j = h.open_journal(tmp_path / "iov", durability=NONE)
    secs = ffi.new("pe_section[]", len(spec))
    for i, (u, o, ng) in enumerate(a["sections"]):
        secs[i].segment_uid, secs[i].segment_offset, secs[i].n_groups = u, o, ng
    grps = ffi.new("pe_group[]", [list(g) for g in a["groups"]])
    payloads = [p for _u, _o, grps_ in spec for _k, ps in grps_ for p in ps]
    bufs = [ffi.from_buffer(p) for p in payloads]
    ptrs = ffi.new("char *[]", bufs)
    head_cap = a["cap"] - sum(len(p) for p in payloads)
    head = ffi.new("char[]", head_cap)
    p2, e2 = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    lens = ffi.new("uint32_t[]", a["lens"])
    assert lib.pe_journal_append_events_v(j, a["writer"], len(a["writer"]), 3, 4, 77, secs, len(spec),
                                          grps, len(a["groups"]), a["keys"], len(a["keys"]), lens,
                                          ptrs, len(payloads), head, head_cap - 1, p2, e2) == lib.PE_ERR_INVAL
    assert lib.pe_journal_append_events_v(j, a["writer"], len(a["writer"]), 3, 4, 77, secs, len(spec),
                                          grps, len(a["groups"]), a["keys"], len(a["keys"]), lens,
                                          ptrs, len(payloads), head, head_cap, p2, e2) == lib.PE_OK
    assert (p2[0], e2[0]) == (pos, end)
    assert [(secs[i].n_events, secs[i].n_bytes, secs[i].data_pos) for i in range(len(spec))] == souts
    assert lib.pe_journal_close(j) == lib.PE_OK
    assert (tmp_path / "iov" / h.file_name(0)).read_bytes() == (tmp_path / "copy" / h.file_name(0)).read_bytes()
