"""A client writer's ``write_event`` takes no lock (client invariant 7): another thread that
flushes, closes or sends a lingering batch takes the batch only when the writing thread is
outside the per-event critical region, so no event is lost, doubled or reordered."""

from __future__ import annotations

import threading

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _events(owner: pe.Store, stream: str) -> list[tuple[str | None, bytes]]:
    r = owner.create_reader("s", stream)
    out = []
    while (ev := r.read_next_event(0)) is not None:
        out.append((ev.routing_key, ev.event))
    r.close()
    return out


class _HeldAppend(list):
    """A batch whose second append stops, inside write_event's critical region, until told."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()
        self.appends = 0

    def __iadd__(self, parts):  # type: ignore[override]
        self.appends += 1
        if self.appends == 2:
            self.entered.set()
            assert self.release.wait(30)
        return super().__iadd__(parts)


@pytest.mark.parametrize("drain", ["flush", "close"])
def test_a_drain_waits_for_the_event_being_buffered(owner, client, drain):
    owner.create_scope("s")
    owner.create_stream("s", drain)
    w = client.create_writer("s", drain, linger=0)  # nothing sends but the drain under test
    held = _HeldAppend()
    w._buf = held  # the batch being filled
    w.write_event(b"one", routing_key="k")
    writer = threading.Thread(target=w.write_event, args=(b"two", "k"))
    writer.start()
    assert held.entered.wait(30)
    drainer = threading.Thread(target=getattr(w, drain))
    drainer.start()
    drainer.join(0.2)
    assert drainer.is_alive(), f"{drain} took the batch while an event was half buffered"
    held.release.set()
    writer.join(30)
    drainer.join(30)
    assert not writer.is_alive() and not drainer.is_alive()
    if drain == "flush":
        w.close()
    assert _events(owner, drain) == [("k", b"one"), ("k", b"two")]
    with pytest.raises(errors.WriterClosedError):
        w.write_event(b"three", routing_key="k")


def test_events_written_while_other_threads_flush_arrive_once_in_order(owner, client):
    owner.create_scope("s")
    owner.create_stream("s", "busy", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    # small batches: the writing thread sends full ones itself, the linger thread late ones,
    # and another thread flushes all the while
    w = client.create_writer("s", "busy", linger=0.0005, batch_bytes=2048)
    n, keys = 30_000, [f"k{i}" for i in range(8)]
    stop = threading.Event()
    flushes = [0]

    def flush_often() -> None:
        while not stop.is_set():
            w.flush()
            flushes[0] += 1

    flusher = threading.Thread(target=flush_often)
    flusher.start()
    try:
        for i in range(n):
            assert w.write_event(b"%d" % i, keys[i % 8]) == i
    finally:
        stop.set()
        flusher.join(60)
    assert w.flush() == n - 1 and flushes[0] > 0
    w.close()
    got = _events(owner, "busy")
    assert len(got) == n
    per_key: dict[str | None, list[int]] = {}
    for key, ev in got:
        per_key.setdefault(key, []).append(int(ev))
    assert {k: v for k, v in per_key.items()} == {k: list(range(j, n, 8)) for j, k in enumerate(keys)}


class _Gate:
    """A batch_bytes that stops the writing thread just after its critical region, on the
    comparison that decides whether the batch is full (and says it is)."""

    def __init__(self) -> None:
        self.at, self.go = threading.Event(), threading.Event()

    def __le__(self, nbytes: int) -> bool:
        self.at.set()
        assert self.go.wait(30)
        return True

    __ge__ = __le__


def test_a_write_whose_full_batch_a_close_took_returns_its_sequence(owner, client):
    owner.create_scope("s")
    owner.create_stream("s", "full")
    w = client.create_writer("s", "full", linger=0)
    gate = _Gate()
    w.batch_bytes = gate  # type: ignore[assignment]
    got: list[object] = []

    def write() -> None:
        try:
            got.append(w.write_event(b"only", routing_key="k"))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            got.append(exc)

    t = threading.Thread(target=write)
    t.start()
    assert gate.at.wait(30)  # the event is buffered; its full batch is not sent yet
    w.close()  # takes and sends the batch with the event
    gate.go.set()
    t.join(30)
    assert got == [0], got  # not ConnectionLostError for an event the owner has
    assert _events(owner, "full") == [("k", b"only")]
