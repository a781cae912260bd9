"""Helpers for reader-group tests: configs, keyed writes, draining readers."""

from __future__ import annotations

from typing import Any

import pravega_embedded as pe


def cfg(*streams: str, **kw: Any) -> pe.ReaderGroupConfig:
    kw.setdefault("automatic_checkpoint_interval", None)
    return pe.ReaderGroupConfig(streams=list(streams), **kw)


def write(store: Any, scope: str, stream: str, n: int, *, keys: int = 16, writer: str = "w",
          start: int = 0) -> list[bytes]:
    """Write events b"<writer>:<key>:<i>" with keys k0..k{keys-1}; return them in write order."""
    out = []
    with store.create_writer(scope, stream, writer_id=writer) as w:
        for i in range(start, start + n):
            ev = f"{writer}:k{i % keys}:{i}".encode()
            w.write_event(ev, routing_key=f"k{i % keys}")
            out.append(ev)
        w.flush()
    return out


def drain(readers: list[Any], *, idle_rounds: int = 3, timeout: float = 0.0) -> dict[str, list[Any]]:
    """Read round-robin from every reader until each returned nothing ``idle_rounds`` times in a
    row (or read completed); checkpoint markers are kept in the lists."""
    got: dict[str, list[Any]] = {r.reader_id: [] for r in readers}
    idle = 0
    while idle < idle_rounds:
        progressed = False
        for r in readers:
            if r.closed:
                continue
            ev = r.read_next_event(timeout=timeout)
            if ev is not None and not ev.is_read_completed:
                got[r.reader_id].append(ev)
                progressed = True
        idle = 0 if progressed else idle + 1
    return got


def events(got: dict[str, list[Any]]) -> list[Any]:
    return [e for lst in got.values() for e in lst if not e.is_checkpoint]
