/* append.c -- building EVENTS and BYTES records and handing them to the journal (journal.c).
 *
 * EVENTS payload (type 1):
 *
 *   Offset  Size  Description
 *        0     8  first_seq: writer sequence number of the first event batch in the record
 *        8     8  last_seq: writer sequence number of the last event batch in the record
 *       16     8  timestamp_ns: wall-clock time of the append (ns since the Unix epoch)
 *       24     4  n_sections
 *       28     2  writer_id_len (0..255)
 *       30     w  writer id bytes (w = writer_id_len)
 *     30+w     .  n_sections sections, back to back
 *
 * Section (32-byte header + data): the events of one segment. The same header precedes the data
 * of a BYTES record, so any section read back from disk is checked against it alone.
 *
 *   Offset  Size  Description
 *        0     8  segment_uid
 *        8     8  segment_offset: segment offset of the section's first byte
 *       16     4  n_events (events starting in the section)
 *       20     4  n_bytes: length of the data that follows
 *       24     4  CRC32C of the n_bytes of data
 *       28     4  Reserved (0)
 *       32     .  n_bytes of data: event frames (layout in frames.c), or a BYTES record's bytes
 *
 * BYTES payload (type 2): u64 write time (ns since the Unix epoch), then one section (header +
 * data); the data starts PE_BYTES_DATA_OFFSET (64) bytes after the record's position.
 *
 * Format 2 (files written before): the BYTES payload has no write time (data at offset 56).
 * Format 1: sections have a 24-byte header (no CRC, no reserved field), the BYTES payload header
 * is 24 bytes, records never carry a durable lag, files end without a ROLL record. Nothing is
 * appended to a file of an older format: the journal starts a new file at its end.
 *
 * BUILDING
 *
 * Records are built and their payload CRC computed outside the journal's mutex: frames are
 * copied into the caller's record buffer (large payloads copied and checksummed in one pass),
 * or, for pe_journal_append_events_v and BYTES records, only the headers are built and the
 * payloads written from the caller's buffers with pwritev. The record CRC is finished under the
 * mutex by pe__journal_commit from the payload's CRC (pe_crc32c_combine).
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "internal.h"
#include "journal_internal.h"

/* Builds the frames of one section at fp and returns its CRC32C: large payloads are copied and
 * checksummed in one pass, small frames are checksummed after they are built. */
static uint32_t build_section(char **fpp, const pe_group *groups, uint64_t g0, uint64_t g1,
                              const char **kpp, const char **ppp, const uint32_t *lens,
                              uint64_t *evp, uint64_t *n_events)
{
    char *fp = *fpp, *pending = fp;
    const char *kp = *kpp, *pp = *ppp;
    uint64_t ev = *evp, count = 0;
    uint32_t c = 0;
    for (uint64_t g = g0; g < g1; g++) {
        uint32_t klen = groups[g].key_len;
        uint32_t kb = klen == PE_NO_KEY ? 0 : klen;
        for (uint64_t ee = ev + groups[g].n_events; ev < ee; ev++) {
            uint32_t n = lens[ev];
            st32(fp, n);
            st16(fp + 4, (uint16_t)klen);
            fp += PE_FRAME_HEADER_SIZE;
            if (kb > 0) {
                memcpy(fp, kp, kb);
                fp += kb;
            }
            if (n >= 4096) {
                c = crc_more(c, pending, (size_t)(fp - pending));
                c = pe_crc32c_copy(fp, pp, n, c);
                fp += n;
                pending = fp;
            } else if (n > 0) {
                memcpy(fp, pp, n);
                fp += n;
            }
            pp += n;
        }
        count += groups[g].n_events;
        kp += kb;
    }
    c = crc_more(c, pending, (size_t)(fp - pending));
    *fpp = fp;
    *kpp = kp;
    *ppp = pp;
    *evp = ev;
    *n_events = count;
    return c;
}

/* Checks the descriptors of an EVENTS record (pe_journal_append_events) and returns its payload
 * size in *rec_payload and the bytes of its headers, frame headers and keys in *head_bytes. */
static int measure_events(uint32_t writer_id_len, const pe_section *sections, uint32_t n_sections,
                          const pe_group *groups, uint32_t n_groups, uint64_t keys_len,
                          const uint32_t *lens, uint32_t n_events, uint64_t payload_len,
                          uint64_t *rec_payload, uint64_t *head_bytes)
{
    if (writer_id_len > PE_MAX_WRITER_ID_LEN)
        return PE_ERR_INVAL;
    uint64_t total = (uint64_t)PE_EVENTS_HEADER_SIZE + writer_id_len;
    uint64_t heads = PE_RECORD_HEADER_SIZE + total;
    uint64_t g = 0, ev = 0, key_total = 0, len_total = 0;
    for (uint32_t s = 0; s < n_sections; s++) {
        if ((uint64_t)sections[s].n_groups > (uint64_t)n_groups - g)
            return PE_ERR_INVAL;
        uint64_t sec_events = 0, sec_bytes = 0;
        for (uint64_t ge = g + sections[s].n_groups; g < ge; g++) {
            uint32_t klen = groups[g].key_len;
            if (klen > PE_MAX_KEY_LEN && klen != PE_NO_KEY)
                return PE_ERR_INVAL;
            uint64_t kb = klen == PE_NO_KEY ? 0 : klen;
            key_total += kb;
            if ((uint64_t)groups[g].n_events > (uint64_t)n_events - ev)
                return PE_ERR_INVAL;
            for (uint64_t ee = ev + groups[g].n_events; ev < ee; ev++) {
                len_total += lens[ev];
                sec_bytes += PE_FRAME_HEADER_SIZE + kb + lens[ev];
                heads += PE_FRAME_HEADER_SIZE + kb;
                if (sec_bytes > PE_MAX_RECORD_PAYLOAD)
                    return PE_ERR_TOOBIG; /* also keeps the sums from overflowing */
            }
            sec_events += groups[g].n_events;
        }
        if (sec_events > UINT32_MAX)
            return PE_ERR_TOOBIG;
        total += PE_SECTION_HEADER_SIZE + sec_bytes;
        heads += PE_SECTION_HEADER_SIZE;
        if (total > PE_MAX_RECORD_PAYLOAD)
            return PE_ERR_TOOBIG;
    }
    if (g != n_groups || ev != n_events || key_total != keys_len || len_total != payload_len)
        return PE_ERR_INVAL;
    if (payload_len > PE_MAX_RECORD_PAYLOAD || total > PE_MAX_RECORD_PAYLOAD)
        return PE_ERR_TOOBIG;
    *rec_payload = total;
    *head_bytes = heads;
    return PE_OK;
}

/* Writes the record header and the EVENTS header at p; returns the CRC of the EVENTS header. */
static uint32_t events_head(char *p, const char *writer_id, uint32_t writer_id_len,
                            uint64_t first_seq, uint64_t last_seq, uint64_t timestamp_ns,
                            uint32_t n_sections, uint64_t rec_payload)
{
    pe__record_header(p, PE_RECORD_EVENTS, rec_payload);
    p += PE_RECORD_HEADER_SIZE;
    st64(p, first_seq);
    st64(p + 8, last_seq);
    st64(p + 16, timestamp_ns);
    st32(p + 24, n_sections);
    st16(p + 28, (uint16_t)writer_id_len);
    if (writer_id_len > 0)
        memcpy(p + 30, writer_id, writer_id_len);
    return crc(p, PE_EVENTS_HEADER_SIZE + writer_id_len);
}

/* Fills a section header and folds it and its data (crc sec_crc, nb bytes) into body_crc. */
static uint32_t section_head(char *sh, const pe_section *sec, uint64_t n_events, uint64_t nb,
                             uint32_t sec_crc, uint32_t body_crc)
{
    st64(sh, sec->segment_uid);
    st64(sh + 8, sec->segment_offset);
    st32(sh + 16, (uint32_t)n_events);
    st32(sh + 20, (uint32_t)nb);
    st32(sh + 24, sec_crc);
    st32(sh + 28, 0);
    return crc_cat(crc_more(body_crc, sh, PE_SECTION_HEADER_SIZE), sec_crc, nb);
}

/* Out fields of the sections of a committed record at pos (section headers at their places
 * in `sh_at`, data positions from the layout). */
static void section_outs(pe_section *sections, uint32_t n_sections, char *const *sh_at,
                         uint64_t first_data_pos)
{
    uint64_t at = first_data_pos;
    for (uint32_t s = 0; s < n_sections; s++) {
        uint32_t nb = ld32(sh_at[s] + 20);
        sections[s].n_events = ld32(sh_at[s] + 16);
        sections[s].n_bytes = nb;
        sections[s].data_pos = at;
        at += (uint64_t)nb + PE_SECTION_HEADER_SIZE;
    }
}

int pe_journal_append_events(pe_journal *j, const char *writer_id, uint32_t writer_id_len,
                             uint64_t first_seq, uint64_t last_seq, uint64_t timestamp_ns,
                             pe_section *sections, uint32_t n_sections, const pe_group *groups,
                             uint32_t n_groups, const char *keys, uint64_t keys_len,
                             const uint32_t *lens, uint32_t n_events, const char *payload,
                             uint64_t payload_len, char *out_record, uint64_t out_cap,
                             uint64_t *out_record_len, uint64_t *out_pos, uint64_t *out_end)
{
    if (j == NULL || out_record_len == NULL || out_pos == NULL || out_end == NULL)
        return PE_ERR_INVAL;
    if ((writer_id == NULL && writer_id_len > 0) || (sections == NULL && n_sections > 0) ||
        (groups == NULL && n_groups > 0) || (keys == NULL && keys_len > 0) ||
        (lens == NULL && n_events > 0) || (payload == NULL && payload_len > 0) ||
        out_record == NULL)
        return PE_ERR_INVAL;
    uint64_t rec_payload = 0, heads = 0;
    int rc = measure_events(writer_id_len, sections, n_sections, groups, n_groups, keys_len, lens,
                            n_events, payload_len, &rec_payload, &heads);
    if (rc != PE_OK)
        return rc;
    uint64_t total = PE_RECORD_HEADER_SIZE + rec_payload;
    if (out_cap < total)
        return PE_ERR_INVAL;

    /* Build the record; the payload's CRC is folded section by section (no second pass). */
    uint32_t body_crc = events_head(out_record, writer_id, writer_id_len, first_seq, last_seq,
                                    timestamp_ns, n_sections, rec_payload);
    char *p = out_record + PE_RECORD_HEADER_SIZE + PE_EVENTS_HEADER_SIZE + writer_id_len;
    const char *kp = keys, *pp = payload;
    uint64_t g = 0, ev = 0;
    for (uint32_t s = 0; s < n_sections; s++) {
        char *sh = p;
        char *fp = p + PE_SECTION_HEADER_SIZE;
        uint64_t sec_events = 0;
        uint64_t g1 = g + sections[s].n_groups;
        uint32_t sec_crc = build_section(&fp, groups, g, g1, &kp, &pp, lens, &ev, &sec_events);
        g = g1;
        uint64_t nb = (uint64_t)(fp - sh) - PE_SECTION_HEADER_SIZE;
        body_crc = section_head(sh, &sections[s], sec_events, nb, sec_crc, body_crc);
        p = fp;
    }

    uint64_t pos = 0;
    struct iovec iov[2] = {{out_record, PE_RECORD_HEADER_SIZE},
                           {out_record + PE_RECORD_HEADER_SIZE, (size_t)rec_payload}};
    rc = pe__journal_commit(j, iov, 2, total, body_crc, &pos);
    if (rc != PE_OK)
        return rc;

    uint64_t first = pos + PE_RECORD_HEADER_SIZE + PE_EVENTS_HEADER_SIZE + writer_id_len;
    uint64_t at = first - pos;
    for (uint32_t s = 0; s < n_sections; s++) {
        const char *sh = out_record + at;
        sections[s].n_events = ld32(sh + 16);
        sections[s].n_bytes = ld32(sh + 20);
        sections[s].data_pos = pos + at + PE_SECTION_HEADER_SIZE;
        at += PE_SECTION_HEADER_SIZE + (uint64_t)ld32(sh + 20);
    }
    *out_record_len = total;
    *out_pos = pos;
    *out_end = pos + total;
    return PE_OK;
}

int pe_journal_append_events_v(pe_journal *j, const char *writer_id, uint32_t writer_id_len,
                               uint64_t first_seq, uint64_t last_seq, uint64_t timestamp_ns,
                               pe_section *sections, uint32_t n_sections, const pe_group *groups,
                               uint32_t n_groups, const char *keys, uint64_t keys_len,
                               const uint32_t *lens, const char *const *payloads,
                               uint32_t n_events, char *out_head, uint64_t out_head_cap,
                               uint64_t *out_pos, uint64_t *out_end)
{
    if (j == NULL || out_pos == NULL || out_end == NULL || out_head == NULL)
        return PE_ERR_INVAL;
    if ((writer_id == NULL && writer_id_len > 0) || (sections == NULL && n_sections > 0) ||
        (groups == NULL && n_groups > 0) || (keys == NULL && keys_len > 0) ||
        (n_events > 0 && (lens == NULL || payloads == NULL)))
        return PE_ERR_INVAL;
    uint64_t payload_len = 0;
    for (uint32_t i = 0; i < n_events; i++) {
        if (payloads[i] == NULL && lens[i] > 0)
            return PE_ERR_INVAL;
        payload_len += lens[i];
    }
    uint64_t rec_payload = 0, heads = 0;
    int rc = measure_events(writer_id_len, sections, n_sections, groups, n_groups, keys_len, lens,
                            n_events, payload_len, &rec_payload, &heads);
    if (rc != PE_OK)
        return rc;
    if (out_head_cap < heads)
        return PE_ERR_INVAL;
    /* iovecs: one run of header bytes before each payload, and the last run */
    uint64_t n_iov = 2 * (uint64_t)n_events + 2;
    struct iovec *iov = malloc(n_iov * sizeof *iov);
    char **sh_at = malloc((n_sections ? n_sections : 1) * sizeof *sh_at);
    if (iov == NULL || sh_at == NULL) {
        free(iov);
        free(sh_at);
        return PE_ERR_NOMEM;
    }
    uint32_t body_crc = events_head(out_head, writer_id, writer_id_len, first_seq, last_seq,
                                    timestamp_ns, n_sections, rec_payload);
    char *hp = out_head + PE_RECORD_HEADER_SIZE + PE_EVENTS_HEADER_SIZE + writer_id_len;
    char *run = out_head; /* start of the header bytes not yet in an iovec */
    int k = 0;
    const char *kp = keys;
    uint64_t g = 0, ev = 0;
    for (uint32_t s = 0; s < n_sections; s++) {
        char *sh = hp;
        sh_at[s] = sh;
        hp += PE_SECTION_HEADER_SIZE;
        uint32_t sec_crc = 0;
        uint64_t nb = 0, sec_events = 0;
        for (uint64_t ge = g + sections[s].n_groups; g < ge; g++) {
            uint32_t klen = groups[g].key_len;
            uint32_t kb = klen == PE_NO_KEY ? 0 : klen;
            for (uint64_t ee = ev + groups[g].n_events; ev < ee; ev++) {
                char *fh = hp;
                st32(hp, lens[ev]);
                st16(hp + 4, (uint16_t)klen);
                hp += PE_FRAME_HEADER_SIZE;
                if (kb > 0) {
                    memcpy(hp, kp, kb);
                    hp += kb;
                }
                sec_crc = crc_more(sec_crc, fh, (size_t)(hp - fh));
                sec_crc = crc_more(sec_crc, lens[ev] ? payloads[ev] : "", lens[ev]);
                nb += (uint64_t)(hp - fh) + lens[ev];
                iov[k++] = (struct iovec){run, (size_t)(hp - run)};
                iov[k++] = (struct iovec){(void *)payloads[ev], lens[ev]};
                run = hp;
            }
            sec_events += groups[g].n_events;
            kp += kb;
        }
        body_crc = section_head(sh, &sections[s], sec_events, nb, sec_crc, body_crc);
    }
    iov[k++] = (struct iovec){run, (size_t)(hp - run)};
    uint64_t pos = 0;
    rc = pe__journal_commit(j, iov, k, PE_RECORD_HEADER_SIZE + rec_payload, body_crc, &pos);
    if (rc == PE_OK) {
        section_outs(sections, n_sections, sh_at,
                     pos + PE_RECORD_HEADER_SIZE + PE_EVENTS_HEADER_SIZE + writer_id_len +
                         PE_SECTION_HEADER_SIZE);
        *out_pos = pos;
        *out_end = pos + PE_RECORD_HEADER_SIZE + rec_payload;
    }
    free(iov);
    free(sh_at);
    return rc;
}

int pe_journal_append_record(pe_journal *j, uint32_t type, const char *payload, uint64_t len,
                             uint64_t *out_pos, uint64_t *out_end)
{
    return pe_journal_append_record2(j, type, payload, len, NULL, 0, out_pos, out_end);
}

int pe_journal_append_record2(pe_journal *j, uint32_t type, const char *head, uint64_t head_len,
                              const char *body, uint64_t body_len, uint64_t *out_pos,
                              uint64_t *out_end)
{
    if (j == NULL || out_pos == NULL || out_end == NULL || (head == NULL && head_len > 0) ||
        (body == NULL && body_len > 0))
        return PE_ERR_INVAL;
    if (type < 2 || type > PE_MAX_RECORD_TYPE || type == PE_RECORD_ROLL)
        return PE_ERR_INVAL;
    if (head_len > PE_MAX_RECORD_PAYLOAD || body_len > PE_MAX_RECORD_PAYLOAD - head_len)
        return PE_ERR_TOOBIG;
    uint64_t len = head_len + body_len;
    char hdr[PE_RECORD_HEADER_SIZE];
    pe__record_header(hdr, type, len);
    uint32_t body_crc = crc_more(crc(head_len ? head : "", (size_t)head_len), body_len ? body : "",
                                 (size_t)body_len);
    struct iovec iov[3];
    int n = 0;
    iov[n++] = (struct iovec){hdr, sizeof hdr};
    if (head_len > 0)
        iov[n++] = (struct iovec){(void *)head, (size_t)head_len};
    if (body_len > 0)
        iov[n++] = (struct iovec){(void *)body, (size_t)body_len};
    uint64_t pos = 0;
    int rc = pe__journal_commit(j, iov, n, PE_RECORD_HEADER_SIZE + len, body_crc, &pos);
    if (rc != PE_OK)
        return rc;
    *out_pos = pos;
    *out_end = pos + PE_RECORD_HEADER_SIZE + len;
    return PE_OK;
}

int pe_journal_append_section(pe_journal *j, uint64_t segment_uid, uint64_t segment_offset,
                              uint32_t n_events, uint64_t timestamp_ns, const char *data,
                              uint64_t len, uint64_t *out_pos, uint64_t *out_end)
{
    if (j == NULL || out_pos == NULL || out_end == NULL || (data == NULL && len > 0))
        return PE_ERR_INVAL;
    if (len > PE_MAX_RECORD_PAYLOAD - (PE_BYTES_DATA_OFFSET - PE_RECORD_HEADER_SIZE) ||
        len > UINT32_MAX)
        return PE_ERR_TOOBIG;
    char hdr[PE_RECORD_HEADER_SIZE], head[PE_BYTES_DATA_OFFSET - PE_RECORD_HEADER_SIZE];
    char *sh = head + 8; /* the section header follows the write time, right before the data */
    uint32_t data_crc = crc(len ? data : "", (size_t)len);
    pe__record_header(hdr, PE_RECORD_BYTES, PE_BYTES_DATA_OFFSET - PE_RECORD_HEADER_SIZE + len);
    st64(head, timestamp_ns);
    st64(sh, segment_uid);
    st64(sh + 8, segment_offset);
    st32(sh + 16, n_events);
    st32(sh + 20, (uint32_t)len);
    st32(sh + 24, data_crc);
    st32(sh + 28, 0);
    uint32_t body_crc = crc_cat(crc(head, sizeof head), data_crc, len);
    struct iovec iov[3] = {{hdr, sizeof hdr}, {head, sizeof head}, {(void *)data, (size_t)len}};
    uint64_t pos = 0;
    uint64_t total = PE_BYTES_DATA_OFFSET + len;
    int rc = pe__journal_commit(j, iov, len > 0 ? 3 : 2, total, body_crc, &pos);
    if (rc != PE_OK)
        return rc;
    *out_pos = pos;
    *out_end = pos + total;
    return PE_OK;
}
