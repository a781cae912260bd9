"""The group's frontier across scalings (state invariant 6): a successor enters ``unassigned``
once, even when a predecessor waits in ``completed`` for another of its successors."""

from __future__ import annotations

from dataclasses import dataclass

from pravega_embedded.readergroup.state import advance

STREAM = "s/t"


@dataclass(frozen=True)
class Seg:
    length: int
    preds: tuple[int, ...] = ()
    succs: tuple[int, ...] = ()
    sealed: bool = True


def key(sid: int) -> str:
    return f"{STREAM}/{sid}"


def test_a_completed_successor_is_not_placed_again_while_its_predecessor_waits():
    # 0 [0, .5) and 1 [.5, 1) were sealed into 2 [0, .25) and 3 [.25, 1); then 2 was split into
    # 4 and 5. 0 stays in completed until 3 is placed, which waits for 1 (still being read).
    segs = {
        0: Seg(100, succs=(2, 3)), 1: Seg(100, succs=(3,)),
        2: Seg(50, preds=(0,), succs=(4, 5)), 3: Seg(0, preds=(0, 1), sealed=False),
        4: Seg(0, preds=(2,), sealed=False), 5: Seg(0, preds=(2,), sealed=False),
    }
    s = {"unassigned": {}, "completed": {key(0): 100},
         "readers": {"slow": {"segments": {key(1): 10}}, "fast": {"segments": {}}}}
    of = {STREAM: segs}.get
    assert advance(s, of) and s["unassigned"] == {key(2): 0}
    # the fast reader reads 2 to its end
    s["readers"]["fast"]["segments"][key(2)] = s["unassigned"].pop(key(2))
    del s["readers"]["fast"]["segments"][key(2)]
    s["completed"][key(2)] = 50
    for _ in range(3):  # every later update of the group advances again
        advance(s, of)
    assert s["unassigned"] == {key(4): 0, key(5): 0}  # 2 is not handed out again
    assert key(2) in s["completed"]
    # the slow reader finishes 1: 3 is placed, and everything before the frontier leaves
    del s["readers"]["slow"]["segments"][key(1)]
    s["completed"][key(1)] = 100
    for _ in range(3):
        advance(s, of)
    assert s["unassigned"] == {key(3): 0, key(4): 0, key(5): 0}
    assert s["completed"] == {}
