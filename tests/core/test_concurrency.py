"""Several writer threads and tailing readers on one store at once: every event exactly once,
per-key order, and the readers see everything the writers flushed."""

from __future__ import annotations

import threading

import pravega_embedded as pe

WRITERS = 4
EVENTS = 3000


def test_writers_and_tailing_reader(durable_store):
    s = durable_store
    s.create_scope("c")
    s.create_stream("c", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    reader = s.create_reader("c", "t")
    got: list[pe.EventRead] = []
    done = threading.Event()
    errors_seen: list[BaseException] = []

    def write(i: int) -> None:
        try:
            with s.create_writer("c", "t", writer_id=f"w{i}", linger=0.0002) as w:
                for n in range(EVENTS):
                    w.write_event(b"%d:%d" % (i, n), routing_key=f"k{i}-{n % 5}")
                    if n % 700 == 0:
                        w.flush()
                    if n % 1000 == 999:
                        w.write_events([b"%d:b%d" % (i, n)], routing_key=f"k{i}-batch")
        except BaseException as exc:  # noqa: BLE001
            errors_seen.append(exc)

    def read() -> None:
        expected = WRITERS * (EVENTS + EVENTS // 1000)
        while len(got) < expected and not done.is_set():
            ev = reader.read_next_event(timeout=0.5)
            if ev is not None:
                got.append(ev)

    rt = threading.Thread(target=read)
    rt.start()
    wts = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for t in wts:
        t.start()
    for t in wts:
        t.join(120)
        assert not t.is_alive(), "a writer thread hung"
    rt.join(120)
    done.set()
    assert not rt.is_alive(), "the reader did not see every event in 120 s"
    assert not errors_seen, errors_seen
    assert len(got) == WRITERS * (EVENTS + EVENTS // 1000)
    assert len({(e.segment_id, e.offset) for e in got}) == len(got)  # each event once
    per_key: dict[str, list[int]] = {}
    for e in got:
        wid, n = e.event.split(b":")
        if n.startswith(b"b"):
            continue
        per_key.setdefault(e.routing_key, []).append(int(n))
    for key, ns in per_key.items():
        assert ns == sorted(ns), f"per-key order broken for {key}"
    assert sorted(n for ns in per_key.values() for n in ns) == sorted(
        n for _ in range(WRITERS) for n in range(EVENTS))
    # the tailing reader saw exactly what a fresh slice sees
    assert sorted(e.event for e in got) == sorted(e.event for e in s.read_slice("c", "t"))
