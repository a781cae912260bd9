"""ByteStream contract: an io.RawIOBase over a one-segment stream: append-only writes at the
tail, seekable reads of durable bytes, truncate_before, sealing, surviving a reopen, working
under io.BufferedReader / io.TextIOWrapper, and refusing to mix with the event API."""

from __future__ import annotations

import io
import os
import random
import threading
import time

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.staging import CHUNK

MiB = 1 << 20
SCOPE = "video"


@pytest.fixture
def store(pe_store):
    pe_store.create_scope(SCOPE)
    return pe_store


def journal_files(path) -> list[str]:
    return sorted(p.name for p in (path / "journal").iterdir())


# --------------------------------------------------------------------- basics


def test_create_write_read_seek_tell(store):
    bs = store.create_byte_stream(SCOPE, "cam-0")
    assert isinstance(bs, io.RawIOBase)
    assert bs.readable() and bs.writable() and bs.seekable()
    assert (bs.head_offset(), bs.tail_offset(), bs.tell(), bs.available()) == (0, 0, 0, 0)
    assert bs.read(10) == b"" and bs.read() == b""
    assert bs.write(b"hello ") == 6 and bs.tell() == 6
    assert bs.write(bytearray(b"world")) == 5 and bs.tell() == 11
    assert bs.write(memoryview(b"!!")) == 2
    assert bs.write(b"") == 0 and bs.tell() == 13
    bs.flush()
    assert bs.tail_offset() == 13
    assert bs.seek(0) == 0
    assert bs.read(5) == b"hello" and bs.tell() == 5
    assert bs.available() == 8
    assert bs.seek(1, io.SEEK_CUR) == 6
    assert bs.read() == b"world!!" and bs.tell() == 13
    assert bs.read(1) == b"", "b'' at the tail"
    assert bs.seek(-7, io.SEEK_END) == 6
    buf = bytearray(4)
    assert bs.readinto(buf) == 4 and buf == b"worl"
    assert bs.readinto(bytearray(0)) == 0
    assert bs.seek(0) == 0 and bs.readall() == b"hello world!!"
    # a write appends at the tail whatever the position, and moves it past the bytes written
    bs.seek(2)
    bs.write(b"<tail>")
    assert bs.tell() == 19
    bs.seek(0)
    assert bs.read(-1) == b"hello world!!<tail>"
    # seeking past the tail is allowed; reading there returns b""
    assert bs.seek(100) == 100 and bs.read(5) == b"" and bs.tell() == 100
    assert bs.available() == 0
    assert "cam-0" in repr(bs)


def test_create_byte_stream_opens_the_existing_one(store):
    a = store.create_byte_stream(SCOPE, "cam-0")
    a.write(b"0123456789")
    a.flush()
    b = store.create_byte_stream(SCOPE, "cam-0")  # a second object: same bytes, own position
    assert b.tell() == 0 and b.read() == b"0123456789"
    b.write(b"abc")
    b.flush()
    assert a.tell() == 10 and a.read() == b"abc"
    assert store.list_streams(SCOPE) == ["cam-0"]
    info = store.stream_info(SCOPE, "cam-0")
    assert len(info.segments) == 1 and info.segments[0].length == 13


def test_bad_positions(store):
    bs = store.create_byte_stream(SCOPE, "cam-0")
    bs.write(b"x" * 10)
    bs.seek(4)
    for bad in (-1, 1.5, True, None, "3"):
        with pytest.raises(errors.InvalidPositionError):
            bs.seek(bad)
    with pytest.raises(errors.InvalidPositionError):
        bs.seek(-5, io.SEEK_CUR)
    with pytest.raises(errors.InvalidPositionError):
        bs.seek(-11, io.SEEK_END)
    with pytest.raises(errors.InvalidPositionError):
        bs.seek(0, 3)
    assert bs.tell() == 4, "a refused seek leaves the position alone"
    for bad in (-1, 11, 10**12, 2.0, True, None):
        with pytest.raises(errors.InvalidPositionError):
            bs.truncate_before(bad)
    assert bs.head_offset() == 0
    with pytest.raises(io.UnsupportedOperation):
        bs.truncate()
    with pytest.raises(io.UnsupportedOperation):
        bs.truncate(3)
    bs.seek(0)
    assert bs.read() == b"x" * 10


def test_closed_byte_stream(store):
    bs = store.create_byte_stream(SCOPE, "cam-0")
    bs.write(b"abc")
    bs.close()
    bs.close()  # idempotent
    assert bs.closed
    for op in (lambda: bs.read(1), lambda: bs.write(b"x"), lambda: bs.seek(0), bs.tell, bs.head_offset,
               bs.tail_offset, lambda: bs.truncate_before(0)):
        with pytest.raises(ValueError):
            op()
    with store.create_byte_stream(SCOPE, "cam-0") as again:
        assert again.read() == b"abc", "close flushed the writes"
    assert again.closed


def test_close_after_store_close_or_stream_delete_does_not_raise(tmp_path):
    with pe.open(tmp_path / "s", durability="none") as s:
        s.create_scope(SCOPE)
        gone = s.create_byte_stream(SCOPE, "gone")
        gone.write(b"x")
        s.delete_stream(SCOPE, "gone")
        with pytest.raises(errors.StreamNotFoundError):
            gone.write(b"y")
        kept = s.create_byte_stream(SCOPE, "kept")
    with pytest.raises(errors.StoreClosedError):
        kept.read(1)
    try:
        kept.close()
    finally:
        gone.close()
    assert kept.closed and gone.closed


def test_io_buffered_reader_and_text_wrapper(store):
    bs = store.create_byte_stream(SCOPE, "log")
    lines = [f"line {i}: {'é' * (i % 7)}{'x' * (i * 37 % 300)}\n" for i in range(2000)]
    text = "".join(lines)
    data = text.encode("utf-8")
    for i in range(0, len(data), 10_000):
        bs.write(data[i : i + 10_000])
    bs.flush()

    br = io.BufferedReader(store.create_byte_stream(SCOPE, "log"), buffer_size=4096)
    assert br.read(5) == data[:5]
    assert br.peek(1)[:1] == data[5:6]
    assert br.tell() == 5
    br.seek(1000)
    assert br.read(3000) == data[1000:4000]
    br.seek(-10, io.SEEK_END)
    assert br.read() == data[-10:]
    br.seek(0)
    assert br.readline() == lines[0].encode()
    assert br.read() == data[len(lines[0].encode()):]

    tw = io.TextIOWrapper(io.BufferedReader(store.create_byte_stream(SCOPE, "log")), encoding="utf-8")
    assert tw.readline() == lines[0]
    assert tw.readlines() == lines[1:]
    assert tw.read() == ""
    tw.seek(0)
    assert tw.read() == text
    # writing text through a wrapper appends; a later reader sees it
    out = io.TextIOWrapper(io.BufferedWriter(store.create_byte_stream(SCOPE, "log")), encoding="utf-8")
    out.write("appended ünïcode\n")
    out.flush()
    assert list(io.TextIOWrapper(io.BufferedReader(store.create_byte_stream(SCOPE, "log")),
                                 encoding="utf-8"))[-1] == "appended ünïcode\n"


def test_write_larger_than_a_chunk(tmp_path):
    """A write over CHUNK (4 MiB) becomes several BYTES records; reads cross their boundaries,
    also from the journal (a small tail cache) and after a reopen."""
    data = random.Random(1).randbytes(2 * CHUNK + CHUNK // 2 + 3)
    with pe.open(tmp_path / "s", tail_cache_bytes=1 << 20) as s:
        s.create_scope(SCOPE)
        bs = s.create_byte_stream(SCOPE, "big")
        bs.write(b"head")
        assert bs.write(data) == len(data)
        assert bs.tell() == 4 + len(data)
        bs.write(b"tail")
        bs.flush()
        total = 8 + len(data)
        assert bs.tail_offset() == total
        r = s.create_byte_stream(SCOPE, "big")
        assert r.read() == b"head" + data + b"tail"
        for off, n in ((CHUNK - 10, 20), (CHUNK + 4, CHUNK), (3, 2 * CHUNK + 5), (total - 5, 10)):
            r.seek(off)
            whole = (b"head" + data + b"tail")[off : off + n]
            assert r.read(n) == whole, (off, n)
        bs.close()
    with pe.open(tmp_path / "s") as s:
        r = s.create_byte_stream(SCOPE, "big")
        r.seek(CHUNK - 1)
        assert r.read(CHUNK + 2) == (b"head" + data)[CHUNK - 1 : 2 * CHUNK + 1]
        r.seek(0)
        assert r.readall() == b"head" + data + b"tail"
        r.truncate_before(CHUNK + 7)  # inside the big write
        r.close()
    with pe.open(tmp_path / "s") as s:
        r = s.create_byte_stream(SCOPE, "big")
        assert r.head_offset() == r.tell() == CHUNK + 7
        assert r.readall() == (b"head" + data + b"tail")[CHUNK + 7 :]


def test_data_and_head_survive_reopen(store_path):
    with pe.open(store_path) as s:
        s.create_scope(SCOPE)
        bs = s.create_byte_stream(SCOPE, "cam-0")
        for i in range(100):
            bs.write(bytes([i]) * (i + 1))
        bs.flush()
        total = bs.tail_offset()
        bs.truncate_before(1000)
        bs.write(b"after-truncate")
        bs.flush()
    expect = b"".join(bytes([i]) * (i + 1) for i in range(100)) + b"after-truncate"
    assert total == 5050
    with pe.open(store_path) as s:
        bs = s.create_byte_stream(SCOPE, "cam-0")
        assert bs.head_offset() == 1000 and bs.tail_offset() == len(expect)
        assert bs.tell() == 1000, "a new object starts at the head"
        assert bs.read() == expect[1000:]
        bs.seek(999)
        with pytest.raises(errors.TruncatedDataError):
            bs.read(1)
        bs.write(b"more")
        bs.close()
        assert s.create_byte_stream(SCOPE, "cam-0").readall() == expect[1000:] + b"more"


def test_unflushed_writes_of_a_killed_process_may_be_lost_but_flushed_ones_stay(tmp_path):
    """flush() is the durability point: the flushed prefix survives a crash whole; of the
    unflushed writes (one of 9 MiB) a prefix of whole writes may survive, never part of one."""
    code = f"""
import os, pravega_embedded as pe
s = pe.open({str(tmp_path / 's')!r})
s.create_scope({SCOPE!r})
bs = s.create_byte_stream({SCOPE!r}, "cam-0")
bs.write(b"A" * 100_000)
bs.flush()
print(bs.tail_offset(), flush=True)
bs.write(b"B" * 10)
bs.write(os.urandom(9 << 20))  # over 4 MiB: staged, then merged in one record
os.kill(os.getpid(), 9)
"""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout.split() == ["100000"]
    with pe.open(tmp_path / "s") as s:
        bs = s.create_byte_stream(SCOPE, "cam-0")
        got = bs.readall()
        assert got[:100_000] == b"A" * 100_000
        rest = got[100_000:]
        assert len(rest) in (0, 10, 10 + (9 << 20)), f"a torn write is visible: {len(rest)} bytes"
        assert rest[:10] == b"B" * len(rest[:10])
        bs.write(b"C")
        bs.flush()
        bs.seek(0)
        assert bs.readall() == got + b"C"


# --------------------------------------------------------------------- truncation


def test_truncate_before_moves_the_head(store):
    bs = store.create_byte_stream(SCOPE, "cam-0")
    bs.write(bytes(range(256)) * 4)
    bs.flush()
    other = store.create_byte_stream(SCOPE, "cam-0")  # positioned at 0
    bs.truncate_before(300)
    assert bs.head_offset() == other.head_offset() == 300
    with pytest.raises(errors.TruncatedDataError):
        other.read(1)
    with pytest.raises(errors.TruncatedDataError):
        other.readinto(bytearray(5))
    with pytest.raises(errors.TruncatedDataError):
        other.readall()
    assert other.tell() == 0
    other.seek(300)
    assert other.read(4) == bytes([300 % 256, 301 % 256, 302 % 256, 303 % 256])
    # moving the head back is no truncation at all; to the tail drops everything
    bs.truncate_before(10)
    assert bs.head_offset() == 300
    bs.truncate_before(1024)
    assert (bs.head_offset(), bs.tail_offset()) == (1024, 1024)
    assert store.create_byte_stream(SCOPE, "cam-0").tell() == 1024
    bs.write(b"z")
    bs.seek(1024)
    assert bs.read() == b"z"
    # truncate_before may name bytes written but not yet flushed (up to the length)
    bs.write(b"12345")
    bs.truncate_before(1030)
    assert bs.head_offset() == 1030


def test_truncate_before_reclaims_journal_files(tmp_path):
    path = tmp_path / "s"
    piece = random.Random(3).randbytes(64 * 1024)
    with pe.open(path, roll_bytes=1 << 20) as s:
        s.create_scope(SCOPE)
        bs = s.create_byte_stream(SCOPE, "cam-0")
        for _ in range(128):  # 8 MiB in 64 KiB writes
            bs.write(piece)
        bs.flush()
        s.checkpoint()
        before = journal_files(path)
        assert len(before) >= 7, before
        bs.truncate_before(6 * MiB)
        s.reclaim()
        after = journal_files(path)
        assert len(after) <= len(before) - 4, (before, after)
        size = sum((path / "journal" / f).stat().st_size for f in after)
        assert size <= 3 * MiB, f"{size} journal bytes kept for ~2 MiB of live data"
        bs.seek(6 * MiB)
        assert bs.read(2 * MiB) == piece * 32
        bs.seek(6 * MiB - 1)
        with pytest.raises(errors.TruncatedDataError):
            bs.read(1)
        bs.truncate_before(8 * MiB)
        s.reclaim()
        assert len(journal_files(path)) <= 2
        bs.write(b"still writable")
        bs.flush()
    with pe.open(path, roll_bytes=1 << 20) as s:
        bs = s.create_byte_stream(SCOPE, "cam-0")
        assert bs.head_offset() == 8 * MiB
        assert bs.read() == b"still writable"


# --------------------------------------------------------------------- sealing and deleting


def test_seal_then_write_is_refused(store_path):
    with pe.open(store_path) as s:
        s.create_scope(SCOPE)
        bs = s.create_byte_stream(SCOPE, "cam-0")
        other = s.create_byte_stream(SCOPE, "cam-0")
        bs.write(b"final bytes")
        bs.seal()
        assert s.stream_info(SCOPE, "cam-0").sealed
        with pytest.raises(errors.StreamSealedError):
            bs.write(b"x")
        with pytest.raises(errors.StreamSealedError):
            other.write(b"x")
        assert other.read() == b"final bytes"
        bs.seal()  # sealing again is harmless
        bs.close()
        other.close()
    with pe.open(store_path) as s:
        bs = s.create_byte_stream(SCOPE, "cam-0")  # opening a sealed byte stream reads it
        assert bs.read() == b"final bytes"
        with pytest.raises(errors.StreamSealedError):
            bs.write(b"x")
        assert bs.tail_offset() == 11
        bs.close()


def test_delete_and_recreate(store):
    bs = store.create_byte_stream(SCOPE, "cam-0")
    bs.write(b"old")
    bs.flush()
    store.delete_stream(SCOPE, "cam-0")
    for op in (lambda: bs.read(1), lambda: bs.write(b"x"), bs.tell, lambda: bs.seek(0)):
        with pytest.raises(errors.StreamNotFoundError):
            op()
    new = store.create_byte_stream(SCOPE, "cam-0")
    assert (new.head_offset(), new.tail_offset(), new.read()) == (0, 0, b"")
    new.write(b"new")
    new.flush()
    new.seek(0)
    assert new.read() == b"new"


# --------------------------------------------------------------------- concurrency


def test_a_reader_object_follows_a_concurrent_writer(tmp_path):
    """One object appends from a thread (flushing now and then) while another reads from its
    own position: the reader sees exactly the written bytes, in order, never a torn piece."""
    with pe.open(tmp_path / "s") as s:
        s.create_scope(SCOPE)
        w = s.create_byte_stream(SCOPE, "live")
        r = s.create_byte_stream(SCOPE, "live")
        rnd = random.Random(5)
        pieces = [rnd.randbytes(rnd.choice([1, 7, 500, 4096, 70_000])) for _ in range(600)]
        expect = b"".join(pieces)
        errors_seen: list[BaseException] = []

        def write():
            try:
                for i, p in enumerate(pieces):
                    assert w.write(p) == len(p)
                    if i % 10 == 9:
                        w.flush()
                w.flush()
            except BaseException as exc:  # noqa: BLE001
                errors_seen.append(exc)

        t = threading.Thread(target=write)
        t.start()
        got = bytearray()
        deadline = time.monotonic() + 30
        while len(got) < len(expect) and time.monotonic() < deadline:
            chunk = r.read(rnd.choice([1, 100, 65536, 1 << 20]))
            if chunk:
                got += chunk
                assert r.tell() == len(got)
            else:
                time.sleep(0.0005)
        t.join()
        assert not errors_seen, errors_seen
        assert bytes(got) == expect
        assert r.read() == b""


def test_a_read_waits_for_bytes_already_written_by_another_object(store_path):
    """Reads return durable bytes only, but bytes already written (not yet flushed) are
    waited for rather than reported as the end."""
    with pe.open(store_path) as s:
        s.create_scope(SCOPE)
        w = s.create_byte_stream(SCOPE, "live")
        r = s.create_byte_stream(SCOPE, "live")
        payload = os.urandom(300_000)
        w.write(payload)  # no flush
        got = r.read(len(payload))
        assert got and payload.startswith(got)
        while len(got) < len(payload):
            more = r.read(len(payload) - len(got))
            assert more, "b'' before the bytes already written were read"
            got += more
        assert got == payload
        assert r.read(1) == b""
        w.close()


# --------------------------------------------------------------------- mixing the APIs


def test_event_api_on_a_byte_stream_raises_stream_kind_error(store):
    bs = store.create_byte_stream(SCOPE, "bytes")
    bs.write(b"raw bytes, no frames")
    bs.flush()
    seg = store.stream_info(SCOPE, "bytes").segments[0].segment_id
    for op in (
        lambda: store.create_writer(SCOPE, "bytes"),
        lambda: store.create_reader(SCOPE, "bytes"),
        lambda: store.read_slice(SCOPE, "bytes"),
        lambda: store.fetch_event(pe.EventPointer(scope=SCOPE, stream="bytes", segment_id=seg, offset=0, length=6)),
        lambda: store.create_reader_group("g", pe.ReaderGroupConfig(streams=[f"{SCOPE}/bytes"])),
        lambda: store.create_transactional_writer(SCOPE, "bytes"),
        lambda: store.scale_stream(SCOPE, "bytes", seal=[seg], new_ranges=[(0.0, 0.5), (0.5, 1.0)]),
        lambda: store.update_stream(SCOPE, "bytes", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2))),
        lambda: store.update_stream(SCOPE, "bytes", pe.StreamConfiguration(
            scaling=pe.ScalingPolicy.by_event_rate(100, min_segments=1))),
    ):
        with pytest.raises(errors.StreamKindError):
            op()
    assert "g" not in store.list_reader_groups()
    info = store.stream_info(SCOPE, "bytes")
    assert [s.segment_id for s in info.segments] == [seg] and not info.sealed
    # fixed(1) is fine: the byte stream keeps its one segment and its bytes
    store.update_stream(SCOPE, "bytes", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
    info = store.stream_info(SCOPE, "bytes")
    assert [s.segment_id for s in info.segments] == [seg] and info.segments[0].length == 20
    assert store.create_byte_stream(SCOPE, "bytes").read() == b"raw bytes, no frames"


def test_byte_stream_api_on_an_event_stream_raises_stream_kind_error(store):
    store.create_stream(SCOPE, "events")
    with store.create_writer(SCOPE, "events") as w:
        w.write_event(b"e", routing_key="k")
    with pytest.raises(errors.StreamKindError):
        store.create_byte_stream(SCOPE, "events")
    assert [e.event for e in store.read_slice(SCOPE, "events")] == [b"e"]


def test_byte_stream_config_must_be_fixed_one(store):
    for cfg in (pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)),
                pe.StreamConfiguration(scaling=pe.ScalingPolicy.by_event_rate(100, min_segments=1)),
                "not a config"):
        with pytest.raises(errors.InvalidConfigurationError):
            store.create_byte_stream(SCOPE, "bad", config=cfg)
    assert store.list_streams(SCOPE) == []
    bs = store.create_byte_stream(SCOPE, "ok", config=pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
    bs.write(b"1")
    with pytest.raises(errors.ScopeNotFoundError):
        store.create_byte_stream("no-such-scope", "x")
    with pytest.raises(errors.InvalidNameError):
        store.create_byte_stream(SCOPE, "bad name!")
