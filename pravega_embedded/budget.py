"""The local budget: back-pressure on writers while the journal kept on local disk is too large.

Owns: measuring the journal's bytes on local disk, making appends of new data wait while they
reach ``local_budget`` (``pe.open(local_budget=...)``: tier 2 down or slower than ingest), and
raising ``LocalBudgetError`` once a wait outlasts ``local_budget_timeout``.

Invariants:
  1. Appends of new data (writer batches, large events, transactions' staged events, byte
     stream writes) are admitted only while the journal's local bytes are under the budget;
     appends that only reference data already written (commit and MERGE records) are not
     held, so a commit never waits on its own staged data.
  2. A wait ends when the bytes fall under the budget (``released`` after a reclaim, or a poll
     every ``POLL_S``), when the store fails (the latch's error), or at the timeout
     (LocalBudgetError: nothing of the batch was written; a writer keeps it and its next flush
     or write tries again). Nothing acknowledged is ever dropped.
  3. Once the store's close begins (``lift``) nothing waits: the close writes what its writers
     hold over the budget (at most a batch each) instead of hanging or dropping it. Nor does
     any append while a ``suspended()`` block runs (a writer's close; a seal's flush of the
     stream's writers, which holds the engine's lock the tierer needs to free space and waits
     for the writers' own appends): they go in over the budget, a batch per writer at most.
  4. Local bytes = the sizes of the rolled journal files still on disk + the bytes written to
     the current one; a file's size is read once, when it is seen rolled.

Thread-safety: ``admit`` from any thread holding no engine lock; ``released`` and
``local_bytes`` from any thread. ``_lock`` guards the waiters and the file sizes.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from .errors import LocalBudgetError

if TYPE_CHECKING:
    from .failstop import FailStop
    from .journal import Journal

__all__ = ["LocalBudget", "POLL_S"]

POLL_S = 0.25  # a waiting writer looks again this often even when no reclaim told it


class LocalBudget:
    """Back-pressure on appends while the local journal is over ``limit`` bytes (module
    docstring)."""

    def __init__(self, path: str, journal: "Journal", latch: "FailStop", limit: int,
                 timeout: float) -> None:
        self._path = path
        self._journal = journal
        self._latch = latch
        self.limit = limit
        self.timeout = timeout
        self._cond = threading.Condition(threading.Lock())
        self._sizes: dict[int, int] = {}  # rolled file base -> size (invariant 4)
        self._rolled = 0  # their sum
        self._current = -1  # base of the file being written when the sizes were read
        self.waiting = 0  # appends waiting now
        self.waits = 0  # appends that ever waited
        self.on_pressure: Callable[[], None] = lambda: None  # tells the tierer to hurry
        self.lifted = False  # invariant 3
        self._suspended = 0  # suspended() blocks running: nothing waits meanwhile
        self._gen = 0  # bumped by ``released``: a refresh that raced a reclaim is not trusted

    # ------------------------------------------------------------------ measuring
    def local_bytes(self) -> int:
        """The journal's bytes on local disk now (invariant 4)."""
        st = self._journal.status()
        if st.file_base != self._current:
            self._refresh(st.file_base)
        return self._rolled + st.written - st.file_base

    def _refresh(self, current: int) -> None:
        """A roll happened (or the first look): read the sizes of the files rolled since."""
        gen = self._gen
        bases = self._journal.files()
        with self._cond:
            for base in bases:
                if base < current and base not in self._sizes:
                    try:
                        self._sizes[base] = os.path.getsize(self._journal.path(base))
                    except FileNotFoundError:
                        continue  # reclaimed meanwhile
            for base in [b for b in self._sizes if b not in bases]:
                del self._sizes[base]
            self._rolled = sum(self._sizes.values())
            # a reclaim between the listing and here: look again next time
            self._current = current if gen == self._gen else -1

    def pressure(self) -> bool:
        """Whether the local journal is past half the budget: the tierer copies everything
        untiered then, not only what is due."""
        return self.local_bytes() * 2 >= self.limit

    def blocked(self) -> bool:
        """Whether new appends wait now."""
        return self.waiting > 0 or self.local_bytes() >= self.limit

    # ------------------------------------------------------------------ waiting
    def admit(self, what: str) -> None:
        """Return once ``what`` may append (invariants 1, 2)."""
        if self.lifted or self._suspended or self.local_bytes() < self.limit:
            return
        deadline = time.monotonic() + self.timeout
        with self._cond:
            self.waiting += 1
            self.waits += 1
        try:
            while True:
                self.on_pressure()
                if self.lifted or self._suspended:
                    return  # invariant 3
                if self._latch.failed:
                    raise self._latch.fresh()
                used = self.local_bytes()
                if used < self.limit:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LocalBudgetError(
                        f"{what}: the local journal of store {self._path} holds {used:,} bytes, "
                        f"at its local_budget of {self.limit:,}, and tier 2 did not take enough of "
                        f"it within {self.timeout:g} s (see store.tiering_status() for why); "
                        "nothing of this batch was written: a writer keeps it and its next flush "
                        "or write tries again")
                with self._cond:
                    self._cond.wait(min(left, POLL_S))
        finally:
            with self._cond:
                self.waiting -= 1

    def released(self) -> None:
        """Journal files were deleted: wake the waiting appends to look again."""
        with self._cond:
            self._gen += 1
            self._current = -1  # re-read which files are left
            self._cond.notify_all()

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """No append waits while the block runs; waiting ones go on (invariant 3)."""
        with self._cond:
            self._suspended += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._suspended -= 1

    def lift(self) -> None:
        """The store's close begins: nothing waits from now on (invariant 3). Idempotent."""
        self.lifted = True
        self.released()
