"""A hypothesis state machine: writes, reads, flushes, truncations and close/reopen checked
against a reference model of per-key event lists."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pravega_embedded as pe

KEYS = st.sampled_from(["a", "b", "c", "d", "e", None])
PAYLOADS = st.binary(min_size=0, max_size=300)


def _canon(d):
    """Per-key lists keep order; events without a key are spread over segments (no order)."""
    return {k: (sorted(v) if k is None else v) for k, v in d.items() if v}


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pe-sm-")
        self.store = pe.open(self.dir, durability="os", checkpoint_interval=0.05)
        self.store.create_scope("s")
        self.store.create_stream("s", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        self.writer = self.store.create_writer("s", "t", writer_id="w1", linger=0.0005)
        self.model: dict[object, list[bytes]] = {}   # per key, events after the head
        self.written = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(key=KEYS, payload=PAYLOADS)
    def write(self, key, payload):
        seq = self.writer.write_event(payload, routing_key=key)
        assert seq == self.written
        self.written += 1
        self.model.setdefault(key, []).append(payload)

    @rule(key=KEYS, payloads=st.lists(PAYLOADS, max_size=20))
    def write_batch(self, key, payloads):
        self.writer.write_events(payloads, routing_key=key)
        self.written += len(payloads)
        self.model.setdefault(key, []).extend(payloads)

    @rule()
    def flush(self):
        assert self.writer.flush() == self.written - 1
        assert self.writer.durable_sequence == self.written - 1

    @rule()
    def read_all(self):
        self.writer.flush()
        got: dict[object, list[bytes]] = {}
        for ev in self.store.read_slice("s", "t"):
            got.setdefault(ev.routing_key, []).append(ev.event)
        assert _canon(got) == _canon(self.model)

    @rule()
    def read_with_reader(self):
        self.writer.flush()
        r = self.store.create_reader("s", "t")
        got: dict[object, list[bytes]] = {}
        while (ev := r.read_next_event(timeout=0)) is not None:
            got.setdefault(ev.routing_key, []).append(ev.event)
        r.close()
        assert _canon(got) == _canon(self.model)

    @rule()
    def truncate_at_tail(self):
        self.writer.flush()
        tail = self.store.stream_info("s", "t").tail
        self.store.truncate_stream("s", "t", tail)
        self.model = {}
        assert self.store.stream_info("s", "t").head == tail

    @rule()
    def reopen(self):
        self.writer.close()
        self.store.close()
        self.store = pe.open(self.dir, durability="os", checkpoint_interval=0.05)
        self.writer = self.store.create_writer("s", "t", writer_id="w1", linger=0.0005)
        assert self.writer.last_sequence == self.written - 1

    @precondition(lambda self: self.written > 0)
    @rule()
    def resend_is_dropped(self):
        before = self.writer.duplicates_dropped
        self.writer.write_event(b"dup", routing_key="a", sequence=self.written - 1)
        assert self.writer.duplicates_dropped == before + 1

    @invariant()
    def sequence_is_count(self):
        assert self.writer.last_sequence == self.written - 1


StoreMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
TestStoreMachine = StoreMachine.TestCase
