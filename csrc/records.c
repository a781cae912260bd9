/* records.c -- parsing journal bytes: file headers, record headers, and the recovery scan.
 *
 * The byte layouts are documented at the top of journal.c (the file that writes them) and in
 * docs/format.md. Everything here is a pure function of a caller's buffer, never reads outside
 * it, and is fuzzed (tests/native/test_scan_fuzz.py).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------------ file headers */

int pe_file_header_build(uint64_t base, char *out, size_t cap)
{
    if (out == NULL || cap < PE_FILE_HEADER_SIZE)
        return PE_ERR_INVAL;
    memcpy(out, pe_file_magic, 8);
    st32(out + 8, PE_FORMAT_VERSION);
    st32(out + 12, PE_FILE_HEADER_SIZE);
    st64(out + 16, base);
    st32(out + 24, 0);
    st32(out + 28, crc(out, 28));
    return PE_OK;
}

int pe_file_header_parse(const char *buf, size_t len, uint64_t *out_base, uint32_t *out_version)
{
    if (buf == NULL || len < PE_FILE_HEADER_SIZE)
        return PE_ERR_INVAL;
    if (memcmp(buf, pe_file_magic, 8) != 0)
        return PE_ERR_FORMAT;
    uint32_t version = ld32(buf + 8);
    if (version < 1 || version > PE_FORMAT_VERSION)
        return PE_ERR_FORMAT;
    if (ld32(buf + 28) != crc(buf, 28))
        return PE_ERR_CORRUPT;
    if (ld32(buf + 12) != PE_FILE_HEADER_SIZE)
        return PE_ERR_CORRUPT;
    if (out_base)
        *out_base = ld64(buf + 16);
    if (out_version)
        *out_version = version;
    return PE_OK;
}

/* ------------------------------------------------------------------ scanning */

/* Checks the header fields of the record at buf[0..avail) (global position pos) without the
 * CRC. Needs avail >= PE_RECORD_HEADER_SIZE. Returns 1 and the total size if plausible. */
static int header_ok(const char *p, uint64_t pos, uint32_t *type, uint32_t *plen)
{
    if (ld16(p + 18) != PE_RECORD_MAGIC)
        return 0;
    if (ld64(p + 8) != pos)
        return 0;
    uint32_t t = (unsigned char)p[16];
    if (t < 1 || t > PE_MAX_RECORD_TYPE)
        return 0;
    uint32_t n = ld32(p + 4);
    if (n > PE_MAX_RECORD_PAYLOAD)
        return 0;
    *type = t;
    *plen = n;
    return 1;
}

/* Full validity check of the record at buf[off..len). Returns its total size, or 0. A valid
 * record with a durable lag raises *mark to the position it says was durable. */
static uint64_t record_valid(const char *buf, uint64_t len, uint64_t off, uint64_t pos,
                             uint64_t *mark)
{
    if (off > len || len - off < PE_RECORD_HEADER_SIZE)
        return 0;
    const char *p = buf + off;
    uint32_t type, plen;
    if (!header_ok(p, pos, &type, &plen))
        return 0;
    uint64_t total = (uint64_t)PE_RECORD_HEADER_SIZE + plen;
    if (total > len - off)
        return 0;
    if (ld32(p) != crc(p + 4, (size_t)(total - 4)))
        return 0;
    if ((unsigned char)p[17] & PE_FLAG_DURABLE) {
        uint64_t lag = ld32(p + 20);
        if (lag <= pos && pos - lag > *mark)
            *mark = pos - lag;
    }
    return total;
}

int pe_record_header(const char *buf, uint64_t len, uint64_t pos, uint32_t *out_type,
                     uint32_t *out_payload_len, uint64_t *out_total)
{
    if (buf == NULL || len < PE_RECORD_HEADER_SIZE)
        return PE_ERR_INVAL;
    uint32_t type, plen;
    if (!header_ok(buf, pos, &type, &plen))
        return PE_ERR_CORRUPT;
    if (out_type)
        *out_type = type;
    if (out_payload_len)
        *out_payload_len = plen;
    if (out_total)
        *out_total = (uint64_t)PE_RECORD_HEADER_SIZE + plen;
    return PE_OK;
}

int pe_scan(const char *buf, uint64_t len, uint64_t buf_pos, uint64_t start_pos,
            pe_scan_result *out)
{
    if (out == NULL || (buf == NULL && len > 0))
        return PE_ERR_INVAL;
    if (UINT64_MAX - buf_pos < len || start_pos < buf_pos || start_pos - buf_pos > len)
        return PE_ERR_INVAL;

    uint64_t off = start_pos - buf_pos;
    uint64_t n = 0, mark = 0;
    for (;;) {
        if (off == len)
            break;
        uint64_t total = record_valid(buf, len, off, buf_pos + off, &mark);
        if (total == 0)
            break;
        n++;
        off += total;
    }

    pe_scan_result r;
    memset(&r, 0, sizeof r);
    r.valid_end = buf_pos + off;
    r.n_records = n;
    if (off == len) {
        r.tail_state = PE_TAIL_CLEAN;
        r.durable_mark = mark;
        *out = r;
        return PE_OK;
    }
    r.bad_pos = buf_pos + off;
    r.tail_state = PE_TAIL_TORN;

    /* Resync: look for valid records at every later byte offset (each found one is skipped
     * whole), for next_valid_pos and the durable marks they carry. A candidate s needs the
     * magic bytes 'P','E' at s + 18; find them with memchr, then check the rest. */
    uint64_t s = off + 1;
    while (len >= PE_RECORD_HEADER_SIZE && s <= len - PE_RECORD_HEADER_SIZE) {
        const char *m = memchr(buf + s + 18, 'P', (size_t)(len - PE_RECORD_HEADER_SIZE - s + 1));
        if (m == NULL)
            break;
        s = (uint64_t)(m - buf) - 18;
        uint64_t total = record_valid(buf, len, s, buf_pos + s, &mark);
        if (total != 0) {
            if (r.tail_state != PE_TAIL_CORRUPT) {
                r.tail_state = PE_TAIL_CORRUPT;
                r.next_valid_pos = buf_pos + s;
            }
            s += total;
        } else {
            s++;
        }
    }
    r.durable_mark = mark;
    *out = r;
    return PE_OK;
}

int pe_section_verify(const char *buf, uint64_t len, uint64_t *out_n_bytes)
{
    if (buf == NULL || len < PE_SECTION_HEADER_SIZE)
        return PE_ERR_INVAL;
    uint64_t n = ld32(buf + 20);
    if (out_n_bytes)
        *out_n_bytes = n;
    if (len - PE_SECTION_HEADER_SIZE != n)
        return PE_ERR_CORRUPT;
    if (crc(buf + PE_SECTION_HEADER_SIZE, (size_t)n) != ld32(buf + 24))
        return PE_ERR_CORRUPT;
    return PE_OK;
}
