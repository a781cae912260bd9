"""Corruption of the journal, end to end through ``pe.open``.

How the journal under test is made: a store with checkpoints disabled (checkpoint_interval is
an hour) writes flushed batches, one journal record per ``write_events`` + ``flush``; the store
directory is copied while the store is open, so its metadata says "nothing applied" and
recovery must scan and replay every record. Each case damages a fresh copy of that snapshot.

Rules checked (docs/format.md, "Recovery"): a torn tail is cut and every complete record is
kept; damage followed by a valid record is CorruptDataError and nothing is changed; an all-zero
tail is not saved; a partial header of the newest file is a crash while rolling.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded._native import ffi, lib

_REC = struct.Struct("<IIQBBHI")
BATCHES = 12


def _batch(i: int) -> tuple[str, str, list[bytes]]:
    writer = f"w{i % 2}"
    key = f"k{i % 3}"
    return writer, key, [b"%s-%d-%d" % (writer.encode(), i, j) for j in range(1 + i % 3)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """(snapshot dir, [(record start, record end)], batches) of an un-checkpointed journal."""
    root = tmp_path_factory.mktemp("corruption")
    live, snap = root / "live", root / "snapshot"
    store = pe.open(live, checkpoint_interval=3600)
    store.create_scope("c")
    store.create_stream("c", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    writers = {w: store.create_writer("c", "s", writer_id=w) for w in ("w0", "w1")}
    batches = []
    for i in range(BATCHES):
        writer, key, evs = _batch(i)
        writers[writer].write_events(evs, routing_key=key)
        writers[writer].flush()
        batches.append((writer, key, evs))
    shutil.copytree(live, snap)  # metadata still says: nothing applied
    store.close()
    journal = _journal_file(snap)
    data = journal.read_bytes()
    records, pos = [], 32
    while pos < len(data):
        _, plen, rpos, *_ = _REC.unpack_from(data, pos)
        assert rpos == pos
        records.append((pos, pos + 24 + plen))
        pos += 24 + plen
    assert len(records) == BATCHES
    return snap, records, batches


def _journal_file(store_dir: Path) -> Path:
    files = sorted((store_dir / "journal").glob("*.pej"))
    assert len(files) == 1
    return files[0]


def _copy(pristine, tmp_path: Path) -> tuple[Path, Path]:
    snap = pristine[0]
    dest = tmp_path / "trial"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(snap, dest)
    return dest, _journal_file(dest)


def _check_prefix(store_dir: Path, batches, kept: int, durability: str = "none") -> None:
    """The store holds exactly batches[:kept], in per-key order, with the right sequences."""
    with pe.open(store_dir, durability=durability) as store:
        got: dict[str, list[bytes]] = {}
        for ev in store.read_slice("c", "s"):
            got.setdefault(ev.routing_key, []).append(ev.event)
        want: dict[str, list[bytes]] = {}
        last_seq = {"w0": -1, "w1": -1}
        seq = {"w0": -1, "w1": -1}
        for writer, key, evs in batches[:kept]:
            want.setdefault(key, []).extend(evs)
            seq[writer] += len(evs)
            last_seq[writer] = seq[writer]
        assert got == want
        for writer in ("w0", "w1"):
            w = store.create_writer("c", "s", writer_id=writer)
            assert w.last_sequence == last_seq[writer]
            w.close()
        # the store keeps working after recovery, and what it writes survives a reopen
        with store.create_writer("c", "s", writer_id="after") as w:
            w.write_event(b"after-recovery", routing_key="z")
    with pe.open(store_dir, durability=durability) as store:
        assert [e.event for e in store.read_slice("c", "s") if e.routing_key == "z"] == [b"after-recovery"]


def test_clean_snapshot_recovers_everything(pristine, tmp_path):
    d, _ = _copy(pristine, tmp_path)
    _check_prefix(d, pristine[2], BATCHES, durability="fsync")


def test_truncate_at_every_byte_of_the_last_two_records(pristine, tmp_path):
    _, records, batches = pristine
    start = records[-2][0]
    end = records[-1][1]
    for cut in range(start, end):
        d, journal = _copy(pristine, tmp_path)
        with open(journal, "r+b") as f:
            f.truncate(cut)
        kept = sum(1 for _, e in records if e <= cut)
        _check_prefix(d, batches, kept)
        torn = list((d / "recovery").glob("torn-*.bin")) if (d / "recovery").exists() else []
        cut_bytes = cut - records[kept][0] if kept < len(records) else 0
        assert len(torn) == (1 if cut_bytes else 0)


@pytest.mark.parametrize("record", [0, 3, 7, BATCHES - 2])
@pytest.mark.parametrize("where", ["crc", "length", "position", "magic", "payload", "last_byte"])
def test_flipped_bit_before_valid_records_is_corruption(pristine, tmp_path, record, where):
    _, records, _ = pristine
    d, journal = _copy(pristine, tmp_path)
    rs, re_ = records[record]
    offset = {"crc": rs + 1, "length": rs + 4, "position": rs + 9, "magic": rs + 18,
              "payload": rs + 40, "last_byte": re_ - 1}[where]
    data = bytearray(journal.read_bytes())
    data[offset] ^= 0x10
    journal.write_bytes(bytes(data))
    before = journal.read_bytes()
    with pytest.raises(errors.CorruptDataError) as info:
        pe.open(d, durability="none")
    assert journal.name in str(info.value)
    assert journal.read_bytes() == before, "a failed recovery must not change the journal"
    # and the lock was released: the store can be opened again (and fails the same way)
    with pytest.raises(errors.CorruptDataError):
        pe.open(d, durability="none")


@pytest.mark.parametrize("offset_from_start", [1, 5, 9, 18, 30, 50])
def test_flipped_bit_in_the_last_record_is_a_torn_tail(pristine, tmp_path, offset_from_start):
    _, records, batches = pristine
    d, journal = _copy(pristine, tmp_path)
    rs, re_ = records[-1]
    data = bytearray(journal.read_bytes())
    data[min(rs + offset_from_start, re_ - 1)] ^= 0x01
    journal.write_bytes(bytes(data))
    _check_prefix(d, batches, BATCHES - 1)
    assert list((d / "recovery").glob("torn-*.bin"))


@pytest.mark.parametrize("mode", ["part_of_last", "all_of_last", "last_and_part_of_previous", "appended"])
def test_zeroed_tail(pristine, tmp_path, mode):
    _, records, batches = pristine
    d, journal = _copy(pristine, tmp_path)
    data = bytearray(journal.read_bytes())
    (ps, _), (ls, le) = records[-2], records[-1]
    if mode == "part_of_last":
        data[le - 10 : le] = bytes(10)
        kept = BATCHES - 1
    elif mode == "all_of_last":
        data[ls:le] = bytes(le - ls)
        kept = BATCHES - 1
    elif mode == "last_and_part_of_previous":
        data[ps + 30 : le] = bytes(le - ps - 30)
        kept = BATCHES - 2
    else:  # a power loss after a size update: zeros after the last record
        data += bytes(4096)
        kept = BATCHES
    journal.write_bytes(bytes(data))
    _check_prefix(d, batches, kept)
    if mode in ("all_of_last", "appended"):
        assert not list((d / "recovery").glob("*")) if (d / "recovery").exists() else True


def _patch_header(path: Path, *, version: int | None = None, garbage: bool = False) -> None:
    data = bytearray(path.read_bytes())
    if garbage:
        data[0:8] = b"NOTAJRNL"
    if version is not None:
        struct.pack_into("<I", data, 8, version)
        crc = ffi.new("uint32_t *")
        lib.pe_crc32c(bytes(data[:28]), 28, 0, crc)
        struct.pack_into("<I", data, 28, crc[0])
    path.write_bytes(bytes(data))


def _rolled_store(tmp_path: Path) -> Path:
    d = tmp_path / "rolled"
    with pe.open(d, durability="none", roll_bytes=1 << 20) as store:
        store.create_scope("c")
        store.create_stream("c", "s")
        with store.create_writer("c", "s", writer_id="w") as w:
            for i in range(40):
                w.write_events([bytes([i]) * 60_000], routing_key="k")
                w.flush()
    assert len(list((d / "journal").glob("*.pej"))) >= 3
    return d


def test_future_format_version_is_refused(tmp_path):
    d = _rolled_store(tmp_path)
    newest = sorted((d / "journal").glob("*.pej"))[-1]
    _patch_header(newest, version=lib.PE_FORMAT_VERSION + 1)
    # the store closed cleanly, so applied_pos lies in the newest file: recovery reads its header
    with pytest.raises((errors.FormatVersionError, errors.CorruptDataError)):
        pe.open(d, durability="none")


def test_garbage_header_in_a_file_recovery_reads_is_corruption(tmp_path):
    d = _rolled_store(tmp_path)
    newest = sorted((d / "journal").glob("*.pej"))[-1]
    _patch_header(newest, garbage=True)
    with pytest.raises(errors.FormatVersionError):
        pe.open(d, durability="none")


@pytest.mark.parametrize("size", [0, 1, 8, 31])
def test_partial_header_of_the_newest_file_is_a_crash_while_rolling(tmp_path, size):
    d = _rolled_store(tmp_path)
    files = sorted((d / "journal").glob("*.pej"))
    last_end = files[-1].stat().st_size + int(files[-1].stem)
    partial = d / "journal" / f"{last_end:020d}.pej"
    header = bytearray(32)
    lib.pe_file_header_build(last_end, ffi.from_buffer(header), 32)
    partial.write_bytes(bytes(header[:size]))
    with pe.open(d, durability="none") as store:
        assert not partial.exists()
        evs = [e.event for e in store.read_slice("c", "s")]
        assert evs == [bytes([i]) * 60_000 for i in range(40)]
        with store.create_writer("c", "s", writer_id="w") as w:
            assert w.last_sequence == 39
            w.write_events([b"more"], routing_key="k")
    with pe.open(d, durability="none") as store:
        assert [e.event for e in store.read_slice("c", "s")][-1] == b"more"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_damage_never_yields_wrong_data(pristine, tmp_path, data):
    """Any damage: open fails with CorruptDataError/FormatVersionError, or succeeds with a prefix
    of the batches (every event read was written, once, in per-key order)."""
    _, records, batches = pristine
    d, journal = _copy(pristine, tmp_path)
    buf = bytearray(journal.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["flip", "set", "truncate", "zero"]))
        i = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if kind == "flip" and buf:
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and buf:
            buf[i] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            del buf[i:]
        else:
            n = data.draw(st.integers(1, 64))
            buf[i : i + n] = bytes(len(buf[i : i + n]))
    journal.write_bytes(bytes(buf))
    try:
        store = pe.open(d, durability="none")
    except (errors.CorruptDataError, errors.FormatVersionError):
        return
    with store:
        got = [e.event for e in store.read_slice("c", "s")]
    for kept in range(len(batches) + 1):
        want = sorted(e for _, _, evs in batches[:kept] for e in evs)
        if sorted(got) == want:
            break
    else:
        raise AssertionError(f"recovered events are not a prefix of the batches: {got}")
