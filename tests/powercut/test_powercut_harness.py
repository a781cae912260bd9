"""The harness itself: LazyFS loses what was not fsynced and keeps what was, its faults fire
where the harness aims them, and the behaviours lazyfs.py documents hold. If these fail, the
power-cut tests' failures say nothing about the store."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest

import lazyfs
import pc_loop
from lazyfs import LazyFS, requires_lazyfs
from pc_loop import PowerCutLoop



def write(path: Path, data: bytes, *, sync: bool, append: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), 0o644)
    try:
        assert os.write(fd, data) == len(data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------ locating (no FUSE)
def test_build_script_from_env_var(tmp_path):
    (tmp_path / "build.sh").write_text("#!/bin/sh\n")
    assert lazyfs.find_build_script({lazyfs.ENV_DIR: str(tmp_path)}) == tmp_path / "build.sh"
    assert lazyfs.find_build_script({lazyfs.ENV_DIR: str(tmp_path / "nowhere")}) is None


def test_build_script_walking_up(tmp_path):
    script = tmp_path / "shared" / "tools" / "lazyfs" / "build.sh"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    repo = tmp_path / "work" / "main"
    repo.mkdir(parents=True)
    assert lazyfs.find_build_script({}, repo_root=repo) == script


def test_commands_lazyfs_would_ignore_are_refused():
    with pytest.raises(ValueError, match="occurrence"):
        lazyfs.check_command("lazyfs::torn-seq::op=write::file=/x::persist=1,3::occurrence=2")
    lazyfs.check_command("lazyfs::torn-op::file=/x::persist=1,3::parts=3")


# ------------------------------------------------------------------------ LazyFS itself
@requires_lazyfs
def test_unsynced_data_vanishes_and_synced_data_survives(lazy_fs: LazyFS):
    m = lazy_fs.mnt
    write(m / "synced", b"S" * 10_000, sync=True)
    write(m / "unsynced", b"U" * 10_000, sync=False)
    write(m / "mixed", b"M" * 5000, sync=True)
    write(m / "mixed", b"m" * 5000, sync=False, append=True)
    assert (m / "unsynced").read_bytes() == b"U" * 10_000  # before the cut: all there
    assert lazy_fs.cache_usage() < 50
    lazy_fs.clear_cache()
    lazy_fs.remount()
    assert (m / "synced").read_bytes() == b"S" * 10_000
    assert (m / "mixed").read_bytes() == b"M" * 5000
    # creating a file passes through to ROOT at once: the name survives, its data does not
    assert (m / "unsynced").read_bytes() == b""


@requires_lazyfs
def test_unmount_writes_nothing_back(lazy_fs: LazyFS):
    write(lazy_fs.mnt / "f", b"x" * 4096, sync=False)
    lazy_fs.remount()  # no clear-cache: an unmount alone loses it too
    assert (lazy_fs.mnt / "f").read_bytes() == b""


@requires_lazyfs
def test_torn_op_file_is_the_path_under_root_not_under_the_mount(lazyfs_binary, tmp_path):
    short_mnt = Path(tempfile.mkdtemp(prefix="pcm-", dir="/tmp"))  # commands fit in 100 bytes
    try:
        with LazyFS(lazyfs_binary, tmp_path / "root", short_mnt, tmp_path / "work", cache_size="64mb") as fs:
            for i, named in enumerate([str(short_mnt / "a0"), "/a1"]):  # under the mount; in the FS
                fs.inject(f"lazyfs::torn-op::file={named}::persist=1::parts=2")
                write(short_mnt / f"a{i}", b"a" * 1000, sync=False)
                assert fs.alive(), f"a torn-op fault on {named} fired"
            target = fs.fault_path(short_mnt / "b")
            assert target == str(fs.alias / "b") == fs.fault_path(tmp_path / "root" / "b")
            fs.inject(f"lazyfs::torn-op::file={target}::persist=1::parts=2")
            with pytest.raises(OSError):
                write(short_mnt / "b", b"b" * 1000, sync=False)  # LazyFS kills itself in this write
            assert fs.wait_exit(10) is not None and fs.fault_fired()
            fs.remount()
            assert (short_mnt / "b").read_bytes() == b"b" * 500  # part 1 of 2 persisted
            assert (short_mnt / "a0").read_bytes() == b""
    finally:
        short_mnt.rmdir()


@requires_lazyfs
def test_torn_seq_persists_a_later_write_without_an_earlier_one(lazy_fs: LazyFS):
    m = lazy_fs.mnt
    write(m / "j", b"H" * 100, sync=True)
    lazy_fs.inject(f"lazyfs::torn-seq::op=write::file={lazy_fs.fault_path(m / 'j')}::persist=2")
    fd = os.open(m / "j", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"1" * 100)
        with pytest.raises(OSError):
            os.write(fd, b"2" * 100)  # persisted, then LazyFS exits
    finally:
        os.close(fd)
    assert lazy_fs.wait_exit(10) is not None
    lazy_fs.remount()
    assert (m / "j").read_bytes() == b"H" * 100 + b"\0" * 100 + b"2" * 100  # a hole, then data


@requires_lazyfs
def test_crash_fault_before_fsync_loses_the_data_being_synced(lazy_fs: LazyFS):
    m = lazy_fs.mnt
    (m / "d").mkdir()
    write(m / "d" / "keep.bin", b"k" * 3000, sync=True)
    lazy_fs.inject(r"lazyfs::crash::timing=before::op=fsync::from_rgx=d/lost\.bin")
    write(m / "d" / "other.bin", b"o" * 3000, sync=True)  # does not match: no crash
    assert lazy_fs.alive()
    with pytest.raises(OSError):
        write(m / "d" / "lost.bin", b"l" * 3000, sync=True)
    assert lazy_fs.wait_exit(10) is not None and lazy_fs.fault_fired()
    lazy_fs.remount()
    assert (m / "d" / "keep.bin").read_bytes() == b"k" * 3000
    assert (m / "d" / "other.bin").read_bytes() == b"o" * 3000
    assert (m / "d" / "lost.bin").read_bytes() == b""


@requires_lazyfs
def test_commands_must_fit_in_100_bytes(lazy_fs: LazyFS):
    with pytest.raises(ValueError, match="100"):
        lazy_fs.inject("lazyfs::crash::timing=before::op=fsync::from_rgx=" + "x" * 60)
    lazy_fs.close()
    lazy_fs.close()  # idempotent
    assert not lazyfs.is_mounted(lazy_fs.mnt) and not lazy_fs.alias.exists()


@requires_lazyfs
def test_lazyfs_dying_by_itself_is_checked_as_a_power_cut(lazy_fs: LazyFS, tmp_path: Path):
    """LazyFS once died by itself under a child in CI (the child then failed with ENOTCONN). Its
    cache died with it, which is a power cut: the loop checks it as one instead of failing on the
    child's errors, says so, and the next cut runs on a fresh mount."""
    loop = PowerCutLoop(lazy_fs, tmp_path, "writes", "harness: LazyFS killed on purpose")
    wait_acks = loop._wait_acks

    def then_lazyfs_dies(*args, **kwargs) -> None:
        wait_acks(*args, **kwargs)
        lazy_fs.proc.kill()

    loop._wait_acks = then_lazyfs_dies
    cut = loop.random_cut()
    assert "LazyFS died by itself (exit status -9)" in cut.kind and loop.unplanned == 1
    assert cut.acks >= 1 and cut.verified >= 1  # what was acknowledged before it died is there
    loop._wait_acks = wait_acks
    assert "died" not in loop.random_cut().kind
    loop.finish()
    assert "1 where LazyFS died by itself" in loop.summary()


@requires_lazyfs
def test_lazyfs_hanging_under_a_killed_child_is_checked_as_a_power_cut(
        lazy_fs: LazyFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Once in CI and once here the loop waited forever to reap a SIGKILLed child: a FUSE
    request LazyFS has taken cannot be interrupted, and LazyFS never answered it. Stopping
    LazyFS (SIGSTOP) under a running child makes that happen at will. The harness now kills
    LazyFS when the child is not reaped within KILL_TIMEOUT: its cache dies with it, a power
    cut, which the loop checks as one and reports with what the child waited in."""
    monkeypatch.setattr(lazyfs, "KILL_TIMEOUT", 2.0)
    loop = PowerCutLoop(lazy_fs, tmp_path, "writes", "harness: LazyFS stopped on purpose",
                        env={"PC_RATE_FACTOR": "0"})  # unpaced: the child always waits on LazyFS
    wait_acks = loop._wait_acks

    def then_lazyfs_stops(*args, **kwargs) -> None:
        wait_acks(*args, **kwargs)
        lazy_fs.proc.send_signal(signal.SIGSTOP)

    loop._wait_acks = then_lazyfs_stops
    cut = loop.random_cut()
    assert "LazyFS hung and was killed" in cut.kind and loop.unplanned == 1, cut.kind
    assert cut.acks >= 1 and cut.verified >= 1  # what was acknowledged before it hung is there
    said = [s for s in pc_loop.SUMMARIES if "harness: LazyFS stopped" in s][-1]
    assert "was not reaped in 2s: the child pid" in said and " D " in said, said  # in the kernel
    loop._wait_acks = wait_acks
    assert "hung" not in loop.random_cut().kind  # the next cut runs on a fresh mount
    loop.finish()


class _FakeLazyFS:
    mnt = Path("/nonexistent")
    proc = None

    def wait_exit(self, timeout: float) -> int:
        return -9

    def log_text(self) -> str:
        return ""


class _FakeChild:
    pid = 999_999_999
    returncode = None

    def poll(self) -> None:
        return None


@pytest.mark.parametrize("when", ["waiting for acknowledgements", "after acknowledgements"])
def test_a_failing_child_is_not_hidden_by_lazyfs_hanging_when_it_is_killed(
        when: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A LazyFS that hangs while the loop kills the child is an unplanned power cut, but the
    errors the child logged before that are its own: they fail the test (with the hang said),
    whether they were found while waiting for acknowledgements or only after the kill."""
    loop = PowerCutLoop(_FakeLazyFS(), tmp_path, "writes", "harness: a failure and a hang")  # type: ignore[arg-type]

    def start(cut, second=False, env=None):
        (tmp_path / "acks.log").write_bytes(b"A w1 1\nerror main: CorruptDataError: damaged\n")
        loop._current = (_FakeChild(), 0)
        return loop._current

    def wait_acks(proc, offset, want, cut, tags=pc_loop.ACK_TAGS):
        if when == "waiting for acknowledgements":
            raise AssertionError("the child failed: [b'error main: CorruptDataError: damaged']")

    def kill_hangs(proc, lfs=None):
        raise lazyfs.LazyFSHung("a SIGKILLed child was not reaped in 30s")

    monkeypatch.setattr(loop, "_start", start)
    monkeypatch.setattr(loop, "_wait_acks", wait_acks)
    monkeypatch.setattr(loop, "_check", lambda cut, t0: loop.cuts.append(cut))
    monkeypatch.setattr(pc_loop, "kill_process", kill_hangs)
    monkeypatch.setattr(pc_loop.time, "sleep", lambda s: None)
    with pytest.raises(AssertionError) as info:
        loop.random_cut()
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "CorruptDataError: damaged" in text and "was not reaped in 30s" in text, text
    assert not loop.cuts  # no cut was counted as checked
