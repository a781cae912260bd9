"""Corruption of the journal, end to end through ``pe.open`` (issue 2: "truncate the journal at
every byte of its last two records, flip bits, zero the tail").

How a journal that recovery must scan is made
---------------------------------------------
Closing a store writes a checkpoint with ``applied_pos`` = the end of the journal, and recovery
never looks at bytes before ``applied_pos``. So the fixtures build the journal with a store whose
checkpoints are disabled (``checkpoint_interval=3600``: the only checkpoint is the one at open,
taken before any event, so ``applied_pos`` is 32 = the first record), write flushed batches
(``write_events(..., routing_key=...)`` + ``flush()`` = exactly one EVENTS record each), and copy
the store directory *while the store is still open* (``LOCK`` and LMDB's ``lock.mdb`` left out):
the copy is what a crash right after the last flush leaves. The fixtures assert that the copy's
metadata says ``applied_pos == 32`` and that an undamaged copy recovers every event; record
boundaries come from parsing the journal file with the layout in docs/format.md (independently
of the library's parser). Each case damages a fresh copy of that pristine snapshot.

A second fixture does the same with ``roll_bytes=1 MiB`` so the journal has several files (for
the rules about files that are not the newest, file headers and crashes while rolling); a third
is a cleanly closed (checkpointed) store, for damage to data the metadata says was applied.

Rules checked (docs/format.md, "Recovery"): every complete record is kept and a torn tail of the
newest file is cut (non-zero cut bytes saved under ``recovery/``); damage followed by a valid
record, damage in a file that is not the newest, a gap, or missing applied data is
``CorruptDataError`` naming the file, and nothing on disk is changed; an unknown format version
is ``FormatVersionError``; a newest file shorter than its header is a crash while rolling.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import lmdb
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded._native import ffi, lib

HEADER = 32
_REC = struct.Struct("<IIQBBHI")  # crc, len, pos, type, flags, magic, reserved
BATCHES = 12
WRITERS = ("w0", "w1")
ROLLED_EVENTS = 40
ROLLED_SIZE = 60_000


# ---------------------------------------------------------------------------- helpers
def _batch(i: int) -> tuple[str, str, list[bytes]]:
    """Batch i: small events (so the last two records are ~250 bytes), 2 writers, 3 keys."""
    writer = WRITERS[i % 2]
    key = f"k{i % 3}"
    return writer, key, [b"%s-%d-%d" % (writer.encode(), i, j) for j in range(1 + i % 3)]


def _snapshot(live: Path, dest: Path) -> None:
    """Copy an open store's directory: what a crash at this moment leaves on disk."""
    shutil.copytree(live, dest, ignore=shutil.ignore_patterns("LOCK", "lock.mdb", "owner.sock"))


def _applied_pos(store_dir: Path) -> int:
    env = lmdb.open(str(store_dir / "meta"), readonly=True, lock=False, max_dbs=8, subdir=True)
    try:
        db = env.open_db(b"store", create=False)
        with env.begin() as txn:
            return struct.unpack_from("<Q", txn.get(b"applied_pos", db=db))[0]
    finally:
        env.close()


def _records(data: bytes, base: int = 0) -> list[tuple[int, int]]:
    """(start, end) positions of the records of one journal file, by the documented layout."""
    out, off = [], HEADER
    while off < len(data):
        _, plen, rpos, rtype, _, magic, _ = _REC.unpack_from(data, off)
        # EVENTS records; a file that is not the newest ends with a ROLL record (type 4)
        assert (rpos, magic) == (base + off, 0x4550) and rtype in (1, 4)
        assert rtype == 1 or off + 24 + plen == len(data)
        out.append((base + off, base + off + 24 + plen))
        off += 24 + plen
    assert off == len(data)
    return out


def _journal_files(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "journal").glob("*.pej"))


def _journal_file(store_dir: Path) -> Path:
    files = _journal_files(store_dir)
    assert len(files) == 1
    return files[0]


def _fresh(src: Path, tmp_path: Path, name: str = "trial") -> Path:
    dest = tmp_path / name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    return dest


def _torn_files(store_dir: Path) -> dict[str, bytes]:
    rec = store_dir / "recovery"
    return {p.name: p.read_bytes() for p in rec.iterdir()} if rec.exists() else {}


def _disk(store_dir: Path) -> dict[str, bytes]:
    """Every journal and recovery file's bytes (to show a failed open changed nothing)."""
    files = {}
    for sub in ("journal", "recovery"):
        d = store_dir / sub
        if d.exists():
            files.update({f"{sub}/{p.name}": p.read_bytes() for p in d.iterdir()})
    return files


def _want(batches, kept: int) -> tuple[dict[str, list[bytes]], dict[str, int]]:
    per_key: dict[str, list[bytes]] = {}
    last_seq = {w: -1 for w in WRITERS}
    for writer, key, evs in batches[:kept]:
        per_key.setdefault(key, []).extend(evs)
        last_seq[writer] += len(evs)
    return per_key, last_seq


def _got(store) -> tuple[dict[str, list[bytes]], dict[str, int]]:
    per_key: dict[str, list[bytes]] = {}
    for ev in store.read_slice("c", "s"):
        per_key.setdefault(ev.routing_key, []).append(ev.event)
    last_seq = {}
    for writer in WRITERS:
        w = store.create_writer("c", "s", writer_id=writer)
        last_seq[writer] = w.last_sequence
        w.close()
    return per_key, last_seq


def _check_prefix(store_dir: Path, batches, kept: int, end: int, durability: str = "none") -> None:
    """The store holds exactly batches[:kept] (each event once, per-key order, nothing of a cut
    record), writers resume after their last kept batch, the journal ends at ``end``, and the
    store keeps working: what it writes after recovery survives a reopen."""
    with pe.open(store_dir, durability=durability) as store:
        assert _journal_file(store_dir).stat().st_size == end
        assert _got(store) == _want(batches, kept)
        with store.create_writer("c", "s", writer_id="after") as w:
            w.write_event(b"after-recovery", routing_key="z")
    with pe.open(store_dir, durability=durability) as store:
        per_key, last_seq = _got(store)
        assert per_key.pop("z") == [b"after-recovery"]
        assert (per_key, last_seq) == _want(batches, kept)


def _patch_header(path: Path, *, version: int | None = None, magic: bytes | None = None,
                  base_delta: int = 0) -> None:
    """Rewrite fields of a file header; with ``version`` the header CRC is made valid again."""
    data = bytearray(path.read_bytes())
    if magic is not None:
        data[0:8] = magic
    if base_delta:
        struct.pack_into("<Q", data, 16, struct.unpack_from("<Q", data, 16)[0] + base_delta)
    if version is not None:
        struct.pack_into("<I", data, 8, version)
        crc = ffi.new("uint32_t *")
        assert lib.pe_crc32c(bytes(data[:28]), 28, 0, crc) == lib.PE_OK
        struct.pack_into("<I", data, 28, crc[0])
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """(snapshot dir, [(record start, record end)], batches, journal bytes): one journal file of
    BATCHES un-checkpointed records, 2 writers, 3 keys over a 3-segment stream."""
    root = tmp_path_factory.mktemp("corruption")
    live, snap = root / "live", root / "snapshot"
    store = pe.open(live, durability="fsync", checkpoint_interval=3600)
    store.create_scope("c")
    store.create_stream("c", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    writers = {w: store.create_writer("c", "s", writer_id=w) for w in WRITERS}
    batches = []
    for i in range(BATCHES):
        writer, key, evs = _batch(i)
        writers[writer].write_events(evs, routing_key=key)
        writers[writer].flush()
        batches.append((writer, key, evs))
    _snapshot(live, snap)
    store.close()
    assert _applied_pos(snap) == HEADER, "the snapshot must make recovery scan every record"
    data = _journal_file(snap).read_bytes()
    records = _records(data)
    assert len(records) == BATCHES
    assert records[-1][1] - records[-2][0] < 400, "keep the every-byte truncation cheap"
    return snap, records, batches, data


@pytest.fixture(scope="module")
def rolled(tmp_path_factory):
    """(un-checkpointed snapshot, cleanly closed store): one writer, ROLLED_EVENTS events of
    ROLLED_SIZE bytes, one flush each, journal files rolling at 1 MiB."""
    root = tmp_path_factory.mktemp("rolled")
    live, snap = root / "live", root / "snapshot"
    store = pe.open(live, durability="os", roll_bytes=1 << 20, checkpoint_interval=3600)
    store.create_scope("c")
    store.create_stream("c", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    with store.create_writer("c", "s", writer_id="w") as w:
        for i in range(ROLLED_EVENTS):
            w.write_events([bytes([i]) * ROLLED_SIZE], routing_key="k")
            w.flush()
    _snapshot(live, snap)
    store.close()
    assert _applied_pos(snap) == HEADER
    assert len(_journal_files(snap)) >= 3
    newest = _journal_files(live)[-1]
    assert _applied_pos(live) == int(newest.stem) + newest.stat().st_size  # closed: all applied
    return snap, live


def _check_rolled(store_dir: Path, durability: str = "none") -> None:
    """All ROLLED_EVENTS events are there once, in order; the writer resumes; writes survive."""
    want = [bytes([i]) * ROLLED_SIZE for i in range(ROLLED_EVENTS)]
    with pe.open(store_dir, durability=durability, roll_bytes=1 << 20) as store:
        assert [e.event for e in store.read_slice("c", "s")] == want
        with store.create_writer("c", "s", writer_id="w") as w:
            assert w.last_sequence == ROLLED_EVENTS - 1
            w.write_events([b"more"], routing_key="k")
    with pe.open(store_dir, durability=durability, roll_bytes=1 << 20) as store:
        assert [e.event for e in store.read_slice("c", "s")] == want + [b"more"]


def _open_fails(store_dir: Path, exc_type: type[Exception], names: Path) -> str:
    """pe.open raises exc_type naming the file; nothing on disk changed; it fails again."""
    before = _disk(store_dir)
    with pytest.raises(exc_type) as info:
        pe.open(store_dir, durability="none")
    assert names.name in str(info.value)
    assert _disk(store_dir) == before, "a failed recovery must not drop, cut or repair anything"
    with pytest.raises(exc_type):  # the lock was released, and the verdict is stable
        pe.open(store_dir, durability="none")
    assert _disk(store_dir) == before
    return str(info.value)


# ---------------------------------------------------------------------------- clean
def test_undamaged_snapshot_recovers_everything_with_default_durability(pristine, tmp_path):
    snap, records, batches, _ = pristine
    d = _fresh(snap, tmp_path)
    with pe.open(d) as store:
        assert store.recovered_records == BATCHES  # the snapshot makes recovery replay all
        segments = {e.segment_id for e in store.read_slice("c", "s")}
        assert len(segments) >= 2
    _check_prefix(d, batches, BATCHES, records[-1][1], durability="fsync")
    assert _torn_files(d) == {}


# ---------------------------------------------------------------------------- case 1: truncation
def test_truncate_at_every_byte_of_the_last_two_records(pristine, tmp_path):
    snap, records, batches, data = pristine
    for cut in range(records[-2][0], records[-1][1] + 1):
        d = _fresh(snap, tmp_path)
        os.truncate(_journal_file(d), cut)
        kept = sum(1 for _, e in records if e <= cut)
        end = records[kept - 1][1]
        _check_prefix(d, batches, kept, end)
        # the cut bytes of a partial record were saved for inspection, named by position; an
        # all-zero tail is not (journal._save_torn): the first byte of a record is its CRC's
        # low byte, 0 in one fixture of 256 (the write times differ per run)
        torn = data[end:cut]
        assert _torn_files(d) == ({f"torn-{end:020d}.bin": torn} if any(torn) else {})


def test_truncation_with_default_durability_then_the_application_resumes(pristine, tmp_path):
    """A cut inside the last record (writer w1's batch 11) with durability "fsync": w1 resumes at
    last_sequence + 1; re-sending its kept batch 9 is dropped, re-sending batch 11 restores it."""
    snap, records, batches, data = pristine
    d = _fresh(snap, tmp_path)
    cut = records[-1][0] + 30
    os.truncate(_journal_file(d), cut)
    with pe.open(d) as store:
        assert store.torn_bytes_cut == 30
        assert _got(store) == _want(batches, BATCHES - 1)
        w = store.create_writer("c", "s", writer_id="w1")
        seq = w.last_sequence
        _, key9, evs9 = batches[9]
        for i, ev in enumerate(evs9):  # already durable: dropped, not duplicated
            w.write_event(ev, routing_key=key9, sequence=seq - len(evs9) + 1 + i)
        _, key11, evs11 = batches[11]
        for i, ev in enumerate(evs11):
            assert w.write_event(ev, routing_key=key11, sequence=seq + 1 + i) == seq + 1 + i
        w.flush()
        w.close()
    assert _torn_files(d) == {f"torn-{records[-1][0]:020d}.bin": data[records[-1][0]:cut]}
    with pe.open(d) as store:
        assert _got(store) == _want(batches, BATCHES)


# ---------------------------------------------------------------------------- case 2: bit flips
FLIPS = {  # (offset in the record, bit); negative offsets count from the record's end
    "crc_low": (0, 0), "crc_high": (3, 7),
    "length_low": (4, 0), "length_high": (7, 7),
    "position_low": (8, 3), "position_high": (15, 6),
    "type": (16, 1), "flags": (17, 0), "magic": (18, 2), "reserved": (21, 5),
    "first_seq": (24, 0), "last_seq": (32, 4), "write_time": (47, 7), "n_sections": (48, 1),
    "writer_id_length": (52, 0), "writer_id": (54, 3), "section_uid": (56, 0),
    "section_offset": (64, 6), "section_n_events": (72, 0), "section_n_bytes": (76, 2),
    "frame_length": (80, 2), "frame_key_length": (84, 0), "event_payload": (90, 5),
    "last_byte": (-1, 0),
}


def _flip(data: bytes, record: tuple[int, int], where: str) -> bytes:
    rs, re_ = record
    off, bit = FLIPS[where]
    i = re_ + off if off < 0 else rs + off
    assert rs <= i < re_
    out = bytearray(data)
    out[i] ^= 1 << bit
    return bytes(out)


@pytest.mark.parametrize("record", [0, 4, 7, BATCHES - 2])
@pytest.mark.parametrize("where", sorted(FLIPS))
def test_flipped_bit_before_valid_records_is_corruption(pristine, tmp_path, record, where):
    snap, records, _, data = pristine
    d = _fresh(snap, tmp_path)
    journal = _journal_file(d)
    journal.write_bytes(_flip(data, records[record], where))
    message = _open_fails(d, errors.CorruptDataError, journal)
    assert str(records[record][0]) in message  # names the damaged position
    assert _torn_files(d) == {}


@pytest.mark.parametrize("where", sorted(FLIPS))
def test_flipped_bit_in_the_last_record_is_a_torn_tail(pristine, tmp_path, where):
    snap, records, batches, data = pristine
    d = _fresh(snap, tmp_path)
    damaged = _flip(data, records[-1], where)
    _journal_file(d).write_bytes(damaged)
    start = records[-1][0]
    _check_prefix(d, batches, BATCHES - 1, start)
    assert _torn_files(d) == {f"torn-{start:020d}.bin": damaged[start:]}


# ---------------------------------------------------------------------------- case 4: zeroed tail
# name -> (how, n) given (length of the last record, length of the one before it)
ZERO_CASES = {
    "last_byte": lambda last, prev: ("overwrite", 1),
    "last_10_bytes": lambda last, prev: ("overwrite", 10),
    "all_but_first_byte_of_last": lambda last, prev: ("overwrite", last - 1),
    "exactly_the_last_record": lambda last, prev: ("overwrite", last),
    "last_and_5_bytes_of_previous": lambda last, prev: ("overwrite", last + 5),
    "last_and_all_but_header_of_previous": lambda last, prev: ("overwrite", last + prev - 24),
    "last_two_records": lambda last, prev: ("overwrite", last + prev),
    "append_1": lambda last, prev: ("append", 1),
    "append_24": lambda last, prev: ("append", 24),
    "append_4096": lambda last, prev: ("append", 4096),
}


@pytest.mark.parametrize("case", sorted(ZERO_CASES))
def test_zeroed_tail(pristine, tmp_path, case):
    snap, records, batches, data = pristine
    (ps, pe_), (ls, le) = records[-2], records[-1]
    how, n = ZERO_CASES[case](le - ls, pe_ - ps)
    damaged = data[:-n] + bytes(n) if how == "overwrite" else data + bytes(n)
    d = _fresh(snap, tmp_path)
    _journal_file(d).write_bytes(damaged)
    intact = len(data) - n if how == "overwrite" else len(data)
    kept = sum(1 for _, e in records if e <= intact)
    end = records[kept - 1][1]
    _check_prefix(d, batches, kept, end)
    tail = damaged[end:]
    # an all-zero tail carries nothing: nothing is saved; otherwise the cut bytes are kept
    assert _torn_files(d) == ({f"torn-{end:020d}.bin": tail} if tail.strip(b"\0") else {})


# ---------------------------------------------------------------------------- case 5: headers, files
@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("damage", ["magic", "zeros", "base", "crc", "header_size"])
def test_damaged_header_of_a_file_that_is_not_the_newest_is_corruption(rolled, tmp_path, which, damage):
    d = _fresh(rolled[0], tmp_path)
    path = _journal_files(d)[which]
    if damage == "magic":
        _patch_header(path, magic=b"NOTAJRNL")
    elif damage == "zeros":
        path.write_bytes(bytes(HEADER) + path.read_bytes()[HEADER:])
    elif damage == "base":
        _patch_header(path, base_delta=1 << 12)
    elif damage == "crc":
        data = bytearray(path.read_bytes())
        data[29] ^= 0x40
        path.write_bytes(bytes(data))
    else:
        data = bytearray(path.read_bytes())
        struct.pack_into("<I", data, 12, 64)
        path.write_bytes(bytes(data))
    _open_fails(d, errors.CorruptDataError, path)


@pytest.mark.parametrize("version", [lib.PE_FORMAT_VERSION + 1, 0xFFFFFFFF, 0])
@pytest.mark.parametrize("which", ["first", "newest"])
def test_unknown_format_version_is_refused(rolled, tmp_path, version, which):
    d = _fresh(rolled[0], tmp_path)
    files = _journal_files(d)
    path = files[0] if which == "first" else files[-1]
    _patch_header(path, version=version)
    message = _open_fails(d, errors.FormatVersionError, path)
    assert "version" in message.lower() or "format" in message.lower()


def test_unknown_format_version_in_a_checkpointed_store(rolled, tmp_path):
    """A cleanly closed store: recovery reads only the newest file's header, and refuses it."""
    d = _fresh(rolled[1], tmp_path)
    newest = _journal_files(d)[-1]
    _patch_header(newest, version=lib.PE_FORMAT_VERSION + 1)
    _open_fails(d, errors.FormatVersionError, newest)


@pytest.mark.parametrize("damage", ["truncated", "zeros_appended", "flipped_last_record"])
def test_damage_at_the_end_of_a_file_that_is_not_the_newest_is_corruption(rolled, tmp_path, damage):
    """Only the newest file can have a torn tail: the same damage in an older file is refused."""
    d = _fresh(rolled[0], tmp_path)
    path = _journal_files(d)[0]
    data = path.read_bytes()
    records = _records(data, int(path.stem))
    if damage == "truncated":
        os.truncate(path, len(data) - 100)
    elif damage == "zeros_appended":
        path.write_bytes(data + bytes(4096))
    else:
        last_start = records[-1][0] - int(path.stem)
        path.write_bytes(_flip(data, (last_start, len(data)), "last_byte"))
    _open_fails(d, errors.CorruptDataError, path)


def test_a_missing_middle_file_is_corruption(rolled, tmp_path):
    d = _fresh(rolled[0], tmp_path)
    files = _journal_files(d)
    files[1].unlink()
    _open_fails(d, errors.CorruptDataError, files[2])


def test_missing_applied_data_in_the_newest_file_is_corruption(rolled, tmp_path):
    """A cleanly closed store (applied_pos = end of the journal) whose newest file lost records:
    the metadata describes events that are gone, so open must refuse."""
    d = _fresh(rolled[1], tmp_path)
    newest = _journal_files(d)[-1]
    assert newest.stat().st_size > HEADER + 1000
    os.truncate(newest, newest.stat().st_size - 1000)
    _open_fails(d, errors.CorruptDataError, newest)


@pytest.mark.parametrize("size", [0, 10, 31])
@pytest.mark.parametrize("layout", ["one_file", "rolled"])
def test_applied_newest_file_cut_below_its_header_is_corruption_not_a_roll(
        pristine, rolled, tmp_path, layout, size):
    """The newest file holds records the checkpoint says were applied: cutting it to less than a
    header is lost data, not "a crash while rolling" (such a file never holds an applied record),
    so open must refuse and must not delete the file."""
    if layout == "rolled":
        d = _fresh(rolled[1], tmp_path)
    else:
        d = _fresh(pristine[0], tmp_path)
        pe.open(d, durability="none").close()  # a clean close: applied_pos = end of the journal
    newest = _journal_files(d)[-1]
    assert _applied_pos(d) > int(newest.stem) + HEADER
    os.truncate(newest, size)
    _open_fails(d, errors.CorruptDataError, newest)


# ---------------------------------------------------------------------------- case 6: rolling crash
@pytest.mark.parametrize("checkpointed", [False, True], ids=["replaying", "checkpointed"])
@pytest.mark.parametrize("size", [0, 1, 8, 31, "zeros32"])
def test_partial_header_of_the_newest_file_is_a_crash_while_rolling(rolled, tmp_path, checkpointed, size):
    d = _fresh(rolled[1] if checkpointed else rolled[0], tmp_path)
    last = _journal_files(d)[-1]
    base = int(last.stem) + last.stat().st_size
    header = ffi.new("char[32]")
    assert lib.pe_file_header_build(base, header, 32) == lib.PE_OK
    content = bytes(32) if size == "zeros32" else ffi.buffer(header)[:size]
    partial = d / "journal" / f"{base:020d}.pej"
    partial.write_bytes(content)
    _check_rolled(d, durability="fsync" if size == 8 else "none")
    assert not partial.exists() or partial.read_bytes()[:8] == b"PEJOURNL"  # removed or re-made
    # a partial header is saved for inspection unless it is empty or all zeros
    assert _torn_files(d) == ({f"torn-{base:020d}.bin": content} if content.strip(b"\0") else {})


# ---------------------------------------------------------------------------- case 7: random damage
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_damage_never_yields_wrong_data(pristine, tmp_path, data):
    """Any damage: open fails with CorruptDataError (FormatVersionError is one), or succeeds with
    batches[:k] for one k: every event read was written, once, in per-key order, and each
    writer's last_sequence is that of its last kept batch."""
    snap, _, batches, pristine_bytes = pristine
    buf = bytearray(pristine_bytes)
    for _ in range(data.draw(st.integers(1, 3), label="n_damages")):
        kind = data.draw(st.sampled_from(["flip", "set", "truncate", "zero", "append"]))
        i = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if kind == "flip" and buf:
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and buf:
            buf[i] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            del buf[i:]
        elif kind == "zero":
            n = data.draw(st.integers(1, 64))
            buf[i : i + n] = bytes(len(buf[i : i + n]))
        else:
            buf += data.draw(st.binary(min_size=1, max_size=64))
    d = _fresh(snap, tmp_path)
    _journal_file(d).write_bytes(bytes(buf))
    try:
        store = pe.open(d, durability="none")
    except errors.CorruptDataError as exc:
        event(f"refused: {type(exc).__name__}")
        return
    with store:
        got = _got(store)
        with store.create_writer("c", "s", writer_id="after") as w:
            w.write_event(b"after", routing_key="z")
    kept = [k for k in range(BATCHES + 1) if got == _want(batches, k)]
    assert kept, f"not a prefix of the batches: {got}"
    event(f"recovered {'all' if kept[0] == BATCHES else 'a proper prefix'}")
    with pe.open(d, durability="none") as store:
        per_key, last_seq = _got(store)
        assert per_key.pop("z") == [b"after"]
        assert (per_key, last_seq) == got
