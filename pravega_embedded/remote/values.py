"""Typed values on the wire: the JSON form of call arguments, results and errors.

Owns: turning the library's value objects (StreamConfiguration, StreamInfo, StreamCut,
EventPointer, TieringStatus, ...) into JSON and back, and an exception into an ERROR body and
back into the same ``pravega_embedded.errors`` class in the client.

Invariants:
  1. Only JSON scalars, lists and tagged objects travel: ``{"$t": name, "j": {...}}`` for a
     configuration (StreamConfiguration, ScalingPolicy, RetentionPolicy: built with their
     ``from_json``, whose factories check every field), ``{"$t": name, "f": {...}}`` for another
     value class on the allowlist ``VALUE_TYPES`` (built with its constructor), ``{"$b": base64}`` for bytes, ``{"$tuple": [...]}``, ``{"$map": [[k, v],
     ...]}``, ``{"$cut": text}`` for a StreamCut, ``{"$uuid": text}``, ``{"$h": id, ...}`` for a handle. Nothing else
     is decoded: a name off the allowlist or an unknown tag is a ProtocolError.
  2. An error decodes to the class of the same name in ``pravega_embedded.errors`` when it is
     one of the library's, a ``TimeoutError`` (a wait that timed out) to ``TimeoutError`` as in
     process; anything else (a bug in the owner) becomes ``RemoteError`` with the original
     type and message in its text.

Thread-safety: pure functions.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from datetime import timedelta

from .. import errors
from ..background import BackgroundFailure, StoreStatus
from ..config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from ..errors import PravegaEmbeddedError, ProtocolError
from ..events import EventPointer
from ..readergroup.config import Checkpoint, Position, ReaderGroupConfig, SegmentDistribution
from ..segment import SegmentInfo
from ..batch import SegmentRange, Truncation
from ..stream import EpochInfo, SegmentWithRange, StreamInfo
from ..streamcut import StreamCut
from ..transactions import TransactionInfo
from ..watch import SegmentCountChange
from ..watermarks import TimeWindow

__all__ = ["VALUE_TYPES", "Handle", "RemoteError", "encode_value", "decode_value", "dumps",
           "loads", "encode_error", "decode_error"]

_JSON = object | None  # what ``json`` reads and writes


class RemoteError(PravegaEmbeddedError, RuntimeError):
    """The owner failed a call with an error that is not one of the library's (a bug there):
    the text names its type and message; the owner logs it in full."""


_CONFIGS = (StreamConfiguration, ScalingPolicy, RetentionPolicy, ReaderGroupConfig)  # from_json checks
VALUE_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (StreamInfo, SegmentInfo,
                EpochInfo, SegmentWithRange, SegmentRange, Truncation, EventPointer, StoreStatus, BackgroundFailure,
                TimeWindow, SegmentCountChange, Position, Checkpoint, SegmentDistribution, TransactionInfo)
}


def register_value_type(cls: type) -> None:
    """Put a dataclass of a higher layer (tiering's TieringStatus) on the allowlist."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    VALUE_TYPES[cls.__name__] = cls


@dataclasses.dataclass(frozen=True, slots=True)
class Handle:
    """A handle the owner made for this connection (a writer, a reader): its id and kind, and
    what the client needs to know of it at once."""

    id: int
    kind: str
    info: dict[str, object]


def encode_value(v: object) -> _JSON:
    """Invariant 1."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, StreamCut):
        return {"$cut": v.to_text()}
    if isinstance(v, Handle):
        return {"$h": v.id, "kind": v.kind, "info": encode_value(v.info)}
    if isinstance(v, timedelta):
        return {"$td": v.total_seconds()}
    if isinstance(v, uuid.UUID):
        return {"$uuid": str(v)}
    if isinstance(v, list):
        return [encode_value(x) for x in v]
    if isinstance(v, tuple):
        return {"$tuple": [encode_value(x) for x in v]}
    if isinstance(v, dict):
        return {"$map": [[encode_value(k), encode_value(x)] for k, x in v.items()]}
    name = type(v).__name__
    if isinstance(v, _CONFIGS):
        return {"$t": name, "j": v.to_json()}
    if dataclasses.is_dataclass(v) and VALUE_TYPES.get(name) is type(v):
        return {"$t": name, "f": {f.name: encode_value(getattr(v, f.name))
                                  for f in dataclasses.fields(v) if f.init}}
    raise TypeError(f"a {type(v).__name__} cannot be sent to another process")


def decode_value(j: _JSON) -> object:
    """Invariant 1: the value ``encode_value`` was given."""
    if j is None or isinstance(j, (bool, int, float, str)):
        return j
    if isinstance(j, list):
        return [decode_value(x) for x in j]
    if not isinstance(j, dict) or len(j) < 1:
        raise ProtocolError(f"not a value: {str(j)[:80]!r}")
    try:
        if "$b" in j:
            return base64.b64decode(_str(j["$b"]), validate=True)
        if "$cut" in j:
            return StreamCut.from_text(_str(j["$cut"]))
        if "$tuple" in j:
            return tuple(decode_value(x) for x in _list(j["$tuple"]))
        if "$map" in j:
            return {_hashable(decode_value(_pair(p)[0])): decode_value(_pair(p)[1]) for p in _list(j["$map"])}
        if "$uuid" in j:
            return uuid.UUID(_str(j["$uuid"]))
        if "$td" in j:
            return timedelta(seconds=float(j["$td"]))  # type: ignore[arg-type]
        if "$h" in j:
            info = decode_value(j.get("info"))
            if not isinstance(j["$h"], int) or not isinstance(info, dict):
                raise ProtocolError("a handle needs an int id and a map of info")
            return Handle(j["$h"], _str(j.get("kind")), info)
        if "$t" in j and "j" in j:
            conf = {c.__name__: c for c in _CONFIGS}.get(_str(j["$t"]))
            if conf is None or not isinstance(j["j"], dict):
                raise ProtocolError(f"{str(j['$t'])[:80]!r} is not a configuration this side knows")
            try:
                return conf.from_json(j["j"])
            except (KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, PravegaEmbeddedError):
                    raise
                raise errors.InvalidConfigurationError(f"a {conf.__name__} that does not decode: {exc!r}") from None
        if "$t" in j:
            cls = VALUE_TYPES.get(_str(j["$t"]))
            fields = j.get("f")
            if cls is None or not isinstance(fields, dict):
                raise ProtocolError(f"{str(j['$t'])[:80]!r} is not a value type this side knows")
            known = {f.name for f in dataclasses.fields(cls) if f.init}
            if not set(fields) <= known:
                raise ProtocolError(f"{cls.__name__} has no fields {sorted(set(fields) - known)}")
            return cls(**{k: decode_value(x) for k, x in fields.items()})
    except (ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, PravegaEmbeddedError):
            raise
        raise ProtocolError(f"a value does not decode: {exc}") from None
    raise ProtocolError(f"unknown value tag in {sorted(j)[:4]}")


def _str(x: object) -> str:
    if not isinstance(x, str):
        raise ProtocolError(f"expected a string, got {type(x).__name__}")
    return x


def _list(x: object) -> list[object]:
    if not isinstance(x, list):
        raise ProtocolError(f"expected a list, got {type(x).__name__}")
    return x


def _pair(x: object) -> list[object]:
    if not isinstance(x, list) or len(x) != 2:
        raise ProtocolError("a map entry is a [key, value] pair")
    return x


def _hashable(x: object) -> object:
    if isinstance(x, (list, dict)):
        raise ProtocolError("a map key must be a scalar or a tuple")
    return x


def dumps(v: object) -> bytes:
    """The JSON body of ``v``; InvalidConfigurationError if something in it is not a value that
    can go to another process."""
    try:
        return json.dumps(encode_value(v), separators=(",", ":"), allow_nan=True).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise errors.InvalidConfigurationError(f"{exc}: pass plain values (str, int, float, bytes, "
                                               "lists, dicts, StreamCut, StreamConfiguration, ...)") from None


def loads(raw: bytes | bytearray | memoryview) -> object:
    """Parse and decode a JSON body; ProtocolError for anything malformed or too deep."""
    try:
        j = json.loads(bytes(raw))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"a message body is not JSON: {str(exc)[:120]}") from None
    try:
        return decode_value(j)
    except RecursionError:
        raise ProtocolError("a message body nests too deep") from None


# ---------------------------------------------------------------------------- errors
def encode_error(exc: BaseException) -> bytes:
    """Invariant 2: the ERROR body for ``exc``."""
    name = type(exc).__name__
    if isinstance(exc, TimeoutError) and not isinstance(exc, PravegaEmbeddedError):
        return json.dumps({"type": "TimeoutError", "message": str(exc)}).encode()  # as in process
    known = isinstance(exc, PravegaEmbeddedError) and getattr(errors, name, None) is type(exc)
    body: dict[str, object] = {"type": name if known else "RemoteError", "message": str(exc)}
    if not known:
        body["message"] = f"{name}: {exc}"
    if isinstance(exc, OSError) and isinstance(exc.errno, int):
        body["errno"] = exc.errno
        body["message"] = exc.strerror if exc.strerror is not None else body["message"]
    for attr in ("path", "pid"):  # StoreLockedError's
        val = getattr(exc, attr, None)
        if known and isinstance(val, (str, int)):
            body[attr] = val
    return json.dumps(body).encode()


def decode_error(raw: bytes | bytearray | memoryview) -> Exception:
    """Invariant 2: the exception an ERROR body stands for."""
    try:
        j = json.loads(bytes(raw))
    except (ValueError, RecursionError):
        return ProtocolError("an ERROR body is not JSON")
    if not isinstance(j, dict):
        return ProtocolError("an ERROR body is not a JSON object")
    name, message = j.get("type"), str(j.get("message", ""))
    if name == "TimeoutError":  # a wait that timed out, as in process (checkpoint results, ...)
        return TimeoutError(message)
    cls = getattr(errors, name, None) if isinstance(name, str) and name in errors.__all__ else None
    if name == "RemoteError":
        cls = RemoteError
    if not (isinstance(cls, type) and issubclass(cls, PravegaEmbeddedError)):
        return ProtocolError(f"an ERROR of unknown type {str(name)[:80]!r}: {message}")
    err = j.get("errno")
    if isinstance(err, int) and issubclass(cls, OSError):
        return cls(err, message)
    if cls is errors.StoreLockedError:
        pid = j.get("pid")
        return cls(message, path=str(j.get("path", "")), pid=pid if isinstance(pid, int) else None)
    return cls(message)
