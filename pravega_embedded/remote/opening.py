"""``pe.open``: open a store directory as its owner, or, when another process owns it, as a
client of that owner (docs/multiprocess.md).

Invariants:
  1. Whoever holds the store lock is the owner; every other ``open`` of the directory connects
     to it, unless ``exclusive=True``, which raises StoreLockedError instead.
  2. The owner may hold the lock a moment before it serves: ``open`` retries the connection
     until ``connect_timeout``, and takes the store itself if the owner went away meanwhile.
  3. A client uses the owner's options (durability, tiering, ...): the options given here
     apply only if this call becomes the owner.

Thread-safety: a function; safe from any thread.
"""

from __future__ import annotations

import os
import time

from ..errors import ConnectionLostError, StoreLockedError
from ..store import Store
from .client import RemoteStore, connect_local

__all__ = ["open"]


def open(path: "str | os.PathLike[str]" = "./data", durability: str = "fsync", *,  # noqa: A001
         exclusive: bool = False, connect_timeout: float = 10.0, **options: object) -> "Store | RemoteStore":
    """Open (creating if needed) the store in directory ``path``.

    durability: "fsync" (default; acknowledged after fdatasync, with group commit), "os"
    (acknowledged once in the OS page cache; fdatasynced at checkpoints) or "none" (tests only).

    If another process has the store open, this returns a ``RemoteStore`` connected to it,
    with the same API (invariant 1); ``exclusive=True`` raises StoreLockedError instead.
    """
    path = os.fspath(path)
    deadline = time.monotonic() + connect_timeout
    while True:
        try:
            return Store(path, durability, **options)  # type: ignore[arg-type]
        except StoreLockedError:
            if exclusive:
                raise
        try:
            return connect_local(path, min(deadline, time.monotonic() + 0.5))
        except ConnectionLostError:
            if time.monotonic() >= deadline:  # held, but not served (serve=False)
                raise StoreLockedError(
                    f"store {os.path.abspath(path)} is held by another process that does not "
                    f"serve it (opened with serve=False, or still starting after "
                    f"{connect_timeout} s)", path=os.path.abspath(path)) from None
            # the owner may have gone: try to take the store (invariant 2)
