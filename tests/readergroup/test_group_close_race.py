"""A group reader closed from another thread while its own thread reads (found by the
torture run): close() recorded the position, then the reading thread went on handing out the
events buffered from the last chunk, so the group delivered them again after the close."""

from __future__ import annotations

import threading

import pravega_embedded as pe
from pravega_embedded import errors

N = 60000


def _one_round(tmp_path, i):
    with pe.open(tmp_path / str(i), durability="none") as store:
        store.create_scope("s")
        store.create_stream("s", "t")
        with store.create_writer("s", "t") as w:
            for at in range(0, N, 5000):  # records of 5,000 events: big buffered chunks
                w.write_events([b"%d" % j for j in range(at, at + 5000)], routing_key="k")
        group = store.create_reader_group(
            "g", pe.ReaderGroupConfig(streams=[("s", "t")], automatic_checkpoint_interval=None))
        r = group.create_reader("r1")
        got = [int(r.read_next_event(5).event)]
        go = threading.Event()

        def closer():
            go.wait()
            r.close()

        t = threading.Thread(target=closer)
        t.start()
        go.set()
        try:
            while True:  # as fast as possible, so reads overlap the close
                ev = r.read_next_event(0)
                if ev is not None and not ev.is_checkpoint:
                    got.append(int(ev.event))
        except errors.ReaderClosedError:
            pass
        t.join()
        store.seal_stream("s", "t")
        with group.create_reader("r2") as r2:
            rest = [int(ev.event) for ev in r2 if not ev.is_checkpoint]
        return got, rest


def test_close_from_another_thread_releases_exactly_what_was_returned(tmp_path):
    for i in range(8):
        got, rest = _one_round(tmp_path, i)
        assert got + rest == list(range(N)), (i, len(got), len(rest))
