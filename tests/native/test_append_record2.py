"""pe_journal_append_record2: a record whose payload is given as head + body is byte-identical
to one whose payload was joined first; bad arguments are refused and write nothing."""

from __future__ import annotations

NONE = 2  # PE_DURABILITY_NONE


def test_head_and_body_make_the_same_record_as_one_payload(h, tmp_path):
    ffi, lib = h.ffi, h.lib
    st, j = h.open_journal(tmp_path, durability=NONE)
    p, e = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    body = bytes(range(256)) * 40
    assert lib.pe_journal_append_record2(j, 2, b"head", 4, body, len(body), p, e) == lib.PE_OK
    first = (p[0], e[0])
    assert lib.pe_journal_append_record2(j, 3, b"", 0, body, len(body), p, e) == lib.PE_OK
    second = (p[0], e[0])
    assert lib.pe_journal_append_record2(j, 2, b"only", 4, ffi.NULL, 0, p, e) == lib.PE_OK
    third = (p[0], e[0])
    # refused, nothing written
    assert lib.pe_journal_append_record2(j, 2, ffi.NULL, 3, body, 1, p, e) == lib.PE_ERR_INVAL
    assert lib.pe_journal_append_record2(j, 2, b"x", 1, ffi.NULL, 5, p, e) == lib.PE_ERR_INVAL
    assert lib.pe_journal_append_record2(j, 1, b"x", 1, body, 1, p, e) == lib.PE_ERR_INVAL
    assert lib.pe_journal_append_record2(j, 2, b"x", 1, body, lib.PE_MAX_RECORD_PAYLOAD, p, e) == \
        lib.PE_ERR_TOOBIG
    assert h.state(j)["written"] == third[1]
    assert lib.pe_journal_close(j) == lib.PE_OK
    data = (tmp_path / h.file_name(0)).read_bytes()
    want = (h.make_record(first[0], 2, b"head" + body) + h.make_record(second[0], 3, body)
            + h.make_record(third[0], 2, b"only"))
    assert data[32:] == want
