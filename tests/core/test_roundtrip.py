"""Write, read back, reopen: the behaviour every user relies on."""

from __future__ import annotations

import pravega_embedded as pe


def _fixed(n):
    return pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n))


def _read_all(store, scope, stream, **kw):
    r = store.create_reader(scope, stream, **kw)
    out = []
    while (ev := r.read_next_event(timeout=0)) is not None:
        out.append(ev)
    return out


def test_write_then_read_in_key_order(durable_store):
    s = durable_store
    s.create_scope("iot")
    s.create_stream("iot", "sensors", _fixed(4))
    w = s.create_writer("iot", "sensors", writer_id="gw-1")
    sent = {}
    for i in range(5000):
        key = f"sensor-{i % 13}"
        w.write_event(b"%d" % i, routing_key=key)
        sent.setdefault(key, []).append(b"%d" % i)
    w.flush()
    assert w.last_sequence == 4999
    assert w.durable_sequence == 4999
    got = {}
    for ev in _read_all(s, "iot", "sensors"):
        got.setdefault(ev.routing_key, []).append(ev.event)
    assert got == sent


def test_reopen_keeps_events_and_writer_sequence(store_path):
    with pe.open(store_path) as s:
        s.create_scope("iot")
        s.create_stream("iot", "t", _fixed(2))
        with s.create_writer("iot", "t", writer_id="w") as w:
            for i in range(100):
                w.write_event(b"e%d" % i, routing_key=str(i % 3))
    with pe.open(store_path) as s:
        evs = _read_all(s, "iot", "t")
        assert sorted(e.event for e in evs) == sorted(b"e%d" % i for i in range(100))
        w = s.create_writer("iot", "t", writer_id="w")
        assert w.last_sequence == 99
        w.write_event(b"dup", routing_key="x", sequence=50)
        assert w.duplicates_dropped == 1
        w.close()
        assert len(_read_all(s, "iot", "t")) == 100
