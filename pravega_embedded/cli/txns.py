"""``pravega-embedded txn list | abort``: a stream's transactions from the command line.

Owns: those subcommands' parsing and output (``store.list_transactions``; an abort goes
through ``create_transactional_writer(...).get_txn(id).abort()``).

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any

from .common import note, out, stream_arg

if TYPE_CHECKING:
    from ..remote import RemoteStore
    from ..store import Store

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("txn", parents=parents, help="a stream's transactions: list, abort")
    tsub = p.add_subparsers(dest="txn_cmd", required=True, metavar="COMMAND")
    s = tsub.add_parser("list", parents=parents, help="the stream's transactions, oldest first")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--json", action="store_true", help="one JSON object per transaction")
    s = tsub.add_parser("abort", parents=parents, help="abort an open transaction")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("txn_id", metavar="TXN_ID")


def run(store: "Store | RemoteStore", args: argparse.Namespace) -> int:
    scope, stream = args.stream
    if args.txn_cmd == "abort":
        w = store.create_transactional_writer(scope, stream)
        try:
            txn = w.get_txn(args.txn_id)
            txn.abort()
            note(f"aborted transaction {args.txn_id} of {scope}/{stream}")
        finally:
            w.close()
        return 0
    infos = store.list_transactions(scope, stream)
    if args.json:
        for t in infos:
            out(json.dumps(dataclasses.asdict(t)))
        return 0
    now = time.time_ns()
    out(f"{'TXN_ID':32}  {'STATUS':10}  {'BYTES':>10}  {'AGE_S':>8}  {'LEASE_LEFT_S':>12}  WRITER")
    for t in infos:
        left = f"{max(0, t.deadline_ns - now) / 1e9:.1f}" if t.status == "OPEN" else "-"
        out(f"{t.txn_id:32}  {t.status:10}  {t.staged_bytes:>10}  {(now - t.created_ns) / 1e9:>8.1f}  "
            f"{left:>12}  {t.writer_id}")
    return 0
