"""Writers across a scaling: events buffered for a sealed segment move to the successor owning
their key, and after the scaling the writer routes by the new segments (it does not keep
hitting the sealed one and re-routing every batch)."""

from __future__ import annotations

import pravega_embedded as pe
import pravega_embedded.append as append
from pravega_embedded.routing import key_point


def test_buffered_events_move_and_routes_are_renewed(monkeypatch):
    calls = []
    real = append.reroute
    monkeypatch.setattr(append, "reroute", lambda st, b: calls.append(1) or real(st, b))
    with pe.open_temporary() as store:
        store.create_scope("s")
        store.create_stream("s", "x")
        w = store.create_writer("s", "x", writer_id="w", linger=60)
        keys = [f"k{i}" for i in range(50)]
        for k in keys:
            w.write_event(k.encode(), routing_key=k)  # buffered, routed to segment 0
        (sid,) = [s.segment_id for s in store.stream_info("s", "x").current_segments]
        lo, hi = store.scale_stream("s", "x", seal=[sid], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
        w.flush()
        assert len(calls) <= 1  # the buffered batch went to the successors (re-routed at most once)
        first = len(calls)
        for _ in range(5):
            for k in keys:
                w.write_event(k.encode(), routing_key=k)
            w.flush()
        assert len(calls) == first  # later batches were routed to the successors directly
        info = {s.segment_id: s for s in store.stream_info("s", "x").segments}
        assert info[sid].length == 0  # nothing reached the sealed segment
        for ev in store.read_slice("s", "x"):
            k = ev.event.decode()
            assert ev.routing_key == k
            assert ev.segment_id == (lo if key_point(k) < 0.5 else hi)
        w.close()
