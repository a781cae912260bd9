"""A program using the public API the way a typed application does: mypy --strict checks it
against the package's annotations (tests/core/test_typing.py), and the test runs it too."""

from __future__ import annotations

import pyarrow as pa

import pravega_embedded as pe


def use(path: str) -> int:
    with pe.open(path, "none") as store:
        store.create_scope("iot", exist_ok=True)
        store.create_stream("iot", "sensors", 2, exist_ok=True)
        with store.create_writer("iot", "sensors", writer_id="gw") as w:
            w.write_event(b"reading", routing_key="k1")
            w.flush()
        info: pe.StreamInfo = store.stream_info("iot", "sensors")
        events: int | None = info.events
        names: list[str] = [s.name for s in info.segments]
        start: pe.StreamCut = store.get_stream_cut_at("iot", "sensors", 0.0)
        last: pe.StreamCut = store.get_stream_cut_from_tail("iot", "sensors", 1)
        with store.create_reader("iot", "sensors", start=start) as r:
            ev: pe.EventRead | None = r.read_next_event(timeout=0)
            times: list[int | None] = [] if ev is None else store.write_times([ev.event_pointer])
        group = store.create_reader_group("dashboards", "iot", "sensors", exist_ok=True)
        lag: int = group.unread_events() + group.unread_bytes()
        table: pa.Table = store.read_slice("iot", "sensors", start=last).to_arrow()
        tw = store.create_transactional_writer("iot", "sensors")
        with tw.begin_txn() as txn:
            txn.write_event(b"atomic", routing_key="k2")
        txns: list[pe.TransactionInfo] = store.list_transactions("iot", "sensors")
        tw.close()
        return (events or 0) + len(names) + len(times) + lag + int(table.num_rows) + len(txns)
