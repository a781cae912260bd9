/* frames.c -- event frames: the bytes of one event inside an EVENTS record section.
 *
 * Event frame layout (all integers little-endian, frames packed back to back, no padding):
 *
 *   Offset  Size     Description
 *        0     4     payload_len: length of the event payload in bytes (u32)
 *        4     2     key_len: length of the routing key in bytes, 0..PE_MAX_KEY_LEN (4096),
 *                    or 65535 (PE_NO_KEY) for an event without a key (u16)
 *        6     k     key bytes (k = key_len, or 0 when key_len == PE_NO_KEY)
 *      6+k     n     payload bytes (n = payload_len)
 *
 * A frame is PE_FRAME_HEADER_SIZE (6) + k + n bytes. The segment offset of an event is the
 * segment offset of its frame's first byte (see the section header in journal.c).
 *
 * Both functions here read bytes that came from disk and are fuzzed: they never read outside
 * buf[0..len).
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pe.h"

static uint32_t ld32(const char *p)
{
    unsigned char b[4];
    memcpy(b, p, 4);
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static uint16_t ld16(const char *p)
{
    unsigned char b[2];
    memcpy(b, p, 2);
    return (uint16_t)(b[0] | (b[1] << 8));
}

int pe_parse_frames(const char *buf, uint64_t len, uint32_t max_events, uint32_t *frame_off,
                    uint32_t *payload_len, int32_t *key_len, uint32_t *out_n,
                    uint64_t *out_consumed)
{
    if ((buf == NULL && len > 0) || out_n == NULL || out_consumed == NULL)
        return PE_ERR_INVAL;
    if (max_events > 0 && (frame_off == NULL || payload_len == NULL || key_len == NULL))
        return PE_ERR_INVAL;

    uint64_t pos = 0;
    uint32_t n = 0;
    int rc = PE_OK;
    while (n < max_events) {
        /* frame_off is 32-bit: a frame starting past 4 GiB is treated as not fitting. */
        if (pos > UINT32_MAX || len - pos < PE_FRAME_HEADER_SIZE)
            break;
        uint32_t plen = ld32(buf + pos);
        uint16_t klen = ld16(buf + pos + 4);
        uint64_t kbytes = 0;
        if (klen != PE_NO_KEY) {
            if (klen > PE_MAX_KEY_LEN) {
                rc = PE_ERR_CORRUPT;
                break;
            }
            kbytes = klen;
        }
        uint64_t total = (uint64_t)PE_FRAME_HEADER_SIZE + kbytes + plen;
        if (total > len - pos)
            break;
        frame_off[n] = (uint32_t)pos;
        payload_len[n] = plen;
        key_len[n] = klen == PE_NO_KEY ? -1 : (int32_t)klen;
        n++;
        pos += total;
    }
    *out_n = n;
    *out_consumed = pos;
    return rc;
}

int pe_gather_payloads(const char *buf, uint64_t len, uint32_t n, const uint32_t *frame_off,
                       const uint32_t *payload_len, const int32_t *key_len, char *out_data,
                       uint64_t out_cap, int64_t offset_base, int64_t *out_offsets)
{
    if ((buf == NULL && len > 0) || out_offsets == NULL)
        return PE_ERR_INVAL;
    if (n > 0 && (frame_off == NULL || payload_len == NULL || key_len == NULL))
        return PE_ERR_INVAL;
    if (offset_base < 0)
        return PE_ERR_INVAL;

    /* Validate everything before writing anything. */
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t k = key_len[i];
        if (k < -1 || k > PE_MAX_KEY_LEN)
            return PE_ERR_INVAL;
        uint64_t start = (uint64_t)frame_off[i] + PE_FRAME_HEADER_SIZE + (uint64_t)(k < 0 ? 0 : k);
        if (start > len || payload_len[i] > len - start)
            return PE_ERR_INVAL;
        total += payload_len[i];
    }
    if (total > out_cap || (total > 0 && out_data == NULL))
        return PE_ERR_INVAL;
    if ((uint64_t)INT64_MAX - (uint64_t)offset_base < total)
        return PE_ERR_INVAL;

    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t k = key_len[i];
        uint64_t start = (uint64_t)frame_off[i] + PE_FRAME_HEADER_SIZE + (uint64_t)(k < 0 ? 0 : k);
        out_offsets[i] = offset_base + (int64_t)at;
        if (payload_len[i] > 0)
            memcpy(out_data + at, buf + start, payload_len[i]);
        at += payload_len[i];
    }
    out_offsets[n] = offset_base + (int64_t)at;
    return PE_OK;
}
