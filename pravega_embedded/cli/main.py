"""The ``pravega-embedded`` command: admin, kcat-like write/read, reader groups, tier 2, the demo.

Owns: argument parsing and text output; it uses only the public API.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Sequence

from . import cli_groups, cli_scaling, cli_tier2, errors
from .config import ScalingPolicy, StreamConfiguration
from .remote import RemoteStore, serve_tcp
from .remote import open as open_store
from .store import Store
from .streamcut import StreamCut, format_segment_id

__all__ = ["main"]


def _stream_arg(text: str) -> tuple[str, str]:
    scope, sep, stream = text.partition("/")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected SCOPE/STREAM, got {text!r}")
    return scope, stream


def _cut_arg(text: str) -> StreamCut:
    try:
        return StreamCut.from_text(text)
    except errors.InvalidStreamCutError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pravega-embedded", description=__doc__.splitlines()[0])
    p.add_argument("--store", default="./data", help="store directory (default ./data)")
    p.add_argument("--durability", default="fsync", choices=["fsync", "os", "none"])
    cli_tier2.add_global_options(p)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("create-scope", help="create a scope")
    s.add_argument("scope")
    s = sub.add_parser("create-stream", help="create a stream (and its scope if needed)")
    s.add_argument("stream", type=_stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--segments", type=int, default=1, help="fixed segment count (default 1)")
    s = sub.add_parser("list", help="list scopes, or the streams of a scope")
    s.add_argument("scope", nargs="?")
    s = sub.add_parser("info", help="segments, head and tail cuts of a stream")
    s.add_argument("stream", type=_stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--json", action="store_true")
    s = sub.add_parser("write", help="write stdin lines as events")
    s.add_argument("stream", type=_stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--key", help="routing key for every line")
    s.add_argument("--key-field", help="lines are JSON objects; route by this field")
    s.add_argument("--writer-id", help="writer id: its sequence numbers continue across runs")
    s.add_argument("--line-sequence", action="store_true",
                   help="with --writer-id: line i of the input is sequence i, so re-running the same "
                   "input (e.g. after a crash) skips the lines already written")
    s = sub.add_parser("read", help="print events as lines")
    s.add_argument("stream", type=_stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--from", dest="start", type=_cut_arg, help="start StreamCut text")
    s.add_argument("--to", dest="end", type=_cut_arg, help="end StreamCut text")
    s.add_argument("--follow", "-f", action="store_true",
                   help="keep reading new events, also from writers in other processes")
    s.add_argument("--poll", type=float, default=0.2, metavar="SECONDS",
                   help="with --follow: how long a read waits before looking whether the stream "
                   "was sealed (default 0.2)")
    s.add_argument("--show-key", action="store_true", help="print KEY<TAB>EVENT")
    s.add_argument("--show-cut", action="store_true", help="print the cut after the last event to stderr")
    for name, help_ in (("seal", "seal a stream"), ("delete", "delete a stream")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("stream", type=_stream_arg, metavar="SCOPE/STREAM")
    s = sub.add_parser("truncate", help="truncate a stream at a StreamCut")
    s.add_argument("stream", type=_stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("cut", type=_cut_arg)
    cli_groups.add_parser(sub, _stream_arg, _cut_arg)
    cli_scaling.add_parser(sub, _stream_arg)
    cli_tier2.add_parser(sub)
    s = sub.add_parser("serve", help="serve the store over TCP (with tokens, optionally TLS) until stopped")
    s.add_argument("path", nargs="?", help="store directory (default: --store)")
    s.add_argument("--listen", default="127.0.0.1:9090", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:9090: this machine only)")
    s.add_argument("--token-file", required=True, help="TOML file of tokens and their grants "
                   "(docs/multiprocess.md)")
    s.add_argument("--tls-cert", help="PEM certificate (chain): serve TLS")
    s.add_argument("--tls-key", help="PEM private key of --tls-cert (if not in it)")
    s.add_argument("--idle-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="close a connection idle this long (default 600)")
    s = sub.add_parser("demo", help="write and read back a small sensor stream")
    s.add_argument("--events", type=int, default=100_000)
    return p


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def _info(store: Store, scope: str, stream: str, as_json: bool) -> None:
    info = store.stream_info(scope, stream)
    tiered = store.tiered_bytes(scope, stream)
    if as_json:
        _out(json.dumps({
            "scope": scope, "stream": stream, "sealed": info.sealed,
            "head": info.head.to_text(), "tail": info.tail.to_text(),
            "length": info.length, "tiered_bytes": tiered,
            "segments": [{"segment": format_segment_id(s.segment_id), "key_low": s.key_low,
                          "key_high": s.key_high, "head": s.head, "length": s.length,
                          "sealed": s.sealed} for s in info.segments],
        }))
        return
    _out(f"stream {scope}/{stream}{' (sealed)' if info.sealed else ''}")
    _out(f"  head: {info.head.to_text()}")
    _out(f"  tail: {info.tail.to_text()}")
    _out(f"  tiered: {tiered} of {info.length} bytes (head to tail) in tier 2")
    _out("  segment  key range            head        length  state")
    for s in info.segments:
        _out(f"  {format_segment_id(s.segment_id):>7}  [{s.key_low:.4f}, {s.key_high:.4f})  "
             f"{s.head:>10}  {s.length:>12}  {'sealed' if s.sealed else 'open'}")


def _write(store: Store, scope: str, stream: str, args: argparse.Namespace) -> None:
    if args.line_sequence and not args.writer_id:
        raise errors.InvalidConfigurationError("--line-sequence needs --writer-id")
    n = 0
    with store.create_writer(scope, stream, writer_id=args.writer_id) as w:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = args.key
            if args.key_field:
                try:
                    obj = json.loads(line)
                    key = None if obj.get(args.key_field) is None else str(obj[args.key_field])
                except (ValueError, AttributeError):
                    raise errors.SerializationError(
                        f"line {n + 1} is not a JSON object with field {args.key_field!r}"
                    ) from None
            # --line-sequence: line i is sequence i, so re-running the same input adds nothing
            w.write_event(line, routing_key=key, sequence=n if args.line_sequence else None)
            n += 1
        w.flush()
        dropped = w.duplicates_dropped
    print(f"wrote {n - dropped} events to {scope}/{stream}"
          + (f" ({dropped} already written by writer {args.writer_id!r} were skipped)" if dropped else ""),
          file=sys.stderr)


def _open(args: argparse.Namespace) -> "Store | RemoteStore":
    """The store: owned by this command, or, when another process has it open, through that
    process (its options apply then)."""
    return open_store(args.store, args.durability, **cli_tier2.open_options(args))


def _serve(args: argparse.Namespace) -> int:
    """``serve``: own the store, serve it over TCP (and to local processes) until SIGINT or
    SIGTERM."""
    import signal
    import threading

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    path = args.path or args.store
    with open_store(path, args.durability, exclusive=True, **cli_tier2.open_options(args)) as store:
        assert isinstance(store, Store)
        server = serve_tcp(store, args.listen, tokens=args.token_file, tls_cert=args.tls_cert,
                           tls_key=args.tls_key, idle_timeout=args.idle_timeout)
        host, port = server.address
        scheme = "tls" if args.tls_cert else "tcp"
        print(f"serving {store.path} on {scheme}://{host}:{port} (Ctrl-C stops)", file=sys.stderr, flush=True)
        stop.wait()
    return 0


def _print_events(r: Any, args: argparse.Namespace) -> None:
    out = sys.stdout.buffer
    while (ev := r.read_next_event(timeout=0)) is not None:
        if args.show_key:
            out.write((ev.routing_key or "").encode() + b"\t")
        out.write(ev.event + b"\n")
    out.flush()


def _read(store: Store, scope: str, stream: str, args: argparse.Namespace) -> None:
    with store.create_reader(scope, stream, start=args.start, end=args.end) as r:
        _print_events(r, args)
        if args.show_cut:
            print(r.position().to_text(), file=sys.stderr)


def _follow(scope: str, stream: str, args: argparse.Namespace) -> None:
    """read --follow: one reader, held open, prints events as they come (writers in other
    processes write through whichever process owns the store). If the owner goes away, the
    store is opened again and reading goes on from the position after the last batch printed."""
    position, shown = args.start, None
    out = sys.stdout.buffer
    while True:
        try:
            with _open(args) as store, store.create_reader(scope, stream, start=position, end=args.end) as r:
                while True:
                    ev = r.read_next_event(timeout=max(0.01, args.poll))
                    while ev is not None:
                        if args.show_key:
                            out.write((ev.routing_key or "").encode() + b"\t")
                        out.write(ev.event + b"\n")
                        ev = r.read_next_event(timeout=0)
                    out.flush()
                    position = r.position()
                    if args.show_cut and position != shown:
                        print(position.to_text(), file=sys.stderr, flush=True)
                        shown = position
                    if r.at_end:  # the end cut, or the end of a sealed stream
                        return
        except errors.ConnectionLostError:
            continue  # the owner went away: open again (this process may become the owner)


def demo(store_path: str, durability: str, events: int, **options: Any) -> None:
    """Write ``events`` sensor readings to iot/sensors and read them back, with timings
    (``options``: more keyword arguments of ``pe.open``)."""
    with open_store(store_path, durability, **options) as store:
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
        _out(f"wrote {events:,} events in {dt:.3f}s ({events / dt:,.0f} events/s, durability={durability}, all durable)")
        _out(f"writer demo-gateway last sequence: {last}")
        after = store.stream_info("iot", "sensors").tail
        t = time.perf_counter()
        table = store.read_slice("iot", "sensors", start=before, end=after).to_arrow()
        dt = time.perf_counter() - t
        _out(f"read the slice {before.to_text()} .. {after.to_text()}")
        _out(f"  -> Arrow table of {table.num_rows:,} rows in {dt:.3f}s")
        assert table.num_rows == events
        r = store.create_reader("iot", "sensors", start=before, end=after)
        per_key: dict[str, int] = {}
        n = 0
        while (ev := r.read_next_event(timeout=0)) is not None:
            per_key[ev.routing_key] = per_key.get(ev.routing_key, 0) + 1
            n += 1
        _out(f"reader got {n:,} events over {len(per_key)} routing keys")
        _info(store, "iot", "sensors", False)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "demo":
            demo(args.store, args.durability, args.events, **cli_tier2.open_options(args))
            return 0
        if args.cmd == "read" and args.follow:
            _follow(*args.stream, args)
            return 0
        if args.cmd == "serve":
            return _serve(args)
        with _open(args) as store:
            if args.cmd == "create-scope":
                store.create_scope(args.scope, exist_ok=True)
            elif args.cmd == "create-stream":
                scope, stream = args.stream
                store.create_scope(scope, exist_ok=True)
                store.create_stream(scope, stream, StreamConfiguration(scaling=ScalingPolicy.fixed(args.segments)), exist_ok=True)
            elif args.cmd == "list":
                for name in (store.list_streams(args.scope) if args.scope else store.list_scopes()):
                    _out(name)
            elif args.cmd == "info":
                _info(store, *args.stream, args.json)
            elif args.cmd == "write":
                _write(store, *args.stream, args)
            elif args.cmd == "read":
                _read(store, *args.stream, args)
            elif args.cmd == "seal":
                store.seal_stream(*args.stream)
            elif args.cmd == "delete":
                store.delete_stream(*args.stream)
            elif args.cmd == "truncate":
                store.truncate_stream(*args.stream, args.cut)
            elif args.cmd == "reader-group":
                return cli_groups.run(store, args)
            elif args.cmd in cli_scaling.COMMANDS:
                return cli_scaling.run(store, args)
            elif args.cmd == "tier2":
                return cli_tier2.run(store, args)
        return 0
    except errors.PravegaEmbeddedError as exc:
        print(f"pravega-embedded: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
