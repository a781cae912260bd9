"""The group state is bytes from disk: every damage is CorruptDataError (never a bare builtin
error), a newer format is FormatVersionError, and one damaged group leaves the others working."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rg_helpers import cfg, drain, write

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.readergroup.state import dumps, parse_state


def valid_state() -> bytes:
    with pe.open_temporary() as store:
        store.create_scope("iot")
        store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        write(store, "iot", "s", 30)
        g = store.create_reader_group("g", cfg("iot/s", end=store.stream_info("iot", "s").tail))
        r1, r2 = g.create_reader("r1"), g.create_reader("r2")
        fut = g.initiate_checkpoint("a")
        drain([r1, r2])
        fut.result(timeout=1)
        g.initiate_checkpoint("b")
        return dict(store._engine.meta.groups())["g"]


VALID = valid_state()


def test_the_valid_state_parses_and_round_trips():
    s = parse_state("g", VALID)
    assert s["done"] and s["checkpoints"] and s["readers"]
    assert parse_state("g", dumps(s)) == s


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_bytes_raise_corrupt_data_error_only(data):
    raw = bytearray(VALID)
    how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] = data.draw(st.integers(0, 255))
    elif how == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        i = data.draw(st.integers(0, len(raw)))
        raw[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    try:
        parse_state("g", bytes(raw))
    except errors.CorruptDataError:
        pass


def _paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, path + (i,))


STRUCT = json.loads(VALID)
PATHS = [p for p in _paths(STRUCT) if p]
ODD = st.one_of(st.none(), st.booleans(), st.integers(-5, 1 << 70), st.floats(allow_nan=False),
                st.text(max_size=5), st.lists(st.integers(), max_size=2),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(PATHS), ODD, st.booleans())
def test_wrong_values_in_any_field_raise_corrupt_data_error_only(path, value, delete):
    s = json.loads(VALID)
    parent = s
    for p in path[:-1]:
        parent = parent[p]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    try:
        parse_state("g", json.dumps(s).encode())
    except errors.CorruptDataError:
        pass


def test_a_newer_format_is_format_version_error():
    s = json.loads(VALID)
    s["format"] = 2
    with pytest.raises(errors.FormatVersionError):
        parse_state("g", json.dumps(s).encode())


def test_a_segment_in_two_places_is_corrupt():
    s = json.loads(VALID)
    k = next(iter(s["start"]))
    s["unassigned"][k] = 0
    s["completed"][k] = 0
    with pytest.raises(errors.CorruptDataError, match="two places"):
        parse_state("g", json.dumps(s).encode())


@pytest.mark.parametrize("checksum", ["right", "wrong"])
def test_one_damaged_group_in_a_store(tmp_path, checksum):
    """A group whose stored value is cut (its checksum right or wrong) fails alone."""
    path = tmp_path / "store"
    with pe.open(path) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s")
        store.create_reader_group("good", cfg("iot/s"))
        store.create_reader_group("bad", cfg("iot/s"))
        meta = store._engine.meta
        cut = b'{"format": 1, "name": "bad", "revis'
        with meta.write() as txn:
            if checksum == "right":
                meta._put(txn, b"groups", b"bad", cut)
            else:
                txn.put(b"bad", cut, db=meta._db[b"groups"])
    with pe.open(path) as store:
        assert store.list_reader_groups() == ["bad", "good"]
        with pytest.raises(errors.CorruptDataError, match="'bad'"):
            store.get_reader_group("bad")
        with pytest.raises(errors.CorruptDataError):
            store.create_reader_group("bad", cfg("iot/s"))
        assert store.get_reader_group("good").create_reader("r").read_next_event(0) is None
        store.delete_reader_group("bad")
        assert store.list_reader_groups() == ["good"]
        store.create_reader_group("bad", cfg("iot/s"))
