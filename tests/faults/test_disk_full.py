"""A really full disk (ENOSPC), in every durability mode: a store on a small tmpfs, and on a
loop-mounted ext4 image of a few MiB (made and removed by the test), is filled until it fails.

The error is StorageFullError (errno ENOSPC) with a hint to free space; nothing acknowledged is
lost; after space is freed (a filler file made beforehand is deleted) either the same store goes
on (a failed journal write is retryable: the writer keeps its batch and the next flush writes
it, exactly once) or, if the store stopped (fail-stop: LMDB could not commit), it reopens and
works. LMDB's own limit (map_size) gives StorageFullError naming map_size; reopening with a
larger map_size recovers everything acknowledged."""

from __future__ import annotations

import errno

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from fault_helpers import (
    KEYS,
    QUIET,
    SCOPE,
    STREAM,
    Findings,
    Ledger,
    call,
    can_loop_mount,
    can_mount_tmpfs,
    check_full_error,
    check_refuses_everything,
    close_after_reported,
    describe,
    reopen_and_verify,
    setup_stream,
)

MiB = 1 << 20
KiB = 1 << 10
_TMPFS = can_mount_tmpfs()
_LOOP = can_loop_mount()
DISKS = [
    pytest.param("tmpfs", marks=pytest.mark.skipif(not _TMPFS[0], reason=_TMPFS[1] or "tmpfs")),
    pytest.param("ext4", marks=pytest.mark.skipif(not _LOOP[0], reason=_LOOP[1] or "loop")),
]
SIZE_KIB = {"tmpfs": 2048, "ext4": 6144}
MODES = ["fsync", "os", "none"]


def _acked_round(ledger: Ledger, w: pe.EventStreamWriter, n: int = 4, size: int = 64) -> None:
    for key in KEYS:
        ledger.write(w, key, n, size)
    assert ledger.flush(w) == w.last_sequence


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("disk", DISKS)
def test_journal_fills_the_disk(small_disk, disk, durability):
    """A writer fills the disk with journal records until a flush raises StorageFullError.
    The failed record is cut off and kept by the writer: after the filler is deleted the next
    flush writes it exactly once and the store goes on; every acknowledged event survives
    close and reopen."""
    f = Findings()
    d = small_disk(disk, SIZE_KIB[disk])
    d.fill("filler", 256 * KiB)
    s = d.open_store(durability=durability, roll_bytes=MiB, **QUIET)
    setup_stream(s)
    ledger = Ledger()
    w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
    w2 = s.create_writer(SCOPE, STREAM, writer_id="w2", linger=60)
    _acked_round(ledger, w2)
    full = None
    for i in range(2 * SIZE_KIB[disk] // 32):
        ledger.write(w, KEYS[i % 3], 8, 4096)  # 32 KiB per record
        _, full = call(lambda: ledger.flush(w))
        if full is not None:
            break
    assert full is not None, "the disk never filled up"
    check_full_error(f, full, "the flush that filled the disk")
    acked = ledger.acked["w1"]
    f.expect(w.durable_sequence == acked,
             f"durable_sequence {w.durable_sequence} != last acknowledged {acked}")
    failed = s.status().failed
    print(f"[{disk}/{durability}] after {i + 1} records: {describe(full)}; stopped: {failed}")
    if disk == "tmpfs":  # tmpfs has no real fdatasync: only the journal write can have failed
        f.expect(failed is None, f"a failed journal write (not a sync) stopped the store: {failed}")
    if failed is None:
        _, again = call(w.flush)  # still full: fails again, writes nothing twice
        check_full_error(f, again, "a second flush on the still full disk")
        ledger.verify(f, s, "on the full disk", check_writers=False)
    d.free("filler")
    if failed is None:
        n, exc = call(lambda: ledger.flush(w))
        f.expect(exc is None, f"flush after freeing space raised {describe(exc)}")
        f.expect(n == w.last_sequence, f"flush after freeing space returned {n}, the writer "
                                       f"wrote up to {w.last_sequence}")
        _acked_round(ledger, w)
        _acked_round(ledger, w2)
        ledger.verify(f, s, "after freeing space", check_writers=False)
        _, exc = call(s.close)
        f.expect(exc is None, f"close() after freeing space raised {describe(exc)}")
    else:
        close_after_reported(f, s)
    reopen_and_verify(f, d.mnt / "store", durability, ledger, roll_bytes=MiB)
    f.check()


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("disk", DISKS)
def test_metadata_fills_the_disk(small_disk, disk, durability):
    """The disk is full (a hog file takes what is left): create_stream after create_stream
    until LMDB cannot grow its file. StorageFullError; then either the store goes on once the
    hog is deleted, or it stopped (fail-stop) and reopens with every acknowledged event and
    every stream whose creation returned."""
    f = Findings()
    d = small_disk(disk, SIZE_KIB[disk])
    d.fill("filler", 128 * KiB)
    s = d.open_store(durability=durability, **QUIET)
    setup_stream(s)
    ledger = Ledger()
    w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
    _acked_round(ledger, w)
    d.fill("margin", 48 * KiB)
    d.fill("hog")
    d.free("margin")  # 48 KiB left: some streams are created before LMDB cannot grow
    created: list[str] = []
    exc = None
    for i in range(5000):
        _, exc = call(lambda: s.create_stream(SCOPE, f"s{i}"))
        if exc is not None:
            break
        created.append(f"s{i}")
    assert exc is not None, "the metadata never filled the disk"
    check_full_error(f, exc, f"create_stream on a full disk (after {len(created)} streams)")
    failed = s.status().failed
    print(f"[{disk}/{durability}] after {len(created)} streams: {describe(exc)}")
    if failed is not None:
        check_refuses_everything(f, s, [w], ledger, errno.ENOSPC)
    d.free("hog")
    d.free("filler")
    if failed is None:
        _, exc = call(lambda: s.create_stream(SCOPE, "after-free"))
        f.expect(exc is None, f"create_stream after freeing space raised {describe(exc)}")
        _acked_round(ledger, w)
        _, exc = call(s.close)
        f.expect(exc is None, f"close() after freeing space raised {describe(exc)}")
    else:
        close_after_reported(f, s)
    reopen_and_verify(f, d.mnt / "store", durability, ledger)
    with pe.open(d.mnt / "store", durability=durability) as s2:
        missing = sorted(set(created) - set(s2.list_streams(SCOPE)))
        f.expect(not missing, f"streams whose create_stream returned are missing: {missing[:10]}")
    f.check()


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("disk", DISKS[:1])
def test_checkpoint_fills_the_disk(small_disk, disk, durability):
    """Many small records over 16 segments leave much index data for the checkpoint; the
    disk is then filled, so the checkpoint's LMDB commit cannot grow the file."""
    f = Findings()
    d = small_disk(disk, SIZE_KIB[disk])
    s = d.open_store(durability=durability, **QUIET)
    setup_stream(s, 16)
    ledger = Ledger()
    w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
    keys = [f"k{i}" for i in range(48)]
    for _ in range(60):
        for k in keys:
            ledger.write(w, k, 1, 16)
        ledger.flush(w)
    d.fill("hog")
    _, exc = call(s.checkpoint)
    check_full_error(f, exc, "a checkpoint on a full disk")
    failed = s.status().failed
    if failed is not None:
        check_refuses_everything(f, s, [w], ledger, errno.ENOSPC)
    d.free("hog")
    if failed is None:
        _, exc = call(s.checkpoint)
        f.expect(exc is None, f"checkpoint after freeing space raised {describe(exc)}")
        _acked_round(ledger, w)
        _, exc = call(s.close)
        f.expect(exc is None, f"close() after freeing space raised {describe(exc)}")
    else:
        close_after_reported(f, s)
    reopen_and_verify(f, d.mnt / "store", durability, ledger)
    f.check()


def _check_map_full(f: Findings, exc: BaseException | None, what: str) -> None:
    if not isinstance(exc, errors.StorageFullError):
        f.add(f"{what}: expected StorageFullError, got {describe(exc)}")
        return
    f.expect(exc.errno == errno.ENOSPC, f"{what}: errno {exc.errno}, expected ENOSPC")
    f.expect("map_size" in str(exc), f"{what}: no map_size hint in {str(exc)!r}")


@pytest.mark.parametrize("durability", MODES)
def test_lmdb_map_full(opener, store_path, durability):
    """map_size 128 KiB: streams are created until LMDB's map is full (StorageFullError naming
    map_size), then a writer goes on writing many small records (the journal has room) whose
    index no checkpoint can store. Every acknowledged event survives: the store opens again
    with a larger map_size (with the same small one it opens or says map_size again)."""
    f = Findings()
    small = 128 * KiB
    s = opener(durability=durability, map_size=small, **QUIET)
    setup_stream(s, 8)
    ledger = Ledger()
    w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
    _acked_round(ledger, w)
    exc = None
    created: list[str] = []
    for i in range(5000):
        _, exc = call(lambda: s.create_stream(SCOPE, f"s{i}"))
        if exc is not None:
            break
        created.append(f"s{i}")
    _check_map_full(f, exc, f"create_stream with a full map (after {len(created)} streams)")
    failed = s.status().failed
    if failed is None:
        keys = [f"k{i}" for i in range(24)]
        for _ in range(40):  # ~1000 index entries waiting for a checkpoint
            for k in keys:
                ledger.write(w, k, 1, 16)
            _, exc = call(lambda: ledger.flush(w))
            if exc is not None:
                f.add(f"a flush (journal has room) with a full LMDB map raised {describe(exc)}")
                break
        _, exc = call(s.checkpoint)
        if exc is not None:
            _check_map_full(f, exc, "a checkpoint with a full map")
        _, exc = call(s.close)
        if exc is not None:
            _check_map_full(f, exc, "close() with a full map")
        f.expect(s.closed, "the store is not closed after close()")
    else:
        check_refuses_everything(f, s, [w], ledger, errno.ENOSPC)
        close_after_reported(f, s)
    s2, exc = call(lambda: pe.open(store_path, durability=durability, map_size=small, **QUIET))
    if s2 is not None:
        s2.close()
    else:
        _check_map_full(f, exc, "reopening with the same small map_size")
    reopen_and_verify(f, store_path, durability, ledger, map_size=16 * MiB)
    with pe.open(store_path, durability=durability, map_size=16 * MiB) as s3:
        missing = sorted(set(created) - set(s3.list_streams(SCOPE)))
        f.expect(not missing, f"streams whose create_stream returned are missing: {missing[:10]}")
    f.check()


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("disk", DISKS)
def test_disk_full_at_journal_roll(small_disk, disk, durability):
    """The journal file is nearly at roll_bytes and the disk is full: the next record needs a
    new file, whose creation fails. Retryable like any failed write: after the hog is deleted
    the kept batch goes into the new file, exactly once."""
    f = Findings()
    d = small_disk(disk, SIZE_KIB[disk])
    s = d.open_store(durability=durability, roll_bytes=MiB, **QUIET)
    setup_stream(s)
    ledger = Ledger()
    w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
    for i in range(31):  # ~990 KiB in the first file
        ledger.write(w, KEYS[i % 3], 8, 4096)
        ledger.flush(w)
    js = s._engine.journal.status()
    assert MiB - (js.written - js.file_base) < 48 * KiB
    d.fill("hog")
    ledger.write(w, "a", 16, 4096)  # 64 KiB: does not fit, the append rolls first
    _, exc = call(w.flush)
    check_full_error(f, exc, "the flush whose journal roll found the disk full")
    failed = s.status().failed
    print(f"[{disk}/{durability}] {describe(exc)}; stopped: {failed}")
    jfiles = sorted(p.name for p in (d.mnt / "store" / "journal").iterdir())
    f.expect(len(jfiles) == 1, f"journal files after the failed roll: {jfiles}")
    d.free("hog")
    if failed is None:
        n, exc = call(lambda: ledger.flush(w))
        f.expect(exc is None, f"flush after freeing space raised {describe(exc)}")
        f.expect(n == w.last_sequence, f"flush after freeing space returned {n}")
        _acked_round(ledger, w)
        ledger.verify(f, s, "after freeing space", check_writers=False)
        _, exc = call(s.close)
        f.expect(exc is None, f"close() after freeing space raised {describe(exc)}")
    else:
        f.expect(disk != "tmpfs", f"a failed journal roll on tmpfs stopped the store: {failed}")
        close_after_reported(f, s)
    reopen_and_verify(f, d.mnt / "store", durability, ledger, roll_bytes=MiB)
    f.check()


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("disk", DISKS)
def test_close_and_reopen_while_full(small_disk, disk, durability):
    """The journal fills the disk and the application closes the store without freeing space
    (close's checkpoint has no room either), then tries to open it while the disk is still
    full: each step fails with StorageFullError, releases the store, and loses nothing; once
    space is freed the store opens with every acknowledged event."""
    f = Findings()
    d = small_disk(disk, SIZE_KIB[disk])
    s = d.open_store(durability=durability, roll_bytes=MiB, **QUIET)
    setup_stream(s, 4)
    ledger = Ledger()
    w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
    for _ in range(20):  # index entries for close's checkpoint
        _acked_round(ledger, w, 2, 16)
    d.fill("hog", (SIZE_KIB[disk] - 900) * KiB)
    full = None
    for i in range(2 * SIZE_KIB[disk] // 32):
        ledger.write(w, KEYS[i % 3], 8, 4096)
        _, full = call(lambda: ledger.flush(w))
        if full is not None:
            break
    assert full is not None, "the disk never filled up"
    check_full_error(f, full, "the flush that filled the disk")
    d.fill("rest")  # whatever the cut-off record gave back
    _, exc = call(s.close)
    print(f"[{disk}/{durability}] close on the full disk: {describe(exc)}")
    f.expect(s.closed, "the store is not closed after close() on a full disk")
    if exc is not None:
        check_full_error(f, exc, "close() on the full disk")
    s2, exc = call(lambda: pe.open(d.mnt / "store", durability=durability, roll_bytes=MiB))
    print(f"[{disk}/{durability}] open on the full disk: {describe(exc)}")
    if s2 is not None:
        d.stores.append(s2)
        ledger.verify(f, s2, "opened on the full disk")
        _, exc = call(s2.close)
        if exc is not None:
            check_full_error(f, exc, "close() of the store opened on the full disk")
    else:
        check_full_error(f, exc, "opening the store on the full disk")
    d.free("rest")
    d.free("hog")
    reopen_and_verify(f, d.mnt / "store", durability, ledger, roll_bytes=MiB)
    f.check()


@pytest.mark.parametrize("margin_kib", [0, 8, 16, 32, 48, 96])
@pytest.mark.parametrize("disk", DISKS[:1])
def test_create_store_on_full_disk(small_disk, disk, margin_kib):
    """A new store is created on a disk with only ``margin_kib`` free (each margin runs out at
    another step of the creation): pe.open raises StorageFullError or succeeds; either way,
    once space is freed the store opens and works."""
    f = Findings()
    d = small_disk(disk, SIZE_KIB[disk])
    d.fill("margin", margin_kib * KiB)
    d.fill("hog")
    d.free("margin")
    path = d.mnt / "store"
    s, exc = call(lambda: pe.open(path, durability="fsync", **QUIET))
    print(f"[{disk}/{margin_kib} KiB] create: {describe(exc)}")
    if s is not None:
        d.stores.append(s)
        _, exc2 = call(lambda: setup_stream(s))
        if exc2 is not None:
            check_full_error(f, exc2, "creating a stream in a store created on a full disk")
        _, exc2 = call(s.close)
        if exc2 is not None and not isinstance(exc2, errors.StorageFullError):
            f.add(f"close() on the full disk raised {describe(exc2)}")
    else:
        check_full_error(f, exc, "pe.open creating a store on a full disk")
    d.free("hog")
    ledger = Ledger()
    s, exc = call(lambda: pe.open(path, durability="fsync", **QUIET))
    # (the caller still holds the first error, as in an ``except`` block that retries)
    if not f.expect(exc is None, f"the store does not open after freeing space (while the "
                                 f"caller holds the first error): {describe(exc)}"):
        f.check()
    d.stores.append(s)
    setup_stream(s)
    w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
    _acked_round(ledger, w)
    w.close()
    s.close()
    reopen_and_verify(f, path, "fsync", ledger)
    f.check()
