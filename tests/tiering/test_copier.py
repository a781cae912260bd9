"""Copies of segment ranges to tier 2 with their state in LMDB: what plain Parquet readers see
is exactly the tiered events, once; copies go on where the last ended and never upload data
past the head; a process killed at each step of a copy leaves, after the next open's clean-up,
no orphan file, no duplicate and a manifest that agrees with LMDB."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

import pravega_embedded as pe
from pravega_embedded.tiering.copier import Copier
from pravega_embedded.tiering.layout import parse_file_name, segment_dir
from pravega_embedded.tiering.manifest import latest_manifest
from pravega_embedded.tiering.target import Tier2Target

REPO = Path(__file__).resolve().parents[2]


def _one_stream(store, n: int) -> None:
    """Scope iot, stream ev with one segment, ``n`` events written and flushed."""
    store.create_scope("iot")
    store.create_stream("iot", "ev")
    with store.create_writer("iot", "ev") as w:
        for i in range(n):
            w.write_event(b"%02d" % i, routing_key="k")


def _visible(store, seg) -> int:
    e = store._engine
    return e.index.visible_length(seg, e.journal.acked())


def _copy_all(store, copier, stream):
    st = store._engine.streams[f"iot/{stream}"]
    return [f for seg in list(st.segments.values())
            if (f := copier.copy(st, seg, _visible(store, seg))) is not None]


def _tier2_events(root: Path, stream: str) -> list[bytes]:
    glob = f"{root}/scope=iot/stream={stream}/**/*.parquet"
    return sorted(r[0] for r in duckdb.sql(
        f"SELECT event FROM read_parquet('{glob}', hive_partitioning=1)").fetchall())


def _parquet_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "_manifest" not in p.parts)


def _check_consistent(store, target, root: Path, stream: str) -> None:
    """Every file in tier 2 is in LMDB and the manifest, and nothing else is there."""
    st = store._engine.streams[f"iot/{stream}"]
    copier = Copier(store._engine, target)
    want = {}
    for seg in st.segments.values():
        for f in copier.files(seg):
            want[root / segment_dir("iot", stream, seg.segment_id) / f.name] = f
    assert set(_parquet_files(root)) == set(want), "orphans or missing files in tier 2"
    m = latest_manifest(target, "iot", stream)
    assert m is not None and set(m.files) == set(want.values())
    assert m.version == store._engine.meta.manifest_versions(st.key)[0]


def test_copies_continue_where_they_ended_and_readers_see_each_event_once(tmp_path):
    root = tmp_path / "t2"
    target = Tier2Target(str(root))
    with pe.open(tmp_path / "s", durability="none", tier2=False) as store:
        store.create_scope("iot")
        store.create_stream("iot", "ev", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        copier = Copier(store._engine, target)
        w = store.create_writer("iot", "ev")
        for i in range(500):
            w.write_event(b"a%04d" % i, routing_key=f"k{i % 9}")
        w.flush()
        first = _copy_all(store, copier, "ev")
        assert len(first) == 2 and _tier2_events(root, "ev") == sorted(b"a%04d" % i for i in range(500))
        assert _copy_all(store, copier, "ev") == []  # nothing new
        for i in range(300):
            w.write_event(b"b%04d" % i, routing_key=f"k{i % 9}")
        w.flush()
        second = _copy_all(store, copier, "ev")
        assert [(f.segment_id, f.first) for f in second] == [(f.segment_id, f.end) for f in first]
        everything = sorted([b"a%04d" % i for i in range(500)] + [b"b%04d" % i for i in range(300)])
        assert _tier2_events(root, "ev") == everything
        _check_consistent(store, target, root, "ev")
        m = latest_manifest(target, "iot", "ev")
        assert m.version == 4 and sum(f.events for f in m.files) == 800
        w.close()
    with pe.open(tmp_path / "s", durability="none", tier2=False) as store:  # the state is in LMDB
        copier = Copier(store._engine, target)
        st = store._engine.streams["iot/ev"]
        assert sorted(copier.tiered_end(s) for s in st.segments.values()) == \
            sorted(f.end for f in second)
        assert _copy_all(store, copier, "ev") == []


def test_data_past_the_head_is_never_uploaded(tmp_path):
    root = tmp_path / "t2"
    with pe.open(tmp_path / "s", durability="none", tier2=False) as store:
        store.create_scope("iot")
        store.create_stream("iot", "ev")
        with store.create_writer("iot", "ev") as w:
            for i in range(100):
                w.write_event(b"%03d" % i, routing_key="k")
        cut = None
        for ev in store.read_slice("iot", "ev"):
            if ev.event == b"060":
                cut = pe.StreamCut.of("iot", "ev", {ev.segment_id: ev.offset})
        store.truncate_stream("iot", "ev", cut)
        (f,) = _copy_all(store, Copier(store._engine, Tier2Target(str(root))), "ev")
        assert f.first == cut.as_dict()[f.segment_id]
        assert _tier2_events(root, "ev") == [b"%03d" % i for i in range(60, 100)]
        m = latest_manifest(Tier2Target(str(root)), "iot", "ev")
        assert m.head == ((f.segment_id, f.first),)


CRASH = textwrap.dedent("""
    import os, sys
    import pravega_embedded as pe
    from pravega_embedded.tiering import copier as cp
    from pravega_embedded.tiering import target as tg
    from pravega_embedded.tiering.target import Tier2Target
    path, root, point = sys.argv[1], sys.argv[2], sys.argv[3]
    s = pe.open(path, durability="fsync", tier2=False)
    s.create_scope("iot")
    s.create_stream("iot", "ev")
    w = s.create_writer("iot", "ev")
    for i in range(200):
        w.write_event(b"a%04d" % i, routing_key="k%d" % (i % 4))
    w.flush()
    c = cp.Copier(s._engine, Tier2Target(root))
    st = s._engine.streams["iot/ev"]
    seg = next(iter(st.segments.values()))
    e = s._engine
    c.copy(st, seg, e.index.visible_length(seg, e.journal.acked()))
    for i in range(200):
        w.write_event(b"b%04d" % i, routing_key="k%d" % (i % 4))
    w.flush()
    def die(*a, **k):
        os._exit(0)
    real_link = os.link
    def die_at_link(suffix):  # files are staged, then published by a hard link
        def link(src, dst, *a, **k):
            if str(dst).endswith(suffix):
                os._exit(0)
            return real_link(src, dst, *a, **k)
        return link
    if point == "before-put":
        cp.write_segment_file = die
    elif point == "staged":
        tg.os.link = die_at_link(".parquet")
    elif point == "published":
        cp.verify_segment_file = die
    elif point == "finished":
        cp.publish_manifest = die
    elif point == "manifest-staged":
        tg.os.link = die_at_link(".json")
    c.copy(st, seg, e.index.visible_length(seg, e.journal.acked()))
    print("copied", flush=True)
    os._exit(0)
""")


@pytest.mark.parametrize("point", ["before-put", "staged", "published", "finished", "manifest-staged",
                                   "none"])
def test_a_copy_killed_at_each_step_leaves_no_orphan_and_no_duplicate(tmp_path, point):
    root = tmp_path / "t2"
    out = subprocess.run([sys.executable, "-c", CRASH, str(tmp_path / "s"), str(root), point],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert ("copied" in out.stdout) == (point == "none")
    # the process died where it was meant to: what it left in tier 2 shows it
    staged_data = [p for p in root.rglob("_stage.*.parquet.partial")]
    staged_manifests = [p for p in root.rglob("_stage.*.json.partial")]
    data = [p for p in _parquet_files(root) if p.name.endswith(".parquet")]
    manifests = sorted(p.name for p in root.rglob("_manifest/*.json"))
    assert bool(staged_data) == (point == "staged")
    assert bool(staged_manifests) == (point == "manifest-staged")
    assert len(data) == (1 if point in ("before-put", "staged") else 2)
    assert len(manifests) == (2 if point == "none" else 1)
    target = Tier2Target(str(root))
    with pe.open(tmp_path / "s", tier2=False) as store:
        copier = Copier(store._engine, target)
        copier.recover()
        _check_consistent(store, target, root, "ev")
        tiered = _tier2_events(root, "ev")
        assert tiered[:200] == [b"a%04d" % i for i in range(200)]
        assert len(tiered) == len(set(tiered))  # no event in two files
        _copy_all(store, copier, "ev")  # and copying goes on
        assert _tier2_events(root, "ev") == sorted([b"a%04d" % i for i in range(200)] +
                                                   [b"b%04d" % i for i in range(200)])
        _check_consistent(store, target, root, "ev")
        assert all(parse_file_name(p.name) for p in _parquet_files(root))


def test_a_failed_copy_leaves_nothing_behind_and_says_why(tmp_path, monkeypatch):
    from pravega_embedded.errors import CorruptDataError, StorageError
    from pravega_embedded.tiering import copier as cp

    root = tmp_path / "t2"
    target = Tier2Target(str(root))
    with pe.open(tmp_path / "s", durability="none", tier2=False) as store:
        _one_stream(store, 50)
        copier = Copier(store._engine, target)
        real_verify = cp.verify_segment_file

        def bad_verify(*a, **k):
            raise CorruptDataError("the file read back differs")
        monkeypatch.setattr(cp, "verify_segment_file", bad_verify)
        with pytest.raises(CorruptDataError, match="differs"):
            _copy_all(store, copier, "ev")
        assert _parquet_files(root) == []  # the published file was deleted again
        monkeypatch.setattr(cp, "verify_segment_file", real_verify)

        def unreachable(self, rel, data, *, exclusive=False):
            raise StorageError(5, "write a tier-2 file (s3://b/x): EndpointConnectionError")
        monkeypatch.setattr(Tier2Target, "put", unreachable)
        monkeypatch.setattr(Tier2Target, "put_streamed", unreachable)
        with pytest.raises(StorageError, match="EndpointConnectionError"):
            _copy_all(store, copier, "ev")
        monkeypatch.undo()
        st = store._engine.streams["iot/ev"]
        assert [store._engine.meta.tiering_segment(s.uid) for s in st.segments.values()] == [(0, None)]
        assert len(_copy_all(store, copier, "ev")) == 1
        assert _tier2_events(root, "ev") == [b"%02d" % i for i in range(50)]
        _check_consistent(store, target, root, "ev")


def test_a_copy_stops_at_durable_data_and_skips_a_deleted_stream(tmp_path):
    root = tmp_path / "t2"
    target = Tier2Target(str(root))
    with pe.open(tmp_path / "s", durability="os", tier2=False) as store:
        _one_stream(store, 20)
        st = store._engine.streams["iot/ev"]
        (seg,) = st.segments.values()
        copier = Copier(store._engine, target)
        f = copier.copy(st, seg, seg.length + 1000)  # asked past the end: stops at the data's end
        assert f is not None and f.end == seg.length
        with store.create_writer("iot", "ev") as w:
            w.write_event(b"late", routing_key="k")
        uid = seg.uid
        store.seal_stream("iot", "ev")
        store.delete_stream("iot", "ev")
        assert copier.copy(st, seg, seg.length) is None
        assert store._engine.meta.tiering_segment(uid) == (0, None)  # nothing left in LMDB
        assert [p.name for p in _parquet_files(root)] == [f.name]  # (the stream's old file)
