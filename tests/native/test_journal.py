"""The journal: files, headers, EVENTS records, positions, group commit, rolls, faults.

Journal format 2: a file that is not the newest ends with a 24-byte ROLL record (type 4, no
payload) whose end is the next file's base (``roll_of``)."""

from __future__ import annotations

import errno
import os
import struct
import threading
import time

import pytest

from pravega_embedded import errors
from pravega_embedded._native import check

FSYNC, OS_MODE, NONE = 0, 1, 2

SPEC = [
    (7, 1000, [(b"user-1", [b"alpha", b"beta"]), (None, [b"", b"gamma" * 10]), (b"", [b"z"])]),
    (2**63 + 5, 0, [(b"k" * 4096, [b"big-key event"])]),
    (9, 42, []),  # a section without events
    (11, 77, [(None, [bytes(range(256)) * 4])]),
]


def expected_frames(spec):
    return [[(k, p) for k, ps in grps for p in ps] for _u, _o, grps in spec]


def roll_of(h, data: bytes, base: int) -> int:
    """Checks that a file that is not the newest ends with a ROLL record; returns the file's
    content length without it."""
    at = len(data) - 24
    assert h.record_ok(data, at, base + at) == 24 and data[at + 16] == 4, "no ROLL record at the end"
    return at


def test_open_fresh_creates_file_with_header(h, tmp_path):
    for base in (0, 123_456_789):
        st, j = h.open_journal(tmp_path, base=base)
        assert st == h.lib.PE_OK
        path = tmp_path / h.file_name(base)
        data = path.read_bytes()
        assert len(data) == 32
        assert data[:8] == b"PEJOURNL"
        assert struct.unpack_from("<IIQI", data, 8) == (h.lib.PE_FORMAT_VERSION, 32, base, 0)
        assert struct.unpack_from("<I", data, 28)[0] == h.crc32c_ref(data[:28])
        b, v = h.ffi.new("uint64_t *"), h.ffi.new("uint32_t *")
        assert h.lib.pe_file_header_parse(data, 32, b, v) == h.lib.PE_OK
        assert (b[0], v[0]) == (base, h.lib.PE_FORMAT_VERSION)
        assert h.state(j) == dict(written=base + 32, synced=base + 32, durable=base + 32, base=base,
                                  errno=0)
        assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000000.pej", "00000000000123456789.pej"]


def test_file_header_checks(h):
    ffi, lib = h.ffi, h.lib
    hdr = ffi.new("char[]", 32)
    assert lib.pe_file_header_build(77, hdr, 31) == lib.PE_ERR_INVAL
    assert lib.pe_file_header_build(77, hdr, 32) == lib.PE_OK
    good = bytes(ffi.buffer(hdr))
    b, v = ffi.new("uint64_t *"), ffi.new("uint32_t *")
    assert lib.pe_file_header_parse(good, 31, b, v) == lib.PE_ERR_INVAL
    assert lib.pe_file_header_parse(good, 32, b, v) == lib.PE_OK and b[0] == 77
    bad_magic = b"PEJOURNX" + good[8:]
    assert lib.pe_file_header_parse(bad_magic, 32, b, v) == lib.PE_ERR_FORMAT
    for version in (0, lib.PE_FORMAT_VERSION + 1):
        raw = bytearray(good)
        struct.pack_into("<I", raw, 8, version)
        struct.pack_into("<I", raw, 28, h.crc32c_ref(bytes(raw[:28])))
        assert lib.pe_file_header_parse(bytes(raw), 32, b, v) == lib.PE_ERR_FORMAT
    raw = bytearray(good)
    raw[20] ^= 1  # base changed, CRC not
    assert lib.pe_file_header_parse(bytes(raw), 32, b, v) == lib.PE_ERR_CORRUPT


def test_append_events_record_and_file(h, tmp_path):
    st, j = h.open_journal(tmp_path, base=1000)
    a = h.prepare(SPEC, writer=b"writer-\xe2\x82\xac", first_seq=5, last_seq=9, ts=1_700_000_000_123)
    st, err, rec, pos, end, souts = h.append(j, a)
    assert st == h.lib.PE_OK
    assert (pos, end, len(rec)) == (1032, 1032 + a["cap"], a["cap"])
    parsed = h.parse_events_record(rec, pos)
    assert (parsed["first_seq"], parsed["last_seq"], parsed["ts"]) == (5, 9, 1_700_000_000_123)
    assert parsed["writer"] == b"writer-\xe2\x82\xac"
    assert [(s["uid"], s["offset"]) for s in parsed["sections"]] == [(u, o) for u, o, _ in SPEC]
    assert [s["frames"] for s in parsed["sections"]] == expected_frames(SPEC)
    assert souts == [(len(s["frames"]), s["n_bytes"], s["data_pos"]) for s in parsed["sections"]]
    data = (tmp_path / h.file_name(1000)).read_bytes()
    assert data[32:] == rec
    for n_events, n_bytes, data_pos in souts:  # data_pos points at the section's frames
        frames = data[data_pos - 1000 : data_pos - 1000 + n_bytes]
        assert len(h.parse_frames_ref(frames)) == n_events
    # a second record follows directly
    st, err, rec2, pos2, end2, _ = h.append(j, h.prepare([(1, 0, [(None, [b"x"])])]))
    assert (st, pos2) == (h.lib.PE_OK, end)
    assert (tmp_path / h.file_name(1000)).read_bytes() == data + rec2
    assert h.state(j)["written"] == end2
    assert h.lib.pe_journal_sync(j, end2, 5_000_000_000) == h.lib.PE_OK
    s = h.state(j)
    assert s["synced"] >= end2 and s["errno"] == 0
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    st, res = h.scan(data + rec2, 1000, 1032)
    assert (res["tail_state"], res["n_records"], res["valid_end"]) == (h.lib.PE_TAIL_CLEAN, 2, end2)


def test_append_record_types(h, tmp_path):
    ffi, lib = h.ffi, h.lib
    st, j = h.open_journal(tmp_path, durability=NONE)
    p, e = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    for t in (0, 1, 16, 255):
        assert lib.pe_journal_append_record(j, t, b"abc", 3, p, e) == lib.PE_ERR_INVAL
    assert lib.pe_journal_append_record(j, 2, b"abc", 3, p, e) == lib.PE_OK
    assert (p[0], e[0]) == (32, 32 + 27)
    assert lib.pe_journal_append_record(j, 15, ffi.NULL, 0, p, e) == lib.PE_OK
    assert lib.pe_journal_append_record(j, 3, b"x", lib.PE_MAX_RECORD_PAYLOAD + 1, p, e) == \
        lib.PE_ERR_TOOBIG
    assert lib.pe_journal_close(j) == lib.PE_OK
    data = (tmp_path / h.file_name(0)).read_bytes()
    assert data[32:] == h.make_record(32, 2, b"abc") + h.make_record(59, 15, b"")
    t, n, tot = ffi.new("uint32_t *"), ffi.new("uint32_t *"), ffi.new("uint64_t *")
    assert lib.pe_record_header(data[32:], len(data) - 32, 32, t, n, tot) == lib.PE_OK
    assert (t[0], n[0], tot[0]) == (2, 3, 27)
    assert lib.pe_record_header(data[32:], len(data) - 32, 33, t, n, tot) == lib.PE_ERR_CORRUPT
    assert lib.pe_record_header(data[32:], 23, 32, t, n, tot) == lib.PE_ERR_INVAL
    for plen, want in ((lib.PE_MAX_RECORD_PAYLOAD, lib.PE_OK),
                       (lib.PE_MAX_RECORD_PAYLOAD + 1, lib.PE_ERR_CORRUPT)):
        hdr = bytearray(data[32:56])
        struct.pack_into("<I", hdr, 4, plen)
        assert lib.pe_record_header(bytes(hdr), 24, 32, t, n, tot) == want
    assert tot[0] == 24 + lib.PE_MAX_RECORD_PAYLOAD
    hdr = bytearray(data[32:56])
    hdr[19] = ord("X")  # magic
    assert lib.pe_record_header(bytes(hdr), 24, 32, t, n, tot) == lib.PE_ERR_CORRUPT


@pytest.mark.parametrize("mode,roll", [(FSYNC, 1 << 30), (FSYNC, 16384), (OS_MODE, 1 << 30),
                                       (NONE, 16384)])
def test_concurrent_appends(h, tmp_path, mode, roll):
    st, j = h.open_journal(tmp_path, durability=mode, roll=roll)
    results, failures = [], []

    def worker(t):
        for i in range(150):
            spec = [(t, i, [(f"key-{t}".encode(), [f"{t}:{i}:{x}".encode() * (x + 1)
                                                  for x in range(i % 5 + 1)])])]
            st, _err, rec, pos, end, _ = h.append(j, h.prepare(spec, writer=f"w{t}".encode(),
                                                               first_seq=i, last_seq=i))
            if st != h.lib.PE_OK:
                failures.append(st)
                return
            if i % 10 == 0 and h.lib.pe_journal_sync(j, end, 10_000_000_000) != h.lib.PE_OK:
                failures.append("sync")
            results.append((pos, end, rec, t, i))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    results.sort()
    files = dict(h.journal_files(tmp_path))
    at = 32
    for pos, end, rec, t, i in results:
        if pos != at:  # rolled: a ROLL record ends the file, the record starts the next one
            assert roll < 1 << 30 and at + 24 in files and pos == at + 24 + 32
        assert end == pos + len(rec)
        parsed = h.parse_events_record(rec, pos)
        assert (parsed["writer"], parsed["first_seq"]) == (f"w{t}".encode(), i)
        at = end
    assert h.lib.pe_journal_sync(j, at, 10_000_000_000) == h.lib.PE_OK
    assert h.state(j)["synced"] == at
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    files = h.journal_files(tmp_path)
    assert (len(files) > 10) == (roll < 1 << 30)
    content = [d[32:roll_of(h, d, b)] for b, d in files[:-1]] + [files[-1][1][32:]]
    assert b"".join(content) == b"".join(r[2] for r in results)
    n = 0
    for base, data in files:
        st, res = h.scan(data, base, base + 32)
        assert (res["tail_state"], res["valid_end"]) == (h.lib.PE_TAIL_CLEAN, base + len(data))
        n += res["n_records"]
    assert n == 1200 + len(files) - 1 and files[-1][0] + len(files[-1][1]) == at


@pytest.mark.parametrize("mode", [FSYNC, OS_MODE, NONE])
def test_roll(h, tmp_path, mode):
    st, j = h.open_journal(tmp_path, durability=mode, roll=2048)
    records = []
    for i in range(40):
        size = 5000 if i == 20 else 300 + i  # record 20 is bigger than roll_bytes
        st, _e, rec, pos, end, _ = h.append(j, h.prepare([(1, i, [(None, [bytes([i]) * size])])]))
        assert st == h.lib.PE_OK
        records.append((pos, rec))
        s = h.state(j)
        assert s["written"] == end and (mode == FSYNC or s["synced"] == end)
    end = records[-1][0] + len(records[-1][1])
    assert h.lib.pe_journal_sync(j, end, 10_000_000_000) == h.lib.PE_OK
    last_base = h.state(j)["base"]
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK

    files = h.journal_files(tmp_path)
    assert len(files) > 5 and files[-1][0] == last_base
    found, expect_base, per_file = [], 0, {}
    for k, (base, data) in enumerate(files):
        assert base == expect_base  # continuous: each file starts where the previous ended
        b = h.ffi.new("uint64_t *")
        assert h.lib.pe_file_header_parse(data, len(data), b, h.ffi.NULL) == h.lib.PE_OK
        assert b[0] == base
        content = len(data) if k == len(files) - 1 else roll_of(h, data, base)
        assert content <= 2048 or content == 32 + 24 + 30 + 8 + 32 + 6 + 5000
        st, res = h.scan(data, base, base + 32)
        assert res["tail_state"] == h.lib.PE_TAIL_CLEAN and res["n_records"] >= 1
        at = base + 32
        while at < base + content:
            size = h.record_ok(data, at - base, at)
            assert size
            found.append((at, data[at - base : at - base + size]))
            per_file[at] = base
            at += size
        expect_base = base + len(data)
    assert found == records
    big_file = per_file[records[20][0]]  # the record bigger than roll_bytes sits alone
    assert list(per_file.values()).count(big_file) == 1 and records[20][0] == big_file + 32
    assert len([d for _b, d in files if len(d) > 2048 + 24]) == 1


def test_big_first_record_stays_in_the_first_file(h, tmp_path):
    st, j = h.open_journal(tmp_path, durability=NONE, roll=100)
    for i in range(3):
        st, _e, _r, pos, _end, _ = h.append(j, h.prepare([(1, i, [(None, [b"x" * 500])])]))
        assert st == h.lib.PE_OK
        if i == 0:
            assert pos == 32 and h.state(j)["base"] == 0  # no roll away from an empty file
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    files = h.journal_files(tmp_path)
    rec = 24 + 30 + 8 + 32 + 6 + 500
    assert len(files) == 3 and [len(d) for _b, d in files] == [32 + rec + 24] * 2 + [32 + rec]


def test_reopen_after_torn_tail(h, tmp_path):
    st, j = h.open_journal(tmp_path)
    recs = []
    for i in range(5):
        st, _e, rec, pos, end, _ = h.append(j, h.prepare([(3, i, [(b"k", [b"event %d" % i])])]))
        recs.append(rec)
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    path = tmp_path / h.file_name(0)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])  # crash in the middle of the last record
    st, res = h.scan(path.read_bytes(), 0, 32)
    assert res["tail_state"] == h.lib.PE_TAIL_TORN and res["n_records"] == 4
    valid_end = res["valid_end"]
    assert valid_end == 32 + sum(len(r) for r in recs[:4])
    st, j = h.open_journal(tmp_path, pos=valid_end)
    assert st == h.lib.PE_OK
    assert path.stat().st_size == valid_end  # cut back to pos
    st, _e, rec, pos, end, _ = h.append(j, h.prepare([(3, 99, [(None, [b"after reopen"])])]))
    assert (st, pos) == (h.lib.PE_OK, valid_end)
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
    data = path.read_bytes()
    assert data[32:] == b"".join(recs[:4]) + rec
    st, res = h.scan(data, 0, 32)
    assert (res["tail_state"], res["n_records"]) == (h.lib.PE_TAIL_CLEAN, 5)


def test_open_errors(h, tmp_path):
    lib = h.lib
    assert h.open_journal(tmp_path, pos=40)[0] == lib.PE_ERR_INVAL  # new file must start at 32
    assert h.open_journal(tmp_path, pos=31)[0] == lib.PE_ERR_INVAL
    assert h.open_journal(tmp_path, durability=3)[0] == lib.PE_ERR_INVAL
    assert h.open_journal(tmp_path, roll=0)[0] == lib.PE_ERR_INVAL
    assert h.open_journal(tmp_path / "missing")[0] == lib.PE_ERR_IO
    assert h.ffi.errno == errno.ENOENT
    assert not list(tmp_path.iterdir())
    st, j = h.open_journal(tmp_path, base=0)
    assert h.lib.pe_journal_close(j) == lib.PE_OK
    assert h.open_journal(tmp_path, base=0, pos=33)[0] == lib.PE_ERR_INVAL  # past the end
    # a file whose header names another base
    hdr = h.ffi.new("char[]", 32)
    lib.pe_file_header_build(5, hdr, 32)
    (tmp_path / h.file_name(64)).write_bytes(bytes(h.ffi.buffer(hdr)))
    assert h.open_journal(tmp_path, base=64)[0] == lib.PE_ERR_CORRUPT
    (tmp_path / h.file_name(128)).write_bytes(b"NOTAJRNL" + bytes(24))
    assert h.open_journal(tmp_path, base=128)[0] == lib.PE_ERR_FORMAT
    (tmp_path / h.file_name(256)).write_bytes(b"PEJ")
    assert h.open_journal(tmp_path, base=256)[0] == lib.PE_ERR_CORRUPT


def test_write_fault_enospc(h, tmp_path):
    lib = h.lib
    st, j = h.open_journal(tmp_path)
    st, _e, rec1, _p, end1, _ = h.append(j, h.prepare([(1, 0, [(None, [b"one"])])]))
    path = tmp_path / h.file_name(0)
    before = path.read_bytes()
    assert lib.pe_journal_inject_fault(j, lib.PE_FAULT_WRITE, errno.ENOSPC, 2) == lib.PE_OK
    st, _e, rec2, pos2, end2, _ = h.append(j, h.prepare([(1, 1, [(None, [b"two"])])]))
    assert (st, pos2) == (lib.PE_OK, end1)  # countdown 2: the next one still works
    before = path.read_bytes()
    st, err, *_ = h.append(j, h.prepare([(1, 2, [(None, [b"three"])])]))
    assert (st, err) == (lib.PE_ERR_IO, errno.ENOSPC)
    with pytest.raises(errors.StorageFullError) as ei:
        check(st, "append to s/t", errno=err)
    assert ei.value.errno == errno.ENOSPC and "append to s/t" in str(ei.value)
    assert path.read_bytes() == before
    s = h.state(j)
    assert (s["written"], s["base"], s["errno"]) == (end2, 0, 0)
    st, _e, rec3, pos3, _end, _ = h.append(j, h.prepare([(1, 2, [(None, [b"three"])])]))
    assert (st, pos3) == (lib.PE_OK, end2)  # retry works at the same position
    assert lib.pe_journal_close(j) == lib.PE_OK
    assert path.read_bytes() == before + rec3


def test_sync_fault_fails_the_journal(h, tmp_path):
    lib = h.lib
    st, j = h.open_journal(tmp_path)
    st, *_ = h.append(j, h.prepare([(1, 0, [(None, [b"one"])])]))
    assert lib.pe_journal_sync(j, h.state(j)["written"], 5_000_000_000) == lib.PE_OK
    assert lib.pe_journal_inject_fault(j, lib.PE_FAULT_SYNC, errno.EIO, 1) == lib.PE_OK
    st, _e, _r, _p, end, _ = h.append(j, h.prepare([(1, 1, [(None, [b"two"])])]))
    assert st == lib.PE_OK
    assert lib.pe_journal_sync(j, end, 5_000_000_000) == lib.PE_ERR_FAILED
    assert h.ffi.errno == errno.EIO
    s = h.state(j)
    assert s["errno"] == errno.EIO and s["synced"] < end
    st, err, *_ = h.append(j, h.prepare([(1, 2, [(None, [b"three"])])]))
    assert (st, err) == (lib.PE_ERR_FAILED, errno.EIO)
    with pytest.raises(errors.StorageError) as ei:
        check(st, "append", errno=err)
    assert ei.value.errno == errno.EIO and not isinstance(ei.value, errors.StorageFullError)
    assert lib.pe_journal_close(j) == lib.PE_ERR_FAILED


def test_a_sync_that_succeeds_beside_a_failed_one_acknowledges_nothing(h, tmp_path):
    """Linux reports a write-back error to one fdatasync only. While the sync thread's fdatasync
    fails (slowly), a flush leading its own fdatasync succeeds: that success must not make
    anything durable, neither what the failed sync covered nor what the leader appended."""
    lib = h.lib
    st, j = h.open_journal(tmp_path, durability=FSYNC)
    st, _e, _r, _p, end1, _ = h.append(j, h.prepare([(1, 0, [(None, [b"one"])])]))
    assert lib.pe_journal_sync(j, end1, -1) == lib.PE_OK
    assert lib.pe_journal_inject_sync_delay(j, 1_500_000_000) == lib.PE_OK
    assert lib.pe_journal_inject_fault(j, lib.PE_FAULT_SYNC, errno.EIO, 1) == lib.PE_OK
    st, _e, _r, _p, end2, _ = h.append(j, h.prepare([(1, 1, [(None, [b"two"])])]))
    assert st == lib.PE_OK  # not flushed: the sync thread takes it, and the fault
    status = h.ffi.new("pe_journal_status *")

    def in_flight() -> int:
        assert lib.pe_journal_status_get(j, status) == lib.PE_OK
        return status.syncs_in_flight

    deadline = time.monotonic() + 30
    while in_flight() == 0:
        assert time.monotonic() < deadline, "the sync thread never synced"
        time.sleep(0.001)
    st, _e, _r, _p, end3, _ = h.append(j, h.prepare([(1, 2, [(None, [b"three"])])]))
    assert st == lib.PE_OK
    assert lib.pe_journal_sync(j, end3, -1) == lib.PE_ERR_FAILED
    s = h.state(j)
    assert s["errno"] == errno.EIO and s["synced"] == s["durable"] == end1
    assert lib.pe_journal_close(j) == lib.PE_ERR_FAILED


def test_durability_modes_sync_at_once(h, tmp_path):
    for mode in (OS_MODE, NONE):
        d = tmp_path / str(mode)
        d.mkdir()
        st, j = h.open_journal(d, durability=mode)
        st, _e, _r, _p, end, _ = h.append(j, h.prepare([(1, 0, [(None, [b"x"])])]))
        s = h.state(j)
        assert s["synced"] == s["written"] == end
        assert h.lib.pe_journal_sync(j, end, 0) == h.lib.PE_OK
        assert h.lib.pe_journal_sync(j, end + 100, -1) == h.lib.PE_OK  # never waits for the future
        assert h.lib.pe_journal_close(j) == h.lib.PE_OK


def test_close_null(h):
    assert h.lib.pe_journal_close(h.ffi.NULL) == h.lib.PE_OK


def test_bad_arguments(h, tmp_path):
    lib = h.lib
    st, j = h.open_journal(tmp_path)
    spec = [(1, 0, [(b"key", [b"a", b"bb"]), (None, [b"c"])]), (2, 0, [(b"k2", [b"d"])])]
    ok = h.prepare(spec)
    bad = [
        dict(n_groups=2),                            # sections own 3 groups
        dict(sections=[(1, 0, 2), (2, 0, 2)]),       # sections claim 4 groups
        dict(groups=[(3, 2), (h.NO_KEY, 1), (2, 2)]),  # groups hold 5 events, lens 4
        dict(n_events=3),
        dict(keys_len=4),
        dict(payload_len=4),
        dict(lens=[1, 2, 1, 2]),                     # sum 6 != payload_len 5
        dict(cap=ok["cap"] - 1),
        dict(groups=[(4097, 2), (h.NO_KEY, 1), (2, 1)], keys=b"k" * 4099),
        dict(writer=b"w" * 256, cap=ok["cap"] + 256 - len(ok["writer"])),
        dict(writer_len=300),
    ]
    path = tmp_path / h.file_name(0)
    for change in bad:
        st, *_ = h.append(j, {**ok, **change})
        assert st == lib.PE_ERR_INVAL, change
    assert path.stat().st_size == 32 and h.state(j)["written"] == 32
    big = dict(lens=[lib.PE_MAX_RECORD_PAYLOAD + 1], payload_len=lib.PE_MAX_RECORD_PAYLOAD + 1,
               sections=[(1, 0, 1)], groups=[(h.NO_KEY, 1)], keys=b"", payload=b"x")
    st, *_ = h.append(j, {**ok, **big})
    assert st == lib.PE_ERR_TOOBIG
    st, *_ = h.append(j, {**ok, "writer": b"w" * 255, "cap": ok["cap"] + 255 - len(ok["writer"])})
    assert st == lib.PE_OK
    st, *_ = h.append(j, ok)
    assert st == lib.PE_OK
    assert lib.pe_journal_inject_fault(j, 3, errno.EIO, 1) == lib.PE_ERR_INVAL
    assert lib.pe_journal_close(j) == lib.PE_OK


def test_check_maps_status_codes(h):
    lib = h.lib
    check(lib.PE_OK, "x")
    cases = [
        (lib.PE_ERR_INVAL, errors.InvalidConfigurationError),
        (lib.PE_ERR_NOMEM, MemoryError),
        (lib.PE_ERR_CORRUPT, errors.CorruptDataError),
        (lib.PE_ERR_FORMAT, errors.FormatVersionError),
        (lib.PE_ERR_TIMEOUT, errors.DurabilityTimeoutError),
        (lib.PE_ERR_FAILED, errors.StorageError),
        (lib.PE_ERR_TOOBIG, errors.EventTooLargeError),
    ]
    for status, cls in cases:
        with pytest.raises(cls, match="doing things on s/t"):
            check(status, "doing things on s/t", errno=0)
    with pytest.raises(errors.StorageError) as ei:
        check(lib.PE_ERR_IO, "write s/t", errno=errno.EIO)
    assert type(ei.value) is errors.StorageError and ei.value.errno == errno.EIO
    assert os.strerror(errno.EIO) in str(ei.value)
    with pytest.raises(errors.StorageFullError):
        check(lib.PE_ERR_IO, "write s/t", errno=errno.ENOSPC)


def test_unflushed_appends_become_durable_while_callers_lead(h, tmp_path):
    """FSYNC mode: the sync thread holds back while flushing callers lead their own group
    commits, but only for a while: what another writer appends without ever flushing becomes
    durable both while the leaders go on and after they stop."""
    st, j = h.open_journal(tmp_path, durability=FSYNC)
    stop = threading.Event()
    failures = []

    def leader():
        i = 0
        while not stop.is_set():
            s, _e, _r, _p, end, _ = h.append(j, h.prepare([(1, i, [(b"lead", [b"x" * 50])])]))
            if s != h.lib.PE_OK or h.lib.pe_journal_sync(j, end, -1) != h.lib.PE_OK:
                failures.append(s)
                return
            i += 1

    def wait_durable(end: int) -> bool:
        # the sync thread may hold back a few ms at a time; 30 s is a bound for a loaded machine
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if h.state(j)["synced"] >= end:
                return True
            time.sleep(0.001)
        return False

    t = threading.Thread(target=leader)
    t.start()
    try:
        for i in range(20):  # appended beside the leader, never flushed
            s, _e, _r, _p, end, _ = h.append(j, h.prepare([(2, i, [(b"quiet", [b"y" * 50])])]))
            assert s == h.lib.PE_OK
            assert wait_durable(end)
    finally:
        stop.set()
        t.join()
    assert not failures
    s, _e, _r, _p, end, _ = h.append(j, h.prepare([(2, 99, [(b"quiet", [b"z"])])]))
    assert s == h.lib.PE_OK and wait_durable(end)  # no leader any more: the sync thread syncs
    assert h.lib.pe_journal_close(j) == h.lib.PE_OK
