"""Serializers: bytes (default), UTF-8 text and JSON through writers, readers, slices and fetch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pravega_embedded as pe
from pravega_embedded import errors

TEXTS = ["", "plain", "é ü ß", "日本語のテキスト", "emoji 🚀🔥", "line\nbreak\ttab", "\0nul", "x" * 10_000]
JSONS = [None, True, 0, -1.5, 2**62, "s", "é🚀", [], {}, [1, "a", None, [2, [3]]],
         {"nested": {"deep": {"list": [1, 2, {"k": "v"}], "uni": "日本"}}, "n": None}]


def _setup(store):
    store.create_scope("s", exist_ok=True)
    store.create_stream("s", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)), exist_ok=True)


def test_text_round_trip(pe_store):
    _setup(pe_store)
    with pe_store.create_writer("s", "t", serializer="text") as w:
        for t in TEXTS:
            w.write_event(t, routing_key="k")
        w.write_events(["batch-1", "batch-2"], routing_key="k")
    expected = TEXTS + ["batch-1", "batch-2"]
    r = pe_store.create_reader("s", "t", serializer="text")
    assert [r.read_next_event(0).event for _ in expected] == expected
    assert [e.event for e in pe_store.read_slice("s", "t", serializer=pe.TextSerializer())] == expected
    raw = [e.event for e in pe_store.read_slice("s", "t")]
    assert raw == [t.encode("utf-8") for t in expected]  # stored as UTF-8
    ev = next(iter(pe_store.read_slice("s", "t")))
    assert pe_store.fetch_event(ev.event_pointer, serializer="text").event == TEXTS[0]


def test_json_round_trip(pe_store):
    _setup(pe_store)
    with pe_store.create_writer("s", "t", serializer="json") as w:
        for v in JSONS:
            w.write_event(v, routing_key="k")
        w.write_events([{"a": 1}, [1, 2]], routing_key="k")
    expected = JSONS + [{"a": 1}, [1, 2]]
    assert [e.event for e in pe_store.read_slice("s", "t", serializer="json")] == expected
    r = pe_store.create_reader("s", "t", serializer=pe.JsonSerializer())
    assert [r.read_next_event(0).event for _ in expected] == expected
    raw = [e.event for e in pe_store.read_slice("s", "t")]
    assert raw[-2] == b'{"a":1}'  # compact UTF-8 JSON
    assert "日本".encode() in raw[-3]


@settings(max_examples=50, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20))
def test_json_serializer_round_trips_any_json_value(value):
    ser = pe.JsonSerializer()
    assert ser.deserialize(ser.serialize(value)) == value


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_text_serializer_round_trips_any_valid_text(text):
    ser = pe.TextSerializer()
    try:
        data = ser.serialize(text)
    except errors.SerializationError:
        with pytest.raises(UnicodeEncodeError):
            text.encode("utf-8")  # only lone surrogates may be refused
        return
    assert ser.deserialize(data) == text


@pytest.mark.parametrize("bad", [b"bytes", 5, None, 1.5, ["a"], {"a": 1}], ids=repr)
def test_text_writer_refuses_non_str(pe_store, bad):
    _setup(pe_store)
    w = pe_store.create_writer("s", "t", serializer="text")
    with pytest.raises(errors.SerializationError) as info:
        w.write_event(bad, routing_key="k")
    assert "text" in str(info.value) and isinstance(info.value, (TypeError, ValueError))
    with pytest.raises(errors.SerializationError):
        w.write_events(["ok", bad], routing_key="k")
    assert w.last_sequence == -1
    w.flush()
    assert list(pe_store.read_slice("s", "t")) == []


def test_text_writer_refuses_lone_surrogates(pe_store):
    _setup(pe_store)
    w = pe_store.create_writer("s", "t", serializer="text")
    with pytest.raises(errors.SerializationError):
        w.write_event("\ud800", routing_key="k")


@pytest.mark.parametrize("bad", [object(), {1, 2}, b"bytes", float("nan"), {"k": object()}],
                         ids=lambda b: type(b).__name__)
def test_json_writer_refuses_values_that_are_not_json(pe_store, bad):
    _setup(pe_store)
    w = pe_store.create_writer("s", "t", serializer="json")
    if isinstance(bad, float):
        # NaN is not JSON; the serializer must either refuse it or round-trip it
        try:
            w.write_event(bad, routing_key="k")
        except errors.SerializationError:
            return
        w.flush()
        back = next(iter(pe_store.read_slice("s", "t", serializer="json"))).event
        assert back != back  # NaN
        return
    with pytest.raises(errors.SerializationError) as info:
        w.write_event(bad, routing_key="k")
    assert "json" in str(info.value)
    w.flush()
    assert list(pe_store.read_slice("s", "t")) == []


@pytest.mark.parametrize("name", ["yaml", "", "TEXT", "Json", "pickle"])
def test_unknown_serializer_names(pe_store, name):
    _setup(pe_store)
    with pytest.raises(errors.SerializationError) as info:
        pe_store.create_writer("s", "t", serializer=name)
    assert repr(name) in str(info.value)
    with pytest.raises(errors.SerializationError):
        pe_store.create_reader("s", "t", serializer=name)
    with pytest.raises(errors.SerializationError):
        pe_store.read_slice("s", "t", serializer=name)


def test_objects_without_the_serializer_methods_are_refused(pe_store):
    _setup(pe_store)
    with pytest.raises(errors.SerializationError):
        pe_store.create_writer("s", "t", serializer=42)
    with pytest.raises(errors.SerializationError):
        pe_store.create_reader("s", "t", serializer=object())


def test_custom_serializer_object(pe_store):
    class Upper:
        name = "upper"

        def serialize(self, value):
            return value.upper().encode()

        def deserialize(self, data):
            return data.decode().lower()

    _setup(pe_store)
    with pe_store.create_writer("s", "t", serializer=Upper()) as w:
        w.write_event("hello", routing_key="k")
    assert next(iter(pe_store.read_slice("s", "t"))).event == b"HELLO"
    assert next(iter(pe_store.read_slice("s", "t", serializer=Upper()))).event == "hello"


def test_reading_non_utf8_with_text_raises(pe_store):
    _setup(pe_store)
    with pe_store.create_writer("s", "t") as w:
        w.write_event(b"\xff\xfe not utf-8", routing_key="k")
    with pytest.raises(errors.SerializationError) as info:
        list(pe_store.read_slice("s", "t", serializer="text"))
    assert "text" in str(info.value)
    with pytest.raises(errors.SerializationError):
        pe_store.create_reader("s", "t", serializer="text").read_next_event(timeout=0)
    ev = next(iter(pe_store.read_slice("s", "t")))
    with pytest.raises(errors.SerializationError):
        pe_store.fetch_event(ev.event_pointer, serializer="text")
    # the bytes are intact: read raw they come back
    assert ev.event == b"\xff\xfe not utf-8"


def test_reading_non_json_with_json_raises(pe_store):
    _setup(pe_store)
    with pe_store.create_writer("s", "t") as w:
        w.write_event(b"{not json", routing_key="k")
    with pytest.raises(errors.SerializationError) as info:
        list(pe_store.read_slice("s", "t", serializer="json"))
    assert "json" in str(info.value)
    with pytest.raises(errors.SerializationError):
        pe_store.create_reader("s", "t", serializer="json").read_next_event(timeout=0)


def test_bytes_serializer_by_name_is_the_default(pe_store):
    _setup(pe_store)
    with pe_store.create_writer("s", "t", serializer="bytes") as w:
        w.write_event(b"raw", routing_key="k")
        with pytest.raises(errors.SerializationError):
            w.write_event("str", routing_key="k")
    with pe_store.create_writer("s", "t", serializer=pe.BytesSerializer()) as w:
        w.write_event(bytearray(b"ba"), routing_key="k")
        with pytest.raises(errors.SerializationError):
            w.write_event(5, routing_key="k")
    assert [e.event for e in pe_store.read_slice("s", "t", serializer="bytes")] == [b"raw", b"ba"]
