"""What a TCP client's token lets it do, call by call: the owner's side of ``auth``'s grants.

Owns: the permission each store call and each handle call needs, checked before the store is
touched; the checks of what a call returned (an existing reader group handed back by
``exist_ok``, a group reader whose group was reset meanwhile); lists filtered to what the
token may read.

Invariants:
  1. Arguments are bound to the store method's signature before any check, so a keyword
     argument is checked exactly as a positional one.
  2. A reader group is checked on its *current* streams at every call on its handle, and a
     group handed back or a group reader made is checked again after the call (a reset by
     another client in between is caught; the reader it made is closed).
  3. Calls that change what a stream holds or is (seal, truncate, create, delete, scale,
     update) need ``admin``; a byte stream's ``seal`` and ``truncate_before`` too, and
     ``create_byte_stream`` of a stream that does not exist yet. The store's status needs
     read on everything (it names paths and tier 2).

Thread-safety: one per session, used by its thread.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from ..bytestream import ByteStream
from ..errors import InvalidConfigurationError, PravegaEmbeddedError, StreamNotFoundError
from ..readergroup.config import Checkpoint, ReaderGroupConfig
from ..batch import SegmentRange
from ..events import EventPointer
from ..readergroup.group import ReaderGroup
from ..readergroup.reader import GroupReader
from .auth import FULL, Grants

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["Authorizer"]

_STREAM = {
    "create_stream": "admin", "seal_stream": "admin", "delete_stream": "admin", "scale_stream": "admin",
    "update_stream": "admin", "truncate_stream": "admin", "stream_info": "read", "tiered_bytes": "read",
    "create_reader": "read", "read_slice": "read", "watch_segments": "read", "create_writer": "write",
    "get_segments": "read", "get_next_stream_cut": "read",
    "get_stream_cut_at": "read", "get_stream_cut_from_tail": "read", "skip_truncated": "read",
    "create_transactional_writer": "write", "create_byte_stream": "write", "list_transactions": "read",
}
_SCOPE = {"create_scope": "admin", "delete_scope": "admin"}
_STORE = {"checkpoint": "admin", "reclaim": "admin", "flush_tier2": "admin", "status": "read",
          "tiering_status": "read"}
_GROUP = {"get_reader_group": "read", "open_group_reader": "read", "delete_reader_group": "write"}
_FILTERED = frozenset({"list_scopes", "list_streams", "list_reader_groups"})
_BYTE_STREAM_ADMIN = frozenset({"seal", "truncate_before"})


def bind(fn: object, args: list[object], kwargs: dict[str, object], method: str) -> dict[str, object]:
    """Invariant 1: the arguments by name (InvalidConfigurationError if they do not fit)."""
    try:
        return dict(inspect.signature(fn).bind(*args, **kwargs).arguments)  # type: ignore[arg-type]
    except TypeError as exc:
        raise InvalidConfigurationError(f"{method}: {exc}") from None


class Authorizer:
    """The checks of one session's calls against ``grants`` (FULL: none)."""

    def __init__(self, store: "Store", grants: Grants) -> None:
        self.store = store
        self.grants = grants
        self.full = grants is FULL

    # ------------------------------------------------------------------ store calls
    def before(self, method: str, args: list[object], kwargs: dict[str, object]) -> None:
        """A store call's permission (invariants 1 and 3)."""
        if self.full:
            return
        g = self.grants
        if method == "open_group_reader":
            self._group_named(args[0] if args else None, "read", method)
            return
        fn = getattr(self.store, method, None)
        if fn is None or method in _FILTERED:
            return  # an unknown name is refused by the session; lists are filtered after
        bound = bind(fn, args, kwargs, method)
        if method in _STREAM:
            scope, stream = bound.get("scope"), bound.get("stream")
            need = _STREAM[method]
            if method == "create_byte_stream" and not self._exists(scope, stream):
                need = "admin"  # it would create the stream
            g.check(need, f"{scope}/{stream}", method)
        elif method in _SCOPE:
            g.check_scope(_SCOPE[method], str(bound.get("scope")), method)
        elif method in _STORE:
            g.check_store(_STORE[method], method)
        elif method == "create_reader_group":
            config = bound.get("config")
            streams = config.streams if isinstance(config, ReaderGroupConfig) else config
            if not isinstance(streams, (list, tuple)):
                raise InvalidConfigurationError("create_reader_group takes a ReaderGroupConfig or [(scope, stream)]")
            self.streams(streams, "read", method)
        elif method in _GROUP:
            self._group_named(bound.get("group_name"), _GROUP[method], method)
        elif method == "write_times":
            pointers = bound.get("pointers")
            if not isinstance(pointers, (list, tuple)):
                raise InvalidConfigurationError("write_times takes a list of EventPointers")
            for p in pointers:
                if isinstance(p, EventPointer):  # anything else: the store refuses it
                    g.check("read", f"{p.scope}/{p.stream}", method)
        elif method == "read_segment_range":
            rng = bound.get("rng")
            if not isinstance(rng, SegmentRange):
                raise InvalidConfigurationError(f"read_segment_range takes a SegmentRange, got {type(rng).__name__}")
            g.check("read", f"{rng.scope}/{rng.stream}", method)

    def after(self, method: str, args: list[object], kwargs: dict[str, object], value: object) -> object:
        """Invariant 2 on what a call returned, and lists filtered."""
        if self.full:
            return value
        try:
            if isinstance(value, ReaderGroup):
                self.streams(value.config.streams, "read", method)
            elif isinstance(value, GroupReader):
                self._group_named(value.group_name, "read", method)
        except BaseException:
            value.close()  # type: ignore[attr-defined]
            raise
        if method in _FILTERED:
            return self._filter(method, bind(getattr(self.store, method), args, kwargs, method), value)
        return value

    # ------------------------------------------------------------------ handle calls
    def handle(self, obj: object, method: str, args: list[object], kwargs: dict[str, object]) -> None:
        """A call on a handle (invariants 2 and 3)."""
        if self.full:
            return
        if isinstance(obj, ReaderGroup):
            self.streams(obj.config.streams, "write" if method == "update_retention_cut" else "read", method)
            if method == "reset":
                target = bind(obj.reset, args, kwargs, method).get("target")
                if isinstance(target, ReaderGroupConfig):
                    self.streams(target.streams, "read", method)
                elif isinstance(target, Checkpoint):
                    self.streams(list(target.stream_cuts), "read", method)
        elif isinstance(obj, ByteStream) and method in _BYTE_STREAM_ADMIN:
            self.grants.check("admin", f"{obj.scope}/{obj.stream}", method)

    # ------------------------------------------------------------------ helpers
    def streams(self, streams: object, permission: str, what: str) -> None:
        for pair in streams:  # type: ignore[attr-defined]
            if isinstance(pair, (list, tuple)) and len(pair) == 2:
                scope, stream = pair
            else:
                scope, _, stream = str(pair).partition("/")
            self.grants.check(permission, f"{scope}/{stream}", what)

    def _group_named(self, name: object, permission: str, what: str) -> None:
        if not isinstance(name, str):
            raise InvalidConfigurationError(f"{what} takes a reader group's name")
        group = self.store.get_reader_group(name)
        try:
            self.streams(group.config.streams, permission, what)
        finally:
            group.close()

    def _exists(self, scope: object, stream: object) -> bool:
        try:
            self.store.stream_info(scope, stream)  # type: ignore[arg-type]
            return True
        except StreamNotFoundError:
            return False
        except PravegaEmbeddedError:
            return True  # a bad name or a missing scope: the call itself says so

    def _filter(self, method: str, bound: dict[str, object], value: object) -> object:
        g = self.grants
        if method == "list_scopes":
            return [s for s in value if g.readable_scope(s)]  # type: ignore[attr-defined]
        if method == "list_streams":
            scope = bound.get("scope")
            return [t for t in value if g.allows("read", f"{scope}/{t}")]  # type: ignore[attr-defined]
        out = []
        for name in value:  # type: ignore[attr-defined]
            try:
                group = self.store.get_reader_group(name)
            except PravegaEmbeddedError:
                continue
            try:
                if all(g.allows("read", f"{s}/{t}") for s, t in group.config.streams):
                    out.append(name)
            finally:
                group.close()
        return out
