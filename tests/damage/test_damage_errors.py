"""Errors that are not the library's must be translated (issue: "permission problems (LOCK not
writable, store of another user, unreadable journal, no writable recovery/) as raw
PermissionError; a LOCK that is a directory as IsADirectoryError; LMDB's ENOSPC as
lmdb.DiskError ... Translate them in one place into pravega_embedded.errors (StorageFullError,
StorageError, a permission error), with the path and a hint.").

Each case asserts the class from pravega_embedded.errors, that it is also the fitting builtin
(PermissionError for StoragePermissionError; OSError for every StorageError), that the message
names the path, and that a refused open changed nothing on disk.

How permission cases run here: the tests run as root, and root ignores file modes, so the open
runs in a child started through ``setpriv --reuid=65534 --regid=65534 --clear-groups`` (user
nobody; util-linux setpriv changes the ids before exec, no PAM or shell involved, unlike
``su``/``runuser``). The stores live in a directory made world-readable for it. Each case has a
control: the same store, owned by nobody with the permissions intact, opens correctly as nobody,
so a refusal is caused by the damage and not by the setup. Without root or setpriv these cases
are skipped (skipif).

ENOSPC runs in a private mount namespace (``unshare --mount --propagation private``) on a small
tmpfs, so no mount is left behind if the test dies; skipped where that is not possible.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import damage_helpers as h

NO_SWITCH = not h.can_switch_user()
NO_SWITCH_REASON = "needs root and setpriv(1) to run the open as another user"


def _can_unshare_tmpfs() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d "
                            "&& rmdir $d"], capture_output=True, timeout=30)
    return probe.returncode == 0


NO_TMPFS = not _can_unshare_tmpfs()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A directory every user can reach (pytest's base temp is mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix="pe-damage-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _copy(ref: h.Reference, world: Path, name: str, owner: int | None = h.NOBODY) -> Path:
    s = world / name
    if s.exists():
        shutil.rmtree(s)
    shutil.copytree(ref.path, s)
    if owner is not None:
        h.chown_tree(s, owner, owner)
    return s


def _check(out: h.Outcome, what: str, cls: str, builtin: type, names: tuple[str, ...]) -> None:
    print(f"{what}: {out}")
    assert out.ok, f"{what}: {out}"
    v = out.verdict
    assert "error" in v, f"{what}: no error: {out}"
    assert cls in v["mro"], f"{what}: {v['error']} is not a {cls}: {v['message']}"
    assert builtin.__name__ in v["mro"], f"{what}: {v['error']} is not also a {builtin.__name__}"
    assert any(n in v["message"] for n in names), f"{what}: the message names none of {names}"


@pytest.mark.skipif(NO_SWITCH, reason=NO_SWITCH_REASON)
def test_control_nobody_opens_its_own_store(single, world):
    """The setup works: a store owned by nobody opens correctly as nobody."""
    crash, clean = single
    for ref in (clean, crash):
        s = _copy(ref, world, f"control-{ref.name}")
        out = h.check_case(s, ref, h.Expect.opens(ref.full), prefix=h.as_nobody())
        assert out.ok, f"{ref.name} as nobody: {out}"


@pytest.mark.skipif(NO_SWITCH, reason=NO_SWITCH_REASON)
def test_lock_not_writable(single, world):
    _, clean = single
    s = _copy(clean, world, "lock-ro")
    os.chmod(s / "LOCK", 0o444)
    out = h.check_case(s, clean, h.Expect.refused(str(s / "LOCK")), prefix=h.as_nobody())
    _check(out, "LOCK mode 0444", "StoragePermissionError", PermissionError, (str(s / "LOCK"),))


@pytest.mark.skipif(NO_SWITCH, reason=NO_SWITCH_REASON)
@pytest.mark.parametrize("mode", [0o700, 0o755], ids=["no-access", "read-only"])
def test_store_of_another_user(single, world, mode):
    """A store owned by root, opened by nobody: no access at all, or readable only."""
    _, clean = single
    s = _copy(clean, world, f"other-{mode:o}", owner=None)
    os.chmod(s, mode)
    out = h.check_case(s, clean, h.Expect.refused(str(s)), prefix=h.as_nobody())
    _check(out, f"root's store (mode {mode:o}) opened by nobody", "StoragePermissionError",
           PermissionError, (str(s),))


@pytest.mark.skipif(NO_SWITCH, reason=NO_SWITCH_REASON)
@pytest.mark.parametrize("variant", ["single-clean", "single-crash", "rolled-crash"])
def test_unreadable_journal_file_recovery_scans(refs, world, variant):
    """The journal file recovery reads at open (the one holding the applied position)."""
    ref = refs[variant]
    s = _copy(ref, world, f"unreadable-{variant}")
    victim = s / "journal" / h.file_name(h.first_scanned(ref))
    os.chmod(victim, 0)
    out = h.check_case(s, ref, h.Expect.refused(victim.name), prefix=h.as_nobody())
    _check(out, f"{variant}: {victim.name} mode 0", "StoragePermissionError", PermissionError,
           (victim.name,))


@pytest.mark.skipif(NO_SWITCH, reason=NO_SWITCH_REASON)
def test_unreadable_older_journal_file(rolled, world):
    """An older file (not read at open): refused at open, or the read of its data raises."""
    _, clean = rolled
    s = _copy(clean, world, "unreadable-older")
    victim = s / "journal" / h.file_name(clean.bases[0])
    os.chmod(victim, 0)
    expect = h.Expect(None, True, (victim.name,), ("StoragePermissionError",),
                      ("StoragePermissionError",))
    out = h.check_case(s, clean, expect, prefix=h.as_nobody())
    _check(out, f"older {victim.name} mode 0", "StoragePermissionError", PermissionError,
           (victim.name,))


def _torn(ref: h.Reference, s: Path) -> bytes:
    """Append non-zero garbage after the newest file's last record: a torn tail to cut."""
    garbage = bytes(range(1, 201))
    with open(s / "journal" / h.file_name(ref.bases[-1]), "ab") as f:
        f.write(garbage)
    return garbage


@pytest.mark.skipif(NO_SWITCH, reason=NO_SWITCH_REASON)
def test_control_torn_tail_saved_as_nobody(single, world):
    crash, _ = single
    s = _copy(crash, world, "torn-control")
    garbage = _torn(crash, s)
    h.chown_tree(s, h.NOBODY, h.NOBODY)
    out = h.check_case(s, crash, h.Expect.opens(crash.full), prefix=h.as_nobody())
    assert out.ok, f"torn tail as nobody: {out}"
    end = crash.records[crash.bases[-1]][-1].end
    assert (s / "recovery" / f"torn-{end:020d}.bin").read_bytes() == garbage


@pytest.mark.skipif(NO_SWITCH, reason=NO_SWITCH_REASON)
@pytest.mark.parametrize("how", ["recovery-0555", "store-dir-0555", "recovery-is-a-file"])
def test_recovery_not_writable(single, world, how):
    """A torn tail must be saved under recovery/ before it is cut, and that is impossible."""
    crash, _ = single
    s = _copy(crash, world, f"torn-{how}")
    _torn(crash, s)
    (s / "LOCK").touch()
    h.chown_tree(s, h.NOBODY, h.NOBODY)
    if how == "recovery-0555":
        (s / "recovery").mkdir(mode=0o555)
        os.chown(s / "recovery", h.NOBODY, h.NOBODY)
        os.chmod(s / "recovery", 0o555)
    elif how == "store-dir-0555":
        os.chmod(s, 0o555)
    else:
        (s / "recovery").write_bytes(b"")
        os.chown(s / "recovery", h.NOBODY, h.NOBODY)
    rec = str(s / "recovery")
    classes = ("StorageError",) if how == "recovery-is-a-file" else ("StoragePermissionError",)
    out = h.check_case(s, crash, h.Expect.refused(rec, classes=classes), prefix=h.as_nobody())
    os.chmod(s, 0o755)
    builtin = OSError if how == "recovery-is-a-file" else PermissionError
    _check(out, f"torn tail, {how}", classes[0], builtin, (rec,))


def test_lock_is_a_directory(single, tmp_path):
    _, clean = single
    s = h.fresh_copy(clean, tmp_path / "s")
    (s / "LOCK").unlink()
    (s / "LOCK").mkdir()
    out = h.check_case(s, clean, h.Expect.refused(str(s / "LOCK"), classes=("StorageError",)))
    _check(out, "LOCK is a directory", "StorageError", OSError, (str(s / "LOCK"),))
    assert out.verdict["errno"] == errno.EISDIR, out.verdict


@pytest.mark.parametrize("variant", ["single-clean", "single-crash"])
def test_meta_is_a_file(refs, tmp_path, variant):
    ref = refs[variant]
    s = h.fresh_copy(ref, tmp_path / "s")
    shutil.rmtree(s / "meta")
    (s / "meta").write_bytes(b"not a directory\n")
    out = h.check_case(s, ref, h.Expect.refused(str(s / "meta")))
    _check(out, f"{variant}: meta/ is a file", "PravegaEmbeddedError", OSError, (str(s / "meta"),))


@pytest.mark.parametrize("variant", ["single-clean", "single-crash"])
def test_journal_is_a_file(refs, tmp_path, variant):
    ref = refs[variant]
    s = h.fresh_copy(ref, tmp_path / "s")
    shutil.rmtree(s / "journal")
    (s / "journal").write_bytes(b"not a directory\n")
    out = h.check_case(s, ref, h.Expect.refused(str(s / "journal")))
    _check(out, f"{variant}: journal/ is a file", "PravegaEmbeddedError", OSError,
           (str(s / "journal"),))


def test_data_mdb_is_a_directory(single, tmp_path):
    _, clean = single
    s = h.fresh_copy(clean, tmp_path / "s")
    (s / "meta" / "data.mdb").unlink()
    (s / "meta" / "data.mdb").mkdir()
    out = h.check_case(s, clean, h.Expect.refused("data.mdb"))
    _check(out, "data.mdb is a directory", "PravegaEmbeddedError", OSError, ("data.mdb",))


# ---------------------------------------------------------------------------- ENOSPC
ENOSPC_CHILD = r'''
import errno, json, os, sys, traceback
import pravega_embedded as pe
from pravega_embedded import errors

root = sys.argv[1]
out = {}

def err(exc):
    return {"error": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
            "is_library": isinstance(exc, errors.PravegaEmbeddedError), "message": str(exc),
            "errno": getattr(exc, "errno", None), "traceback": traceback.format_exc()[-2000:]}

def fill(path):
    """Fill the file system: write until ENOSPC."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\xff" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        try:
            while True:
                f.write(b"\xff" * 512)
        except OSError:
            pass

# 1. the journal: write and flush until the disk is full
store = pe.open(os.path.join(root, "j"), durability="fsync", checkpoint_interval=3600)
store.create_scope("d")
store.create_stream("d", "s")
fill(os.path.join(root, "filler-j"))
try:
    with store.create_writer("d", "s", writer_id="w") as w:
        for i in range(100000):
            w.write_event(b"x" * 4000, routing_key="k")
            w.flush()
    out["journal"] = {"no_error": True}
except BaseException as exc:
    out["journal"] = err(exc)
try:
    store.close()
except BaseException as exc:
    out["journal_close"] = err(exc)
os.unlink(os.path.join(root, "filler-j"))

# 2. LMDB: create streams until data.mdb must grow on a full disk
store = pe.open(os.path.join(root, "m"), durability="fsync", checkpoint_interval=3600)
store.create_scope("d")
fill(os.path.join(root, "filler-m"))
try:
    for i in range(100000):
        store.create_stream("d", f"s{i}", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(64)))
    out["lmdb"] = {"no_error": True}
except BaseException as exc:
    out["lmdb"] = err(exc)
try:
    store.close()
except BaseException as exc:
    out["lmdb_close"] = err(exc)
print("RESULT " + json.dumps(out))
'''


@pytest.mark.skipif(NO_TMPFS, reason="needs root and unshare(1) to mount a private tmpfs")
def test_disk_full(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "enospc.py"
    script.write_text(ENOSPC_CHILD)
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
           f"mount -t tmpfs -o size=24m tmpfs {mnt} && exec {sys.executable} {script} {mnt}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode >= 0, f"the child died with signal {-proc.returncode}: {proc.stderr[-3000:]}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result (exit {proc.returncode}): {proc.stderr[-3000:]}"
    res = json.loads(lines[0][len("RESULT "):])
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "traceback"} for k, v in res.items()},
                     indent=1))
    problems = []
    for what in ("journal", "lmdb", "journal_close", "lmdb_close"):
        v = res.get(what)
        if v is None:
            continue
        if v.get("no_error"):
            problems.append(f"{what}: filling the disk raised nothing")
            continue
        if not v["is_library"]:
            problems.append(f"{what}: raw {v['error']}: {v['message']}\n{v['traceback']}")
        elif "StorageFullError" not in v["mro"]:
            problems.append(f"{what}: {v['error']} (errno {v['errno']}), not StorageFullError: "
                            f"{v['message']}")
        elif v["errno"] != errno.ENOSPC or str(mnt) not in v["message"]:
            problems.append(f"{what}: errno {v['errno']}, message without the path: {v['message']}")
    assert not problems, "\n".join(problems)

