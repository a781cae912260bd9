"""StreamCut: text form, garbage text, partial order, and validation against a stream."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.streamcut import segment_id

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,20}", fullmatch=True)
u32 = st.integers(0, 2**32 - 1)
offsets = st.integers(0, 2**63 - 1)
positions = st.dictionaries(st.builds(segment_id, u32, u32), offsets, min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(names, names, positions)
def test_text_round_trip(scope, stream, pos):
    cut = pe.StreamCut.of(scope, stream, pos)
    text = cut.to_text()
    assert text.startswith(f"pe1:{scope}/{stream}:")
    back = pe.StreamCut.from_text(text)
    assert back == cut and back.to_text() == text and hash(back) == hash(cut)
    assert back.as_dict() == pos and str(back) == text


def test_epochs_in_the_text_form():
    cut = pe.StreamCut.of("s", "t", {segment_id(0): 5, segment_id(3, 2): 7, segment_id(2**32 - 1, 2**32 - 1): 0})
    assert cut.to_text() == "pe1:s/t:0=5,3#2=7,4294967295#4294967295=0"
    assert pe.StreamCut.from_text("pe1:s/t:3#2=7,0=5").as_dict() == {0: 5, (2 << 32) | 3: 7}


def test_unbounded():
    u = pe.StreamCut.UNBOUNDED
    assert u.to_text() == "UNBOUNDED" and pe.StreamCut.from_text("UNBOUNDED") is u
    assert u.is_unbounded and u.as_dict() == {} and u == pe.StreamCut()
    with pytest.raises(errors.InvalidStreamCutError):
        _ = u <= pe.StreamCut.of("s", "t", {0: 0})


GARBAGE = [
    "", " ", "pe1:", "pe1:a/b:", "pe1:a/b:0=", "pe1:a/b:=1", "pe1:a/b:0=-1", "pe1:a/b:-1=0",
    "pe1:a/b:x=1", "pe1:a/b:0=x", "pe1:../b:0=1", "pe1:a/..:0=1", "pe1:./b:0=1", "pe1:_a/b:0=1",
    "pe1:-a/b:0=1", "pe1:a/b/c:0=1", "pe1:a:0=1", "pe1:/b:0=1", "pe1:a/:0=1", "pe1:a/b:0=1,",
    "pe1:a/b:,0=1", "pe1:a/b:0=1,,1=2", "pe1:a/b:0=1,0=2", "pe1:a/b:1=1,0=1,1=3",
    "pe1:a/b:0=1,0#0=2", "pe1:a/b:0=9223372036854775808", "pe1:a/b:0=99999999999999999999",
    "pe1:a/b:0=" + "9" * 40, "pe1:a/b:4294967296=0", "pe1:a/b:0#4294967296=0", "pe1:a/b:" + "9" * 40 + "=0",
    "pe1:a/b:0#=1", "pe1:a/b:#1=1", "pe1:a/b:0##1=1", "pe1:a/b:0=1;1=2", "pe1:a/b:0 = 1", "pe1:a/b:0=1 ",
    " pe1:a/b:0=1", "pe1:a/b:0=1\n", "pe2:a/b:0=1", "PE1:a/b:0=1", "pe1:a/b:0=1.5", "pe1:a/b:0=1e3",
    "pe1:a/b:٠=1", "pe1:a/b:0=١", "pe1:é/b:0=1", "pe1:a b/c:0=1", "unbounded", "UNBOUNDED ", "None",
    "pe1:" + "a" * 256 + "/b:0=1", "pe1:a/b:" + ",".join(f"{i}=0" for i in range(5000)),
]


@pytest.mark.parametrize("text", GARBAGE, ids=lambda t: repr(t)[:40])
def test_garbage_text_is_refused(text):
    with pytest.raises(errors.InvalidStreamCutError) as info:
        pe.StreamCut.from_text(text)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("bad", [None, b"pe1:a/b:0=1", 5, 1.0, ["pe1:a/b:0=1"], pe.StreamCut.UNBOUNDED],
                         ids=repr)
def test_non_str_text_is_refused(bad):
    with pytest.raises(errors.InvalidStreamCutError):
        pe.StreamCut.from_text(bad)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=80),
                 st.text(alphabet="pe1:ab/09#=,-.UNBOD ", max_size=60),
                 st.builds(lambda t: "pe1:a/b:" + t, st.text(alphabet="0123456789#=,-x", max_size=40))))
def test_random_text_is_a_cut_or_refused(text):
    try:
        cut = pe.StreamCut.from_text(text)
    except errors.InvalidStreamCutError:
        return
    # anything accepted is a valid cut whose canonical text parses back to it
    assert isinstance(cut, pe.StreamCut)
    assert pe.StreamCut.from_text(cut.to_text()) == cut


@pytest.mark.parametrize("kw", [
    dict(scope="a", stream="b", positions=()),
    dict(scope="a", stream="b", positions=((0, -1),)),
    dict(scope="a", stream="b", positions=((0, 2**63),)),
    dict(scope="a", stream="b", positions=((1, 0), (0, 0))),
    dict(scope="a", stream="b", positions=((0, 0), (0, 1))),
    dict(scope="a", stream="b", positions=((0, "1"),)),
    dict(scope="a", stream="b", positions=((0, True),)),
    dict(scope="a", stream="b", positions=((0,),)),
    dict(scope="", stream="b", positions=((0, 0),)),
    dict(scope="a", stream="", positions=((0, 0),)),
    dict(scope="a", stream="b", positions=None),
], ids=repr)
def test_constructor_validates(kw):
    with pytest.raises(errors.InvalidStreamCutError):
        pe.StreamCut(**kw)


@pytest.mark.parametrize("scope,stream", [("../x", "b"), ("a", "b/c"), ("_a", "b"), ("a", "é")])
def test_constructor_refuses_names_the_text_form_cannot_hold(scope, stream):
    """Invariant 2 of streamcut.py (from_text(c.to_text()) == c for every cut) needs valid names.
    Library bug: StreamCut(...) and StreamCut.of(...) do not validate scope/stream names."""
    with pytest.raises((errors.InvalidStreamCutError, errors.InvalidNameError)):
        pe.StreamCut(scope=scope, stream=stream, positions=((0, 1),))
    with pytest.raises((errors.InvalidStreamCutError, errors.InvalidNameError)):
        pe.StreamCut.of(scope, stream, {0: 1})


# ------------------------------------------------------------------ order
def test_partial_order():
    a = pe.StreamCut.of("s", "t", {0: 0, 1: 10})
    b = pe.StreamCut.of("s", "t", {0: 5, 1: 10})
    c = pe.StreamCut.of("s", "t", {0: 10, 1: 0})
    assert a <= a and a >= a and not a < a and not a > a
    assert a <= b and a < b and b > a and b >= a and not b <= a
    assert not (b <= c) and not (c <= b) and not (b < c) and not (c < b)  # incomparable
    assert not (a <= c) and not (c <= a)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 5)] * 3), min_size=3, max_size=3))
def test_order_is_a_partial_order(triples):
    a, b, c = (pe.StreamCut.of("s", "t", dict(enumerate(t))) for t in triples)
    assert a <= a
    if a <= b and b <= a:
        assert a == b
    if a <= b and b <= c:
        assert a <= c
    assert (a < b) == (a <= b and a != b)
    assert (a <= b) == all(x <= y for x, y in zip(triples[0], triples[1]))


@pytest.mark.parametrize("other", [
    pe.StreamCut.of("s", "u", {0: 0, 1: 0}), pe.StreamCut.of("x", "t", {0: 0, 1: 0}),
    pe.StreamCut.of("s", "t", {0: 0}), pe.StreamCut.of("s", "t", {0: 0, 2: 0}), pe.StreamCut.UNBOUNDED,
], ids=str)
def test_cuts_that_cannot_be_compared(other):
    a = pe.StreamCut.of("s", "t", {0: 0, 1: 0})
    for op in (lambda: a <= other, lambda: a < other, lambda: a >= other, lambda: a > other):
        with pytest.raises(errors.InvalidStreamCutError):
            op()


def test_compare_with_a_non_cut_is_a_type_error():
    with pytest.raises(TypeError):
        _ = pe.StreamCut.of("s", "t", {0: 0}) <= "pe1:s/t:0=0"


# ------------------------------------------------------------------ cuts against a stream
@pytest.fixture
def two(pe_store):
    s = pe_store
    s.create_scope("s")
    for name in ("t", "u"):
        s.create_stream("s", name, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        with s.create_writer("s", name) as w:
            for i in range(20):
                w.write_event(b"event-%02d" % i, routing_key=f"k{i % 10}")
    counts = {}
    for e in s.read_slice("s", "t"):
        counts[e.segment_id] = counts.get(e.segment_id, 0) + 1
    assert len(counts) == 2 and min(counts.values()) >= 4, counts
    return s


def _uses(s, cut):
    return {
        "create_reader start": lambda: s.create_reader("s", "t", start=cut),
        "create_reader end": lambda: s.create_reader("s", "t", end=cut),
        "read_slice start": lambda: s.read_slice("s", "t", start=cut),
        "read_slice end": lambda: s.read_slice("s", "t", end=cut),
        "truncate_stream": lambda: s.truncate_stream("s", "t", cut),
    }


def _assert_refused(s, cut):
    head = s.stream_info("s", "t").head
    for what, call in _uses(s, cut).items():
        with pytest.raises(errors.InvalidStreamCutError):
            call()
    assert s.stream_info("s", "t").head == head  # a refused truncation changes nothing
    assert len(list(s.read_slice("s", "t"))) == 20


def test_cut_of_another_stream_is_refused(two):
    _assert_refused(two, two.stream_info("s", "u").tail)
    _assert_refused(two, two.stream_info("s", "u").head)


def test_cut_with_other_segments_is_refused(two):
    _assert_refused(two, pe.StreamCut.of("s", "t", {0: 0}))
    _assert_refused(two, pe.StreamCut.of("s", "t", {0: 0, 1: 0, 2: 0}))
    _assert_refused(two, pe.StreamCut.of("s", "t", {0: 0, segment_id(1, 1): 0}))


def test_cut_inside_an_event_is_refused(two):
    evs = list(two.read_slice("s", "t"))
    tail = two.stream_info("s", "t").tail.as_dict()
    for ev in evs[:5] + evs[-3:]:
        for delta in (1, 2, 5, ev.length - 1):
            pos = dict(tail)
            pos[ev.segment_id] = ev.offset + delta
            _assert_refused(two, pe.StreamCut.of("s", "t", pos))
    # every real boundary is accepted
    for ev in evs:
        pos = {sid: 0 for sid in tail}
        pos[ev.segment_id] = ev.offset
        assert all(e.offset >= ev.offset for e in two.read_slice("s", "t", start=pe.StreamCut.of("s", "t", pos))
                   if e.segment_id == ev.segment_id)


def test_cut_beyond_the_tail_is_refused(two):
    tail = two.stream_info("s", "t").tail.as_dict()
    for sid in tail:
        for extra in (1, 1000, 2**40):
            pos = dict(tail)
            pos[sid] += extra
            _assert_refused(two, pe.StreamCut.of("s", "t", pos))


def test_cut_that_is_not_a_cut_is_refused(two):
    for bad in ("pe1:s/t:0=0,1=0", {0: 0, 1: 0}, 5):
        with pytest.raises(errors.InvalidStreamCutError):
            two.create_reader("s", "t", start=bad)
        with pytest.raises(errors.InvalidStreamCutError):
            two.read_slice("s", "t", end=bad)
        with pytest.raises(errors.InvalidStreamCutError):
            two.truncate_stream("s", "t", bad)


def test_end_before_start_is_refused(two):
    head, tail = two.stream_info("s", "t").head, two.stream_info("s", "t").tail
    with pytest.raises(errors.InvalidStreamCutError):
        two.create_reader("s", "t", start=tail, end=head)
    with pytest.raises(errors.InvalidStreamCutError):
        two.read_slice("s", "t", start=tail, end=head)


def test_text_of_a_real_cut_is_usable(two):
    evs = list(two.read_slice("s", "t"))
    mid = {}
    for ev in evs:  # a cut after the first 3 events of every segment
        mid.setdefault(ev.segment_id, []).append(ev)
    cut = pe.StreamCut.of("s", "t", {sid: lst[3].offset for sid, lst in mid.items()})
    again = pe.StreamCut.from_text(cut.to_text())
    assert [e.event for e in two.read_slice("s", "t", end=again)] == \
        [e.event for lst in mid.values() for e in lst[:3]]
