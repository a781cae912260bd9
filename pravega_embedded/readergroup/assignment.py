"""Segment assignment: which segments a reader should release or acquire.

Owns: the balancing rule, as a pure function of the group state (docs/reader-groups.md,
"Balancing").

With ``R`` readers in the group and ``T`` segments still to read (held by readers or
unassigned; completed ones do not count), a fair share is ``lo = T // R`` or ``hi = ceil(T / R)``
segments. Each reader applies the rule to the freshest state whenever the state changes:

  1. holding more than ``hi``: release the excess;
  2. holding more than ``lo`` while the other readers below ``lo`` need more segments than are
     unassigned or about to be (the excess other readers hold above ``hi``, which rule 1 makes
     them release): release what is still lacking (at most down to ``lo``);
  3. holding fewer than ``lo``: acquire up to ``lo`` from the unassigned segments;
  4. then, holding fewer than ``hi``: acquire one more only from unassigned segments that no
     reader below ``lo`` needs.

Invariants:
  1. At a fixed point every reader holds ``lo`` or ``hi`` segments and nothing is unassigned
     (when ``R >= 1``); at most ``T % R`` readers hold ``hi``.
  2. A segment is released only when no other supply covers the readers below ``lo``, so a
     join moves each segment once (no release that is then taken back).
  3. The rule never moves a segment between two readers directly: a release puts it in
     ``unassigned`` at the releasing reader's position, an acquire takes it from there.
  4. Choices are deterministic (sorted keys): released are the reader's last segments in key
     order, acquired the first unassigned ones.

Thread-safety: pure functions.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plan"]


def plan(s: dict[str, Any], rid: str) -> tuple[list[str], list[str]]:
    """(segments ``rid`` should release, segments it should acquire) under the state ``s``."""
    readers = s["readers"]
    if rid not in readers:
        return [], []
    held = {r: len(v["segments"]) for r, v in readers.items()}
    unassigned = sorted(s["unassigned"])
    total = sum(held.values()) + len(unassigned)
    n = len(readers)
    if total == 0:
        return [], []
    lo, hi = total // n, -(-total // n)
    h = held[rid]
    mine = sorted(readers[rid]["segments"])
    deficit = sum(max(0, lo - c) for r, c in held.items() if r != rid)
    if h > hi:
        return mine[hi:], []
    coming = len(unassigned) + sum(max(0, c - hi) for r, c in held.items() if r != rid)
    if h > lo and deficit > coming:
        k = min(h - lo, deficit - coming)
        return mine[h - k:], []
    take = min(max(0, lo - h), len(unassigned))
    spare = len(unassigned) - take - deficit
    if h + take < hi and spare > 0:
        take += min(hi - h - take, spare)
    return [], unassigned[:take]
