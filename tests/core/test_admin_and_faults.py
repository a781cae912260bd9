"""Store administration, the one-process lock, and disk faults injected into the live journal."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded._native import lib

REPO = Path(__file__).resolve().parents[2]


def test_scopes_and_streams(pe_store):
    s = pe_store
    assert s.create_scope("a") is True
    assert s.create_scope("a", exist_ok=True) is False
    with pytest.raises(errors.ScopeExistsError):
        s.create_scope("a")
    with pytest.raises(errors.ScopeNotFoundError):
        s.create_stream("missing", "x")
    with pytest.raises(errors.ScopeNotFoundError):
        s.list_streams("missing")
    assert s.create_stream("a", "x") is True
    assert s.create_stream("a", "x", exist_ok=True) is False
    with pytest.raises(errors.StreamExistsError):
        s.create_stream("a", "x")
    with pytest.raises(errors.StreamNotFoundError) as info:
        s.stream_info("a", "nope")
    assert "a/nope" in str(info.value)
    s.create_stream("a", "y")
    assert s.list_scopes() == ["a"] and s.list_streams("a") == ["x", "y"]
    with pytest.raises(errors.ScopeNotEmptyError):
        s.delete_scope("a")
    s.delete_stream("a", "x")
    s.delete_stream("a", "y")
    s.delete_scope("a")
    assert s.list_scopes() == []


def test_head_tail_and_truncation(pe_store):
    s = pe_store
    s.create_scope("a")
    s.create_stream("a", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    info = s.stream_info("a", "t")
    assert info.head == info.tail and not info.sealed and info.length == 0
    w = s.create_writer("a", "t")
    w.write_events([b"old%d" % i for i in range(5)], routing_key="k")
    w.flush()
    mid = s.stream_info("a", "t").tail
    assert mid != info.tail and info.tail <= mid
    w.write_events([b"new%d" % i for i in range(5)], routing_key="k")
    w.flush()
    s.truncate_stream("a", "t", mid)
    assert s.stream_info("a", "t").head == mid
    assert [e.event for e in s.read_slice("a", "t")] == [b"new%d" % i for i in range(5)]
    s.truncate_stream("a", "t", info.tail)  # an older cut does not move the head back
    assert s.stream_info("a", "t").head == mid
    with pytest.raises(errors.TruncatedDataError):
        s.create_reader("a", "t", start=info.tail)
    with pytest.raises(errors.TruncatedDataError):
        s.read_slice("a", "t", start=info.tail)


def test_delete_then_recreate_starts_empty_also_after_reopen(store_path):
    with pe.open(store_path, durability="os") as s:
        s.create_scope("a")
        s.create_stream("a", "t")
        with s.create_writer("a", "t", writer_id="w") as w:
            w.write_events([b"gone1", b"gone2"], routing_key="k")
        s.delete_stream("a", "t")
        s.create_stream("a", "t")
        with s.create_writer("a", "t", writer_id="w") as w:
            assert w.last_sequence == -1
            w.write_event(b"fresh", routing_key="k")
    with pe.open(store_path, durability="os") as s:
        assert [e.event for e in s.read_slice("a", "t")] == [b"fresh"]
        assert s.create_writer("a", "t", writer_id="w").last_sequence == 0


def test_closed_store_and_temporary_store(tmp_path):
    s = pe.open_temporary()
    path = Path(s.path)
    assert path.is_dir()
    s.close()
    s.close()
    assert not path.exists()
    with pytest.raises(errors.StoreClosedError):
        s.list_scopes()
    with pytest.raises(errors.StoreClosedError):
        s.create_scope("x")
    nested = tmp_path / "a" / "b" / "c"
    with pe.open(nested, durability="none") as s2:
        s2.create_scope("x")
    assert (nested / "journal").is_dir() and s2.closed


def test_many_streams(store_path):
    with pe.open(store_path, durability="none") as s:
        s.create_scope("many")
        for i in range(2000):
            s.create_stream("many", f"s{i}")
    with pe.open(store_path, durability="none") as s:
        assert len(s.list_streams("many")) == 2000


# ------------------------------------------------------------------ the process lock
def test_second_open_in_this_process(store_path):
    with pe.open(store_path, durability="none"):
        with pytest.raises(errors.StoreLockedError) as info:
            pe.open(store_path, durability="none", exclusive=True)
        assert str(os.getpid()) in str(info.value) and info.value.pid == os.getpid()
    pe.open(store_path, durability="none").close()  # released on close


def test_second_open_from_another_process(store_path):
    script = textwrap.dedent(f"""
        import sys
        import pravega_embedded as pe
        try:
            pe.open({str(store_path)!r}, durability="none", exclusive=True)
        except pe.errors.StoreLockedError as exc:
            print("LOCKED", exc.pid, exc)
            sys.exit(3)
        print("OPENED")
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with pe.open(store_path, durability="none"):
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 3, out.stderr
        assert f"LOCKED {os.getpid()}" in out.stdout and str(store_path) in out.stdout
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "OPENED" in out.stdout, out.stderr


# ------------------------------------------------------------------ injected disk faults
def test_disk_full_loses_nothing(durable_store):
    s = durable_store
    s.create_scope("f")
    s.create_stream("f", "t")
    w = s.create_writer("f", "t", writer_id="w", linger=60)  # only flush() drains: the fault hits it
    w.write_events([b"before"], routing_key="k")
    w.flush()
    lib.pe_journal_inject_fault(s._engine.journal.handle, lib.PE_FAULT_WRITE, errno.ENOSPC, 1)
    w.write_events([b"during-1", b"during-2"], routing_key="k")
    with pytest.raises(errors.StorageFullError) as info:
        w.flush()
    assert info.value.errno == errno.ENOSPC
    w.write_event(b"after", routing_key="k")
    assert w.flush() == 3  # the kept batch went in first, then the new event
    assert [e.event for e in s.read_slice("f", "t")] == [b"before", b"during-1", b"during-2", b"after"]


def test_failed_fsync_is_not_retried(store_path):
    s = pe.open(store_path)
    s.create_scope("f")
    s.create_stream("f", "t")
    w = s.create_writer("f", "t", writer_id="w", linger=60)
    w.write_events([b"acked"], routing_key="k")
    w.flush()
    lib.pe_journal_inject_fault(s._engine.journal.handle, lib.PE_FAULT_SYNC, errno.EIO, 1)
    w.write_events([b"unacked"], routing_key="k")
    with pytest.raises(errors.StorageError) as info:
        w.flush()
    assert info.value.errno == errno.EIO
    with pytest.raises(errors.StorageError):
        w.write_events([b"later"], routing_key="k")
        w.flush()
    s.close()  # the failure was reported already: close releases everything quietly
    assert s.closed
    with pe.open(store_path) as s2:  # reopening recovers; the acknowledged event is there
        events = [e.event for e in s2.read_slice("f", "t")]
        assert events[0] == b"acked" and b"later" not in events


def test_os_mode_syncs_the_journal_before_a_topology_commit(store_path):
    """Durability "os" acknowledges writes without fdatasync, but a seal (like a checkpoint)
    must make the journal durable before LMDB records state that refers to it: with that
    fdatasync failing, the seal fails and LMDB never says the stream is sealed."""
    s = pe.open(store_path, durability="os", checkpoint_interval=3600)
    s.create_scope("o")
    s.create_stream("o", "t")
    with s.create_writer("o", "t", writer_id="w") as w:
        w.write_events([b"data"], routing_key="k")
    lib.pe_journal_inject_fault(s._engine.journal.handle, lib.PE_FAULT_SYNC, errno.EIO, 1)
    with pytest.raises(errors.StorageError) as info:
        s.seal_stream("o", "t")
    assert info.value.errno == errno.EIO
    s.close()
    with pe.open(store_path, durability="os") as s2:
        assert not s2.stream_info("o", "t").sealed
        assert [e.event for e in s2.read_slice("o", "t")] == [b"data"]


def test_a_lock_file_a_fuse_file_system_lost_is_opened_afresh(tmp_path, monkeypatch):
    """LazyFS, after a simulated power cut, once answered ENOENT to ftruncate of the LOCK file
    it had just opened (CI); the open tries the LOCK file once more instead of failing."""
    import pravega_embedded.storedir as sd

    real = os.ftruncate
    calls = []

    def lost_once(fd, length):
        calls.append(fd)
        if len(calls) == 1:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
        return real(fd, length)

    monkeypatch.setattr(sd.os, "ftruncate", lost_once)
    with pe.open(tmp_path / "s", durability="none", tier2=False) as store:
        store.create_scope("x")
    assert len(calls) == 2
