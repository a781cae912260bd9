"""One process owns a store: a second exclusive open fails with StoreLockedError naming the
holder's pid (a second plain open connects to the owner: tests/remote)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))

TRY_OPEN = textwrap.dedent("""
    import sys
    import pravega_embedded as pe
    try:
        store = pe.open(sys.argv[1], durability="none", exclusive=True)
    except pe.errors.StoreLockedError as exc:
        print("LOCKED", exc.pid, isinstance(exc, BlockingIOError), exc.path)
        print("MESSAGE", exc)
        sys.exit(3)
    print("OPENED", sorted(store.list_scopes()))
    store.close()
""")

HOLD = textwrap.dedent("""
    import sys
    import pravega_embedded as pe
    store = pe.open(sys.argv[1], durability="none")
    store.create_scope("held", exist_ok=True)
    print("READY", flush=True)
    sys.stdin.readline()
    store.close()
    print("CLOSED", flush=True)
""")


def _try_open(path):
    return subprocess.run([sys.executable, "-c", TRY_OPEN, str(path)], env=ENV,
                          capture_output=True, text=True, timeout=120)


def test_second_open_in_the_same_process(store_path):
    s = pe.open(store_path, durability="none")
    try:
        with pytest.raises(errors.StoreLockedError) as info:
            pe.open(store_path, durability="none", exclusive=True)
        exc = info.value
        assert isinstance(exc, BlockingIOError) and isinstance(exc, errors.PravegaEmbeddedError)
        assert exc.pid == os.getpid() and str(os.getpid()) in str(exc)
        assert str(store_path) in str(exc) and exc.path == str(store_path)
        with pytest.raises(errors.StoreLockedError):
            pe.open(str(store_path) + "/", durability="fsync", exclusive=True)  # other spelling
        s.create_scope("still-works")  # the failed open did not disturb the owner
        with pe.open(str(store_path) + "/") as client:  # not exclusive: a client of the owner
            assert isinstance(client, pe.RemoteStore) and client.list_scopes() == ["still-works"]
    finally:
        s.close()
    with pe.open(store_path, durability="none") as s2:
        assert s2.list_scopes() == ["still-works"]


def test_another_process_cannot_open_a_store_we_hold(store_path):
    with pe.open(store_path, durability="none") as s:
        s.create_scope("mine")
        out = _try_open(store_path)
        assert out.returncode == 3, out.stdout + out.stderr
        assert f"LOCKED {os.getpid()} True {store_path}" in out.stdout
        assert str(os.getpid()) in out.stdout.split("MESSAGE", 1)[1]
        s.create_scope("after")  # the owner is unaffected
    out = _try_open(store_path)  # released on close
    assert out.returncode == 0 and "OPENED ['after', 'mine']" in out.stdout, out.stderr


def test_we_cannot_open_a_store_another_process_holds(store_path):
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(store_path)], env=ENV,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "READY", child.stderr.read()
        with pytest.raises(errors.StoreLockedError) as info:
            pe.open(store_path, durability="none", exclusive=True)
        assert info.value.pid == child.pid
        assert str(child.pid) in str(info.value) and str(store_path) in str(info.value)
        assert "this process" not in str(info.value)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "CLOSED"
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with pe.open(store_path, durability="none") as s:  # after the holder closed it
        assert s.list_scopes() == ["held"]


def test_lock_is_released_when_the_holder_is_killed(store_path):
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(store_path)], env=ENV,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "READY", child.stderr.read()
        with pytest.raises(errors.StoreLockedError):
            pe.open(store_path, durability="none", exclusive=True)
    finally:
        child.kill()
        child.wait()
    with pe.open(store_path, durability="none") as s:
        assert s.list_scopes() == ["held"]


def test_a_plain_open_of_a_store_held_but_not_served_waits_then_says_so(store_path):
    """No owner answers on the socket: the open retries (the owner may be starting, or gone and
    its store free to take) until connect_timeout, then raises StoreLockedError; a failed
    connect is never reported as a storage failure of the directory."""
    s = pe.open(store_path, durability="none", serve=False)
    try:
        with pytest.raises(errors.StoreLockedError, match="does not serve it"):
            pe.open(store_path, durability="none", connect_timeout=0.5)
    finally:
        s.close()
    with pe.open(store_path, durability="none") as again:  # free again: this open owns it
        assert isinstance(again, pe.Store)
