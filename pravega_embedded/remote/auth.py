"""Who may do what over TCP: tokens, their grants, and the check of every call against them
(docs/multiprocess.md, "Serving over TCP").

Owns: the token file's format, ``TokenTable`` (a token to its grants, looked up in constant
time), ``Grants`` and the permission each store call needs (``required``).

A token file is TOML::

    [[token]]
    name = "dashboard"             # shown in the owner's log, never the secret
    secret = "s3cr3t-..."          # or sha256 = "<hex digest of the secret>"
    grants = ["read:iot/*", "write:iot/sensors", "admin:*"]

A grant is ``<permission>:<pattern>``: the permission is ``read`` (readers, reader groups,
slices, fetch_event, stream info, watchers), ``write`` (writers, transactions, byte streams;
includes read, as Pravega's READ_UPDATE) or ``admin`` (create, delete, seal, scale, update,
truncate streams and scopes, store-wide checkpoints and tier-2 flushes; includes write); the
pattern is ``scope/stream`` with shell wildcards (``iot/*``, ``*``: everything). Pravega's
``prn::/scope:S/stream:X`` READ / READ_UPDATE model, in fewer words.

Invariants:
  1. A token is looked up by comparing its SHA-256 digest with every entry's, each with
     ``hmac.compare_digest``: the time taken does not depend on which entry (if any) matched
     or on how much of the token was right.
  2. A call outside the token's grants raises PermissionDeniedError naming the permission and
     the stream it needs, before the store is touched. Scope-wide calls need a grant of
     ``<scope pattern>/*``; store-wide ones (and the store's status) ``*``.
  3. Lists (scopes, streams, reader groups) are filtered to what the token may read.

Thread-safety: immutable values; safe to share.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import os
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidConfigurationError, PermissionDeniedError

__all__ = ["Grants", "TokenTable", "load_tokens", "FULL", "LEVELS"]

LEVELS = {"read": 1, "write": 2, "admin": 3}
TOKEN_MAX = 1024  # as the HELLO's cap


@dataclass(frozen=True, slots=True)
class Grants:
    """What one token may do: ``(level, pattern)`` pairs, and the token's name for logs."""

    name: str
    grants: tuple[tuple[int, str], ...]

    def allows(self, permission: str, resource: str) -> bool:
        """Whether ``permission`` on ``resource`` (``scope/stream``, ``scope/*`` or ``*``) is
        granted."""
        need = LEVELS[permission]
        for level, pattern in self.grants:
            if level >= need and (pattern == "*" or fnmatch.fnmatchcase(resource, pattern)):
                return True
        return False

    def check(self, permission: str, resource: str, what: str) -> None:
        """Invariant 2."""
        if not self.allows(permission, resource):
            raise PermissionDeniedError(
                f"{what} needs {permission} on {resource!r}, which token {self.name!r} is not "
                f"granted: add a grant such as \"{permission}:{resource}\" to it in the token file")

    def check_scope(self, permission: str, scope: str, what: str) -> None:
        """A scope-wide call: a grant of ``scope/*`` exactly (its stream part a bare ``*``) or
        of everything; a pattern that only looks like it (``iot/?``) does not count."""
        need = LEVELS[permission]
        for level, pattern in self.grants:
            head, _, tail = pattern.partition("/")
            if level >= need and (pattern == "*" or (tail == "*" and fnmatch.fnmatchcase(scope, head))):
                return
        raise PermissionDeniedError(
            f"{what} needs {permission} on all of scope {scope!r}, which token {self.name!r} is not "
            f"granted: add a grant such as \"{permission}:{scope}/*\" to it in the token file")

    def check_store(self, permission: str, what: str) -> None:
        """A store-wide call: a grant of everything (``*``)."""
        if not any(level >= LEVELS[permission] and pattern == "*" for level, pattern in self.grants):
            raise PermissionDeniedError(
                f"{what} needs {permission} on the whole store, which token {self.name!r} is not "
                f"granted: add the grant \"{permission}:*\" to it in the token file")

    def readable_scope(self, scope: str) -> bool:
        """True if some stream of ``scope`` may be read (invariant 3)."""
        return any(p == "*" or fnmatch.fnmatchcase(scope, p.split("/", 1)[0]) for _, p in self.grants)


FULL = Grants("(same user on the unix socket)", ((LEVELS["admin"], "*"),))


class TokenTable:
    """Tokens and their grants (invariant 1)."""

    def __init__(self, entries: Iterable[tuple[bytes, Grants]]) -> None:
        self._entries = tuple(entries)  # (sha256 digest, grants)
        if not self._entries:
            raise InvalidConfigurationError("a token table needs at least one token")

    def lookup(self, token: bytes) -> Grants | None:
        """The grants of ``token``, or None. Compares with every entry (invariant 1)."""
        digest = hashlib.sha256(token).digest()
        found = None
        for known, grants in self._entries:
            if hmac.compare_digest(digest, known) and token:
                found = grants
        return found

    @classmethod
    def of(cls, tokens: dict[str, list[str]]) -> "TokenTable":
        """From ``{secret: [grant, ...]}`` (tests, embedding)."""
        return cls((hashlib.sha256(secret.encode()).digest(), _grants(f"token {i}", spec))
                   for i, (secret, spec) in enumerate(tokens.items()))


def load_tokens(path: "str | os.PathLike[str]") -> TokenTable:
    """Read a token file (the module's format); InvalidConfigurationError naming the entry
    for anything wrong in it."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise InvalidConfigurationError(f"cannot read token file {os.fspath(path)!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidConfigurationError(f"token file {os.fspath(path)!r} is not TOML: {exc}") from None
    tokens = doc.get("token")
    if not isinstance(tokens, list) or not tokens:
        raise InvalidConfigurationError(f"token file {os.fspath(path)!r} has no [[token]] entries")
    entries = []
    for i, t in enumerate(tokens):
        name = t.get("name", f"#{i + 1}") if isinstance(t, dict) else f"#{i + 1}"
        if not isinstance(t, dict) or not isinstance(name, str):
            raise InvalidConfigurationError(f"token entry #{i + 1} is not a table with a name")
        secret, digest = t.get("secret"), t.get("sha256")
        if isinstance(secret, str) and digest is None:
            if not 16 <= len(secret.encode()) <= TOKEN_MAX:
                raise InvalidConfigurationError(f"token {name!r}: a secret is 16..{TOKEN_MAX} bytes")
            raw = hashlib.sha256(secret.encode()).digest()
        elif isinstance(digest, str) and secret is None:
            try:
                raw = bytes.fromhex(digest)
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise InvalidConfigurationError(f"token {name!r}: sha256 is 64 hex digits")
        else:
            raise InvalidConfigurationError(f"token {name!r}: give exactly one of secret and sha256")
        entries.append((raw, _grants(name, t.get("grants"))))
    return TokenTable(entries)


def _grants(name: str, spec: object) -> Grants:
    if not isinstance(spec, list) or not spec:
        raise InvalidConfigurationError(f"token {name!r}: grants is a list such as [\"read:iot/*\"]")
    out = []
    for g in spec:
        perm, _, pattern = g.partition(":") if isinstance(g, str) else ("", "", "")
        if perm not in LEVELS or not pattern or (pattern != "*" and "/" not in pattern):
            raise InvalidConfigurationError(
                f"token {name!r}: grant {g!r} is not <read|write|admin>:<scope/stream pattern or *>")
        out.append((LEVELS[perm], pattern))
    return Grants(name, tuple(out))
