"""``pravega-embedded demo`` (``python -m pravega_embedded demo``): write sensor events to
``iot/sensors`` and read them back, with timings.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..config import ScalingPolicy, StreamConfiguration
from ..remote import open as open_any
from .common import out
from .streams import info

__all__ = ["add_parser", "demo"]


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("demo", parents=parents, help="write and read back a small sensor stream")
    s.add_argument("--events", type=int, default=100_000)


def demo(store_path: str, durability: str, events: int, **options: Any) -> None:
    """Write ``events`` sensor readings to iot/sensors and read them back, with timings
    (``options``: more keyword arguments of ``pe.open``)."""
    with open_any(store_path, durability, **options) as store:
        store.create_scope("iot", exist_ok=True)
        store.create_stream("iot", "sensors", StreamConfiguration(scaling=ScalingPolicy.fixed(4)), exist_ok=True)
        before = store.stream_info("iot", "sensors").tail
        t = time.perf_counter()
        with store.create_writer("iot", "sensors", writer_id="demo-gateway") as w:
            for i in range(events):
                w.write_event(b'{"sensor":%d,"value":%d}' % (i % 64, i), routing_key=f"sensor-{i % 64}")
            w.flush()
            last = w.last_sequence
        dt = time.perf_counter() - t
        out(f"wrote {events:,} events in {dt:.3f}s ({events / dt:,.0f} events/s, durability={durability}, all durable)")
        out(f"writer demo-gateway last sequence: {last}")
        after = store.stream_info("iot", "sensors").tail
        t = time.perf_counter()
        table = store.read_slice("iot", "sensors", start=before, end=after).to_arrow()
        dt = time.perf_counter() - t
        out(f"read the slice {before.to_text()} .. {after.to_text()}")
        out(f"  -> Arrow table of {table.num_rows:,} rows in {dt:.3f}s")
        assert table.num_rows == events
        r = store.create_reader("iot", "sensors", start=before, end=after)
        per_key: dict[str, int] = {}
        n = 0
        while (ev := r.read_next_event(timeout=0)) is not None:
            per_key[ev.routing_key] = per_key.get(ev.routing_key, 0) + 1
            n += 1
        out(f"reader got {n:,} events over {len(per_key)} routing keys")
        info(store, "iot", "sensors", False)
