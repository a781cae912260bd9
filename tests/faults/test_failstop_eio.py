"""Fail-stop after an injected EIO at every kind of sync, in every durability mode where it
applies: the journal's fdatasync behind a flush (fsync), the OS-mode fdatasync behind a
checkpoint, seal, scale or truncate (os), the LMDB commit and the LMDB sync (fsync, os), the
directory fsyncs of a journal roll, of a journal file's deletion, and of the store's creation.

For each: the failing call raises StorageError(EIO) whose message says to close and reopen;
every later call raises StorageError; store.status().failed is set; nothing written after the
failure is acknowledged or ever appears; after close and reopen every acknowledged event is
there exactly once in per-key order, each writer resumes exactly after its last event present,
and the store works."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

import pravega_embedded as pe
from pravega_embedded._native import lib
from fault_helpers import (
    KEYS,
    QUIET,
    SCOPE,
    STREAM,
    FailingFsync,
    FaultyEnv,
    Findings,
    Ledger,
    call,
    check_failstop_error,
    check_refuses_everything,
    close_after_reported,
    describe,
    inject_journal,
    journal_failed_errno,
    journal_raw_status,
    open_txn,
    payload,
    reopen_and_verify,
    setup_stream,
    wait_for,
)

MiB = 1 << 20


def _acked_round(ledger: Ledger, writers: list[pe.EventStreamWriter], n: int = 4,
                 size: int = 64) -> None:
    for w in writers:
        for key in KEYS:
            ledger.write(w, key, n, size)
        d = ledger.flush(w)
        assert d == w.last_sequence


def _start(opener, durability: str, **opts) -> tuple[pe.Store, Ledger, list[pe.EventStreamWriter]]:
    s = opener(durability=durability, **{**QUIET, **opts})
    setup_stream(s)
    ledger = Ledger()
    writers = [s.create_writer(SCOPE, STREAM, writer_id=wid, linger=60) for wid in ("w1", "w2")]
    _acked_round(ledger, writers)
    return s, ledger, writers


def _tail_cut(s: pe.Store):
    return s.stream_info(SCOPE, STREAM).tail


# ---------------------------------------------------------------------------- journal fdatasync
def _lose_unsynced(store_path: Path, raw) -> int:
    """Model a failed fdatasync whose dirty pages the kernel dropped: cut the journal file
    being written back to the position known durable (``raw``: the C status read after the
    failure, before close)."""
    path = Path(store_path) / "journal" / f"{raw.file_base:020d}.pej"
    keep = raw.durable - raw.file_base
    size = os.path.getsize(path)
    assert size >= keep
    os.truncate(path, keep)
    return size - keep


@pytest.mark.parametrize("unsynced", ["kept", "lost"])
def test_fsync_mode_flush_fdatasync_eio(opener, store_path, unsynced):
    """durability="fsync": the group-commit fdatasync behind a flush fails. "lost": the data
    the failed fdatasync covered is then cut from the journal file (as when the kernel drops
    the dirty pages), before reopening."""
    f = Findings()
    s, ledger, (w1, w2) = _start(opener, "fsync")
    tw, txn = open_txn(s)
    cut = _tail_cut(s)
    acked1 = w1.durable_sequence
    inject_journal(s, lib.PE_FAULT_SYNC)
    ledger.write(w1, "a", 4)  # these may or may not be on disk after the failure, but whole
    ledger.write(w1, "b", 2)
    _, exc = call(w1.flush)
    check_failstop_error(f, exc, "the flush whose fdatasync failed")
    f.expect(w1.durable_sequence == acked1,
             f"durable_sequence moved to {w1.durable_sequence} (acknowledged before: {acked1})")
    raw = journal_raw_status(s)
    f.expect(raw.durable <= raw.written, f"durable {raw.durable} past written {raw.written}")
    check_refuses_everything(f, s, [w1, w2], ledger, txn=txn, tw=tw, cut=cut)
    close_after_reported(f, s)
    if unsynced == "lost":
        assert _lose_unsynced(store_path, raw) > 0, "the failed fdatasync covered no data"
    reopen_and_verify(f, store_path, "fsync", ledger)
    f.check()


@pytest.mark.parametrize("trigger", ["checkpoint", "seal", "scale", "truncate"])
def test_os_mode_make_durable_eio(opener, store_path, trigger):
    """durability="os": events are acknowledged once written; the fdatasync that a checkpoint,
    seal, scale or truncate does first (make_durable) fails. Nothing may be committed to LMDB
    after it (applied_pos, seal, scale, head stay), and the store stops."""
    f = Findings()
    s, ledger, (w1, w2) = _start(opener, "os")
    tw, txn = open_txn(s)
    cut = _tail_cut(s)
    _acked_round(ledger, [w1, w2])  # acknowledged in the page cache, not yet fdatasynced
    meta = s._engine.meta
    applied = meta.applied_pos()
    info = s.stream_info(SCOPE, STREAM)
    inject_journal(s, lib.PE_FAULT_SYNC)
    action = {
        "checkpoint": s.checkpoint,
        "seal": lambda: s.seal_stream(SCOPE, STREAM),
        "scale": lambda: s.scale_stream(SCOPE, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)]),
        "truncate": lambda: s.truncate_stream(SCOPE, STREAM, cut),
    }[trigger]
    _, exc = call(action)
    check_failstop_error(f, exc, f"{trigger} whose fdatasync failed")
    f.expect(meta.applied_pos() == applied,
             f"applied_pos moved from {applied} to {meta.applied_pos()} past a failed fdatasync")
    check_refuses_everything(f, s, [w1, w2], ledger, txn=txn, tw=tw, cut=cut)
    f.expect(meta.applied_pos() == applied,
             f"applied_pos moved from {applied} to {meta.applied_pos()} after the failure")
    close_after_reported(f, s)
    # the seal/scale/truncate was never committed: the stream is as it was
    with pe.open(store_path, durability="os") as s2:
        after = s2.stream_info(SCOPE, STREAM)
        f.expect(not after.sealed, f"{trigger}: the stream is sealed after reopen")
        f.expect(len(after.segments) == len(info.segments) and after.head == info.head,
                 f"{trigger}: the stream changed after reopen: {len(info.segments)} -> "
                 f"{len(after.segments)} segments, head {info.head} -> {after.head}")
    reopen_and_verify(f, store_path, "os", ledger)
    f.check()


@pytest.mark.parametrize("durability", ["fsync", "os"])
def test_transaction_commit_fdatasync_eio(opener, store_path, durability):
    """The fdatasync that makes a transaction's MERGE durable fails: commit raises the
    fail-stop error; after reopening the transaction is committed as a whole (all its events,
    in order, status COMMITTED) or not at all (none of them, not COMMITTED)."""
    f = Findings()
    s, ledger, (w1, w2) = _start(opener, durability)
    cut = _tail_cut(s)
    tw = s.create_transactional_writer(SCOPE, STREAM, writer_id="tw")
    txn = tw.begin_txn()
    staged = {k: [payload("txc", "tw", k, i, 48) for i in range(5)] for k in KEYS}
    for k in KEYS:
        txn.write_events(staged[k], routing_key=k)
    txn.flush()
    inject_journal(s, lib.PE_FAULT_SYNC)
    _, exc = call(txn.commit)
    check_failstop_error(f, exc, "the transaction commit whose fdatasync failed")
    check_refuses_everything(f, s, [w1, w2], ledger, tw=tw, cut=cut)
    close_after_reported(f, s)
    with pe.open(store_path, durability=durability) as s2:
        got: dict[str, list[bytes]] = {}
        for ev in s2.read_slice(SCOPE, STREAM):
            if ev.event.startswith(b"txc|"):
                got.setdefault(ev.routing_key, []).append(ev.event)
        committed = bool(got)
        for k in KEYS:
            f.expect(got.get(k, []) == (staged[k] if committed else []),
                     f"transaction events of key {k!r} after reopen: {got.get(k, [])[:6]} (the "
                     "commit must show all of them in order or none)")
        status, exc = call(lambda: s2.create_transactional_writer(
            SCOPE, STREAM, writer_id="tw").get_txn(txn.txn_id).status())
        f.expect((status == pe.TxnStatus.COMMITTED) == committed,
                 f"transaction status after reopen {status or describe(exc)}, its events "
                 f"{'are' if committed else 'are not'} visible")
    reopen_and_verify(f, store_path, durability, ledger)
    f.check()


# ---------------------------------------------------------------------------- LMDB commit and sync
@pytest.mark.parametrize("durability", ["fsync", "os"])
@pytest.mark.parametrize("kind", ["commit", "sync"])
@pytest.mark.parametrize("trigger", ["checkpoint", "create_stream"])
def test_lmdb_commit_or_sync_eio(opener, store_path, durability, kind, trigger):
    """An LMDB commit (aborted) or the env.sync after a commit fails with EIO."""
    f = Findings()
    s, ledger, (w1, w2) = _start(opener, durability)
    tw, txn = open_txn(s)
    cut = _tail_cut(s)
    _acked_round(ledger, [w1, w2])
    meta = s._engine.meta
    applied = meta.applied_pos()
    env = FaultyEnv.install(s)
    env.arm(kind)
    action = s.checkpoint if trigger == "checkpoint" else (
        lambda: s.create_stream(SCOPE, "other"))
    _, exc = call(action)
    f.expect(env.hits == [kind], f"the armed LMDB {kind} fault was hit {env.hits}")
    check_failstop_error(f, exc, f"{trigger} whose LMDB {kind} failed")
    if kind == "commit":
        f.expect(meta.applied_pos() == applied,
                 f"applied_pos moved from {applied} to {meta.applied_pos()} by a failed commit")
    check_refuses_everything(f, s, [w1, w2], ledger, txn=txn, tw=tw, cut=cut)
    close_after_reported(f, s)
    if trigger == "create_stream" and kind == "commit":
        with pe.open(store_path, durability=durability) as s2:
            f.expect("other" not in s2.list_streams(SCOPE),
                     "the stream whose LMDB commit failed exists after reopen")
    reopen_and_verify(f, store_path, durability, ledger)
    f.check()


# ---------------------------------------------------------------------------- directory fsyncs
@pytest.mark.parametrize("durability", ["fsync", "os"])
def test_journal_roll_directory_fsync_eio(opener, store_path, durability):
    """The journal rolls to a new file (roll_bytes 1 MiB): the fsync of the journal directory
    that makes the new file's name durable fails (the 2nd sync of the roll, after the new
    file's fdatasync)."""
    f = Findings()
    s, ledger, (w1, w2) = _start(opener, durability, roll_bytes=MiB)
    tw, txn = open_txn(s)
    cut = _tail_cut(s)
    for i in range(14):  # ~900 KiB acknowledged in the first file
        ledger.write(w1, KEYS[i % 3], 16, 4096)
        ledger.flush(w1)
    js = s._engine.journal.status()
    room = MiB - (js.written - js.file_base)
    assert 0 < room < 200 * 1024, room
    jdir = Path(store_path) / "journal"
    files_before = sorted(os.listdir(jdir))
    acked1 = w1.durable_sequence
    inject_journal(s, lib.PE_FAULT_SYNC, countdown=2)
    ledger.write(w1, "a", 50, 4096)  # 200 KiB: does not fit, the append rolls first
    _, exc = call(w1.flush)
    check_failstop_error(f, exc, "the flush whose journal roll failed at the directory fsync")
    f.expect(w1.durable_sequence == acked1, f"durable_sequence moved to {w1.durable_sequence}")
    f.expect(sorted(os.listdir(jdir)) == files_before,
             f"journal files after the failed roll: {sorted(os.listdir(jdir))}, before: "
             f"{files_before}")
    check_refuses_everything(f, s, [w1, w2], ledger, txn=txn, tw=tw, cut=cut)
    close_after_reported(f, s)
    reopen_and_verify(f, store_path, durability, ledger, roll_bytes=MiB)
    f.check()


@pytest.mark.parametrize("durability", ["fsync", "os", "none"])
def test_journal_file_deletion_directory_fsync_eio(opener, store_path, durability, monkeypatch):
    """truncate_stream makes the first journal file dead; reclaiming it unlinks the file and
    fsyncs the journal directory, which fails."""
    f = Findings()
    s, ledger, (w1, w2) = _start(opener, durability, roll_bytes=MiB)
    for i in range(20):  # ~1.3 MiB: the journal rolls once
        ledger.write(w1, KEYS[i % 3], 16, 4096)
        ledger.flush(w1)
    jdir = Path(store_path) / "journal"
    assert len(os.listdir(jdir)) >= 2
    tw, txn = open_txn(s)  # staged in the second file (a staged transaction pins its file)
    cut = _tail_cut(s)
    before_cut = {wid: set(ev) for wid, ev in ledger.events.items()}
    _acked_round(ledger, [w1, w2])  # events after the cut: these stay
    for wid, seqs in before_cut.items():
        ledger.may_vanish[wid] = seqs  # truncated on purpose (the truncation may be durable)
    fake = FailingFsync(jdir)
    monkeypatch.setattr(os, "fsync", fake)
    _, exc = call(lambda: s.truncate_stream(SCOPE, STREAM, cut))
    monkeypatch.undo()
    if durability == "none" and fake.count == 0:
        # the store does not fsync directories in this mode: then nothing failed
        f.expect(exc is None, f"truncate_stream raised {describe(exc)} with no failed sync")
        f.expect(s.status().failed is None, "the store failed without a failed sync")
        s.close()
    else:
        if not f.expect(fake.failed == 1, f"the journal directory was fsynced {fake.count} "
                                          "times, the fault was never hit (no file reclaimed)"):
            f.check()
        check_failstop_error(f, exc, "truncate_stream whose journal file deletion failed at "
                                     "the directory fsync")
        check_refuses_everything(f, s, [w1, w2], ledger, txn=txn, tw=tw, cut=cut)
        close_after_reported(f, s)
    reopen_and_verify(f, store_path, durability, ledger, roll_bytes=MiB)
    f.check()


_CREATION_TARGETS = {
    # (directory, which fsync of it): the fsyncs a new store makes of its directories
    "parent": (".", 1),  # the parent of the new store directory
    "store-dirs": ("store", 1),  # the store directory after meta/ and journal/ are made
    "meta": ("store/meta", 1),
    "journal": ("store/journal", 1),
    "marker": ("store", 2),  # the store directory after the STORE marker is renamed in
}


@pytest.mark.parametrize("durability", ["fsync", "os", "none"])
@pytest.mark.parametrize("target", sorted(_CREATION_TARGETS))
def test_store_creation_directory_fsync_eio(tmp_path, durability, target, monkeypatch):
    """Creating a store: one of its directory fsyncs fails. pe.open raises StorageError(EIO)
    saying how to recover, leaves no thread and no lock behind, and opening again works."""
    f = Findings()
    path = tmp_path / "store"
    rel, nth = _CREATION_TARGETS[target]
    fake = FailingFsync(tmp_path / rel if rel != "." else tmp_path, nth)
    threads = {t.ident for t in threading.enumerate()}
    monkeypatch.setattr(os, "fsync", fake)
    s, exc = call(lambda: pe.open(path, durability=durability, **QUIET))
    monkeypatch.undo()
    if s is not None:
        s.close()
    if durability == "none" and fake.count < nth:
        f.expect(exc is None, f"pe.open raised {describe(exc)} with no failed sync")
    else:
        f.expect(fake.failed == 1, f"{target}: the fsync was never made ({fake.count} fsyncs "
                                   f"of {fake.target})")
        check_failstop_error(f, exc, f"pe.open whose {target} directory fsync failed",
                             needs_close=False)
        f.expect(s is None, "pe.open returned a store although a directory fsync failed")
    left = [t.name for t in threading.enumerate() if t.ident not in threads and t.is_alive()]
    f.expect(not left, f"threads left running by the failed open: {left}")
    ledger = Ledger()
    s, exc = call(lambda: pe.open(path, durability=durability))
    if not f.expect(exc is None, f"the store does not open after the failed creation: "
                                 f"{describe(exc)}"):
        f.check()
    try:
        setup_stream(s)
        w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
        for key in KEYS:
            ledger.write(w, key, 3)
        ledger.flush(w)
        w.close()
        ledger.verify(f, s, "after the failed creation")
    finally:
        s.close()
    reopen_and_verify(f, path, durability, ledger)
    f.check()


@pytest.mark.parametrize("durability", ["fsync", "os"])
@pytest.mark.parametrize("kind", ["commit", "sync"])
def test_store_creation_lmdb_eio(tmp_path, durability, kind, monkeypatch):
    """Creating a store: the first LMDB commit (or the sync after it) fails with EIO. pe.open
    raises StorageError(EIO) saying how to recover, leaves nothing open (no thread, no lock, no
    LMDB environment), and opening again in the same process works."""
    import lmdb

    f = Findings()
    path = tmp_path / "store"
    real_open = lmdb.open
    armed: list[FaultyEnv] = []

    def faulty_open(*args, **kw):
        env = FaultyEnv(real_open(*args, **kw))
        env.arm(kind)
        armed.append(env)
        return env

    threads = {t.ident for t in threading.enumerate()}
    monkeypatch.setattr(lmdb, "open", faulty_open)
    s, exc = call(lambda: pe.open(path, durability=durability, **QUIET))
    monkeypatch.undo()
    if s is not None:
        s.close()
    f.expect(bool(armed) and armed[0].hits == [kind],
             f"the armed LMDB {kind} fault was not hit: {[e.hits for e in armed]}")
    check_failstop_error(f, exc, f"pe.open whose first LMDB {kind} failed", needs_close=False)
    left = [t.name for t in threading.enumerate() if t.ident not in threads and t.is_alive()]
    f.expect(not left, f"threads left running by the failed open: {left}")
    ledger = Ledger()
    s, exc = call(lambda: pe.open(path, durability=durability, **QUIET))
    # (the caller still holds the first error, as in an ``except`` block that retries)
    if not f.expect(exc is None, f"the store does not open again after the failed creation "
                                 f"(while the caller holds the first error): {describe(exc)}"):
        f.check()
    try:
        setup_stream(s)
        w = s.create_writer(SCOPE, STREAM, writer_id="w1", linger=60)
        for key in KEYS:
            ledger.write(w, key, 3)
        ledger.flush(w)
        w.close()
    finally:
        s.close()
    reopen_and_verify(f, path, durability, ledger)
    f.check()


# ---------------------------------------------------------------------------- nobody told
def _count_background_runs(s: pe.Store, gate: threading.Event | None = None
                           ) -> tuple[list[int], threading.Condition]:
    """Wrap the background threads' task runner: returns a counter of its calls and a
    condition notified at each. With ``gate``, every task waits until the gate is set (so a
    test can prepare the store without a checkpoint running in between)."""
    runs = [0]
    cv = threading.Condition()
    orig = s._bg._run

    def run(task, fn):
        if gate is not None:
            gate.wait(30)
        try:
            orig(task, fn)
        finally:
            with cv:
                runs[0] += 1
                cv.notify_all()

    s._bg._run = run
    return runs, cv


@pytest.mark.parametrize("background", ["quiet", "ticking"])
def test_fsync_mode_background_fdatasync_eio_close_raises(opener, store_path, background):
    """durability="fsync": the sync thread's fdatasync fails while no flush waits for it. No
    call has reported the failure: close() must raise it, and reopening recovers. "ticking":
    the store's checkpoint thread runs (and notices the failure) before close(); a background
    thread noticing it is not telling the caller."""
    f = Findings()
    ticks = {"quiet": 3600.0, "ticking": 0.05}[background]
    s, ledger, (w1, w2) = _start(opener, "fsync", checkpoint_interval=ticks)
    runs, cv = _count_background_runs(s)
    bg = s.create_writer(SCOPE, STREAM, writer_id="bg", linger=60, batch_bytes=1)
    inject_journal(s, lib.PE_FAULT_SYNC)
    ledger.write(bg, "a", 3)  # batch_bytes=1: appended at once; the sync thread syncs it
    wait_for(lambda: journal_failed_errno(s), 10, "the sync thread's fdatasync to fail")
    if background == "ticking":
        start = runs[0]
        with cv:  # the checkpoint thread looks at the store twice more
            assert cv.wait_for(lambda: runs[0] >= start + 2, timeout=10)
    raw = journal_raw_status(s)
    _, exc = call(s.close)
    check_failstop_error(f, exc, "close() after a failure no call reported")
    f.expect(s.closed, "the store is not closed after close()")
    f.expect(s.status().failed is not None, "store.status().failed is None after close")
    # the failed fdatasync's data never reached the disk
    assert _lose_unsynced(store_path, raw) > 0, "the failed fdatasync covered no data"
    reopen_and_verify(f, store_path, "fsync", ledger)
    f.check()


@pytest.mark.parametrize("fault", ["os-fdatasync", "lmdb-commit"])
def test_background_checkpoint_eio(opener, store_path, fault):
    """The background checkpoint hits the failed sync (os: the fdatasync before it; fsync: the
    LMDB commit). applied_pos never moves past what is durable, status() shows the failure and
    the failed background task, and every call raises."""
    f = Findings()
    durability = "os" if fault == "os-fdatasync" else "fsync"
    s, ledger, (w1, w2) = _start(opener, durability, checkpoint_interval=0.05)
    gate = threading.Event()
    try:
        runs, cv = _count_background_runs(s, gate)  # no checkpoint while the fault is armed
        tw, txn = open_txn(s)
        cut = _tail_cut(s)
        meta = s._engine.meta
        if fault == "os-fdatasync":
            inject_journal(s, lib.PE_FAULT_SYNC)
            _acked_round(ledger, [w1, w2])  # acknowledged (page cache) before the failure
        else:
            _acked_round(ledger, [w1, w2])
            FaultyEnv.install(s).arm("commit")
    finally:
        gate.set()
    wait_for(lambda: s._bg.failures, 10, "the background checkpoint to fail")
    applied = meta.applied_pos()
    start = runs[0]
    with cv:  # more checkpoint ticks: none may move applied_pos
        assert cv.wait_for(lambda: runs[0] >= start + 3, timeout=10)
    f.expect(meta.applied_pos() == applied,
             f"applied_pos moved from {applied} to {meta.applied_pos()} after the failure")
    raw = journal_raw_status(s)
    f.expect(applied <= raw.durable, f"applied_pos {applied} is past the journal's durable "
                                     f"position {raw.durable}")
    st = s.status()
    f.expect(st.failed is not None, "status().failed is None after the background failure")
    fails = [b for b in st.background_failures if b.task == "checkpoint"]
    f.expect(bool(fails), f"no checkpoint failure in status().background_failures: "
                          f"{st.background_failures}")
    f.expect(all("StorageError" in b.error for b in fails),
             f"background failures: {[b.error for b in fails]}")
    check_refuses_everything(f, s, [w1, w2], ledger, txn=txn, tw=tw, cut=cut)
    close_after_reported(f, s)
    reopen_and_verify(f, store_path, durability, ledger)
    f.check()


@pytest.mark.parametrize("fault", ["os-fdatasync", "lmdb-commit"])
def test_background_checkpoint_eio_close_raises(opener, store_path, fault):
    """As above, but nothing asks the store before close(): no call has reported the failure,
    so close() must raise it (it must not pass silently because a background thread saw it)."""
    f = Findings()
    durability = "os" if fault == "os-fdatasync" else "fsync"
    s, ledger, (w1, w2) = _start(opener, durability, checkpoint_interval=0.05)
    gate = threading.Event()
    try:
        _count_background_runs(s, gate)  # no checkpoint while the fault is armed
        if fault == "os-fdatasync":
            inject_journal(s, lib.PE_FAULT_SYNC)
            _acked_round(ledger, [w1, w2])
        else:
            _acked_round(ledger, [w1, w2])
            FaultyEnv.install(s).arm("commit")
    finally:
        gate.set()
    wait_for(lambda: s._bg.failures, 10, "the background checkpoint to fail")
    _, exc = call(s.close)
    check_failstop_error(f, exc, "close() after a failure only a background checkpoint saw")
    f.expect(s.closed, "the store is not closed after close()")
    reopen_and_verify(f, store_path, durability, ledger)
    f.check()


def test_os_mode_close_fdatasync_eio(opener, store_path):
    """durability="os": close() makes the acknowledged page-cache data durable; that fdatasync
    fails. Nobody was told before: close() raises it, and reopening recovers."""
    f = Findings()
    s, ledger, (w1, w2) = _start(opener, "os")
    _acked_round(ledger, [w1, w2])
    inject_journal(s, lib.PE_FAULT_SYNC)
    _, exc = call(s.close)
    check_failstop_error(f, exc, "close() whose fdatasync failed")
    f.expect(s.closed, "the store is not closed after close()")
    reopen_and_verify(f, store_path, "os", ledger)
    f.check()
