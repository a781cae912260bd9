"""Every ByteStream.write is atomic and contiguous, also over 4 MiB (staged + MERGE) and with
several writers at once: the stream is a concatenation of whole writes."""

from __future__ import annotations

import threading

import pravega_embedded as pe


def test_concurrent_large_writes_never_interleave(tmp_path):
    sizes = [100, (4 << 20) + 1, 9 << 20, 3000, 5 << 20]
    with pe.open(tmp_path, durability="none") as store:
        store.create_scope("v")
        store.create_byte_stream("v", "c").close()
        errors = []

        def writer(tag: int) -> None:
            try:
                with store.create_byte_stream("v", "c") as bs:
                    for i, n in enumerate(sizes):
                        bs.write(bytes([tag * 16 + i]) * n)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        with store.create_byte_stream("v", "c") as bs:
            data = bs.read()
    assert len(data) == 4 * sum(sizes)
    seen = []
    at = 0
    while at < len(data):
        b = data[at]
        n = sizes[b % 16]
        assert data[at : at + n] == bytes([b]) * n, f"write {b} is not contiguous at {at}"
        seen.append(b)
        at += n
    assert sorted(seen) == sorted(t * 16 + i for t in range(4) for i in range(len(sizes)))
    for t in range(4):  # each writer's writes in its order
        assert [b for b in seen if b // 16 == t] == [t * 16 + i for i in range(len(sizes))]


def test_stream_info_says_the_kind():
    with pe.open_temporary() as store:
        store.create_scope("a")
        store.create_byte_stream("a", "b")
        store.create_stream("a", "c")
        assert store.stream_info("a", "b").kind == "bytes"
        assert store.stream_info("a", "c").kind == "events"


def test_io_on_a_closed_byte_stream_raises_value_error_like_a_file():
    import pytest

    with pe.open_temporary() as store:
        store.create_scope("a")
        bs = store.create_byte_stream("a", "b")
        bs.write(b"x")
        bs.close()
        bs.close()  # idempotent
        for call in (bs.flush, lambda: bs.write(b"y"), lambda: bs.read(1), bs.tell):
            with pytest.raises(ValueError):
                call()
        with store.create_byte_stream("a", "b") as again:
            assert again.read() == b"x"
