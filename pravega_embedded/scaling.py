"""Scaling: sealing segments and creating their successors, by hand or by load.

Owns: the atomic scale commit (``commit_scale``), the choice of equal ranges for a fixed count
(``rescale_ranges``), the per-segment rate meters and the auto-scaling rule (``AutoScaler``).

The auto-scaling rule (Pravega's, with its four windows; docs/scaling.md). Every segment has
four exponentially weighted rates ``r[0..3]`` with time constants ``windows`` (default 2, 5,
10 and 20 minutes), of events/s (``by_event_rate``) or KiB/s (``by_data_rate``), corrected for
starting at 0 (divided by ``1 - exp(-age/w)``, so a new segment's steady rate reads true and a
split load is not mistaken for a lull). With target
``T``, a segment older than the cooldown is

- **hot** if ``r0 > 5T`` (age > w0) or ``r1 > 2T`` (age > w1) or ``r2 > T`` (age > w2): it is
  split into ``scale_factor`` successors with equal key sub-ranges (never past 1024 segments);
- **cold** if ``r0, r1, r2 < T`` and ``r3 < T/2`` (age > w3): two cold neighbours (adjacent key
  ranges) are merged into one, never below ``min_segments``.

All splits and merges found in one check are one scale (one new epoch).

Invariants:
  1. A scale is one LMDB transaction committed under the store's append lock after the journal
     is durable: after a crash the stream is in the old epoch or the new one, never between.
     No append reaches a segment after it is sealed in memory; writers whose batch was routed
     to it re-route under the same lock.
  2. The new ranges cover exactly the sealed ranges (``topology.check_scale``); a successor's
     predecessors are the sealed segments its range overlaps.

Thread-safety: ``commit_scale`` is called with the store's topology lock held; ``AutoScaler.tick``
runs on the store's maintenance thread.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from .config import MAX_SEGMENTS
from .errors import InvalidConfigurationError, StreamNotFoundError, StreamSealedError
from .routing import equal_ranges
from .segment import Segment
from .streamcut import segment_id
from .topology import check_scale

if TYPE_CHECKING:
    from .engine import Engine
    from .stream import StreamState

__all__ = ["commit_scale", "rescale_ranges", "AutoScaler", "ScaleDecision", "DEFAULT_WINDOWS"]

DEFAULT_WINDOWS = (120.0, 300.0, 600.0, 1200.0)


def commit_scale(engine: "Engine", st: "StreamState", seal: Sequence[int],
                 new_ranges: Sequence[tuple[float, float]], *, check_min: bool = True) -> list[int]:
    """Seal ``seal`` and create successors with ``new_ranges`` atomically (invariant 1).
    Returns the new segment ids in key order. Caller holds the engine's topology lock."""
    if st.deleted:
        raise StreamNotFoundError(f"stream {st.key} was deleted")
    if st.sealed:
        raise StreamSealedError(f"stream {st.key} is sealed; it cannot scale")
    open_map = {s.segment_id: s for s in st.open_segments}
    ranges = check_scale(open_map, seal, new_ranges, st.key)
    after = len(open_map) - len(seal) + len(ranges)
    minimum = st.config.scaling.min_segments
    if check_min and after < minimum:
        raise InvalidConfigurationError(
            f"scale {st.key}: {after} segments would be fewer than the policy's min_segments "
            f"({minimum})"
        )
    if after > MAX_SEGMENTS:
        raise InvalidConfigurationError(f"scale {st.key}: {after} segments is over the limit of {MAX_SEGMENTS}")
    sealed = [open_map[s] for s in seal]
    epoch = st.epoch + 1
    now = time.time_ns()
    meta = engine.meta
    with engine.append_lock:
        for seg in sealed:
            seg.sealed = True
            seg.sealed_epoch = epoch
        try:
            engine.sync_all(f"scale {st.key}")
            with meta.write(f"scale {st.key}") as txn:
                uids = meta.allocate_uids(txn, len(ranges))
                new = []
                for i, (uid, (lo, hi)) in enumerate(zip(uids, ranges)):
                    preds = tuple(sorted(s.segment_id for s in sealed if s.low < hi and lo < s.high))
                    new.append(Segment(uid, segment_id(st.next_number + i, epoch), lo, hi, 0, False, st,
                                       preds=preds, created_ns=now))
                for seg in sealed:
                    meta.put_segment(txn, seg.uid, seg.record())
                for seg in new:
                    meta.put_segment(txn, seg.uid, seg.record())
                rec = st.record()
                rec["epochs"].append([epoch, now])
                rec["next_number"] = st.next_number + len(ranges)
                rec["head"].update({str(seg.segment_id): 0 for seg in new})
                meta.put_stream(txn, st.key, rec)
        except BaseException:
            for seg in sealed:
                seg.sealed = False
                seg.sealed_epoch = None
            raise
        st.next_number += len(ranges)
        st.scaled(sealed, new, epoch, now)
        for seg in new:
            engine.segments[seg.uid] = seg
    st.notify()
    engine.on_scaled(st)
    return [s.segment_id for s in new]


def rescale_ranges(st: "StreamState", n: int) -> tuple[list[int], list[tuple[float, float]]] | None:
    """(seal, ranges) that turn the stream's open segments into ``n`` equal ranges, or None if
    they already are those."""
    ranges = equal_ranges(n)
    current = [(s.low, s.high) for s in st.open_segments]
    if current == ranges:
        return None
    return [s.segment_id for s in st.open_segments], ranges


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """What one auto-scaling check decided for a stream."""

    seal: tuple[int, ...]
    ranges: tuple[tuple[float, float], ...]
    splits: int
    merges: int


class _Meter:
    """Four exponentially weighted rates of one segment (events/s and bytes/s)."""

    __slots__ = ("t0", "t", "events", "bytes", "ev_rates", "by_rates")

    def __init__(self, now: float, seg: Segment) -> None:
        self.t0 = self.t = now
        self.events, self.bytes = seg.events_in, seg.bytes_in
        self.ev_rates = [0.0, 0.0, 0.0, 0.0]
        self.by_rates = [0.0, 0.0, 0.0, 0.0]

    def corrected(self, rates: list[float], windows: Sequence[float]) -> tuple[float, ...]:
        """The rates without the bias of starting at 0: a meter of age ``a`` has seen only
        ``1 - exp(-a/w)`` of its window, so a steady rate reads that fraction of its value."""
        age = self.t - self.t0
        if age <= 0:
            return tuple(0.0 for _ in rates)
        return tuple(r / (1.0 - math.exp(-age / w)) for r, w in zip(rates, windows))

    def sample(self, now: float, seg: Segment, windows: Sequence[float]) -> None:
        dt = now - self.t
        if dt <= 0:
            return
        ev = (seg.events_in - self.events) / dt
        by = (seg.bytes_in - self.bytes) / dt
        self.t, self.events, self.bytes = now, seg.events_in, seg.bytes_in
        for i, w in enumerate(windows):
            a = 1.0 - math.exp(-dt / w)
            self.ev_rates[i] += a * (ev - self.ev_rates[i])
            self.by_rates[i] += a * (by - self.by_rates[i])


class AutoScaler:
    """Meters every open segment of streams with a rate policy and applies the rule (module
    docstring) on each ``tick``."""

    def __init__(self, engine: "Engine", windows: Sequence[float], cooldown: float) -> None:
        if (not isinstance(windows, (tuple, list)) or len(windows) != 4
                or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in windows)):
            raise InvalidConfigurationError(f"scale_windows must be 4 positive numbers of seconds, got {windows!r}")
        if isinstance(cooldown, bool) or not isinstance(cooldown, (int, float)) or cooldown < 0:
            raise InvalidConfigurationError(f"scale_cooldown must be a number of seconds >= 0, got {cooldown!r}")
        self.engine = engine
        self.windows = tuple(float(w) for w in windows)
        self.cooldown = float(cooldown)
        self._meters: dict[int, _Meter] = {}

    def rates(self, seg: Segment) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """(events/s, bytes/s) over the four windows of an open, metered segment."""
        m = self._meters.get(seg.uid)
        if m is None:
            return None
        return m.corrected(m.ev_rates, self.windows), m.corrected(m.by_rates, self.windows)

    def tick(self) -> None:
        now = time.monotonic()
        live = set()
        for st in list(self.engine.streams.values()):
            policy = st.config.scaling
            if policy.kind == "fixed" or st.sealed or st.deleted:
                continue
            for seg in st.open_segments:
                live.add(seg.uid)
                m = self._meters.get(seg.uid)
                if m is None:
                    self._meters[seg.uid] = _Meter(now, seg)
                else:
                    m.sample(now, seg, self.windows)
            decision = self.decide(st, now)
            if decision is not None:
                with self.engine.lock:
                    if self.engine.closed or st.deleted or st.sealed:
                        continue
                    try:
                        commit_scale(self.engine, st, decision.seal, decision.ranges)
                    except (InvalidConfigurationError, StreamSealedError, StreamNotFoundError):
                        continue  # the topology changed under the decision: decide again next tick
        for uid in [u for u in self._meters if u not in live]:
            del self._meters[uid]

    def decide(self, st: "StreamState", now: float) -> ScaleDecision | None:
        """The splits and merges the rule asks for on ``st`` now, as one scale, or None."""
        policy = st.config.scaling
        target = policy.target_rate if policy.kind == "event_rate" else policy.target_kib_per_s * 1024.0
        w = self.windows
        segs = list(st.open_segments)
        states = []
        for seg in segs:
            m = self._meters.get(seg.uid)
            age = 0.0 if m is None else now - m.t0
            if m is None or age < self.cooldown:
                states.append("young")
                continue
            r = m.corrected(m.ev_rates if policy.kind == "event_rate" else m.by_rates, w)
            if (age > w[0] and r[0] > 5 * target) or (age > w[1] and r[1] > 2 * target) \
                    or (age > w[2] and r[2] > target):
                states.append("hot")
            elif age > w[3] and r[0] < target and r[1] < target and r[2] < target and r[3] < target / 2:
                states.append("cold")
            else:
                states.append("ok")
        seal: list[int] = []
        ranges: list[tuple[float, float]] = []
        count = len(segs)
        splits = merges = 0
        factor = policy.scale_factor
        for seg, state in zip(segs, states):
            if state == "hot" and count + factor - 1 <= MAX_SEGMENTS:
                seal.append(seg.segment_id)
                ranges += equal_ranges(factor, seg.low, seg.high)
                count += factor - 1
                splits += 1
        i = 0
        while i + 1 < len(segs):
            a, b = segs[i], segs[i + 1]
            if states[i] == "cold" and states[i + 1] == "cold" and a.high == b.low \
                    and count - 1 >= policy.min_segments:
                seal += [a.segment_id, b.segment_id]
                ranges.append((a.low, b.high))
                count -= 1
                merges += 1
                i += 2
            else:
                i += 1
        if not seal:
            return None
        return ScaleDecision(tuple(seal), tuple(ranges), splits, merges)
