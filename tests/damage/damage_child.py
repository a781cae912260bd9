"""Child of the damage battery: open a (damaged) store and print one JSON verdict line.

    damage_child.py --request '{"path": ..., "roll_bytes": ...}'   one open, then exit
    damage_child.py --worker                                        one request per stdin line

The verdict line is ``VERDICT {...}`` on stdout (everything else the library prints goes to
stderr): either ``{"phase": "open"|"read"|"close", "error": class name, "mro": [...],
"is_library": bool, "message": str, "errno": int|None, "traceback": str}`` or
``{"content": {...}}`` (damage_helpers.Reference.full has the same form). Request options:
``write_event`` (write one event with a new writer and flush after reading, to check the store
takes writes) and ``durability``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import damage_helpers as h  # noqa: E402

_OUT = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
sys.stdout = sys.stderr  # stray prints must not mix with verdicts

import pravega_embedded as pe  # noqa: E402
from pravega_embedded import errors  # noqa: E402


def collect(store: pe.Store) -> dict:
    """Everything the reference records. A stream, scope or writer that does not exist is
    reported as missing (an empty store is a content verdict, not an error)."""
    missing = errors.NotFoundError
    events = h.empty_events()
    segments: dict = {}
    for s in h.STREAMS:
        key = f"{h.SCOPE}/{s}"
        try:
            segments[key] = h.segments_of(store.stream_info(h.SCOPE, s))
            for ev in store.read_slice(h.SCOPE, s):
                events[key].setdefault(ev.routing_key, []).append(h.tag_of(ev.event))
        except missing:
            segments[key] = None
    writers = {}
    for w, s in h.WRITERS.items():
        try:
            with store.create_writer(h.SCOPE, s, writer_id=w) as writer:
                writers[w] = writer.last_sequence
        except missing:
            writers[w] = None
    txns = {}
    try:
        tw = store.create_transactional_writer(h.SCOPE, "s3", writer_id=h.TXN_WRITER)
    except missing:
        tw = None
    if tw is not None:
        try:
            for tid in _txn_ids(store):
                txns[tid] = tw.get_txn(tid).status().value
        finally:
            tw.close()
    groups = {}
    for name in store.list_reader_groups():
        g = store.get_reader_group(name)
        cp = g.last_checkpoint()
        groups[name] = {"last_checkpoint": None if cp is None else cp.name,
                        "cut": "" if cp is None else str(cp.stream_cut(h.SCOPE, "s1"))}
        g.close()
    scopes = store.list_scopes()
    streams = sorted(store.list_streams(h.SCOPE)) if h.SCOPE in scopes else []
    return {"scopes": scopes, "streams": streams, "segments": segments, "txns": txns,
            "groups": groups, "events": events, "writers": writers}


def _txn_ids(store: pe.Store) -> list[str]:
    """The transaction ids the store knows (from its metadata, through the public reader of it)."""
    return sorted(tid for tid, _ in store._engine.meta.txns())


def _error(phase: str, exc: BaseException) -> dict:
    return {"phase": phase, "error": type(exc).__name__,
            "mro": [c.__name__ for c in type(exc).__mro__],
            "is_library": isinstance(exc, errors.PravegaEmbeddedError),
            "message": str(exc), "errno": getattr(exc, "errno", None),
            "traceback": "".join(traceback.format_exception(exc))[-3000:]}


def handle(req: dict) -> dict:
    try:
        store = pe.open(req["path"], durability=req.get("durability", "fsync"),
                        roll_bytes=req.get("roll_bytes", h.DEFAULT_ROLL), checkpoint_interval=3600,
                        maintenance_interval=86400, retention_interval=86400)
    except BaseException as exc:  # noqa: BLE001 - the verdict reports it
        return _error("open", exc)
    try:
        content = collect(store)
        if req.get("write_event"):
            with store.create_writer(h.SCOPE, "s1", writer_id="after") as w:
                w.write_event(b"after", routing_key="z")
                w.flush()
        result = {"content": content}
    except BaseException as exc:  # noqa: BLE001
        result = _error("read", exc)
    try:
        store.close()
    except BaseException as exc:  # noqa: BLE001
        if "content" in result:
            result = _error("close", exc)
    return result


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        for line in sys.stdin:
            if line.strip():
                _OUT.write("VERDICT " + json.dumps(handle(json.loads(line))) + "\n")
                _OUT.flush()
        return
    assert sys.argv[1:2] == ["--request"], sys.argv
    _OUT.write("VERDICT " + json.dumps(handle(json.loads(sys.argv[2]))) + "\n")
    _OUT.flush()


if __name__ == "__main__":
    main()
