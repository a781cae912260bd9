"""The local budget (``pe.open(local_budget=...)``): while tier 2 is unreachable the local
journal grows up to the budget, writers then wait and raise LocalBudgetError with their batch
kept, ``tiering_status`` says "blocked"; once tier 2 is back, ingest resumes by itself and every
acknowledged event is read back exactly once, in order, through the store and plain Parquet;
the local journal never grew past the budget by more than a batch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

import pravega_embedded as pe
from pravega_embedded.errors import InvalidConfigurationError, LocalBudgetError, StorageFullError

MiB = 1 << 20
BUDGET = 4 * MiB
EVENT = 1000


def test_local_budget_options_are_checked(tmp_path):
    with pytest.raises(InvalidConfigurationError, match="tier2=False"):
        pe.open(tmp_path / "a", tier2=False, local_budget=1 << 30)
    with pytest.raises(InvalidConfigurationError, match="two journal files"):
        pe.open(tmp_path / "b", roll_bytes=4 * MiB, local_budget=6 * MiB)
    for bad in (True, 1.5e9, "8G", MiB):
        with pytest.raises(InvalidConfigurationError, match="local_budget"):
            pe.open(tmp_path / "c", local_budget=bad)
    with pytest.raises(InvalidConfigurationError, match="local_budget_timeout"):
        pe.open(tmp_path / "d", roll_bytes=MiB, local_budget=BUDGET, local_budget_timeout=0)
    with pe.open(tmp_path / "e", roll_bytes=MiB, local_budget=BUDGET) as store:
        st = store.tiering_status()
        assert st.local_budget == BUDGET and 0 < st.local_bytes < BUDGET and st.state == "ok"


class Sampler:
    """Samples the store's local journal bytes from a thread: the disk's high-water mark."""

    def __init__(self, store) -> None:
        self.store, self.peak, self._stop = store, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.store.tiering_status().local_bytes)

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        assert not self._t.is_alive()
        return self.peak


def write_until_refused(w, start: int) -> int:
    """Write events numbered from ``start`` until the budget refuses a batch; returns how many
    write calls returned a sequence number (the refused batch is kept by the writer)."""
    i = start
    while True:
        try:
            w.write_event(b"%08d" % i + b"x" * (EVENT - 8), routing_key=f"k{i % 5}")
        except LocalBudgetError:
            return i + 1 - start  # the event of the refused call is kept (write_event's promise)
        i += 1
        assert i - start < 100_000, "the budget never held the writer back"


def test_ingest_waits_at_the_budget_while_tier2_is_down_and_resumes_when_it_is_back(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"a file where tier 2's folder should be: every put fails")
    target = blocker / "t2"
    with pe.open(tmp_path / "data", tier2=str(target), roll_bytes=MiB, local_budget=BUDGET,
                 local_budget_timeout=0.5) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        sampler = Sampler(store)
        w = store.create_writer("iot", "s", batch_bytes=64 << 10)
        n = write_until_refused(w, 0)
        assert n * EVENT > BUDGET // 2  # it took a good part of the budget before waiting
        with pytest.raises(LocalBudgetError, match="local_budget") as info:
            w.flush()
        assert isinstance(info.value, StorageFullError)
        status = store.tiering_status()
        assert status.state == "blocked" and status.failures > 0 and status.last_error
        assert status.local_bytes >= BUDGET

        blocker.unlink()  # tier 2 is back
        deadline = time.monotonic() + 120
        while True:  # a user's loop: flush until the writer's kept batch is in
            try:
                w.flush()
                break
            except LocalBudgetError:
                assert time.monotonic() < deadline, "ingest did not resume after tier 2 came back"
        total = n
        while total * EVENT < 4 * BUDGET:  # ingest goes on past the budget: tiering keeps up
            try:
                w.write_event(b"%08d" % total + b"x" * (EVENT - 8), routing_key=f"k{total % 5}")
                total += 1
            except LocalBudgetError:
                total += 1  # kept; goes in with the next batch
                assert time.monotonic() < deadline, "ingest stalled with tier 2 up"
        while True:
            try:
                w.flush()
                break
            except LocalBudgetError:
                assert time.monotonic() < deadline, "ingest stalled with tier 2 up"
        peak = sampler.stop()
        assert w.durable_sequence == total - 1
        w.close()
        store.flush_tier2(timeout=120)
        assert store.tiering_status().state == "ok"
        assert peak <= BUDGET + 2 * MiB, peak  # bounded: the budget plus a batch and a header
        got = [ev.event for ev in store.read_slice("iot", "s")]
    # exactly once, and per key in order, through the store and through plain Parquet
    want = [b"%08d" % i + b"x" * (EVENT - 8) for i in range(total)]
    assert sorted(got) == want
    for k in range(5):
        mine = [int(e[:8]) for e in got if int(e[:8]) % 5 == k]
        assert mine == sorted(mine)
    table = ds.dataset(target, partitioning="hive").to_table(columns=["event"])
    assert sorted(table.column("event").to_pylist()) == want


def test_close_releases_a_waiting_writer_and_loses_nothing_it_accepted(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"x")
    store = pe.open(tmp_path / "data", tier2=str(blocker / "t2"), roll_bytes=MiB,
                    local_budget=BUDGET, local_budget_timeout=3600)
    store.create_scope("iot")
    store.create_stream("iot", "s")
    w = store.create_writer("iot", "s", batch_bytes=64 << 10)
    errors: list[BaseException] = []
    written = [0]

    def ingest() -> None:
        try:
            for i in range(100_000):
                w.write_event(b"%08d" % i + b"y" * (EVENT - 8))
                written[0] = i + 1
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            errors.append(exc)

    t = threading.Thread(target=ingest)
    t.start()
    deadline = time.monotonic() + 60
    while store.tiering_status().state != "blocked":
        assert time.monotonic() < deadline and t.is_alive(), "the writer never waited"
        time.sleep(0.01)
    store.close()  # does not wait an hour for the budget
    t.join(60)
    assert not t.is_alive(), "close did not release the waiting writer"
    assert len(errors) == 1 and isinstance(errors[0], pe.errors.WriterClosedError), errors
    with pe.open(tmp_path / "data", tier2=False) as again:
        got = [ev.event for ev in again.read_slice("iot", "s")]
    nums = [int(e[:8]) for e in got]
    assert nums == list(range(len(nums)))  # nothing twice, nothing skipped
    assert len(nums) >= written[0] > 0  # every write that returned a sequence number is in
