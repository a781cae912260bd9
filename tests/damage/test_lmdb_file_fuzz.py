"""Fuzzing of the check that reads LMDB's data.mdb before LMDB maps it (lmdbfile.py): a real
metadata file, damaged at random (bytes changed, the meta page's last page raised, the file
cut), gives a CorruptDataError or passes, never another exception or a hang; and a file that
passes is one LMDB can read entirely without touching a page past its end (a child process,
so a SIGBUS would show)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.lmdbfile import check_lmdb_file

_READ_ALL = """
import lmdb, sys
env = lmdb.open(sys.argv[1], max_dbs=16, readonly=True, lock=False)
with env.begin() as t:
    names = [k for k, _ in t.cursor()]
    for name in names:
        db = env.open_db(name, txn=t, create=False)
        for _ in t.cursor(db=db):
            pass
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("ref") / "store"
    with pe.open(path, durability="none") as store:
        store.create_scope("s")
        store.create_stream("s", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        with store.create_writer("s", "t", writer_id="w") as w:
            for i in range(3000):
                w.write_event(b"e%d" % i * 20, routing_key=f"k{i % 11}")
                if i % 50 == 0:
                    w.flush()
        store.create_reader_group("g", pe.ReaderGroupConfig(streams=[("s", "t")]))
        store.checkpoint()
    return (path / "meta" / "data.mdb").read_bytes()


def _raise_last_pg(raw: bytearray, extra: int) -> None:
    psize = int.from_bytes(raw[40:44], "little")
    for meta in (0, psize):
        at = meta + 136
        if at + 8 <= len(raw):
            last = int.from_bytes(raw[at : at + 8], "little")
            raw[at : at + 8] = ((last + extra) % (1 << 64)).to_bytes(8, "little")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_damaged_lmdb_files_are_refused_or_readable(reference, tmp_path, data):
    raw = bytearray(reference)
    if data.draw(st.booleans()):
        _raise_last_pg(raw, data.draw(st.integers(1, 1 << 40)))  # the tree walk runs
    for _ in range(data.draw(st.integers(0, 6))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(raw))))
    if cut is not None:
        del raw[cut:]
    meta = tmp_path / f"m{data.draw(st.integers(0, 1 << 30))}"
    shutil.rmtree(meta, ignore_errors=True)
    meta.mkdir()
    (meta / "data.mdb").write_bytes(bytes(raw))
    try:
        check_lmdb_file(str(meta))
    except errors.CorruptDataError:
        return
    # passed: LMDB must not be killed reading it (it may report damage; that is not a crash)
    child = subprocess.run([sys.executable, "-c", _READ_ALL, str(meta)], capture_output=True,
                           timeout=60)
    assert child.returncode >= 0, f"LMDB was killed by signal {-child.returncode} on a file the check passed"


def test_a_file_cut_inside_its_trees_is_refused(reference, tmp_path):
    raw = bytearray(reference)
    _raise_last_pg(raw, 5)
    meta = tmp_path / "m"
    meta.mkdir()
    (meta / "data.mdb").write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(errors.CorruptDataError, match="cut short"):
        check_lmdb_file(str(meta))
    (meta / "data.mdb").write_bytes(bytes(raw))
    check_lmdb_file(str(meta))  # whole: the raised last page is no damage
    assert os.path.getsize(meta / "data.mdb") == len(raw)
