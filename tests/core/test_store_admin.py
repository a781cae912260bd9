"""Store administration: scopes, streams, head/tail cuts, truncation, deletion, closing,
temporary stores and many streams."""

from __future__ import annotations

from pathlib import Path

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _fixed(n):
    return pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n))


def _events(store, scope, stream, **kw):
    return [e.event for e in store.read_slice(scope, stream, **kw)]


def test_create_scope_exist_ok(pe_store):
    s = pe_store
    assert s.create_scope("iot") is True
    assert s.create_scope("iot", exist_ok=True) is False
    with pytest.raises(errors.ScopeExistsError) as info:
        s.create_scope("iot")
    assert "iot" in str(info.value) and isinstance(info.value, FileExistsError)
    assert s.list_scopes() == ["iot"]


def test_create_stream_exist_ok_and_missing_scope(pe_store):
    s = pe_store
    with pytest.raises(errors.ScopeNotFoundError) as info:
        s.create_stream("nope", "t")
    assert "nope" in str(info.value) and isinstance(info.value, LookupError)
    s.create_scope("iot")
    assert s.create_stream("iot", "sensors", _fixed(4)) is True
    assert s.create_stream("iot", "sensors", _fixed(4), exist_ok=True) is False
    assert s.create_stream("iot", "sensors", _fixed(2), exist_ok=True) is False  # existing one kept
    assert len(s.stream_info("iot", "sensors").segments) == 4
    with pytest.raises(errors.StreamExistsError) as info:
        s.create_stream("iot", "sensors")
    assert "iot/sensors" in str(info.value)
    with pytest.raises(errors.StreamNotFoundError) as info:
        s.stream_info("iot", "other")
    assert "iot/other" in str(info.value)
    with pytest.raises(errors.ScopeNotFoundError):
        s.stream_info("nope", "sensors")


def test_list_scopes_and_streams(pe_store):
    s = pe_store
    assert s.list_scopes() == []
    for scope in ("b", "a", "c"):
        s.create_scope(scope)
    assert s.list_scopes() == ["a", "b", "c"]
    for stream in ("z", "x", "y"):
        s.create_stream("a", stream)
    s.create_stream("b", "x")
    assert s.list_streams("a") == ["x", "y", "z"]
    assert s.list_streams("b") == ["x"] and s.list_streams("c") == []
    with pytest.raises(errors.ScopeNotFoundError):
        s.list_streams("d")


def test_delete_scope(pe_store):
    s = pe_store
    s.create_scope("a")
    s.create_stream("a", "t")
    with pytest.raises(errors.ScopeNotEmptyError) as info:
        s.delete_scope("a")
    assert "a" in str(info.value) and isinstance(info.value, OSError)
    assert s.list_streams("a") == ["t"]
    s.delete_stream("a", "t")
    s.delete_scope("a")
    assert s.list_scopes() == []
    with pytest.raises(errors.ScopeNotFoundError):
        s.delete_scope("a")
    s.create_scope("a")  # a recreated scope is empty and works
    assert s.list_streams("a") == []
    with pytest.raises(errors.StreamNotFoundError):
        s.delete_stream("a", "t")
    s.create_stream("a", "t")
    assert s.list_streams("a") == ["t"]


def test_stream_info_head_and_tail(pe_store):
    s = pe_store
    s.create_scope("a")
    s.create_stream("a", "t", _fixed(3))
    info = s.stream_info("a", "t")
    assert isinstance(info, pe.StreamInfo)
    assert (info.scope, info.stream, info.sealed, info.length) == ("a", "t", False, 0)
    assert info.head == info.tail and set(info.head.as_dict().values()) == {0}
    assert set(info.tail.as_dict()) == {seg.segment_id for seg in info.segments}
    tails = [info.tail]
    with s.create_writer("a", "t") as w:
        for round_ in range(3):
            w.write_events([b"r%d-%d" % (round_, i) for i in range(10)], routing_key=f"k{round_}")
            w.write_events([b"x"] * 5)
            w.flush()
            tails.append(s.stream_info("a", "t").tail)
    for a, b in zip(tails, tails[1:]):
        assert a < b  # the tail moves forward with every durable write
    info = s.stream_info("a", "t")
    assert info.head == tails[0] and info.tail == tails[-1]
    assert info.length == sum(seg.length for seg in info.segments) > 0
    assert info.tail.as_dict() == {seg.segment_id: seg.length for seg in info.segments}


def test_truncate_to_tail_then_nothing_older_is_readable(pe_store):
    s = pe_store
    s.create_scope("a")
    s.create_stream("a", "t", _fixed(2))
    with s.create_writer("a", "t") as w:
        w.write_events([b"old-%d" % i for i in range(20)], routing_key="k")
        w.write_events([b"old-free-%d" % i for i in range(6)])
    first_head = s.stream_info("a", "t").head
    tail = s.stream_info("a", "t").tail
    s.truncate_stream("a", "t", tail)
    info = s.stream_info("a", "t")
    assert info.head == info.tail == tail and info.length == 0
    assert _events(s, "a", "t") == []
    assert s.create_reader("a", "t").read_next_event(timeout=0) is None
    with pytest.raises(errors.TruncatedDataError):
        s.create_reader("a", "t", start=first_head)
    with pytest.raises(errors.TruncatedDataError):
        s.read_slice("a", "t", start=first_head)
    with s.create_writer("a", "t") as w:
        w.write_events([b"new-%d" % i for i in range(3)], routing_key="k")
    assert _events(s, "a", "t") == [b"new-0", b"new-1", b"new-2"]
    r = s.create_reader("a", "t", start=s.stream_info("a", "t").head)
    got = []
    while (ev := r.read_next_event(timeout=0)) is not None:
        got.append(ev.event)
    assert got == [b"new-0", b"new-1", b"new-2"]


def test_truncate_with_an_older_cut_keeps_the_head(store_path):
    with pe.open(store_path, durability="os") as s:
        s.create_scope("a")
        s.create_stream("a", "t", _fixed(2))
        start = s.stream_info("a", "t").head
        with s.create_writer("a", "t") as w:
            w.write_events([b"%d" % i for i in range(10)], routing_key="k")
        mid = s.stream_info("a", "t").tail
        with s.create_writer("a", "t") as w:
            w.write_events([b"%d" % i for i in range(10, 20)], routing_key="k")
        s.truncate_stream("a", "t", mid)
        s.truncate_stream("a", "t", start)  # older: no effect
        s.truncate_stream("a", "t", pe.StreamCut.UNBOUNDED)  # no position: no effect
        assert s.stream_info("a", "t").head == mid
        assert _events(s, "a", "t") == [b"%d" % i for i in range(10, 20)]
    with pe.open(store_path, durability="os") as s:  # the head is persistent
        assert s.stream_info("a", "t").head == mid
        assert _events(s, "a", "t") == [b"%d" % i for i in range(10, 20)]


def test_delete_and_recreate_starts_empty_also_after_reopen(store_path):
    with pe.open(store_path, durability="os") as s:
        s.create_scope("a")
        s.create_stream("a", "t", _fixed(2))
        with s.create_writer("a", "t", writer_id="w") as w:
            w.write_events([b"gone-%d" % i for i in range(50)], routing_key="k")
            w.write_events([b"gone-free"] * 10)
        s.delete_stream("a", "t")
        assert s.list_streams("a") == []
        with pytest.raises(errors.StreamNotFoundError):
            s.stream_info("a", "t")
        s.create_stream("a", "t", _fixed(3))
        info = s.stream_info("a", "t")
        assert info.length == 0 and len(info.segments) == 3 and not info.sealed
        assert _events(s, "a", "t") == []
        w = s.create_writer("a", "t", writer_id="w")
        assert w.last_sequence == -1  # the old writer's sequence went with the stream
        w.write_event(b"fresh", routing_key="k")
        w.close()
        assert _events(s, "a", "t") == [b"fresh"]
    for _ in range(2):  # the old data must not come back at recovery
        with pe.open(store_path, durability="os") as s:
            assert _events(s, "a", "t") == [b"fresh"]
            assert len(s.stream_info("a", "t").segments) == 3
            assert s.create_writer("a", "t", writer_id="w").last_sequence == 0


def test_delete_without_checkpoint_then_crash_style_reopen(store_path):
    """Delete and recreate right after writing (before a checkpoint can run) and reopen: the
    journal replay must not apply the old stream's records to the new one."""
    s = pe.open(store_path, durability="os", checkpoint_interval=3600)
    s.create_scope("a")
    s.create_stream("a", "t")
    with s.create_writer("a", "t", writer_id="w") as w:
        w.write_events([b"old"] * 5, routing_key="k")
    s.delete_stream("a", "t")
    s.create_stream("a", "t")
    with s.create_writer("a", "t", writer_id="w") as w:
        w.write_event(b"new", routing_key="k")
    s.close()
    with pe.open(store_path, durability="os") as s:
        assert _events(s, "a", "t") == [b"new"]


def test_everything_after_close_raises_store_closed(store_path):
    s = pe.open(store_path, durability="none")
    s.create_scope("a")
    s.create_stream("a", "t")
    w = s.create_writer("a", "t")
    w.write_event(b"x", routing_key="k")
    w.flush()
    w.write_event(b"pending", routing_key="k")  # flushed by close
    r = s.create_reader("a", "t")
    ptr = list(s.read_slice("a", "t"))[0].event_pointer
    cut = s.stream_info("a", "t").tail
    s.close()
    assert s.closed
    s.close()  # idempotent
    calls = {
        "create_scope": lambda: s.create_scope("b"),
        "list_scopes": lambda: s.list_scopes(),
        "delete_scope": lambda: s.delete_scope("a"),
        "create_stream": lambda: s.create_stream("a", "u"),
        "list_streams": lambda: s.list_streams("a"),
        "stream_info": lambda: s.stream_info("a", "t"),
        "seal_stream": lambda: s.seal_stream("a", "t"),
        "delete_stream": lambda: s.delete_stream("a", "t"),
        "truncate_stream": lambda: s.truncate_stream("a", "t", cut),
        "create_writer": lambda: s.create_writer("a", "t"),
        "create_reader": lambda: s.create_reader("a", "t"),
        "read_slice": lambda: s.read_slice("a", "t"),
        "fetch_event": lambda: s.fetch_event(ptr),
    }
    for name, call in calls.items():
        with pytest.raises(errors.StoreClosedError) as info:
            call()
        assert str(store_path) in str(info.value), name
    with pytest.raises(errors.ClosedError):
        w.write_event(b"y", routing_key="k")
    with pytest.raises(errors.ClosedError):
        r.read_next_event(timeout=0)
    with pe.open(store_path, durability="none") as s2:  # close flushed the writer
        assert _events(s2, "a", "t") == [b"x", b"pending"]


def test_with_block_closes_the_store(store_path):
    with pe.open(store_path, durability="none") as s:
        s.create_scope("a")
        assert not s.closed
    assert s.closed
    with pytest.raises(RuntimeError):
        with pe.open(store_path, durability="none") as s:
            raise RuntimeError("boom")
    assert s.closed
    with pe.open(store_path, durability="none") as s:  # the lock was released
        assert s.list_scopes() == ["a"]


def test_open_temporary_is_removed_on_close():
    s = pe.open_temporary()
    path = Path(s.path)
    assert path.is_dir() and s.durability == "none"
    s.create_scope("a")
    s.create_stream("a", "t")
    with s.create_writer("a", "t") as w:
        w.write_event(b"x", routing_key="k")
    s.close()
    assert not path.exists()
    with pe.open_temporary(durability="fsync") as s2:
        p2 = Path(s2.path)
        assert p2 != path and s2.durability == "fsync"
    assert not p2.exists()


def test_open_creates_missing_nested_directories(tmp_path):
    nested = tmp_path / "a" / "b" / "c" / "store"
    with pe.open(nested, durability="none") as s:
        s.create_scope("x")
    assert nested.is_dir()
    with pe.open(str(nested), durability="none") as s:  # str paths too
        assert s.list_scopes() == ["x"]


def test_open_on_a_file_fails_cleanly(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"not a directory")
    with pytest.raises(OSError):
        pe.open(f, durability="none")


def test_two_thousand_streams_in_one_scope(store_path):
    with pe.open(store_path, durability="none") as s:
        s.create_scope("many")
        for i in range(2000):
            s.create_stream("many", f"s{i:04d}")
        with s.create_writer("many", "s1234") as w:
            w.write_event(b"needle", routing_key="k")
    with pe.open(store_path, durability="none") as s:
        names = s.list_streams("many")
        assert names == [f"s{i:04d}" for i in range(2000)]
        assert _events(s, "many", "s1234") == [b"needle"]
        assert _events(s, "many", "s1999") == []
        s.create_stream("many", "one-more")
        assert len(s.list_streams("many")) == 2001
