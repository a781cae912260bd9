"""``create-scope``, ``create-stream``, ``list``, ``info``, ``seal``, ``delete``,
``truncate``: the streams of a store from the command line.

Owns: those commands' parsing and output. ``info`` and ``list -l`` show each stream's events
(``StreamInfo.events``, Redis's XLEN), bytes and policies; the commands that change something
say what they did on stderr.

Invariants:
  1. ``create-stream`` of an existing stream changes nothing: it says so, and fails when the
     existing configuration is not the one asked for (``update-stream`` changes it).

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from .. import errors
from ..config import ScalingPolicy, StreamConfiguration
from ..streamcut import segment_name
from .common import CommandError, cut_arg, describe_retention, describe_scaling, note, out, stream_arg

if TYPE_CHECKING:
    from ..remote import RemoteStore
    from ..store import Store
    from ..stream import StreamInfo

__all__ = ["COMMANDS", "CREATING", "add_parsers", "run"]

COMMANDS = frozenset({"create-scope", "create-stream", "list", "info", "seal", "delete", "truncate"})
CREATING = frozenset({"create-scope", "create-stream"})  # may create the store


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a segment count >= 1, got {text!r}")
    return int(text)


def add_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("create-scope", parents=parents, help="create a scope")
    s.add_argument("scope")
    s = sub.add_parser("create-stream", parents=parents, help="create a stream (and its scope if needed)")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--segments", type=_positive, metavar="N", help="fixed segment count (default 1)")
    s = sub.add_parser("list", parents=parents, help="list scopes, or the streams of a scope")
    s.add_argument("scope", nargs="?")
    s.add_argument("-l", "--long", action="store_true",
                   help="streams with segments, events, bytes and policies (all scopes without SCOPE)")
    s = sub.add_parser("info", parents=parents, help="segments, events, policies, head and tail cuts of a stream")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--json", action="store_true")
    for name, help_ in (("seal", "seal a stream"), ("delete", "delete a stream")):
        s = sub.add_parser(name, parents=parents, help=help_)
        s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s = sub.add_parser("truncate", parents=parents, help="truncate a stream at a StreamCut")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("cut", type=cut_arg)


def _bytes(info: "StreamInfo") -> int:
    return sum(s.length - s.head for s in info.segments)


def _create_stream(store: "Store | RemoteStore", scope: str, stream: str, segments: int | None) -> None:
    store.create_scope(scope, exist_ok=True)
    scaling = ScalingPolicy.fixed(segments or 1)
    if store.create_stream(scope, stream, StreamConfiguration(scaling=scaling), exist_ok=True):
        note(f"created stream {scope}/{stream} ({describe_scaling(scaling)})")
        return
    have = store.stream_info(scope, stream).config.scaling
    if segments is not None and have != scaling:
        raise CommandError(
            f"stream {scope}/{stream} already exists with scaling {describe_scaling(have)}, not "
            f"{describe_scaling(scaling)}; change it with `update-stream {scope}/{stream} --fixed {segments}`")
    note(f"stream {scope}/{stream} already exists ({describe_scaling(have)}); left as it is")


def _list(store: "Store | RemoteStore", scope: str | None, long: bool) -> None:
    if not long:
        for name in (store.list_streams(scope) if scope else store.list_scopes()):
            out(name)
        return
    scopes = [scope] if scope else store.list_scopes()
    rows = [("STREAM", "SEGMENTS", "EVENTS", "BYTES", "SCALING", "RETENTION", "STATE")]
    for sc in scopes:
        for name in store.list_streams(sc):
            info = store.stream_info(sc, name)
            events = "-" if info.events is None else f"{info.events}"
            rows.append((f"{sc}/{name}", str(len(info.current_segments)), events, str(_bytes(info)),
                         describe_scaling(info.config.scaling), describe_retention(info.config.retention),
                         ("sealed" if info.sealed else "open") + ("" if info.kind == "events" else f" ({info.kind})")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out("  ".join(c.rjust(w) if i in (1, 2, 3) else c.ljust(w)
                      for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def _info_json(store: "Store | RemoteStore", info: "StreamInfo") -> dict[str, object]:
    return {
        "scope": info.scope, "stream": info.stream, "kind": info.kind, "sealed": info.sealed,
        "head": info.head.to_text(), "tail": info.tail.to_text(), "length": _bytes(info),
        "events": info.events, "tiered_bytes": store.tiered_bytes(info.scope, info.stream),
        "scaling": describe_scaling(info.config.scaling), "retention": describe_retention(info.config.retention),
        "config": info.config.to_json(),
        "segments": [{"segment": segment_name(s.segment_id), "key_low": s.key_low,
                      "key_high": s.key_high, "head": s.head, "length": s.length, "events": s.events,
                      "sealed": s.sealed} for s in info.segments],
    }


def info(store: "Store | RemoteStore", scope: str, stream: str, as_json: bool) -> None:
    """Print a stream's info (also the demo's last step)."""
    i = store.stream_info(scope, stream)
    if as_json:
        out(json.dumps(_info_json(store, i)))
        return
    tiered = store.tiered_bytes(scope, stream)
    events = "-" if i.events is None else f"{i.events:,}"
    out(f"stream {scope}/{stream}{' (sealed)' if i.sealed else ''}{'' if i.kind == 'events' else f' ({i.kind})'}")
    out(f"  events: {events} in {_bytes(i):,} bytes (head to tail)")
    out(f"  scaling: {describe_scaling(i.config.scaling)}; retention: {describe_retention(i.config.retention)}")
    out(f"  head: {i.head.to_text()}")
    out(f"  tail: {i.tail.to_text()}")
    out(f"  tiered: {tiered} of {_bytes(i)} bytes (head to tail) in tier 2")
    out("  segment  key range            head        length      events  state")
    for s in i.segments:
        ev = "-" if s.events is None else f"{s.events:,}"
        out(f"  {segment_name(s.segment_id):>7}  [{s.key_low:.4f}, {s.key_high:.4f})  "
            f"{s.head:>10}  {s.length:>12}  {ev:>10}  {'sealed' if s.sealed else 'open'}")


def _truncate(store: "Store | RemoteStore", scope: str, stream: str, cut: Any) -> None:
    before = store.stream_info(scope, stream)
    store.truncate_stream(scope, stream, cut)
    after = store.stream_info(scope, stream)
    gone = (before.events or 0) - (after.events or 0)
    note(f"truncated {scope}/{stream}: head is now {after.head.to_text()}; {gone:,} events "
         f"({_bytes(before) - _bytes(after):,} bytes) removed")


def run(store: "Store | RemoteStore", args: argparse.Namespace) -> int:
    cmd = args.cmd
    if cmd == "create-scope":
        if store.create_scope(args.scope, exist_ok=True):
            note(f"created scope {args.scope}")
        else:
            note(f"scope {args.scope} already exists")
    elif cmd == "create-stream":
        _create_stream(store, *args.stream, args.segments)
    elif cmd == "list":
        _list(store, args.scope, args.long)
    elif cmd == "info":
        info(store, *args.stream, args.json)
    elif cmd == "seal":
        store.seal_stream(*args.stream)
        note(f"sealed stream {'/'.join(args.stream)}")
    elif cmd == "delete":
        store.delete_stream(*args.stream)
        note(f"deleted stream {'/'.join(args.stream)}")
    elif cmd == "truncate":
        _truncate(store, *args.stream, args.cut)
    else:  # pragma: no cover - argparse chose the command
        raise errors.InvalidConfigurationError(f"unknown command {cmd}")
    return 0
