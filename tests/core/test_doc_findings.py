"""Contracts found while checking docs/ against the code (each test states one promise of the
docs or of issue 2 that the code did not keep when it was written)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded._native import lib


def test_slice_with_an_explicit_end_returns_only_durable_events(store_path):
    """Readers see only durable data (store.py invariant 4, docs/concepts/readers.md). After a
    failed fdatasync the second event is not durable; a slice ending at stream_info().tail must
    not hand it out (raise, or stop at the durable end)."""
    store = pe.open(store_path)
    try:
        store.create_scope("d")
        store.create_stream("d", "s")
        w = store.create_writer("d", "s", writer_id="w")
        w.write_events([b"acked"], routing_key="k")
        w.flush()
        lib.pe_journal_inject_fault(store._engine.journal.handle, lib.PE_FAULT_SYNC, errno.EIO, 1)
        w.write_events([b"not-durable"], routing_key="k")
        with pytest.raises(errors.StorageError):
            w.flush()
        try:
            tail = store.stream_info("d", "s").tail
            events = [e.event for e in store.read_slice("d", "s", end=tail)]
        except errors.StorageError:
            events = None  # fail-stop: the store refuses everything until it is reopened
        assert events is None or b"not-durable" not in events
    finally:
        store.close()


def test_a_reader_created_before_truncation_does_not_return_truncated_events(pe_store):
    """truncate_stream: "data before the cut is no longer readable". A live reader positioned
    before the new head must skip to it (or raise TruncatedDataError), as Pravega's readers do."""
    pe_store.create_scope("d")
    pe_store.create_stream("d", "s")
    with pe_store.create_writer("d", "s") as w:
        w.write_events([b"old-1", b"old-2"], routing_key="k")
    cut = pe_store.stream_info("d", "s").tail
    with pe_store.create_writer("d", "s") as w:
        w.write_events([b"new"], routing_key="k")
    reader = pe_store.create_reader("d", "s")
    pe_store.truncate_stream("d", "s", cut)
    try:
        ev = reader.read_next_event(timeout=0)
    except errors.TruncatedDataError:
        return
    assert ev is not None and ev.event == b"new"


def test_a_batch_whose_frames_exceed_the_record_limit_does_not_poison_the_writer(pe_store):
    """write_events accepted 33,000 one-byte events with a 4,096-byte key (33 KB of payload, far
    under the 64 MiB batch limit), but framed they exceed the 128 MiB record limit: every later
    flush raised EventTooLargeError for ever. Either refuse the batch up front (nothing written)
    or write it; the writer must stay usable."""
    pe_store.create_scope("d")
    pe_store.create_stream("d", "s")
    w = pe_store.create_writer("d", "s", writer_id="w", linger=60)
    key = "k" * 4096
    try:
        w.write_events([b"x"] * 33_000, routing_key=key)
    except errors.EventTooLargeError:
        pass  # refused up front: fine
    try:
        w.flush()
        w.write_event(b"after", routing_key="other")
        assert w.flush() == w.last_sequence
    finally:
        w._failed = None  # let the fixture close the store even when the contract is broken
        w._closed = True
        w._hooks.on_close()


def test_cli_write_with_the_same_writer_id_does_not_duplicate_a_rerun(tmp_path):
    """`write --writer-id ID --line-sequence` numbers lines as sequences: running the same input
    again with the same id must not store the lines twice."""
    store = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def cli(*args, stdin=None):
        return subprocess.run([sys.executable, "-m", "pravega_embedded", "--store", str(store),
                               "--durability", "none", *args], input=stdin, env=env,
                              capture_output=True, text=True, timeout=60, check=True)

    cli("create-stream", "a/b")
    cli("write", "a/b", "--writer-id", "loader", "--line-sequence", stdin="one\ntwo\n")
    cli("write", "a/b", "--writer-id", "loader", "--line-sequence", stdin="one\ntwo\n")
    assert cli("read", "a/b").stdout.splitlines() == ["one", "two"]


def test_a_timeout_of_the_wrong_type_is_a_library_error(pe_store):
    """Every bad input raises a PravegaEmbeddedError subclass (and the fitting builtin)."""
    pe_store.create_scope("d")
    pe_store.create_stream("d", "s")
    reader = pe_store.create_reader("d", "s")
    with pytest.raises(errors.PravegaEmbeddedError):
        reader.read_next_event(timeout="1")
