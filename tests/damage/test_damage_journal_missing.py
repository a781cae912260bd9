"""Missing journal files, end to end (issue: "Deleting every journal file opens an empty stream
with the writer's last_sequence back at -1; deleting the newest opens with the sequence moved
backwards (exactly-once resumption breaks). Each must raise a clear CorruptDataError that says
what is missing or damaged, and change nothing on disk.").

Every reference (one or three journal files; crash snapshot or cleanly closed) loses its first,
middle or newest journal file, every journal file, or the journal/ directory itself; each
holds acknowledged events, so the open must be refused with a CorruptDataError naming the
missing file (or the journal directory), and nothing on disk may change.
"""

from __future__ import annotations

import shutil

import pytest

import damage_helpers as h

CASES = {
    "single-crash": ("only", "all", "dir"),
    "single-clean": ("only", "all", "dir"),
    "rolled-crash": ("first", "middle", "newest", "first+middle", "all", "dir"),
    "rolled-clean": ("first", "middle", "newest", "first+middle", "all", "dir"),
}


def _doomed(ref: h.Reference, case: str) -> list[int]:
    b = ref.bases
    return {"only": b, "all": b, "dir": b, "first": b[:1], "middle": b[1:2], "newest": b[-1:],
            "first+middle": b[:2]}[case]


@pytest.mark.parametrize("variant,case", [(v, c) for v, cs in CASES.items() for c in cs])
def test_missing_journal_file(refs, tmp_path, variant, case):
    ref = refs[variant]
    s = h.fresh_copy(ref, tmp_path / "s")
    doomed = _doomed(ref, case)
    if case == "dir":
        shutil.rmtree(s / "journal")
        names: tuple[str, ...] = (str(s / "journal"),)
    else:
        for base in doomed:
            (s / "journal" / h.file_name(base)).unlink()
        names = tuple(h.file_name(b) for b in doomed) + ((str(s / "journal"),) if case == "all" else ())
    out = h.check_case(s, ref, h.Expect.refused(*names, classes=("CorruptDataError",)))
    print(f"{variant}: {case} ({[h.file_name(b) for b in doomed]}) deleted: {out}")
    assert out.ok, f"{variant}: journal {case} deleted: {out}"
