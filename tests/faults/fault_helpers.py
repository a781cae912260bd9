"""Helpers of the fail-stop and disk-full tests (tests/faults): a ledger of what was written and
acknowledged, the checks run after a failure and after reopening, and the fault injectors
(journal faults through the C hook, LMDB commit/sync faults through a proxy of the environment,
directory fsync faults through a fake ``os.fsync``).

Every check collects its findings in a ``Findings`` list instead of stopping at the first one,
so one run of a test reports everything that went wrong in its scenario."""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import lmdb

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded._native import ffi, lib

SCOPE, STREAM = "f", "t"
KEYS = ("a", "b", "c")
# store options that keep background threads from touching the disk on their own (so an armed
# fault is hit by the call under test, not by a checkpoint or maintenance tick)
QUIET = {"checkpoint_interval": 3600.0, "maintenance_interval": 3600.0, "tier2": False}

_RECOVER = re.compile(r"\breopen\b|\bopen (it|the store) again\b", re.I)
_CLOSE = re.compile(r"\bclose\b", re.I)
_FREE = re.compile(r"\bfree\b.*\bspace\b|\bspace\b.*\bfree", re.I)


# ---------------------------------------------------------------------------- findings
class Findings(list):
    """Violations found in one scenario; ``check()`` fails the test listing all of them."""

    def add(self, text: str) -> None:
        self.append(text)

    def expect(self, cond: bool, text: str) -> bool:
        if not cond:
            self.append(text)
        return cond

    def check(self) -> None:
        assert not self, "\n  - " + "\n  - ".join(self)


def describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no exception"
    return f"{type(exc).__name__}({getattr(exc, 'errno', None)}): {exc}"


def check_failstop_error(f: Findings, exc: BaseException | None, what: str,
                         err: int = errno.EIO, *, needs_close: bool = True) -> None:
    """``exc`` is the StorageError of a failed sync: errno ``err`` and a message that says how
    to recover (close the store and open it again)."""
    if not isinstance(exc, errors.StorageError):
        f.add(f"{what}: expected StorageError(errno {err}), got {describe(exc)}")
        return
    f.expect(exc.errno == err, f"{what}: errno {exc.errno}, expected {err} ({describe(exc)})")
    msg = str(exc)
    f.expect(bool(_RECOVER.search(msg)) and (not needs_close or bool(_CLOSE.search(msg))),
             f"{what}: the message does not say how to recover (close and reopen): {msg!r}")


def check_full_error(f: Findings, exc: BaseException | None, what: str) -> None:
    """``exc`` reports a full disk: StorageFullError, errno ENOSPC, a hint to free space."""
    if not isinstance(exc, errors.StorageFullError):
        f.add(f"{what}: expected StorageFullError(ENOSPC), got {describe(exc)}")
        return
    f.expect(exc.errno == errno.ENOSPC, f"{what}: errno {exc.errno}, expected ENOSPC")
    f.expect(bool(_FREE.search(str(exc))), f"{what}: no hint to free space in {str(exc)!r}")


def call(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001 - the caller judges it
        return None, exc


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``cond`` until it is true; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


# ---------------------------------------------------------------------------- the ledger
def payload(tag: str, wid: str, key: str, seq: int, size: int) -> bytes:
    head = f"{tag}|{wid}|{key}|{seq}|".encode()
    return head + b"." * max(0, size - len(head))


def parse(event: bytes) -> tuple[str, str, str, int]:
    tag, wid, key, seq, _ = event.split(b"|", 4)
    return tag.decode(), wid.decode(), key.decode(), int(seq)


@dataclass
class Ledger:
    """Everything written to SCOPE/STREAM by the test's writers: per writer, every event by
    sequence, which write_events call it came in (a call is one atomic group), which are
    acknowledged (flush returned a durable sequence at or past it), and events written after
    the failure (tag "late": must never appear), transactional events never committed (tag
    "txn": must never appear)."""

    events: dict[str, dict[int, tuple[str, bytes]]] = field(default_factory=dict)
    groups: dict[str, list[list[int]]] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)  # highest acknowledged sequence
    may_vanish: dict[str, set[int]] = field(default_factory=dict)  # truncated on purpose
    late: int = 0

    def write(self, w: pe.EventStreamWriter, key: str, n: int, size: int = 64,
              tag: str = "ok") -> int:
        wid = w.writer_id
        first = w.last_sequence + 1
        evs = [payload(tag, wid, key, first + i, size) for i in range(n)]
        if tag == "late":
            self.late += n
            return w.write_events(evs, routing_key=key)
        last = w.write_events(evs, routing_key=key)
        assert last == first + n - 1, (last, first, n)
        d = self.events.setdefault(wid, {})
        for i, e in enumerate(evs):
            d[first + i] = (key, e)
        self.groups.setdefault(wid, []).append(list(range(first, first + n)))
        self.acked.setdefault(wid, -1)
        return last

    def flush(self, w: pe.EventStreamWriter) -> int:
        d = w.flush()
        self.note_acked(w.writer_id, d)
        return d

    def note_acked(self, wid: str, seq: int) -> None:
        self.acked[wid] = max(self.acked.get(wid, -1), seq)

    def acked_events(self, wid: str) -> list[int]:
        return [s for s in sorted(self.events.get(wid, {})) if s <= self.acked.get(wid, -1)]

    def verify(self, f: Findings, store: pe.Store, where: str, *,
               check_writers: bool = True) -> dict[str, int]:
        """After reopening: every acknowledged event exactly once, per key in order; the
        unacknowledged ones of a writer a gap-free continuation made of whole write_events
        groups; no "late" or "txn" event; each writer resumes exactly after its last event
        present. Returns the highest sequence present per writer."""
        seen: dict[str, list[tuple[int, str]]] = {}
        per_key: dict[tuple[str, str], list[int]] = {}
        for ev in store.read_slice(SCOPE, STREAM):
            try:
                tag, wid, key, seq = parse(ev.event)
            except ValueError:
                f.add(f"{where}: an event that no test wrote: {ev.event[:60]!r}")
                continue
            if tag == "txc":
                continue  # a transaction whose commit is in doubt: its test checks it
            if tag in ("late", "txn"):
                f.add(f"{where}: event {tag}|{wid}|{seq} (written after the failure or in an "
                      "uncommitted transaction) is in the stream")
                continue
            known = self.events.get(wid, {}).get(seq)
            if known is None or known[1] != ev.event:
                f.add(f"{where}: unknown or altered event {ev.event[:60]!r}")
                continue
            if ev.routing_key != key:
                f.add(f"{where}: event {wid}#{seq} read with routing key {ev.routing_key!r}, "
                      f"written with {key!r}")
            seen.setdefault(wid, []).append((seq, key))
            per_key.setdefault((wid, key), []).append(seq)
        tops: dict[str, int] = {}
        for wid, evs in self.events.items():
            got = [s for s, _ in seen.get(wid, [])]
            dup = sorted({s for s in got if got.count(s) > 1})
            f.expect(not dup, f"{where}: writer {wid}: events {dup[:10]} appear more than once")
            present = set(got)
            vanish = self.may_vanish.get(wid, set())
            acked = self.acked.get(wid, -1)
            lost = [s for s in self.acked_events(wid) if s not in present and s not in vanish]
            f.expect(not lost, f"{where}: writer {wid}: {len(lost)} acknowledged events lost, "
                               f"sequences {lost[:10]}{'...' if len(lost) > 10 else ''} "
                               f"(acknowledged up to {acked})")
            top = max(present | {-1})
            tops[wid] = top
            gaps = [s for s in range(0, top + 1) if s not in present and s not in vanish
                    and s not in lost]
            f.expect(not gaps, f"{where}: writer {wid}: the events present are not a gap-free "
                               f"prefix: missing {gaps[:10]} below {top}")
            for g in self.groups.get(wid, []):
                k = sum(1 for s in g if s in present)
                if 0 < k < len(g) and not (set(g) & vanish):
                    f.add(f"{where}: writer {wid}: only {k} of the {len(g)} events of one "
                          f"write_events call ({g[0]}..{g[-1]}) are present: not atomic")
        for (wid, key), seqs in per_key.items():
            f.expect(seqs == sorted(seqs), f"{where}: writer {wid}, key {key!r}: events out of "
                                           f"order: {seqs[:20]}")
        if check_writers:
            for wid in self.events:
                w = store.create_writer(SCOPE, STREAM, writer_id=wid)
                try:
                    last = w.last_sequence
                finally:
                    w.close()
                f.expect(last >= self.acked.get(wid, -1),
                         f"{where}: writer {wid} resumes at last_sequence={last}, before its "
                         f"last acknowledged sequence {self.acked.get(wid, -1)}")
                f.expect(last == tops[wid],
                         f"{where}: writer {wid} resumes at last_sequence={last}, but the "
                         f"events present end at {tops[wid]}: the metadata disagrees")
        return tops


def reopen_and_verify(f: Findings, path: str | Path, durability: str, ledger: Ledger,
                      where: str = "after reopen", **opts: Any) -> None:
    """Open the store again, verify the ledger, show that it works (write, flush, read,
    reopen, read) and close it."""
    s, exc = call(lambda: pe.open(path, durability=durability, **opts))
    if exc is not None:
        f.add(f"{where}: the store does not open again: {describe(exc)}")
        return
    try:
        f.expect(s.status().failed is None, f"{where}: the reopened store reports failed: "
                                            f"{s.status().failed}")
        ledger.verify(f, s, where)
        w = s.create_writer(SCOPE, STREAM, writer_id="after", linger=60)
        for i, key in enumerate(KEYS):
            ledger.write(w, key, 5)
        n = ledger.flush(w)
        f.expect(n == w.last_sequence, f"{where}: flush of a new writer returned {n}, "
                                       f"expected {w.last_sequence}")
        w.close()
        ledger.verify(f, s, f"{where}, after new writes", check_writers=False)
    finally:
        s.close()
    with pe.open(path, durability=durability, **opts) as s:
        ledger.verify(f, s, f"{where}, opened once more")


# ---------------------------------------------------------------------------- after a failure
def check_refuses_everything(f: Findings, s: pe.Store, writers: list[pe.EventStreamWriter],
                             ledger: Ledger, err: int = errno.EIO, *,
                             txn: Any = None, tw: Any = None, cut: Any = None) -> None:
    """Every API call after the failure raises StorageError (errno ``err``), store.status()
    says failed, and no writer's durable_sequence moves."""
    durable = {w.writer_id: w.durable_sequence for w in writers}
    st = s.status()
    if st.failed is None:
        f.add("store.status().failed is None after the failed sync (the calls after it were "
              "not tried)")
        return
    f.expect(str(err) in st.failed or os.strerror(err) in st.failed,
             f"store.status().failed does not name the error: {st.failed!r}")
    w = writers[0]
    key = KEYS[0]
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("writer.write_event", lambda: w.write_event(payload("late", w.writer_id, key, 0, 32),
                                                      routing_key=key)),
        ("writer.write_events + flush", lambda: (ledger.write(w, key, 3, tag="late"), w.flush())),
        ("writer.flush", lambda: w.flush()),
        ("writer.flush (nothing pending)", lambda: writers[-1].flush()),
        ("store.create_writer", lambda: s.create_writer(SCOPE, STREAM, writer_id="late-writer")),
        ("store.stream_info", lambda: s.stream_info(SCOPE, STREAM)),
        ("store.create_reader", lambda: s.create_reader(SCOPE, STREAM)),
        ("store.read_slice", lambda: list(s.read_slice(SCOPE, STREAM))),
        ("store.checkpoint", lambda: s.checkpoint()),
        ("store.create_scope", lambda: s.create_scope("late-scope")),
        ("store.create_stream", lambda: s.create_stream(SCOPE, "late-stream")),
        ("store.scale_stream", lambda: s.scale_stream(SCOPE, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)])),
        ("store.truncate_stream", lambda: s.truncate_stream(SCOPE, STREAM, cut)),
        ("store.seal_stream", lambda: s.seal_stream(SCOPE, STREAM)),
        ("store.create_transactional_writer",
         lambda: s.create_transactional_writer(SCOPE, STREAM, writer_id="late-tw")),
    ]
    if tw is not None:
        calls.append(("transactional_writer.begin_txn", lambda: tw.begin_txn()))
    if txn is not None:
        calls.append(("transaction.write_event", lambda: txn.write_event(
            payload("txn", "tw", key, 99, 32), routing_key=key)))
        calls.append(("transaction.commit", lambda: txn.commit()))
    for name, fn in calls:
        if name == "store.truncate_stream" and cut is None:
            continue
        if name == "writer.flush (nothing pending)" and len(writers) < 2:
            continue
        res, exc = call(fn)
        if exc is None:
            f.add(f"after the failure {name} returned {res!r} instead of raising StorageError")
        elif not isinstance(exc, errors.StorageError):
            f.add(f"after the failure {name} raised {describe(exc)} instead of StorageError")
        elif exc.errno != err:
            f.add(f"after the failure {name} raised StorageError with errno {exc.errno}, "
                  f"expected {err}")
    for wr in writers:
        f.expect(wr.durable_sequence == durable[wr.writer_id],
                 f"writer {wr.writer_id}: durable_sequence moved from {durable[wr.writer_id]} to "
                 f"{wr.durable_sequence} after the failure")
    f.expect(s.status().failed is not None, "store.status().failed was cleared")


def close_after_reported(f: Findings, s: pe.Store) -> None:
    """The failure reached a caller: close() releases everything and raises nothing."""
    _, exc = call(s.close)
    f.expect(exc is None, f"close() after a reported failure raised {describe(exc)}")
    f.expect(s.closed, "the store is not closed after close()")


def open_txn(s: pe.Store) -> tuple[Any, Any]:
    """A transactional writer with an open transaction holding one event (never committed)."""
    tw = s.create_transactional_writer(SCOPE, STREAM, writer_id="tw")
    txn = tw.begin_txn()
    txn.write_event(payload("txn", "tw", KEYS[0], 0, 32), routing_key=KEYS[0])
    txn.flush()
    return tw, txn


def setup_stream(s: pe.Store, segments: int = 2) -> None:
    s.create_scope(SCOPE, exist_ok=True)
    s.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)),
                    exist_ok=True)


# ---------------------------------------------------------------------------- injectors
def inject_journal(s: pe.Store, which: int, err: int = errno.EIO, countdown: int = 1) -> None:
    assert lib.pe_journal_inject_fault(s._engine.journal.handle, which, err, countdown) == lib.PE_OK


def journal_raw_status(s: pe.Store) -> Any:
    """The C journal's positions and failed errno, read straight from C (without asking the
    latch, which would count as telling someone)."""
    st = ffi.new("pe_journal_status *")
    lib.pe_journal_status_get(s._engine.journal.handle, st)
    return st


def journal_failed_errno(s: pe.Store) -> int:
    """The C journal's failed errno, read straight from C (without asking the latch, which
    would count as telling someone)."""
    st = ffi.new("pe_journal_status *")
    lib.pe_journal_status_get(s._engine.journal.handle, st)
    return st.failed_errno


def lmdb_error(what: str, err: int) -> lmdb.Error:
    """An exception like the one py-lmdb raises for an OS error (class by code, ``code`` set)."""
    cls = lmdb.DiskError if err == errno.ENOSPC else lmdb.Error
    exc = cls(f"{what}: {os.strerror(err)}")
    exc.code = err  # type: ignore[attr-defined]
    return exc


class _WriteTxn:
    """Context manager around a real LMDB write transaction whose commit can be made to fail
    (then the real transaction is aborted: nothing of it is committed)."""

    def __init__(self, env: "FaultyEnv", txn: lmdb.Transaction) -> None:
        self._env, self._txn = env, txn

    def __enter__(self) -> lmdb.Transaction:
        return self._txn

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        if et is not None:
            self._txn.abort()
            return False
        if self._env._hit("commit"):
            self._txn.abort()
            raise lmdb_error("mdb_txn_commit", self._env.err)
        self._txn.commit()
        return False


class FaultyEnv:
    """Stands in for ``Metadata.env``: delegates to the real environment; ``arm("commit", n)``
    makes the n-th write-transaction commit from now fail (aborted), ``arm("sync", n)`` the n-th
    ``env.sync`` (after a commit that succeeded)."""

    def __init__(self, env: lmdb.Environment, err: int = errno.EIO) -> None:
        self._real = env
        self.err = err
        self._lock = threading.Lock()
        self._countdown = {"commit": 0, "sync": 0}
        self.hits: list[str] = []
        self.hit = threading.Event()

    @classmethod
    def install(cls, s: pe.Store, err: int = errno.EIO) -> "FaultyEnv":
        meta = s._engine.meta
        env = cls(meta.env, err)
        meta.env = env
        return env

    def arm(self, kind: str, countdown: int = 1) -> None:
        with self._lock:
            self._countdown[kind] = countdown

    def _hit(self, kind: str) -> bool:
        with self._lock:
            n = self._countdown[kind]
            if n <= 0:
                return False
            self._countdown[kind] = n - 1
            if n != 1:
                return False
            self.hits.append(kind)
        self.hit.set()
        return True

    def begin(self, *args: Any, **kw: Any) -> Any:
        txn = self._real.begin(*args, **kw)
        return _WriteTxn(self, txn) if kw.get("write") else txn

    def sync(self, *args: Any) -> Any:
        if self._hit("sync"):
            raise lmdb_error("mdb_env_sync", self.err)
        return self._real.sync(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class FailingFsync:
    """A replacement for ``os.fsync`` that fails with EIO the ``nth`` fsync of directory
    ``target`` (resolved through /proc/self/fd); every other fsync is the real one."""

    def __init__(self, target: str | Path, nth: int = 1, err: int = errno.EIO) -> None:
        self.target = os.path.realpath(target)
        self.nth = nth
        self.err = err
        self.count = 0
        self.failed = 0
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        except OSError:
            path, is_dir = "", False
        if is_dir and path == self.target:
            self.count += 1
            if self.count == self.nth:
                self.failed += 1
                raise OSError(self.err, os.strerror(self.err))
        self.real(fd)


# ---------------------------------------------------------------------------- small file systems
def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def can_mount_tmpfs() -> tuple[bool, str]:
    import tempfile
    if os.geteuid() != 0:
        return False, "mounting tmpfs needs root"
    d = tempfile.mkdtemp(prefix="pe-probe-")
    try:
        r = _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d)
        if r.returncode != 0:
            return False, f"mount -t tmpfs refused: {r.stderr.strip()}"
        _run("umount", d)
        return True, ""
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"mount failed: {exc}"
    finally:
        os.rmdir(d)


def can_loop_mount() -> tuple[bool, str]:
    import shutil
    import tempfile
    ok, why = can_mount_tmpfs()
    if not ok:
        return ok, why
    for tool in ("losetup", "mkfs.ext4"):
        if shutil.which(tool) is None:
            return False, f"{tool} is not installed"
    if not os.path.exists("/dev/loop-control"):
        return False, "no /dev/loop-control (loop devices unavailable)"
    fd, img = tempfile.mkstemp(prefix="pe-probe-", suffix=".img")
    try:
        os.ftruncate(fd, 1 << 20)
        os.close(fd)
        r = _run("losetup", "--find", "--show", img)
        if r.returncode != 0:
            return False, f"losetup refused: {r.stderr.strip()}"
        _run("losetup", "-d", r.stdout.strip())
        return True, ""
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"losetup failed: {exc}"
    finally:
        os.unlink(img)


class SmallDisk:
    """A small file system mounted at ``mnt`` (tmpfs, or ext4 on a loop device over an image
    file); ``close`` closes the stores opened through ``open_store`` and unmounts."""

    def __init__(self, kind: str, base: Path, size_kib: int) -> None:
        self.kind, self.size_kib = kind, size_kib
        self.mnt = base / f"mnt-{kind}"
        self.img = base / f"{kind}.img"
        self.loop: str | None = None
        self.mounted = False
        self.stores: list[pe.Store] = []

    def mount(self) -> "SmallDisk":
        """Make and mount the file system (``close`` undoes whatever part of it happened)."""
        kind, size_kib = self.kind, self.size_kib
        self.mnt.mkdir()
        if kind == "tmpfs":
            self._must("mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(self.mnt))
            self.mounted = True
        else:
            with open(self.img, "wb") as fimg:
                fimg.truncate(size_kib * 1024)
            r = self._must("losetup", "--find", "--show", str(self.img))
            self.loop = r.stdout.strip()
            self._must("mkfs.ext4", "-q", "-F", "-m", "0", "-b", "1024", "-E",
                       "lazy_itable_init=0,lazy_journal_init=0", self.loop)
            self._must("mount", "-t", "ext4", self.loop, str(self.mnt))
            self.mounted = True
        return self

    @staticmethod
    def _must(*cmd: str) -> subprocess.CompletedProcess:
        r = _run(*cmd)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        return r

    def open_store(self, name: str = "store", **kw: Any) -> pe.Store:
        s = pe.open(self.mnt / name, **kw)
        self.stores.append(s)
        return s

    def fill(self, name: str, max_bytes: int | None = None, chunk: int = 16 << 10) -> int:
        """Write file ``name`` until the disk is full (or ``max_bytes``); returns its size."""
        path = self.mnt / name
        n = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            block = b"\xa5" * chunk
            while max_bytes is None or n < max_bytes:
                want = chunk if max_bytes is None else min(chunk, max_bytes - n)
                try:
                    k = os.write(fd, block[:want])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if chunk > 512:
                        chunk //= 2  # fill the last bits too
                        continue
                    break
                n += k
            try:
                os.fsync(fd)
            except OSError:
                pass
        finally:
            os.close(fd)
        return n

    def free(self, name: str) -> None:
        os.unlink(self.mnt / name)
        fd = os.open(self.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)  # ext4: commit the unlink, so its blocks are free for sure
        finally:
            os.close(fd)

    def close(self) -> None:
        for s in self.stores:
            try:
                s.close()
            except Exception:  # noqa: BLE001 - teardown
                pass
        if self.mounted:
            r = _run("umount", str(self.mnt))
            if r.returncode != 0:
                _run("umount", "-l", str(self.mnt))
            self.mounted = False
        if self.loop is not None:
            _run("losetup", "-d", self.loop)
            self.loop = None
        try:
            self.img.unlink()
        except FileNotFoundError:
            pass
