"""``pravega-embedded serve``: own a store and serve it over TCP until stopped.

Owns: the ``serve`` options (listen address, token file, TLS, idle timeout) and running the
server until SIGINT or SIGTERM (exit 0).

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from ..remote import open as open_any
from ..remote import serve_tcp
from ..store import Store
from . import tier2
from .common import CommandError, note

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("serve", parents=parents,
                       help="serve the store over TCP (with tokens, optionally TLS) until stopped")
    s.add_argument("path", nargs="?", help="store directory (default: --store)")
    s.add_argument("--listen", default="127.0.0.1:9090", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:9090: this machine only)")
    s.add_argument("--token-file", required=True, help="TOML file of tokens and their grants "
                   "(docs/multiprocess.md)")
    s.add_argument("--tls-cert", help="PEM certificate (chain): serve TLS")
    s.add_argument("--tls-key", help="PEM private key of --tls-cert (if not in it)")
    s.add_argument("--idle-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="close a connection idle this long (default 600)")


def run(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    path = args.path or args.store
    with open_any(path, args.durability, exclusive=True, **tier2.open_options(args)) as store:
        if not isinstance(store, Store):  # pragma: no cover - exclusive=True owns it or raises
            raise CommandError(f"serve: {path} is served by another process")
        server = serve_tcp(store, args.listen, tokens=args.token_file, tls_cert=args.tls_cert,
                           tls_key=args.tls_key, idle_timeout=args.idle_timeout)
        host, port = server.address
        scheme = "tls" if args.tls_cert else "tcp"
        note(f"serving {store.path} on {scheme}://{host}:{port} (Ctrl-C stops)")
        stop.wait()
    return 0
