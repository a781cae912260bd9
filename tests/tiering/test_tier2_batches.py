"""Reading tier 2 in pieces and in batches (``pe.open_tier2``): ``get_segments(max_bytes=)``
splits a big file at its row groups, and ``arrow_batches()`` reads a row group only when the
consumer asks for the next batch. Spark's tasks read this way (docs/spark.md, "Partitions")."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import pravega_embedded as pe
from pravega_embedded.tiering import parquetfile, rows

MiB = 1 << 20


@pytest.fixture
def tier2(tmp_path: Path, monkeypatch) -> pe.Tier2Store:
    """A stream of one segment in tier 2: 3000 events of 1000 B in files of about 2 MiB, each of
    several 256 KiB row groups."""
    monkeypatch.setattr(rows, "ROW_GROUP_BYTES", 256 << 10)
    with pe.open(tmp_path / "data", durability="none", roll_bytes=MiB, tier2_file_bytes=2 * MiB) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s")
        with store.create_writer("iot", "s") as w:
            for i in range(3000):
                w.write_event(b"%06d" % i + bytes(994), routing_key=f"k{i % 5}")
        store.flush_tier2()
    t2 = pe.open_tier2(str(tmp_path / "data" / "tier2"))
    yield t2
    t2.close()


def _ids(table: pa.Table) -> list[int]:
    return [int(e[:6]) for e in table.column("event").to_pylist()]


def test_max_bytes_splits_big_files_at_their_row_groups(tier2):
    whole = tier2.get_segments("iot", "s")
    files = tier2.manifest("iot", "s").files
    assert len(whole) == 1 and len(files) >= 2
    pieces = tier2.get_segments("iot", "s", max_bytes=600_000)
    assert len(pieces) >= 4 > len(files)  # segment bytes of ~2 MiB per file, pieces of ~600 KB
    starts = {f.first for f in files} | {b for f in files for b in
                                         parquetfile.group_starts(tier2.target, "iot", "s", f)}
    assert all(p.start in starts for p in pieces)  # each piece starts a row group
    assert [(p.start, p.end) for p in pieces] == list(zip([whole[0].start] + [p.end for p in pieces[:-1]],
                                                          [p.end for p in pieces]))
    assert all(p.nbytes < 2 * 600_000 for p in pieces)
    got = [i for p in pieces for i in _ids(tier2.read_segment_range(p).to_arrow())]
    assert got == _ids(tier2.read_slice("iot", "s").to_arrow()) and sorted(got) == list(range(3000))


def test_arrow_batches_read_a_row_group_when_the_consumer_asks(tier2, monkeypatch):
    want = tier2.read_slice("iot", "s").to_arrow()
    reads = []
    real = parquetfile.read_group

    def counted(fh, md, span, where, buf=None):
        reads.append(span.index)
        return real(fh, md, span, where, buf)

    monkeypatch.setattr(parquetfile, "read_group", counted)
    batches = tier2.read_slice("iot", "s").arrow_batches()
    first = next(batches)
    assert len(reads) == 1 and 0 < first.num_rows < 3000  # one group read, not the whole file
    rest = list(batches)
    assert pa.Table.from_batches([first, *rest]).equals(want)
    groups = sum(pa.parquet.ParquetFile(Path(tier2.url) / parquetfile.file_rel("iot", "s", f)).num_row_groups
                 for f in tier2.manifest("iot", "s").files)
    assert len(reads) == groups  # each group read once
    # a piece of a file reads only its own row groups
    piece = tier2.get_segments("iot", "s", max_bytes=600_000)[3]
    reads.clear()
    sl = tier2.read_segment_range(piece)
    assert reads == []  # its bounds are row groups' starts: checked from the footers alone
    got = pa.Table.from_batches(list(sl.arrow_batches()))
    assert 1 <= len(reads) <= 3  # its own groups: ~600 KB of 256 KiB groups
    assert _ids(got) == _ids(tier2.read_segment_range(piece).to_arrow())
