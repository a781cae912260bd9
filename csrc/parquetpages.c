/* parquetpages.c -- the page checksums of Parquet column chunks, checked in one pass (tier-2
 * reads: pravega_embedded/tiering/parquetfile.py reads a row group's bytes, checks them here,
 * then lets pyarrow decode those same bytes without checking them again).
 *
 * On disk (written by pyarrow with write_page_checksum=True; the Parquet format's layout):
 *   a column chunk is pages back to back, from its dictionary page (if any) or first data page,
 *   total_compressed_size bytes in all (both from the file's footer); a page is
 *     PageHeader (Thrift compact protocol)  |  compressed_page_size bytes of page data
 *   PageHeader: 1: type i32, 2: uncompressed_page_size i32, 3: compressed_page_size i32,
 *   4: crc i32 (the CRC-32 of the page data, as written on disk), 5-8: the header of the
 *   page's type (structs, skipped here).
 *
 * The Thrift compact protocol, as far as a skip needs it: a struct is fields then a 0 byte; a
 * field header byte is (id delta << 4 | type), or (0 | type) followed by a zigzag varint id;
 * types 1/2 bool (the value is in the type), 3 byte, 4-6 zigzag varints (i16, i32, i64), 7
 * double (8 bytes), 8 binary (varint length, bytes), 9/10 list/set (size << 4 | element type,
 * a size of 15 meaning a varint size follows), 11 map (varint size, then key type << 4 | value
 * type unless empty), 12 struct. Nesting is limited to PE_PARQUET_MAX_DEPTH; a varint to 10
 * bytes (i32 values to 5); every read is bounded by the column chunk's end.
 *
 * Every page must have a crc field: a tier-2 file's pages all have one, and a damaged header
 * that lost it must not pass unchecked.
 */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "internal.h" /* pe.h and pe_crc32_update */

typedef struct cursor {
    const uint8_t *p;
    const uint8_t *end;
} cursor;

static int read_varint(cursor *c, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (c->p >= c->end)
            return PE_ERR_CORRUPT;
        uint8_t b = *c->p++;
        if (shift == 63 && (b & 0x7E) != 0)
            return PE_ERR_CORRUPT; /* more than 64 bits */
        v |= (uint64_t)(b & 0x7F) << shift;
        if ((b & 0x80) == 0) {
            *out = v;
            return PE_OK;
        }
    }
    return PE_ERR_CORRUPT;
}

static int read_i32(cursor *c, int32_t *out)
{
    uint64_t v;
    const uint8_t *start = c->p;
    int rc = read_varint(c, &v);
    if (rc != PE_OK)
        return rc;
    if (c->p - start > 5 || v > 0xFFFFFFFFu)
        return PE_ERR_CORRUPT;
    uint32_t u = (uint32_t)v;
    *out = (int32_t)((u >> 1) ^ (0u - (u & 1u))); /* zigzag */
    return PE_OK;
}

static int skip_bytes(cursor *c, uint64_t n)
{
    if ((uint64_t)(c->end - c->p) < n)
        return PE_ERR_CORRUPT;
    c->p += n;
    return PE_OK;
}

static int skip_struct(cursor *c, int depth);

/* Skips one value of compact type `type`. */
static int skip_value(cursor *c, int type, int depth)
{
    uint64_t v;
    switch (type) {
    case 1: case 2:
        return PE_OK; /* a bool field's value is its type */
    case 3:
        return skip_bytes(c, 1);
    case 4: case 5: case 6:
        return read_varint(c, &v);
    case 7:
        return skip_bytes(c, 8);
    case 8:
        if (read_varint(c, &v) != PE_OK)
            return PE_ERR_CORRUPT;
        return skip_bytes(c, v);
    case 9: case 10: {
        if (depth >= PE_PARQUET_MAX_DEPTH || c->p >= c->end)
            return PE_ERR_CORRUPT;
        uint8_t h = *c->p++;
        uint64_t n = h >> 4;
        int et = h & 0x0F;
        if (n == 15 && read_varint(c, &n) != PE_OK)
            return PE_ERR_CORRUPT;
        if (et == 1 || et == 2) /* bools in a list are one byte each */
            return skip_bytes(c, n);
        if (et < 3 || et > 12)
            return PE_ERR_CORRUPT;
        for (uint64_t i = 0; i < n; i++) {
            if (c->p >= c->end || skip_value(c, et, depth + 1) != PE_OK)
                return PE_ERR_CORRUPT; /* every element takes a byte or more */
        }
        return PE_OK;
    }
    case 11: {
        if (depth >= PE_PARQUET_MAX_DEPTH || read_varint(c, &v) != PE_OK)
            return PE_ERR_CORRUPT;
        if (v == 0)
            return PE_OK;
        if (c->p >= c->end)
            return PE_ERR_CORRUPT;
        uint8_t kv = *c->p++;
        int kt = kv >> 4, vt = kv & 0x0F;
        if (kt < 1 || kt > 12 || vt < 1 || vt > 12)
            return PE_ERR_CORRUPT;
        for (uint64_t i = 0; i < v; i++) {
            if (c->p >= c->end)
                return PE_ERR_CORRUPT;
            if ((kt <= 2 ? skip_bytes(c, 1) : skip_value(c, kt, depth + 1)) != PE_OK ||
                (vt <= 2 ? skip_bytes(c, 1) : skip_value(c, vt, depth + 1)) != PE_OK)
                return PE_ERR_CORRUPT;
        }
        return PE_OK;
    }
    case 12:
        if (depth >= PE_PARQUET_MAX_DEPTH)
            return PE_ERR_CORRUPT;
        return skip_struct(c, depth + 1);
    default:
        return PE_ERR_CORRUPT;
    }
}

/* Reads one field header: *type 0 at the struct's end. */
static int field_header(cursor *c, int32_t *id, int *type)
{
    if (c->p >= c->end)
        return PE_ERR_CORRUPT;
    uint8_t h = *c->p++;
    *type = h & 0x0F;
    if (*type == 0)
        return PE_OK;
    if (h >> 4) { /* field ids are i16: a run of deltas wraps as Thrift's does, never overflows */
        *id = (int32_t)(int16_t)(uint16_t)((uint32_t)*id + (h >> 4));
        return PE_OK;
    }
    int32_t v;
    if (read_i32(c, &v) != PE_OK || v < -32768 || v > 32767)
        return PE_ERR_CORRUPT;
    *id = v;
    return PE_OK;
}

static int skip_struct(cursor *c, int depth)
{
    int32_t id = 0;
    for (;;) {
        int type;
        if (field_header(c, &id, &type) != PE_OK)
            return PE_ERR_CORRUPT;
        if (type == 0)
            return PE_OK;
        if (skip_value(c, type, depth) != PE_OK)
            return PE_ERR_CORRUPT;
    }
}

/* Parses the PageHeader at c->p (leaving c->p after it): its compressed_page_size and crc. */
static int page_header(cursor *c, int64_t *size, uint32_t *crc, int *has_crc)
{
    int32_t id = 0, v;
    int have_size = 0;
    *has_crc = 0;
    for (;;) {
        int type;
        if (field_header(c, &id, &type) != PE_OK)
            return PE_ERR_CORRUPT;
        if (type == 0)
            break;
        if ((id == 3 || id == 4) && type == 5) {
            if (read_i32(c, &v) != PE_OK)
                return PE_ERR_CORRUPT;
            if (id == 3) {
                if (v < 0)
                    return PE_ERR_CORRUPT;
                *size = v;
                have_size = 1;
            } else {
                *crc = (uint32_t)v;
                *has_crc = 1;
            }
        } else if (skip_value(c, type, 1) != PE_OK) {
            return PE_ERR_CORRUPT;
        }
    }
    return have_size ? PE_OK : PE_ERR_CORRUPT;
}

/* What of buf holds the file's bytes: buf[lo..filled) when reading from fd (fd >= 0), every
 * byte when fd < 0. Reads go in blocks of PE_PARQUET_READ_BLOCK (pe.h), and each block's pages are
 * checked right after it is read, while it is still in the CPU's cache. */
typedef struct filler {
    int32_t fd;
    uint8_t *buf;
    uint64_t filled;
    uint64_t end;
    uint64_t eof_pos; /* where the file ended early (PE_ERR_CORRUPT from fill_to) */
} filler;

#define READ_BLOCK ((uint64_t)PE_PARQUET_READ_BLOCK)

/* Makes buf[..upto) hold the file's bytes (upto <= f->end). */
static int fill_to(filler *f, uint64_t upto)
{
    while (f->fd >= 0 && f->filled < upto) {
        uint64_t want = f->end - f->filled;
        if (want > READ_BLOCK)
            want = READ_BLOCK;
        ssize_t got = pread(f->fd, f->buf + f->filled, (size_t)want, (off_t)f->filled);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return PE_ERR_IO;
        }
        if (got == 0) { /* the file ends before its footer says its pages do */
            f->eof_pos = f->filled;
            return PE_ERR_CORRUPT;
        }
        f->filled += (uint64_t)got;
    }
    return PE_OK;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Checks the pages of the chunk [start, cend), reading one block more whenever the walk needs
 * bytes not read yet (so a header may be cut by the end of a block: it is parsed again with
 * the next block in); *bad = the damaged page's position on PE_ERR_CORRUPT. */
static int check_chunk(filler *f, uint64_t start, uint64_t cend, uint32_t *pages, uint64_t *bad)
{
    uint64_t pos = start;
    int rc = PE_OK;
    while (pos < cend) {
        uint64_t page = pos;
        int64_t size = 0;
        uint32_t want = 0, crc = 0;
        int has_crc = 0;
        for (;;) {
            uint64_t have = min_u64(min_u64(f->filled, cend), page + PE_PARQUET_MAX_HEADER);
            if (have > pos) {
                cursor c = {f->buf + pos, f->buf + have};
                if (page_header(&c, &size, &want, &has_crc) == PE_OK) {
                    pos = (uint64_t)(c.p - f->buf);
                    break;
                }
            }
            if (have >= cend || have >= page + PE_PARQUET_MAX_HEADER) { /* no more to read */
                *bad = page;
                return PE_ERR_CORRUPT;
            }
            if ((rc = fill_to(f, f->filled + 1)) != PE_OK)
                goto failed;
        }
        if (!has_crc || (uint64_t)size > cend - pos) {
            *bad = page;
            return PE_ERR_CORRUPT;
        }
        uint64_t pend = pos + (uint64_t)size;
        while (pos < pend) {
            if (f->filled <= pos && (rc = fill_to(f, pos + 1)) != PE_OK)
                goto failed;
            uint64_t q = min_u64(pend, f->filled);
            crc = pe_crc32_update(crc, f->buf + pos, (size_t)(q - pos));
            pos = q;
        }
        if (crc != want) {
            *bad = page;
            return PE_ERR_CORRUPT;
        }
        (*pages)++;
    }
    return PE_OK;
failed:
    if (rc == PE_ERR_CORRUPT)
        *bad = f->eof_pos;
    return rc;
}

static int check_all(filler *f, const uint64_t *chunks, uint32_t n_chunks, uint32_t *out_pages,
                     uint64_t *out_bad_pos)
{
    uint32_t pages = 0;
    for (uint32_t i = 0; i < n_chunks; i++) {
        int rc = check_chunk(f, chunks[2 * i], chunks[2 * i] + chunks[2 * i + 1], &pages, out_bad_pos);
        if (rc != PE_OK)
            return rc;
    }
    *out_pages = pages;
    return PE_OK;
}

int pe_parquet_check_pages(const uint8_t *buf, uint64_t buf_len, const uint64_t *chunks,
                           uint32_t n_chunks, uint32_t *out_pages, uint64_t *out_bad_pos)
{
    if (buf == NULL || chunks == NULL || out_pages == NULL || out_bad_pos == NULL)
        return PE_ERR_INVAL;
    for (uint32_t i = 0; i < n_chunks; i++) {
        uint64_t start = chunks[2 * i], len = chunks[2 * i + 1];
        if (start > buf_len || len > buf_len - start)
            return PE_ERR_INVAL;
    }
    filler f = {-1, (uint8_t *)buf, buf_len, buf_len, 0};
    return check_all(&f, chunks, n_chunks, out_pages, out_bad_pos);
}

int pe_parquet_read_pages(int32_t fd, uint8_t *buf, uint64_t buf_len, uint64_t lo, uint64_t hi,
                          const uint64_t *chunks, uint32_t n_chunks, uint32_t *out_pages,
                          uint64_t *out_bad_pos)
{
    if (fd < 0 || buf == NULL || chunks == NULL || lo > hi || hi > buf_len ||
        out_pages == NULL || out_bad_pos == NULL)
        return PE_ERR_INVAL;
    for (uint32_t i = 0; i < n_chunks; i++) {
        if (chunks[2 * i] < lo || chunks[2 * i] > hi || chunks[2 * i + 1] > hi - chunks[2 * i])
            return PE_ERR_INVAL; /* a page outside what is read would be checked unread */
        if (i > 0 && chunks[2 * i] < chunks[2 * i - 2])
            return PE_ERR_INVAL; /* read front to back: chunks in file order */
    }
    filler f = {fd, buf, lo, hi, 0};
    int rc = check_all(&f, chunks, n_chunks, out_pages, out_bad_pos);
    if (rc == PE_OK && (rc = fill_to(&f, hi)) == PE_ERR_CORRUPT) /* any bytes after the last page */
        *out_bad_pos = f.eof_pos;
    return rc;
}

/* ------------------------------------------------------------------ the footer's row groups */

static int read_i64(cursor *c, int64_t *out)
{
    uint64_t u;
    if (read_varint(c, &u) != PE_OK)
        return PE_ERR_CORRUPT;
    *out = (int64_t)((u >> 1) ^ (0u - (u & 1u))); /* zigzag */
    return PE_OK;
}

/* A list header whose elements must be structs: *n their count. */
static int struct_list(cursor *c, uint64_t *n)
{
    if (c->p >= c->end)
        return PE_ERR_CORRUPT;
    uint8_t h = *c->p++;
    *n = h >> 4;
    if (*n == 15 && read_varint(c, n) != PE_OK)
        return PE_ERR_CORRUPT;
    if ((h & 0x0F) != 12 || *n > (uint64_t)(c->end - c->p))
        return PE_ERR_CORRUPT; /* every struct takes a byte at least */
    return PE_OK;
}

/* Statistics (depth 6): min_value (6) and max_value (5) as 8-byte little-endian int64. */
static int statistics(cursor *c, pe_parquet_group *g)
{
    int32_t id = 0;
    int have = 0;
    for (;;) {
        int type;
        if (field_header(c, &id, &type) != PE_OK)
            return PE_ERR_CORRUPT;
        if (type == 0)
            break;
        if ((id == 5 || id == 6) && type == 8) {
            uint64_t n;
            if (read_varint(c, &n) != PE_OK || n > (uint64_t)(c->end - c->p))
                return PE_ERR_CORRUPT;
            if (n == 8) {
                uint64_t v = 0;
                for (int k = 7; k >= 0; k--)
                    v = (v << 8) | c->p[k];
                if (id == 5)
                    g->last = (int64_t)v;
                else
                    g->first = (int64_t)v;
                have |= id == 5 ? 1 : 2;
            }
            c->p += n;
        } else if (skip_value(c, type, 6) != PE_OK) {
            return PE_ERR_CORRUPT;
        }
    }
    g->has_stats = have == 3;
    return PE_OK;
}

/* ColumnMetaData (depth 5): total_compressed_size (7), data_page_offset (9),
 * dictionary_page_offset (11); with `stats`, the statistics (12) into g. */
static int column_meta(cursor *c, int stats, pe_parquet_group *g, uint64_t *chunk)
{
    int32_t id = 0;
    int64_t size = -1, data = -1, dict = -1;
    for (;;) {
        int type;
        if (field_header(c, &id, &type) != PE_OK)
            return PE_ERR_CORRUPT;
        if (type == 0)
            break;
        if ((id == 7 || id == 9 || id == 11) && type == 6) {
            int64_t v;
            if (read_i64(c, &v) != PE_OK)
                return PE_ERR_CORRUPT;
            *(id == 7 ? &size : id == 9 ? &data : &dict) = v;
        } else if (id == 12 && type == 12 && stats) {
            if (statistics(c, g) != PE_OK)
                return PE_ERR_CORRUPT;
        } else if (skip_value(c, type, 5) != PE_OK) {
            return PE_ERR_CORRUPT;
        }
    }
    if (size < 0 || data < 0)
        return PE_ERR_CORRUPT;
    int64_t start = (dict > 0 && dict < data) ? dict : data; /* as pyarrow computes it */
    chunk[0] = (uint64_t)start;
    chunk[1] = (uint64_t)size;
    return PE_OK;
}

/* ColumnChunk (depth 4): its meta_data (3) is required. */
static int column_chunk(cursor *c, int stats, pe_parquet_group *g, uint64_t *chunk)
{
    int32_t id = 0;
    int have = 0;
    for (;;) {
        int type;
        if (field_header(c, &id, &type) != PE_OK)
            return PE_ERR_CORRUPT;
        if (type == 0)
            return have ? PE_OK : PE_ERR_CORRUPT;
        if (id == 3 && type == 12) {
            if (column_meta(c, stats, g, chunk) != PE_OK)
                return PE_ERR_CORRUPT;
            have = 1;
        } else if (skip_value(c, type, 4) != PE_OK) {
            return PE_ERR_CORRUPT;
        }
    }
}

/* RowGroup (depth 3): exactly n_cols column chunks (1). */
static int row_group(cursor *c, uint32_t n_cols, pe_parquet_group *g, uint64_t *chunks)
{
    int32_t id = 0;
    int have = 0;
    for (;;) {
        int type;
        if (field_header(c, &id, &type) != PE_OK)
            return PE_ERR_CORRUPT;
        if (type == 0)
            return have ? PE_OK : PE_ERR_CORRUPT;
        if (id == 1 && type == 9 && !have) {
            uint64_t n;
            if (struct_list(c, &n) != PE_OK || n != n_cols)
                return PE_ERR_CORRUPT;
            for (uint32_t j = 0; j < n_cols; j++) {
                if (column_chunk(c, j == 0, g, chunks + 2 * j) != PE_OK)
                    return PE_ERR_CORRUPT;
            }
            have = 1;
        } else if (skip_value(c, type, 3) != PE_OK) {
            return PE_ERR_CORRUPT;
        }
    }
}

int pe_parquet_footer_groups(const uint8_t *footer, uint64_t len, uint32_t n_cols,
                             pe_parquet_group *groups, uint32_t groups_cap, uint64_t *chunks,
                             uint32_t *out_groups)
{
    if (footer == NULL || n_cols == 0 || (groups_cap > 0 && (groups == NULL || chunks == NULL)) ||
        out_groups == NULL)
        return PE_ERR_INVAL;
    cursor c = {footer, footer + len};
    int32_t id = 0;
    int have = 0;
    uint64_t n = 0;
    for (;;) {
        int type;
        if (field_header(&c, &id, &type) != PE_OK)
            return PE_ERR_CORRUPT;
        if (type == 0)
            break;
        if (id == 4 && type == 9 && !have) {
            if (struct_list(&c, &n) != PE_OK || n > groups_cap)
                return PE_ERR_CORRUPT;
            for (uint64_t i = 0; i < n; i++) {
                pe_parquet_group *g = &groups[i];
                g->first = g->last = 0;
                g->has_stats = 0;
                if (row_group(&c, n_cols, g, chunks + 2 * (uint64_t)n_cols * i) != PE_OK)
                    return PE_ERR_CORRUPT;
            }
            have = 1;
        } else if (skip_value(&c, type, 1) != PE_OK) {
            return PE_ERR_CORRUPT;
        }
    }
    if (c.p != c.end)
        return PE_ERR_CORRUPT; /* the footer is one struct, all of it */
    *out_groups = (uint32_t)n;
    return PE_OK;
}
