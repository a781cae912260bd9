"""How ``read`` prints events: kcat's ``-f`` format strings, ``-J`` JSON envelopes, and plain
events with a delimiter (``-D``).

Owns: compiling a format string once into parts (:func:`compile_format`), and turning one
event into bytes (:class:`Printer`).

Format: ``%s`` payload, ``%S`` payload bytes, ``%k`` routing key (empty if none), ``%K`` key
bytes (-1 if none), ``%p`` segment (``NUMBER#EPOCH``), ``%o`` offset, ``%T`` write time (ms
since the epoch, -1 if unknown, as kcat), ``%t`` SCOPE/STREAM, ``%P`` event pointer
(``SCOPE/STREAM/SEGMENT@OFFSET+LENGTH``), ``%%`` a percent sign; escapes ``\\n \\t \\r \\0
\\\\ \\xHH``.

Invariants:
  1. A payload is written as its bytes: JSON envelopes carry it as text only when it is valid
     UTF-8 (``"payload"``), else as base64 (``"payload_base64"``), so framing is never lost.
  2. An unknown ``%`` directive is a usage error before anything is read.

Thread-safety: one Printer per command.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Callable

from ..events import EventRead
from ..streamcut import segment_name
from .common import unescape

__all__ = ["compile_format", "Printer", "NEEDS_TIME"]

NEEDS_TIME = "%T"  # a format with it asks the store for write times
_Field = Callable[[EventRead, "int | None"], bytes]


def _key(ev: EventRead) -> bytes:
    return (ev.routing_key or "").encode()


def _payload(ev: EventRead) -> bytes:
    data = ev.event
    return data if isinstance(data, bytes) else bytes(data)


_FIELDS: dict[str, _Field] = {
    "s": lambda ev, t: _payload(ev),
    "S": lambda ev, t: str(len(ev.event)).encode(),
    "k": lambda ev, t: _key(ev),
    "K": lambda ev, t: str(-1 if ev.routing_key is None else len(_key(ev))).encode(),
    "p": lambda ev, t: segment_name(ev.segment_id).encode(),
    "o": lambda ev, t: str(ev.offset).encode(),
    "T": lambda ev, t: str(-1 if t is None else t // 1_000_000).encode(),
    "t": lambda ev, t: f"{ev.event_pointer.scope}/{ev.event_pointer.stream}".encode(),
    "P": lambda ev, t: str(ev.event_pointer).encode(),
}


def compile_format(fmt: str) -> list[bytes | _Field]:
    """``fmt`` as literal bytes and field functions (invariant 2: ValueError if unknown)."""
    parts: list[bytes | _Field] = []
    literal = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c != "%":
            literal.append(c)
            i += 1
            continue
        d = fmt[i + 1 : i + 2]
        if d == "%":
            literal.append("%")
        elif d in _FIELDS:
            if literal:
                parts.append(unescape("".join(literal)))
                literal = []
            parts.append(_FIELDS[d])
        else:
            raise ValueError(f"unknown format directive %{d} in {fmt!r} "
                             "(%s %S %k %K %p %o %T %t %P %%)")
        i += 2
    if literal:
        parts.append(unescape("".join(literal)))
    return parts


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat(timespec="microseconds")


class Printer:
    """Turns events into output bytes: ``fmt`` parts, JSON envelopes, or the payload (with
    the key and a tab first if ``show_key``) and ``delimiter``."""

    def __init__(self, *, fmt: str | None, as_json: bool, delimiter: bytes, show_key: bool) -> None:
        self._parts = compile_format(fmt) if fmt is not None else None
        self.json = as_json
        self.delimiter = delimiter
        self.show_key = show_key
        self.needs_time = as_json or (fmt is not None and NEEDS_TIME in fmt.replace("%%", ""))

    def render(self, ev: EventRead, write_ns: int | None) -> bytes:
        if self._parts is not None:
            return b"".join(p if isinstance(p, bytes) else p(ev, write_ns) for p in self._parts)
        if self.json:
            return json.dumps(self.envelope(ev, write_ns)).encode() + self.delimiter
        head = _key(ev) + b"\t" if self.show_key else b""
        return head + _payload(ev) + self.delimiter

    @staticmethod
    def envelope(ev: EventRead, write_ns: int | None) -> dict[str, object]:
        """One event as a JSON object (invariant 1)."""
        ptr = ev.event_pointer
        payload = _payload(ev)
        env: dict[str, object] = {
            "stream": f"{ptr.scope}/{ptr.stream}", "segment": segment_name(ev.segment_id),
            "offset": ev.offset, "key": ev.routing_key, "write_time": _iso(write_ns),
            "pointer": base64.b64encode(ptr.to_bytes()).decode("ascii"),
        }
        try:
            env["payload"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            env["payload_base64"] = base64.b64encode(payload).decode("ascii")
        return env
