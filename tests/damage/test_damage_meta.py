"""Missing and damaged metadata files, end to end (issue: "a deleted or zero-length
meta/data.mdb (or a missing meta/) opens as an empty store ...; a truncated one kills the
interpreter with SIGBUS").

Each case damages a fresh copy of a reference store (damage_helpers: the crash snapshot and the
cleanly closed store, one journal file) and opens it in a child interpreter (so SIGBUS shows as
a crash verdict, not a killed test run). Rules (damage_helpers.judge):

* a crash, a hang or an exception that is not a pravega_embedded error fails;
* a refused open must raise a PravegaEmbeddedError whose message names the damaged file
  (``data.mdb``, ``meta``, ``STORE``), and leave every file but LOCK (and LMDB's lock.mdb, which
  holds no data) byte-identical;
* a successful open must give exactly the recorded content: every event once, per-key order,
  the segments, both transactions' status, the reader group's checkpoint, and every writer's
  last_sequence (never lower than recorded).

Cases that can hold no correct data (data.mdb missing or empty, meta/ missing) must be refused;
truncations may be refused or (if LMDB never needed the cut bytes) open correctly; LMDB's
lock.mdb and the STORE marker hold no data, so their loss must open correctly (the marker is
written again).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import damage_helpers as h

VARIANTS = ("single-clean", "single-crash")


def _ref(single, name: str) -> h.Reference:
    crash, clean = single
    return {"single-crash": crash, "single-clean": clean}[name]


def _case(single, tmp_path: Path, variant: str) -> tuple[h.Reference, Path]:
    ref = _ref(single, variant)
    return ref, h.fresh_copy(ref, tmp_path / "s")


def _meta_names(store: Path) -> tuple[str, ...]:
    return ("data.mdb", str(store / "meta"))


def _assert(out: h.Outcome, what: str) -> None:
    print(f"{what}: {out}")
    assert out.ok, f"{what}: {out}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_data_mdb_deleted(single, tmp_path, variant):
    ref, s = _case(single, tmp_path, variant)
    (s / "meta" / "data.mdb").unlink()
    _assert(h.check_case(s, ref, h.Expect.refused(*_meta_names(s))), f"{variant}: data.mdb deleted")


@pytest.mark.parametrize("variant", VARIANTS)
def test_data_mdb_zero_length(single, tmp_path, variant):
    ref, s = _case(single, tmp_path, variant)
    os.truncate(s / "meta" / "data.mdb", 0)
    _assert(h.check_case(s, ref, h.Expect.refused(*_meta_names(s))), f"{variant}: data.mdb empty")


@pytest.mark.parametrize("variant", VARIANTS)
def test_meta_dir_deleted(single, tmp_path, variant):
    ref, s = _case(single, tmp_path, variant)
    shutil.rmtree(s / "meta")
    _assert(h.check_case(s, ref, h.Expect.refused(str(s / "meta"))), f"{variant}: meta/ deleted")


@pytest.mark.parametrize("variant", VARIANTS)
def test_meta_dir_emptied(single, tmp_path, variant):
    ref, s = _case(single, tmp_path, variant)
    for p in (s / "meta").iterdir():
        p.unlink()
    _assert(h.check_case(s, ref, h.Expect.refused(*_meta_names(s))), f"{variant}: meta/ emptied")


@pytest.mark.parametrize("variant", VARIANTS)
def test_meta_and_marker_deleted(single, tmp_path, variant):
    """No marker, no metadata: only the journal says a store lives here."""
    ref, s = _case(single, tmp_path, variant)
    shutil.rmtree(s / "meta")
    (s / "STORE").unlink()
    _assert(h.check_case(s, ref, h.Expect.refused(str(s / "meta"), "journal")),
            f"{variant}: meta/ and STORE deleted")


SIZES = ("0", "1", "100", "4095", "4096", "8192", "half", "size-1", "size-4096")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("size", SIZES)
def test_data_mdb_truncated(single, tmp_path, variant, size):
    ref, s = _case(single, tmp_path, variant)
    data = s / "meta" / "data.mdb"
    full = data.stat().st_size
    n = {"half": full // 2, "size-1": full - 1, "size-4096": full - 4096}.get(size) or int(size)
    assert 0 <= n < full
    os.truncate(data, n)
    expect = h.Expect(ref.full, True, _meta_names(s), ("CorruptDataError",))
    _assert(h.check_case(s, ref, expect), f"{variant}: data.mdb truncated to {n} of {full} bytes")



def _name_unwritten_pages(data: Path, extra: int) -> int:
    """Raise ``last_pg`` in both LMDB meta pages by ``extra``, as LMDB leaves it after a write
    transaction that allocated pages and freed them again (it does not write such pages, so
    the file ends before the last page its meta page names). Returns the file's size."""
    raw = bytearray(data.read_bytes())
    psize = int.from_bytes(raw[16 + 24 : 16 + 28], "little")  # md_pad of the free-list MDB_db
    for meta in (0, psize):
        at = meta + 16 + 24 + 96  # page header, magic..mapsize, two MDB_db: last_pg
        last = int.from_bytes(raw[at : at + 8], "little")
        raw[at : at + 8] = (last + extra).to_bytes(8, "little")
    data.write_bytes(raw)
    return len(raw)


@pytest.mark.parametrize("variant", VARIANTS)
def test_data_mdb_naming_pages_it_never_wrote_opens(single, tmp_path, variant):
    """Library bug (found by the torture run): a cleanly closed store was refused as "cut
    short" because LMDB's meta page named a page past the end of the file; LMDB does not write
    the pages a write transaction allocates and frees again, so that is no damage."""
    ref, s = _case(single, tmp_path, variant)
    _name_unwritten_pages(s / "meta" / "data.mdb", 3)
    _assert(h.check_case(s, ref, h.Expect.opens(ref.full)), f"{variant}: last_pg past the end")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cut", ("half", "one page"))
def test_data_mdb_naming_unwritten_pages_and_truncated(single, tmp_path, variant, cut):
    """The same file cut short as well: the pages its trees reach are checked, so the cut is
    refused (or opens correctly if no tree page was cut), never a crash."""
    ref, s = _case(single, tmp_path, variant)
    data = s / "meta" / "data.mdb"
    full = _name_unwritten_pages(data, 3)
    os.truncate(data, full // 2 if cut == "half" else full - 4096)
    expect = h.Expect(ref.full, True, _meta_names(s), error_classes=("CorruptDataError",))
    _assert(h.check_case(s, ref, expect), f"{variant}: last_pg past the end, cut to {cut}")

@pytest.mark.parametrize("variant", VARIANTS)
def test_lock_mdb_deleted(single, tmp_path, variant):
    ref, s = _case(single, tmp_path, variant)
    lock = s / "meta" / "lock.mdb"
    if lock.exists():
        lock.unlink()
    _assert(h.check_case(s, ref, h.Expect.opens(ref.full)), f"{variant}: lock.mdb deleted")


@pytest.mark.parametrize("variant", VARIANTS)
def test_lock_mdb_garbage(single, tmp_path, variant):
    ref, s = _case(single, tmp_path, variant)
    (s / "meta" / "lock.mdb").write_bytes(os.urandom(8192))
    _assert(h.check_case(s, ref, h.Expect.opens(ref.full)), f"{variant}: lock.mdb garbage")


@pytest.mark.parametrize("variant", VARIANTS)
def test_store_marker_deleted(single, tmp_path, variant):
    ref, s = _case(single, tmp_path, variant)
    (s / "STORE").unlink()
    _assert(h.check_case(s, ref, h.Expect.opens(ref.full)), f"{variant}: STORE deleted")
    doc = json.loads((s / "STORE").read_text())
    assert doc.get("format") == 1 and doc.get("id"), f"the marker was not written again: {doc}"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("garbage", [b"", b"\x00" * 64, b"not json\n", b'{"format": "x"}', b"[1, 2]"],
                         ids=["empty", "zeros", "text", "bad-format", "list"])
def test_store_marker_garbage(single, tmp_path, variant, garbage):
    """A damaged marker: refused with an error naming it, or opened correctly."""
    ref, s = _case(single, tmp_path, variant)
    (s / "STORE").write_bytes(garbage)
    expect = h.Expect(ref.full, True, (str(s / "STORE"),))
    _assert(h.check_case(s, ref, expect), f"{variant}: STORE = {garbage!r}")


@pytest.mark.parametrize("variant", VARIANTS)
def test_data_mdb_of_a_new_store(single, tmp_path, variant):
    """meta/ replaced by a freshly created store's (a valid LMDB holding no streams, e.g. a
    wrong backup): with a journal full of data this must never open as an empty store."""
    import pravega_embedded as pe

    ref, s = _case(single, tmp_path, variant)
    other = tmp_path / "other"
    pe.open(other, durability="os").close()
    shutil.rmtree(s / "meta")
    shutil.copytree(other / "meta", s / "meta", ignore=shutil.ignore_patterns("lock.mdb"))
    expect = h.Expect(ref.full, True, (str(s / "meta"), "data.mdb", "journal"))
    _assert(h.check_case(s, ref, expect), f"{variant}: meta/ of a new empty store")


def test_data_mdb_from_an_earlier_checkpoint(single, tmp_path):
    """The clean store with the crash snapshot's data.mdb (an older checkpoint of the same
    store): the journal still holds everything after it, so it must open with all content."""
    crash, clean = single
    s = h.fresh_copy(clean, tmp_path / "s")
    shutil.copyfile(crash.path / "meta" / "data.mdb", s / "meta" / "data.mdb")
    (s / "meta" / "lock.mdb").unlink()
    _assert(h.check_case(s, clean, h.Expect.opens(clean.full)), "clean store, older data.mdb")
