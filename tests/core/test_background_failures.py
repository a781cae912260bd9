"""Background threads never swallow a failure: it is logged with its traceback (logger
``pravega_embedded.streams``), kept for ``store.status()``, and a failed sync stops the store so
the next call raises it; the library prints nothing unless the application configures logging."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
import time

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded._native import lib


def _wait(cond, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_failing_maintenance_task_is_logged_kept_and_shown(tmp_path, monkeypatch, caplog):
    with pe.open(tmp_path / "s", maintenance_interval=0.05) as store:
        calls = []

        def broken() -> None:
            calls.append(1)
            raise RuntimeError("retention broke")

        # the maintenance thread runs the tasks it was given at open: replace one
        monkeypatch.setattr(store._bg, "_maintenance", [("retention", broken)])
        with caplog.at_level(logging.ERROR, logger="pravega_embedded.streams"):
            _wait(lambda: store.status().background_failures, "a recorded failure")
        failure = store.status().background_failures[0]
        assert failure.task == "retention" and "retention broke" in failure.error
        assert "Traceback" in failure.traceback and "broken" in failure.traceback
        assert any("retention" in r.getMessage() and r.exc_info for r in caplog.records)
        assert store.status().healthy  # not a failed sync: the store goes on
        store.create_scope("still-works")


def test_a_background_checkpoint_whose_sync_fails_stops_the_store(tmp_path):
    """Durability "os": the checkpoint's fdatasync (in C, on the checkpoint thread) fails; the
    store is failed from then on, and the next call says so, with the first failure as cause."""
    store = pe.open(tmp_path / "s", durability="os", checkpoint_interval=0.05)
    store.create_scope("a")
    store.create_stream("a", "b")
    w = store.create_writer("a", "b", writer_id="w")
    w.write_event(b"before", routing_key="k")
    w.flush()
    lib.pe_journal_inject_fault(store._engine.journal.handle, lib.PE_FAULT_SYNC, errno.EIO, 1)
    w.write_event(b"unsynced", routing_key="k")
    w.flush()  # os mode: acknowledged once written
    _wait(lambda: not store.status().healthy, "the failed background checkpoint")
    assert "close the store and open it again" in store.status().failed
    with pytest.raises(errors.StorageError) as info:
        store.stream_info("a", "b")
    assert info.value.errno == errno.EIO and info.value.__cause__ is not None
    with pytest.raises(errors.StorageError):
        w.write_event(b"after", routing_key="k")
        w.flush()
    store.close()
    with pe.open(tmp_path / "s", durability="os") as store:
        got = [e.event for e in store.read_slice("a", "b")]
        assert got[0] == b"before" and b"after" not in got


def test_the_library_prints_nothing_by_default(tmp_path):
    """A failure in a background task, in a process that configured no logging: nothing on
    stderr (the package logger has a NullHandler), the failure is still in status()."""
    code = f"""
import time, pravega_embedded as pe
s = pe.open({str(tmp_path / 's')!r}, maintenance_interval=0.05)
def broken():
    raise RuntimeError("boom")
s._bg._maintenance = [("retention", broken)]
deadline = time.monotonic() + 30
while not s.status().background_failures and time.monotonic() < deadline:
    time.sleep(0.01)
print(len(s.status().background_failures) > 0)
s.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True" and out.stderr == ""
