"""Recovery after a power cut, built by hand (no FUSE needed; tests/powercut does it on LazyFS):
a hole in unsynced data is a torn tail, not corruption; damage before a position known durable
is corruption; recovered bytes are made durable before anything refers to them; a missing
newest file is noticed through the ROLL record that names it; reads that reach the disk are
checked against the section's CRC and never return another file's bytes."""

from __future__ import annotations

import os
import shutil
import struct
import threading
from pathlib import Path

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

_REC = struct.Struct("<IIQBBHI")


def _records(path: Path) -> list[tuple[int, int, int]]:
    """(position, end, type) of the records of a journal file, by the documented layout."""
    data = path.read_bytes()
    base, off, out = int(path.stem), 32, []
    while off < len(data):
        _, plen, pos, rtype, *_ = _REC.unpack_from(data, off)
        assert pos == base + off
        out.append((pos, pos + 24 + plen, rtype))
        off += 24 + plen
    return out


def _journal(d: Path) -> list[Path]:
    return sorted((d / "journal").glob("*.pej"))


def _snapshot(live: Path, dest: Path) -> Path:
    """What a crash leaves: the directory copied while the store is open."""
    shutil.copytree(live, dest, ignore=shutil.ignore_patterns("LOCK", "lock.mdb", "owner.sock"))
    return dest


def _events(store, key="k") -> list[bytes]:
    return [e.event for e in store.read_slice("r", "s") if e.routing_key == key]


def _store_with_unsynced_batches(tmp_path: Path, n: int) -> tuple[Path, list[bytes]]:
    """A crash snapshot of a durability-"os" store: n batches appended and acknowledged (OS mode:
    written), none fdatasynced after the open's checkpoint, so no record says it was durable."""
    live = tmp_path / "live"
    store = pe.open(live, durability="os", checkpoint_interval=3600)
    store.create_scope("r")
    store.create_stream("r", "s")
    w = store.create_writer("r", "s", writer_id="w")
    evs = []
    for i in range(n):
        ev = b"batch-%d-" % i + os.urandom(50)
        w.write_events([ev], routing_key="k")
        w.flush()
        evs.append(ev)
    snap = _snapshot(live, tmp_path / "snap")
    store.close()
    return snap, evs


def test_a_hole_in_unsynced_data_followed_by_valid_records_is_a_torn_tail(tmp_path):
    """Unsynced writes reached the disk out of order (LazyFS's torn-seq): batch 2 is a hole of
    zeros, batches 3 and 4 are intact after it. Nothing from batch 2 on was durable, so this is a
    torn tail: the store opens with batches 0 and 1, the cut bytes are kept under recovery/."""
    snap, evs = _store_with_unsynced_batches(tmp_path, 5)
    (path,) = _journal(snap)
    recs = [r for r in _records(path) if r[2] == 1]
    pos, end, _ = recs[-3]  # the third batch from the end
    data = bytearray(path.read_bytes())
    base = int(path.stem)
    data[pos - base : end - base] = bytes(end - pos)
    path.write_bytes(bytes(data))
    with pe.open(snap) as store:
        assert _events(store) == evs[:2]
        assert store.torn_bytes_cut == len(data) - (pos - base)
        assert store.create_writer("r", "s", writer_id="w").last_sequence == 1
    assert list((snap / "recovery").iterdir()), "the cut bytes are saved for inspection"


def test_damage_before_a_durable_position_is_corruption(tmp_path):
    """The same hole, but every batch was fdatasynced (flush in durability "fsync"): the next
    record says so, and the damage is refused, naming the file and the durable position."""
    live = tmp_path / "live"
    store = pe.open(live, checkpoint_interval=3600)
    store.create_scope("r")
    store.create_stream("r", "s")
    w = store.create_writer("r", "s", writer_id="w")
    for i in range(5):
        w.write_events([b"batch-%d" % i], routing_key="k")
        w.flush()
    snap = _snapshot(live, tmp_path / "snap")
    store.close()
    (path,) = _journal(snap)
    pos, end, _ = [r for r in _records(path) if r[2] == 1][-3]
    data = bytearray(path.read_bytes())
    data[pos - int(path.stem) + 30] ^= 0xFF
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(errors.CorruptDataError, match="which was durable") as info:
        pe.open(snap)
    assert path.name in str(info.value)
    assert path.read_bytes() == before


def test_open_makes_the_recovered_journal_durable_before_the_checkpoint(tmp_path, monkeypatch):
    """A process crash leaves complete records in the page cache that were never fdatasynced;
    open must fdatasync them before its checkpoint records them as applied in LMDB (else a power
    cut after the open loses data LMDB says was applied)."""
    snap, evs = _store_with_unsynced_batches(tmp_path, 3)
    import pravega_embedded.journal as journal_mod
    import pravega_embedded.metadata as meta_mod

    order: list[str] = []
    real_sync, real_ckpt = os.fdatasync, meta_mod.Metadata.checkpoint
    monkeypatch.setattr(journal_mod.os, "fdatasync", lambda fd: (order.append("fdatasync"), real_sync(fd))[1])
    monkeypatch.setattr(meta_mod.Metadata, "checkpoint",
                        lambda self, *a, **k: (order.append("checkpoint"), real_ckpt(self, *a, **k))[1])
    with pe.open(snap, durability="fsync") as store:
        assert _events(store) == evs
    assert "fdatasync" in order and order.index("fdatasync") < order.index("checkpoint"), order


def test_a_missing_newest_file_is_noticed_through_its_roll_record(tmp_path):
    """The newest journal file holds events no checkpoint has applied yet; deleting it would let
    writers resume at an old sequence (duplicates). The previous file ends with a ROLL record
    naming it, so open refuses and names it, changing nothing."""
    live = tmp_path / "live"
    store = pe.open(live, roll_bytes=1 << 20, checkpoint_interval=3600)
    store.create_scope("r")
    store.create_stream("r", "s")
    w = store.create_writer("r", "s", writer_id="w")
    for i in range(12):
        w.write_events([bytes([i]) * 200_000], routing_key="k")
        w.flush()
    snap = _snapshot(live, tmp_path / "snap")
    store.close()
    files = _journal(snap)
    assert len(files) >= 3 and _records(files[-2])[-1][2] == 4  # a ROLL ends the previous file
    files[-1].unlink()
    before = {p.name: p.read_bytes() for p in _journal(snap)}
    with pytest.raises(errors.CorruptDataError, match=files[-1].name):
        pe.open(snap)
    assert {p.name: p.read_bytes() for p in _journal(snap)} == before


def test_deleting_every_journal_file_is_refused(tmp_path):
    with pe.open(tmp_path / "s") as store:
        store.create_scope("r")
        store.create_stream("r", "s")
        with store.create_writer("r", "s", writer_id="w") as w:
            w.write_event(b"x", routing_key="k")
    for p in _journal(tmp_path / "s"):
        p.unlink()
    with pytest.raises(errors.CorruptDataError, match="journal"):
        pe.open(tmp_path / "s")


def test_a_damaged_section_read_from_disk_is_refused_not_returned(tmp_path):
    """Reads that reach a journal file check the section's CRC: a flipped byte in applied data
    (recovery never scans it) raises CorruptDataError naming the file; other data still reads."""
    d = tmp_path / "s"
    with pe.open(d, tail_cache_bytes=1) as store:
        store.create_scope("r")
        store.create_stream("r", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        with store.create_writer("r", "s", writer_id="w") as w:
            for i in range(200):
                w.write_event(b"event-%03d" % i + b"." * 100, routing_key=f"key-{i % 2}")
            w.flush()
        target = store.stream_info("r", "s").segments[0]
    (path,) = _journal(d)
    data = bytearray(path.read_bytes())
    at = data.index(b"event-100")  # inside some section of one segment
    data[at + 3] ^= 0x01
    path.write_bytes(bytes(data))
    with pe.open(d, tail_cache_bytes=1) as store:
        with pytest.raises(errors.CorruptDataError, match=path.name):
            list(store.read_slice("r", "s"))
        assert target.segment_id in (0, 1)


def test_a_read_racing_with_reclamation_never_returns_another_files_bytes(tmp_path, monkeypatch):
    """A read holds the journal file it reads: reclamation deletes the file meanwhile and the
    descriptor number is reused by another file, yet the read returns the right bytes; reads
    after it raise TruncatedDataError."""
    from pravega_embedded.journal import Journal

    d = tmp_path / "s"
    store = pe.open(d, roll_bytes=1 << 20, tail_cache_bytes=1)
    try:
        store.create_scope("r")
        store.create_stream("r", "s")
        with store.create_writer("r", "s", writer_id="w") as w:
            for i in range(30):
                w.write_events([bytes([65 + i % 26]) * 100_000], routing_key="k")
        store.checkpoint()
        first = store.read_slice("r", "s")
        paused, go = threading.Event(), threading.Event()
        real = Journal._pread
        calls = []

        def pread(f, pos, n):
            if not calls:
                calls.append(pos)
                paused.set()
                assert go.wait(10)
            return real(f, pos, n)

        monkeypatch.setattr(Journal, "_pread", staticmethod(pread))
        got: list = []
        t = threading.Thread(target=lambda: got.append(next(iter(first)).event))
        t.start()
        assert paused.wait(10)
        store.truncate_stream("r", "s", store.stream_info("r", "s").tail)  # deletes old files
        decoys = [os.open(os.devnull, os.O_RDONLY) for _ in range(8)]  # take freed fd numbers
        go.set()
        t.join(10)
        for fd in decoys:
            os.close(fd)
        assert got == [b"A" * 100_000]
        monkeypatch.undo()
        with pytest.raises(errors.TruncatedDataError):  # its file is gone now
            list(first)
    finally:
        store.close()
