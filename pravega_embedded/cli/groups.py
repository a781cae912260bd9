"""``pravega-embedded reader-group ...``: list, create, inspect, checkpoint, reset, put readers
offline and delete reader groups from the command line.

Owns: the ``reader-group`` subcommands (parsing and text/JSON output); ``cli.main`` adds them to
its parser and calls :func:`run` with the open store. Uses only the public API.

The command holds the store only while it runs, so the readers of a group live in other
processes; readers the group still lists (their process went away without closing them) count
as online until ``reader-group offline`` takes them out, and a checkpoint needs every listed
reader to answer.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import errors
from ..readergroup import ReaderGroupConfig
from ..store import Store
from .common import CommandError, cut_arg, out, stream_arg

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``reader-group`` and its subcommands to the CLI's subparsers (``parents``: the
    global options, accepted after the subcommand too)."""
    p = sub.add_parser("reader-group", parents=parents, help="list, create, inspect, checkpoint, reset and delete reader groups")
    gsub = p.add_subparsers(dest="group_cmd", required=True, metavar="COMMAND")
    gsub.add_parser("list", parents=parents, help="the reader groups, one per line")
    s = gsub.add_parser("create", parents=parents, help="create a reader group over one or more streams")
    s.add_argument("name", metavar="NAME")
    s.add_argument("streams", type=stream_arg, nargs="+", metavar="SCOPE/STREAM")
    s.add_argument("--from", dest="start", type=cut_arg, action="append", default=[], metavar="CUT",
                   help="start StreamCut of one of the streams (repeat for more streams; default: head)")
    s.add_argument("--to", dest="end", type=cut_arg, action="append", default=[], metavar="CUT",
                   help="end StreamCut of one of the streams (repeat; default: read until sealed)")
    s.add_argument("--checkpoint-interval", type=float, default=30.0, metavar="SECONDS",
                   help="seconds between automatic checkpoints, 0 for none (default 30)")
    s.add_argument("--max-checkpoints", type=int, default=3, metavar="N",
                   help="checkpoints that may be outstanding at once (default 3)")
    s = gsub.add_parser("info", parents=parents, help="readers, segments, lag and checkpoints of a group")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--json", action="store_true")
    s = gsub.add_parser("checkpoint", parents=parents, help="checkpoint a group and print its StreamCuts")
    s.add_argument("name", metavar="NAME")
    s.add_argument("checkpoint", metavar="CPNAME")
    s.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS",
                   help="how long to wait for the group's readers to answer (default 2)")
    s = gsub.add_parser("reset", parents=parents, help="start a group over: from its config, its last checkpoint or cuts")
    s.add_argument("name", metavar="NAME")
    how = s.add_mutually_exclusive_group()
    how.add_argument("--to-checkpoint", action="store_true", help="start from the last completed checkpoint")
    how.add_argument("--from", dest="start", type=cut_arg, action="append", metavar="CUT",
                     help="start StreamCut of one of the streams (repeat for more streams)")
    s = gsub.add_parser("offline", parents=parents, help="take a reader out of a group (its segments go back at its last checkpoint)")
    s.add_argument("name", metavar="NAME")
    s.add_argument("reader", metavar="READER")
    s = gsub.add_parser("cancel-checkpoints", parents=parents, help="withdraw a group's outstanding checkpoints")
    s.add_argument("name")
    s = gsub.add_parser("delete", parents=parents, help="delete a reader group")
    s.add_argument("name", metavar="NAME")


def _key(pair: tuple[str, str]) -> str:
    return f"{pair[0]}/{pair[1]}"


def _cuts(cuts: Any) -> dict[str, str]:
    """``{(scope, stream): StreamCut}`` or an iterable of cuts -> ``{"scope/stream": text}``."""
    items = cuts.values() if isinstance(cuts, dict) else cuts
    return {f"{c.scope}/{c.stream}": c.to_text() for c in items}


def _describe(store: Store, name: str) -> dict[str, Any]:
    g = store.get_reader_group(name)
    config = g.config
    dist = g.segment_distribution()
    last = g.last_checkpoint()
    per_stream = {_key(p): g.unread_bytes(*p) for p in config.streams}
    per_stream_events = {_key(p): g.unread_events(*p) for p in config.streams}
    return {
        "name": name,
        "streams": [_key(p) for p in config.streams],
        "start": _cuts(config.start),
        "end": _cuts(config.end),
        "automatic_checkpoint_interval": config.automatic_checkpoint_interval,
        "max_outstanding_checkpoints": config.max_outstanding_checkpoints,
        "online_readers": g.online_readers(),
        "segments": {"readers": {r: list(segs) for r, segs in dist.readers.items()},
                     "unassigned": list(dist.unassigned)},
        "unread_bytes": {"total": g.unread_bytes(), "streams": per_stream},
        "unread_events": {"total": sum(per_stream_events.values()), "streams": per_stream_events},
        "stream_cuts": _cuts(g.get_stream_cuts()),
        "last_checkpoint": None if last is None else {"name": last.name, "stream_cuts": _cuts(last.stream_cuts)},
        "outstanding_checkpoints": g.outstanding_checkpoints(),
    }


def _info(store: Store, name: str, as_json: bool) -> None:
    d = _describe(store, name)
    if as_json:
        out(json.dumps(d))
        return
    iv = d["automatic_checkpoint_interval"]
    out(f"reader group {name}")
    out(f"  streams: {', '.join(d['streams'])}")
    for what in ("start", "end"):
        for key in d["streams"]:
            default = "head" if what == "start" else "unbounded (until sealed)"
            out(f"  {what} {key}: {d[what].get(key, default)}")
    out(f"  automatic checkpoints: {'off' if iv is None else f'every {iv:g}s'}; "
         f"max outstanding: {d['max_outstanding_checkpoints']}")
    out(f"  online readers: {', '.join(d['online_readers']) or '-'}")
    out("  segments:")
    for reader, segs in d["segments"]["readers"].items():
        out(f"    {reader}: {', '.join(segs) or '-'}")
    out(f"    (unassigned): {', '.join(d['segments']['unassigned']) or '-'}")
    out(f"  unread (lag): {d['unread_events']['total']} events, {d['unread_bytes']['total']} bytes")
    for key, n in d["unread_bytes"]["streams"].items():
        out(f"    {key}: {d['unread_events']['streams'][key]} events, {n} bytes")
    out("  stream cuts:")
    for cut in d["stream_cuts"].values():
        out(f"    {cut}")
    last = d["last_checkpoint"]
    out(f"  last checkpoint: {'-' if last is None else last['name']}")
    for cut in ({} if last is None else last["stream_cuts"]).values():
        out(f"    {cut}")
    out(f"  outstanding checkpoints: {', '.join(d['outstanding_checkpoints']) or '-'}")


def _create(store: Store, args: argparse.Namespace) -> None:
    if args.checkpoint_interval < 0:
        raise errors.InvalidConfigurationError(
            f"--checkpoint-interval must be >= 0 seconds, got {args.checkpoint_interval:g}")
    config = ReaderGroupConfig(
        streams=args.streams, start=args.start, end=args.end,
        automatic_checkpoint_interval=args.checkpoint_interval or None,
        max_outstanding_checkpoints=args.max_checkpoints)
    store.create_reader_group(args.name, config)


def _checkpoint(store: Store, args: argparse.Namespace) -> int:
    g = store.get_reader_group(args.name)
    timeout = max(0.0, args.timeout)
    future = g.initiate_checkpoint(args.checkpoint)
    try:
        cp = future.result(timeout)
    except TimeoutError:
        # No reader of this command's process is in the group, and no other process can use
        # the store while this one holds it: the listed readers are the ones not answering.
        pending = g.online_readers()
        raise CommandError(
            f"checkpoint {args.checkpoint!r} of reader group {args.name!r} did not complete within "
            f"{timeout:g}s: pending reader(s): {', '.join(pending)}. A reader whose process "
            f"has gone away never answers; take it out with `reader-group offline {args.name} "
            f"{pending[0] if pending else 'READER'}`. The checkpoint stays outstanding and "
            f"completes when those readers answer or are put offline; `reader-group "
            f"cancel-checkpoints {args.name}` withdraws it."
        )
    for cut in cp.stream_cuts.values():
        out(cut.to_text())
    print(f"checkpoint {cp.name!r} of reader group {args.name!r} completed", file=sys.stderr)
    return 0


def _reset(store: Store, args: argparse.Namespace) -> int:
    g = store.get_reader_group(args.name)
    if args.to_checkpoint:
        last = g.last_checkpoint()
        if last is None:
            raise CommandError(f"reader group {args.name!r} has no completed checkpoint to reset to")
        g.reset(last)
        print(f"reset reader group {args.name!r} to checkpoint {last.name!r}", file=sys.stderr)
    elif args.start:
        g.reset(g.config.with_start(args.start))
    else:
        g.reset(g.config)
    return 0


def run(store: Store, args: argparse.Namespace) -> int:
    """Run ``reader-group <args.group_cmd>`` on the open store; returns the exit code (errors
    of the store propagate, for the CLI to report)."""
    cmd = args.group_cmd
    if cmd == "list":
        for name in store.list_reader_groups():
            out(name)
    elif cmd == "create":
        _create(store, args)
    elif cmd == "info":
        _info(store, args.name, args.json)
    elif cmd == "checkpoint":
        return _checkpoint(store, args)
    elif cmd == "reset":
        return _reset(store, args)
    elif cmd == "offline":
        store.get_reader_group(args.name).reader_offline(args.reader)
    elif cmd == "cancel-checkpoints":
        n = store.get_reader_group(args.name).cancel_outstanding_checkpoints()
        print(f"cancelled {n} outstanding checkpoint(s) of reader group {args.name!r}", file=sys.stderr)
    elif cmd == "delete":
        store.delete_reader_group(args.name)
    return 0
