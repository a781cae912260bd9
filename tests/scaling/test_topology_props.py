"""Property tests of the segment graph algebra (pravega_embedded.topology) on random scaling
histories: a position survives the round trip frontier <-> full map, every frontier is a valid
StreamCut covering the key space, min/max of positions are positions, and check_cut rejects
what is not a position with InvalidStreamCutError only."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pravega_embedded.errors import InvalidConfigurationError, InvalidStreamCutError
from pravega_embedded.topology import (
    check_cut,
    check_scale,
    expand,
    frontier,
    lower_bound,
    union,
    upper_bound,
)


class Seg:
    def __init__(self, sid, low, high, preds=()):
        self.segment_id, self.low, self.high, self.preds = sid, low, high, tuple(preds)
        self.succs = ()
        self.sealed = False
        self.length = 0
        self.name = f"seg{sid}"


def history(rnd: random.Random, scalings: int) -> dict[int, Seg]:
    """A stream scaled ``scalings`` times: random runs of adjacent open segments replaced by
    1-3 successors covering exactly their union (what check_scale accepts)."""
    segs = {0: Seg(0, 0.0, 1.0)}
    number = 1
    for epoch in range(1, scalings + 1):
        open_ = sorted((s for s in segs.values() if not s.sealed), key=lambda s: s.low)
        i = rnd.randrange(len(open_))
        run = open_[i : i + rnd.randint(1, 3)]
        lo, hi = run[0].low, run[-1].high
        cuts = sorted(rnd.sample([lo + (hi - lo) * k / 8 for k in range(1, 8)], rnd.randint(0, 2)))
        bounds = [lo, *cuts, hi]
        ranges = list(zip(bounds, bounds[1:]))
        if len(ranges) == 1 and len(run) == 1:
            ranges = [(lo, (lo + hi) / 2), ((lo + hi) / 2, hi)]
        assert check_scale({s.segment_id: s for s in open_}, [s.segment_id for s in run], ranges, "t") == ranges
        for s in run:
            s.sealed = True
            s.length = rnd.choice([0, 1, 5, 9])
        for a, b in ranges:
            sid = (epoch << 32) | number
            number += 1
            preds = [s.segment_id for s in run if s.low < b and a < s.high]
            segs[sid] = Seg(sid, a, b, preds)
            for p in preds:
                segs[p].succs = tuple(sorted(segs[p].succs + (sid,)))
    stream_sealed = rnd.random() < 0.3  # seal_stream: the last segments are sealed, no successors
    for s in segs.values():
        if not s.sealed:
            s.length = rnd.choice([0, 3, 10])
            s.sealed = stream_sealed
    return segs


def position(rnd: random.Random, segs: dict[int, Seg]) -> dict[int, int]:
    """A random consistent full map: a segment has an offset > 0 only when every predecessor
    (recursively) is read to its end."""
    full, complete = {}, {}
    for sid in sorted(segs):
        s = segs[sid]
        ok = all(complete[p] for p in s.preds)
        full[sid] = rnd.randint(0, s.length) if ok and rnd.random() < 0.8 else (s.length if ok and rnd.random() < 0.5 else 0)
        complete[sid] = ok and full[sid] == s.length
    return full


def consistent(segs, full) -> bool:
    complete = {}
    for sid in sorted(segs):
        s = segs[sid]
        ok = all(complete[p] for p in s.preds)
        if full[sid] > 0 and not ok:
            return False
        complete[sid] = ok and full[sid] >= s.length
    return True


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 12))
def test_round_trip_and_validity(seed, scalings):
    rnd = random.Random(seed)
    segs = history(rnd, scalings)
    full = position(rnd, segs)
    assert consistent(segs, full)
    front = frontier(segs, full)
    assert front, "a frontier is never empty"
    assert union((segs[s].low, segs[s].high) for s in front) == [(0.0, 1.0)]
    assert expand(segs, front) == full
    assert check_cut(segs, front, "t", "s/x") == full
    other = position(rnd, segs)
    for m in (lower_bound(full, other), upper_bound(full, other)):
        assert consistent(segs, m)
        assert expand(segs, frontier(segs, m)) == m


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 10), st.data())
def test_check_cut_rejects_damaged_cuts_cleanly(seed, scalings, data):
    rnd = random.Random(seed)
    segs = history(rnd, scalings)
    front = frontier(segs, position(rnd, segs))
    bad = dict(front)
    how = data.draw(st.sampled_from(["drop", "unknown", "offset", "ancestor", "random"]))
    if how == "drop" and len(bad) > 1:
        bad.pop(next(iter(bad)))
    elif how == "unknown":
        bad[(99 << 32) | 7] = 0
    elif how == "offset":
        sid = next(iter(bad))
        bad[sid] = segs[sid].length + data.draw(st.integers(1, 100))
    elif how == "ancestor":
        for sid in list(bad):
            for p in segs[sid].preds:
                bad[p] = data.draw(st.integers(0, segs[p].length))
    else:
        bad = {data.draw(st.sampled_from(sorted(segs))): data.draw(st.integers(0, 12))
               for _ in range(data.draw(st.integers(1, 5)))}
    try:
        full = check_cut(segs, bad, "t", "s/x")
    except InvalidStreamCutError:
        return
    # accepted: then it must be a real position
    assert consistent(segs, full)
    assert union((segs[s].low, segs[s].high) for s in bad) == [(0.0, 1.0)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.5, 1.5), st.floats(-0.5, 1.5)), min_size=0, max_size=4),
       st.lists(st.integers(-2, 4), min_size=0, max_size=3))
def test_check_scale_accepts_only_exact_covers(ranges, seal):
    open_ = {i: Seg(i, i / 4, (i + 1) / 4) for i in range(4)}
    try:
        got = check_scale(open_, seal, ranges, "s/x")
    except InvalidConfigurationError:
        return
    assert len(set(seal)) == len(seal) and all(s in open_ for s in seal)
    assert union(got) == union((open_[s].low, open_[s].high) for s in seal)
    assert all(0 <= a < b <= 1 for a, b in got)
