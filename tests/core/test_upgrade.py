"""A store written by an earlier release opens with this one: every event is there, the
unapplied journal tail replays, writers resume, new writes go to a journal file of the current
format, and the old release then refuses the store.

The earlier releases are this repository at ``OLD_COMMITS``: the last commit before journal
format 2 (journal format 1, metadata format 3) and the last before journal format 3 (journal
format 2, metadata format 4), each exported with ``git archive`` and its C core built with cffi,
then run in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pravega_embedded as pe

ROOT = Path(__file__).resolve().parents[2]
OLD_COMMITS = {"journal-1": "6882e25", "journal-2": "870b2a4"}


def _have_old_releases() -> bool:
    try:
        return all(subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{c}^{{commit}}"],
                                  capture_output=True, timeout=30).returncode == 0
                   for c in OLD_COMMITS.values())
    except (OSError, subprocess.SubprocessError):
        return False


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _have_old_releases(),
                       reason=f"git history with commits {sorted(OLD_COMMITS.values())} is not "
                              "available (shallow clone?)"),
]

WRITE = textwrap.dedent("""
    import json, os, sys
    import pravega_embedded as pe
    path, mode = sys.argv[1], sys.argv[2]
    s = pe.open(path, roll_bytes=1 << 20, checkpoint_interval=3600)
    s.create_scope("up")
    s.create_stream("up", "ev", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    w = s.create_writer("up", "ev", writer_id="w1")
    for i in range(3000):
        w.write_event(b"e-%05d-" % i + b"x" * 400, routing_key="k%d" % (i % 5))
    w.flush()
    s.scale_stream("up", "ev", [0], [(0.0, 0.25), (0.25, 0.5)])
    tx = s.create_transactional_writer("up", "ev", writer_id="t1").begin_txn()
    for i in range(10):
        tx.write_event(b"t-%d" % i, routing_key="k%d" % i)
    tx.commit()
    w.write_event(b"big" + os.urandom(9 << 20), routing_key="k1")  # a large event
    b = s.create_byte_stream("up", "bytes")
    b.write(b"0123456789" * 1000)
    b.flush()
    if mode == "checkpointed":
        s.checkpoint()
    for i in range(3000, 3500):  # after the last checkpoint: replayed from the journal
        w.write_event(b"e-%05d-" % i + b"x" * 400, routing_key="k%d" % (i % 5))
    w.flush()
    b.write(b"tail")
    b.flush()
    sys.stdout.write(json.dumps({"last": w.last_sequence}))
    sys.stdout.flush()
    os._exit(0)  # a crash: no close, no final checkpoint
""")

READ = textwrap.dedent("""
    import json, sys
    import pravega_embedded as pe
    try:
        pe.open(sys.argv[1]).close()
    except pe.errors.FormatVersionError as exc:
        print(json.dumps({"refused": str(exc)}))
    else:
        print(json.dumps({"opened": True}))
""")


@pytest.fixture(scope="module", params=sorted(OLD_COMMITS))
def old_release(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("old-release")
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMITS[request.param]],
                         capture_output=True, check=True, timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=tar, check=True, timeout=120)
    # cffi compiles through setuptools, which reads a pyproject.toml in the working directory; the
    # setuptools of a fresh venv (65.x) rejects the old file's license string, and the old release
    # runs from PYTHONPATH, so the packaging files are not needed.
    (root / "pyproject.toml").unlink()
    subprocess.run([sys.executable, "pravega_embedded/_native/_build.py"], cwd=root, check=True,
                   capture_output=True, timeout=600)
    return root


def _run_old(old: Path, code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=old, capture_output=True,
                         text=True, timeout=600, env={"PYTHONPATH": str(old), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("mode", ["replaying", "checkpointed"])
def test_a_store_of_the_previous_release_opens_and_upgrades(old_release, tmp_path, mode):
    store = tmp_path / "store"
    last = _run_old(old_release, WRITE, str(store), mode)["last"]
    assert (store / "meta" / "data.mdb").exists()
    # the marker came with journal format 2: a format-1 store gets one at its first open here
    assert (store / "STORE").exists() == (old_release / "pravega_embedded" / "storedir.py").exists()
    with pe.open(store, roll_bytes=1 << 20) as s:
        evs = [e for e in s.read_slice("up", "ev")]
        plain = sorted(e.event[:7] for e in evs if e.event.startswith(b"e-"))
        assert plain == [b"e-%05d" % i for i in range(3500)]
        assert sorted(e.event for e in evs if e.event.startswith(b"t-")) == sorted(b"t-%d" % i for i in range(10))
        assert [len(e.event) for e in evs if e.event.startswith(b"big")] == [3 + (9 << 20)]
        per_key: dict[str, list[bytes]] = {}
        for e in evs:
            if e.event.startswith(b"e-"):
                per_key.setdefault(e.routing_key, []).append(e.event[:7])
        assert all(v == sorted(v) for v in per_key.values()), "per-key order"
        w = s.create_writer("up", "ev", writer_id="w1")
        assert w.last_sequence == last
        w.write_event(b"after-upgrade", routing_key="k0")
        w.flush()
        b = s.create_byte_stream("up", "bytes")
        assert b.read() == b"0123456789" * 1000 + b"tail"
        b.write(b"more")
        b.close()
        w.close()
    assert (store / "STORE").exists()
    newest = sorted((store / "journal").glob("*.pej"))[-1]
    assert int.from_bytes(newest.read_bytes()[8:12], "little") == 3  # new writes: format 3
    with pe.open(store) as s:  # and again
        assert [e.event for e in s.read_slice("up", "ev")][-1:] == [b"after-upgrade"] or \
            b"after-upgrade" in [e.event for e in s.read_slice("up", "ev")]
        assert s.create_byte_stream("up", "bytes").read()[-8:] == b"tailmore"
    assert "refused" in _run_old(old_release, READ, str(store))  # the old release says no


CRASH_AT_UPGRADE = textwrap.dedent("""
    import os, sys
    import pravega_embedded as pe
    from pravega_embedded.engine import Engine
    Engine.checkpoint = lambda self, *a, **k: os._exit(0)  # dies at the open's first checkpoint
    pe.open(sys.argv[1])
""")


def test_a_crash_while_opening_an_old_store_leaves_it_openable(old_release, tmp_path):
    """The upgrade starts a journal file of the current format before the open's first
    checkpoint; a crash in between leaves the old format's last file (no ROLL record) followed
    by a new, empty one, both scanned at the next open."""
    store = tmp_path / "store"
    _run_old(old_release, WRITE, str(store), "checkpointed")
    out = subprocess.run([sys.executable, "-c", CRASH_AT_UPGRADE, str(store)], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    newest = sorted((store / "journal").glob("*.pej"))[-1]
    assert int.from_bytes(newest.read_bytes()[8:12], "little") == 3  # the new file is there
    with pe.open(store) as s:
        evs = [e.event[:7] for e in s.read_slice("up", "ev") if e.event.startswith(b"e-")]
        assert sorted(evs) == [b"e-%05d" % i for i in range(3500)]
        assert s.create_byte_stream("up", "bytes").read() == b"0123456789" * 1000 + b"tail"
